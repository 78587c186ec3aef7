"""Events benchmark (SYSTEM.md section 16): doorbell latency and the cost of the event machinery.

1. Doorbell latency. `switchboard serve` runs as its own process; an official-SDK client (session
   era) subscribes to `switchboard://queues/bench`; the bench creates 1,000 todos one at a time with
   `todos.create` in this process and times each from the create's return (its commit) to the arrival
   of `notifications/resources/updated` at the client: the path is commit -> NOTIFY -> the server's
   LISTEN connection -> re-read -> push on the client's GET stream. p50/p99 (target p99 <= 50 ms).

2. Event cost on the store loop: claim_next + complete cycles/s, 4 asyncio workers on the core, in
   interleaved rounds (each variant's rate is also taken as a ratio to the bare run of its own round),
   in four variants:
     bare         no hook-bus subscribers, the transition trigger disabled
     trigger      the transition trigger (pg_notify + notify-hook outbox check) enabled
     bus          the trigger enabled and the subscribers a serving process has (metrics counters,
                  the hook sender's wake-up) on the hook bus
     bus+hook     as `bus`, with a notify hook on the endpoint subscribed to todo.completed, so every
                  complete writes an outbox row (the sender is not running; rows just accumulate)
   The target is `bus` >= 0.95 x `bare` (the hook bus and trigger cost at most 5 %).

Runs on a fresh embedded PostgreSQL in a temporary directory, or on SWITCHBOARD_DATABASE_URL's server
(a database of its own is created there and dropped afterwards).

    make bench                                   # runs this after the store benchmark
    .venv/bin/python bench/doorbell_bench.py     # about 3 minutes on 2 cores
    .venv/bin/python bench/doorbell_bench.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import httpx2
import mcp_types as types
import psycopg
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from switchboard.config import load_settings
from switchboard.core import endpoints, hooks, humans, todos
from switchboard.core.events import HookBus
from switchboard.core.models import Core
from switchboard.db import migrate
from switchboard.db.pool import open_pool
from switchboard.web.metrics import Metrics

import store_bench  # same folder: its PostgreSQL server helper

QUEUE = "bench"
ROOT = Path(__file__).resolve().parent.parent
BULK_LOAD = """
INSERT INTO todos (id, endpoint_id, queue, title, created_at, updated_at)
SELECT 'td_' || gen_random_uuid(), %(endpoint_id)s, %(queue)s, 'bench ' || g,
       now() + g * interval '1 microsecond', now()
  FROM generate_series(1, %(n)s) AS g
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> dict:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "python": platform.python_version(),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


@contextlib.contextmanager
def postgres_server():
    """The store benchmark's server: SWITCHBOARD_DATABASE_URL, else a fresh embedded one."""
    with store_bench.postgres_server() as (uri, _how, _pgdata):
        yield uri


async def fresh_database(server_uri: str) -> tuple[str, str]:
    name = f"sb_events_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(server_uri, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    uri = psycopg.conninfo.make_conninfo(server_uri, dbname=name)
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        await conn.execute("SET client_min_messages = warning")
        await migrate.migrate(conn)
    return name, uri


async def drop_database(server_uri: str, name: str) -> None:
    async with await psycopg.AsyncConnection.connect(server_uri, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --------------------------------------------------------------------------- 1. doorbell latency

def start_server(uri: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_PORT=str(port), SWITCHBOARD_HOST="127.0.0.1",
               SWITCHBOARD_LOG_LEVEL="warning", SWITCHBOARD_SWEEP_INTERVAL_SECONDS="3600",
               SWITCHBOARD_RATE_LIMIT_RPS="1000", SWITCHBOARD_RATE_LIMIT_BURST="1000")
    proc = subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("bench: the server did not start")
        time.sleep(0.1)


async def doorbell_latency(uri: str, n: int) -> dict:
    pool = await open_pool(uri, min_size=1, max_size=4)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    human = await humans.add(core, f"bell-{uuid.uuid4().hex[:6]}")
    ep, credential = await endpoints.vend(core, human, agent="bench", queues=[QUEUE])
    proc, url = start_server(uri)
    arrivals: asyncio.Queue[float] = asyncio.Queue()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            arrivals.put_nowait(time.perf_counter())

    commit_to_note: list[float] = []
    call_to_note: list[float] = []
    try:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"}, timeout=httpx2.Timeout(30))
        async with http, Client(streamable_http_client(f"{url}/mcp/{ep['slug']}", http_client=http),
                                mode="legacy", message_handler=on_message) as client:
            await client.subscribe_resource(f"switchboard://queues/{QUEUE}")
            # The GET stream opens just after the handshake: ring until the first notification arrives.
            for _ in range(200):
                await todos.create(core, endpoint_id=ep["endpoint_id"], queue=QUEUE, title="warm-up", source="bench")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(arrivals.get(), 0.1)
                    break
            await asyncio.sleep(0.5)
            while not arrivals.empty():
                arrivals.get_nowait()
            for i in range(n):
                t_call = time.perf_counter()
                await todos.create(core, endpoint_id=ep["endpoint_id"], queue=QUEUE, title=f"todo {i}",
                                   source="bench")
                t_commit = time.perf_counter()
                t_note = await asyncio.wait_for(arrivals.get(), 10)
                commit_to_note.append((t_note - t_commit) * 1000)
                call_to_note.append((t_note - t_call) * 1000)
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        await pool.close()
    return {
        "todos": n,
        "commit_to_notification_ms": {"p50": round(pct(commit_to_note, 50), 2), "p99": round(pct(commit_to_note, 99), 2),
                                      "max": round(max(commit_to_note), 2)},
        "call_to_notification_ms": {"p50": round(pct(call_to_note, 50), 2), "p99": round(pct(call_to_note, 99), 2)},
    }


# ------------------------------------------------------------------------------ 2. event cost

async def set_trigger(core: Core, enabled: bool) -> None:
    async with core.pool.connection() as conn:
        await conn.execute(f"ALTER TABLE todos {'ENABLE' if enabled else 'DISABLE'} TRIGGER todos_transition_events")
        await conn.execute(f"ALTER TABLE todos {'ENABLE' if enabled else 'DISABLE'} TRIGGER todos_created_events")


async def store_cost(uri: str, *, rounds: int, seconds: float, workers: int) -> dict:
    pool = await open_pool(uri, min_size=2, max_size=20)
    settings = load_settings(database_url=uri, log_format="text")
    try:
        plain = Core(pool=pool, settings=settings, bus=HookBus())
        subscribed = Core(pool=pool, settings=settings, bus=HookBus())
        metrics = Metrics()
        wake = asyncio.Event()
        subscribed.bus.subscribe(metrics.on_event)
        subscribed.bus.subscribe(lambda ev: wake.set() if ev.verb in ("create", "complete", "fail") else None)
        human = await humans.add(plain, f"cost-{uuid.uuid4().hex[:6]}")
        ep, credential = await endpoints.vend(plain, human, agent="bench", queues=[QUEUE])
        caller = endpoints.caller_from_row(await endpoints.resolve_credential(plain, credential), "bench")
        hook_ids: list[str] = []
        variants = ("bare", "trigger", "bus", "bus+hook")

        # One backlog for the whole run, loaded without the trigger (nobody listens to its wake-ups).
        backlog = int((rounds + 1) * len(variants) * seconds * 1200) + 5000
        await set_trigger(plain, False)
        async with pool.connection() as conn:
            await conn.execute(BULK_LOAD, {"endpoint_id": caller.endpoint_id, "queue": QUEUE, "n": backlog})
            await conn.execute("VACUUM ANALYZE todos")

        async def worker(core: Core, deadline: float) -> int:
            done = 0
            while time.perf_counter() < deadline:
                got = await todos.claim_next(core, caller, lease_ttl_seconds=1800)
                if got is None:
                    raise SystemExit("bench: the backlog ran out; lower --seconds")
                await todos.complete(core, caller, got.todo["id"])
                done += 1
            return done

        async def run(variant: str) -> float:
            core = plain if variant in ("bare", "trigger") else subscribed
            await set_trigger(core, variant != "bare")
            if variant == "bus+hook" and not hook_ids:
                hook, _ = await hooks.add(core, human, ep["slug"], url="https://hooks.example.com/bench",
                                          events=["todo.completed"])
                hook_ids.append(hook["hook_id"])
            elif variant != "bus+hook" and hook_ids:
                await hooks.remove(core, human, hook_ids.pop())
            t0 = time.perf_counter()
            n = sum(await asyncio.gather(*[worker(core, t0 + seconds) for _ in range(workers)]))
            return n / (time.perf_counter() - t0)

        for v in variants:  # warm-up: connections, prepared statements, caches
            await run(v)
        cps: dict[str, list[float]] = {v: [] for v in variants}
        ratios: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(rounds):
            order = variants if r % 2 == 0 else tuple(reversed(variants))
            for v in order:
                cps[v].append(await run(v))
            for v in variants:  # against the bare run of the same round: slow drifts of the box cancel
                ratios[v].append(cps[v][-1] / cps["bare"][-1])
            print(f"  round {r + 1}/{rounds}: " + ", ".join(f"{v} {cps[v][-1]:.0f}" for v in variants), flush=True)
        await set_trigger(plain, True)
        return {"workers": workers, "rounds": rounds, "seconds_each": seconds,
                "cycles_per_s_median": {v: round(statistics.median(x), 1) for v, x in cps.items()},
                "ratio_to_bare_median_of_rounds": {v: round(statistics.median(x), 3) for v, x in ratios.items()},
                "metrics_seen_completions": metrics.registry.get_sample_value(
                    "switchboard_todos_completed_total", {"queue": QUEUE, "outcome": "complete"})}
    finally:
        await pool.close()


async def trigger_share(uri: str, samples: int = 300) -> dict:
    """The transition trigger's own time inside the core's `complete` statement, as PostgreSQL reports
    it (EXPLAIN ANALYZE: `Trigger todos_transition_events: time=…`), next to the statement's execution
    time; each sample runs in a transaction that is rolled back, so the same claimed todo is reused.
    Less sensitive to a busy machine than comparing loop rates."""
    import re

    from switchboard.core.queries import Q

    pool = await open_pool(uri, min_size=1, max_size=2)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"), bus=HookBus())
    out = {}
    try:
        human = await humans.add(core, f"trig-{uuid.uuid4().hex[:6]}")
        ep, credential = await endpoints.vend(core, human, agent="bench", queues=[QUEUE])
        caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential), "bench")
        todo, _ = await todos.create(core, endpoint_id=ep["endpoint_id"], queue=QUEUE, title="explained")
        await todos.claim(core, caller, todo["id"])
        params = {"human_id": None, "endpoint_id": caller.endpoint_id, "queues": [QUEUE], "owner": caller.owner,
                  "token_hash": None, "id": todo["id"], "summary": None, "summary_truncated": False,
                  "artifact": None, "result": None}
        trig = re.compile(r"Trigger todos_transition_events(?: on todos)?: time=([0-9.]+) calls=(\d+)")
        for label in ("no_hook", "hook_on_completed"):
            if label == "hook_on_completed":
                await hooks.add(core, human, ep["slug"], url="https://hooks.example.com/x", events=["todo.completed"])
            t_ms, e_ms = [], []
            async with pool.connection() as conn:
                for _ in range(samples):
                    async with conn.transaction(force_rollback=True):
                        cur = await conn.execute("EXPLAIN (ANALYZE, TIMING ON) " + Q.todos.complete, params)
                        plan = "\n".join(r[0] if not isinstance(r, dict) else next(iter(r.values()))
                                         for r in await cur.fetchall())
                    m = trig.search(plan)
                    e = re.search(r"Execution Time: ([0-9.]+) ms", plan)
                    if m and e:
                        t_ms.append(float(m.group(1)))
                        e_ms.append(float(e.group(1)))
            med_t, med_e = statistics.median(t_ms), statistics.median(e_ms)
            out[label] = {"trigger_ms": round(med_t, 4), "statement_ms": round(med_e, 4),
                          "share_of_statement": round(med_t / med_e, 3)}
    finally:
        await pool.close()
    return out


async def bus_publish_cost(n: int = 20000) -> dict:
    """Microseconds to build and publish one committed-transition event, without and with the
    subscribers a serving process has: the hook bus's own share of a cycle, free of database noise."""
    from datetime import datetime, timezone

    from switchboard.core.events import build

    row = {"id": "td_bench", "endpoint_id": uuid.uuid4(), "queue": QUEUE, "source": None, "kind": None,
           "title": "t", "state": "done", "owner": "agent:x", "assignee": None, "attempt": 1, "max_attempts": 5,
           "lease_expires_at": None, "next_retry_at": None, "created_at": datetime.now(timezone.utc),
           "payload": None, "attempts_total": 1}
    closed = {"seq": 1, "attempt": 1, "claimer_kind": "endpoint", "claimant": None,
              "claimed_at": "2026-01-01T00:00:00+00:00", "last_heartbeat_at": None,
              "ended_at": "2026-01-01T00:00:01+00:00", "outcome": "completed", "disposition": "done",
              "summary": None, "summary_truncated": False, "artifact": None}
    out = {}
    for label in ("no_subscribers", "serving_subscribers"):
        bus = HookBus()
        if label == "serving_subscribers":
            metrics, wake = Metrics(), asyncio.Event()
            bus.subscribe(metrics.on_event)
            bus.subscribe(lambda ev: wake.set() if ev.verb in ("create", "complete", "fail") else None)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n // 5):
                await bus.publish(build("complete", row, closed))
            best = min(best, (time.perf_counter() - t0) / (n // 5) * 1e6)
        out[label] = round(best, 2)
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="300 todos, 3 short rounds")
    ap.add_argument("--todos", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args()
    n = args.todos or (300 if args.quick else 1000)
    rounds, seconds = (4, 1.5) if args.quick else (16, 2.0)
    out: dict = {"machine": machine()}
    with postgres_server() as server_uri:
        name, uri = await fresh_database(server_uri)
        try:
            print(f"doorbell latency over {n} todos ...", flush=True)
            out["doorbell"] = await doorbell_latency(uri, n)
            print(json.dumps(out["doorbell"]), flush=True)
            print(f"event cost on claim_next + complete, {rounds} rounds of {seconds:.0f} s ...", flush=True)
            out["store_cost"] = await store_cost(uri, rounds=rounds, seconds=seconds, workers=4)
            print(json.dumps(out["store_cost"]), flush=True)
            out["bus_us_per_event"] = await bus_publish_cost()
            print(json.dumps(out["bus_us_per_event"]), flush=True)
            out["trigger_in_complete"] = await trigger_share(uri)
            print(json.dumps(out["trigger_in_complete"]), flush=True)
        finally:
            await drop_database(server_uri, name)
    out["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(out))
    d, c = out["doorbell"]["commit_to_notification_ms"], out["store_cost"]
    print(f"\ndoorbell commit->notification: p50 {d['p50']} ms, p99 {d['p99']} ms (target p99 <= 50 ms)")
    print("store loop cycles/s (median): " + ", ".join(f"{k} {v}" for k, v in c["cycles_per_s_median"].items()))
    print("ratio to bare (median of rounds): "
          + ", ".join(f"{k} {v}" for k, v in c["ratio_to_bare_median_of_rounds"].items()) + " (target bus >= 0.95)")
    b = out["bus_us_per_event"]
    cycle_us = 4 / c["cycles_per_s_median"]["bare"] * 1e6  # one worker's cycle (two events) at the bare rate
    share = 2 * (b["serving_subscribers"] - b["no_subscribers"]) / cycle_us
    print(f"hook bus subscribers: {b['no_subscribers']} -> {b['serving_subscribers']} us per event; "
          f"{share:.2%} of a {cycle_us / 1000:.1f} ms cycle")
    for label, t in out["trigger_in_complete"].items():
        print(f"trigger inside complete ({label}): {t['trigger_ms']} ms of {t['statement_ms']} ms "
              f"({t['share_of_statement']:.1%})")


if __name__ == "__main__":
    asyncio.run(main())
