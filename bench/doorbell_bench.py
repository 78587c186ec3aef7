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

3. Idle sessions (`--idle-sessions 1000,10000`). One `switchboard serve` holds that many idle
   session-era MCP sessions, each a raw client that initializes and then keeps its GET notification
   stream open on the same connection (one descriptor per session on each side), spread over
   endpoints (`--per-endpoint`, 50 by default, under SWITCHBOARD_MCP_MAX_SESSIONS_PER_ENDPOINT), with
   SWITCHBOARD_MAX_CONNECTIONS raised above the count.
   At each count: the server's RSS and open descriptors, and the doorbell latency (as in 1, with an
   official-SDK client on an endpoint of its own) while the sessions are open. `--compare-src SRC`
   first runs the same against the server of another source tree (an earlier commit exported with
   `git archive`; same database, same run), then against this one. `--trace-sessions N`
   instead runs the server under tracemalloc and prints where the memory of N idle sessions went
   (top allocation sites by size, from a snapshot before and one after opening them).

4. `--check-cost`: the cost of the statement-level endpoint check (`endpoint_live` fragment,
   migration 0008) on claim_next + complete cycles through the core, interleaved rounds with the
   check as shipped and with `switchboard_endpoint_live` replaced by a constant (what the statements
   cost before the check).

Runs on a fresh embedded PostgreSQL in a temporary directory, or on SWITCHBOARD_DATABASE_URL's server
(a database of its own is created there and dropped afterwards).

    make bench                                   # runs this after the store benchmark
    .venv/bin/python bench/doorbell_bench.py     # about 3 minutes on 2 cores
    .venv/bin/python bench/doorbell_bench.py --quick
    .venv/bin/python bench/doorbell_bench.py --idle-sessions 1000,10000     # about 4 minutes
    .venv/bin/python bench/doorbell_bench.py --idle-sessions 1000,10000 --compare-src OLD/src
                                             # OLD: an earlier commit, git archive C | tar -x -C OLD
    .venv/bin/python bench/doorbell_bench.py --trace-sessions 1000
    .venv/bin/python bench/doorbell_bench.py --check-cost
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
from datetime import UTC
from pathlib import Path

import httpx
import httpx2
import mcp_types as types
import psycopg
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import store_bench  # same folder: its PostgreSQL server helper
from switchboard.config import load_settings
from switchboard.core import endpoints, hooks, humans, todos
from switchboard.core.events import HookBus
from switchboard.core.models import Core
from switchboard.db import migrate
from switchboard.db.pool import open_pool
from switchboard.web.metrics import Metrics

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

def start_server(uri: str, extra_env: dict | None = None,
                 command: list[str] | None = None, server_src: str | None = None) -> tuple[subprocess.Popen, str]:
    """`switchboard serve` on a free port; `server_src`: another source tree's `src` to run instead
    (an earlier commit, for a before/after comparison on the same database)."""
    port = free_port()
    env = dict(os.environ, SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_PORT=str(port), SWITCHBOARD_HOST="127.0.0.1",
               SWITCHBOARD_LOG_LEVEL="warning", SWITCHBOARD_SWEEP_INTERVAL_SECONDS="3600",
               SWITCHBOARD_RATE_LIMIT_RPS="1000", SWITCHBOARD_RATE_LIMIT_BURST="1000", **(extra_env or {}))
    if server_src:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (server_src, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(command or [sys.executable, "-m", "switchboard", "serve"], env=env, cwd=ROOT,
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
        "commit_to_notification_ms": {"p50": round(pct(commit_to_note, 50), 2),
                                      "p99": round(pct(commit_to_note, 99), 2),
                                      "max": round(max(commit_to_note), 2)},
        "call_to_notification_ms": {"p50": round(pct(call_to_note, 50), 2), "p99": round(pct(call_to_note, 99), 2)},
    }


# --------------------------------------------------------------------------- 3. idle sessions

async def open_idle_session(port: int, slug: str, credential: str) -> asyncio.StreamWriter:
    """initialize, notifications/initialized, then the GET stream, on one connection held open."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /mcp/{slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {credential}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")

    async def exchange(extra: str, body: bytes) -> tuple[int, dict]:
        writer.write((head + extra + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        status = int((await reader.readline()).split(b" ", 2)[1])
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", 0))
        answer = (await reader.readexactly(n)) if n else b""
        if status >= 300:
            raise RuntimeError(f"HTTP {status}: {answer[:200]!r}")
        return status, headers

    _, headers = await exchange("", b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{'
                                    b'"protocolVersion":"2025-11-25","capabilities":{},'
                                    b'"clientInfo":{"name":"idle","version":"0"}}}')
    session = f"Mcp-Session-Id: {headers['mcp-session-id']}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
    await exchange(session, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    writer.write((f"GET /mcp/{slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {credential}\r\n"
                  f"Accept: text/event-stream\r\n{session}\r\n").encode())
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"GET stream: {status!r}")
    return writer


def proc_status(pid: int) -> dict:
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return {"rss_mb": round(rss, 1), "open_fds": len(os.listdir(f"/proc/{pid}/fd"))}


def raise_own_fd_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def ring_latency(core: Core, url: str, ep: dict, credential: str, n: int) -> dict:
    """Commit -> notifications/resources/updated at an SDK client, over `n` todos (as in part 1)."""
    arrivals: asyncio.Queue[float] = asyncio.Queue()

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            arrivals.put_nowait(time.perf_counter())

    out: list[float] = []
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"}, timeout=httpx2.Timeout(60))
    async with http, Client(streamable_http_client(f"{url}/mcp/{ep['slug']}", http_client=http),
                            mode="legacy", message_handler=on_message) as client:
        await client.subscribe_resource(f"switchboard://queues/{QUEUE}")
        for _ in range(300):
            await todos.create(core, endpoint_id=ep["endpoint_id"], queue=QUEUE, title="warm-up", source="bench")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(arrivals.get(), 0.2)
                break
        await asyncio.sleep(0.5)
        while not arrivals.empty():
            arrivals.get_nowait()
        for i in range(n):
            await todos.create(core, endpoint_id=ep["endpoint_id"], queue=QUEUE, title=f"todo {i}", source="bench")
            t_commit = time.perf_counter()
            out.append((await asyncio.wait_for(arrivals.get(), 10) - t_commit) * 1000)
    return {"p50": round(pct(out, 50), 2), "p99": round(pct(out, 99), 2), "max": round(max(out), 2)}


async def idle_sessions(uri: str, counts: list[int], per_endpoint: int, n: int,
                        server_src: str | None = None) -> list[dict]:
    raise_own_fd_limit()
    pool = await open_pool(uri, min_size=1, max_size=4)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    human = await humans.add(core, f"idle-{uuid.uuid4().hex[:6]}")
    bell, bell_credential = await endpoints.vend(core, human, agent="bell", queues=[QUEUE])
    lanes = [await endpoints.vend(core, human, agent=f"idle{i}", queues=["idle"])
             for i in range(-(-max(counts) // per_endpoint))]
    proc, url = start_server(uri, {"SWITCHBOARD_MCP_MAX_SESSIONS_PER_ENDPOINT": str(per_endpoint),
                                   "SWITCHBOARD_MAX_CONNECTIONS": str(max(counts) + 1000)}, server_src=server_src)
    port = int(url.rsplit(":", 1)[1])
    held: list[asyncio.StreamWriter] = []
    results = []
    try:
        await asyncio.sleep(1.0)
        results.append({"sessions": 0, **proc_status(proc.pid), "doorbell_ms": await ring_latency(
            core, url, bell, bell_credential, n)})
        print(json.dumps(results[-1]), flush=True)
        gate = asyncio.Semaphore(16)

        retried = 0

        async def one(i: int) -> None:
            nonlocal retried
            ep, credential = lanes[i // per_endpoint]
            async with gate:
                for attempt in range(5):
                    try:
                        held.append(await open_idle_session(port, ep["slug"], credential))
                        return
                    except RuntimeError as exc:  # a 503 under load (the pool's checkout deadline): retry
                        if "HTTP 503" not in str(exc) or attempt == 4:
                            raise
                        retried += 1
                        await asyncio.sleep(1.0)

        for target in sorted(counts):
            started = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(len(held), target)))
            opened_in = time.perf_counter() - started
            await asyncio.sleep(3.0)
            row = {"sessions": len(held), **proc_status(proc.pid), "opened_in_s": round(opened_in, 1),
                   "retried_503": retried, "loadavg": [round(x, 2) for x in os.getloadavg()]}
            row["doorbell_ms"] = await ring_latency(core, url, bell, bell_credential, n)
            row.update(proc_status(proc.pid))
            results.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for w in held:
            w.close()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        await pool.close()
    return results


def serve_traced() -> None:
    """The server under tracemalloc: SIGUSR1 takes a snapshot; the second one writes the difference
    (top allocation sites) to SWITCHBOARD_BENCH_TRACE_OUT."""
    import signal
    import tracemalloc

    from switchboard.web.server import serve

    tracemalloc.start(1)
    snaps: list = []

    def on_signal(signum, frame) -> None:
        snaps.append(tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]))
        if len(snaps) == 2:
            by_file = snaps[1].compare_to(snaps[0], "filename")
            by_line = snaps[1].compare_to(snaps[0], "lineno")
            total = sum(d.size_diff for d in by_file)
            lines = [f"total {total / 1024:.0f} KiB"]
            lines += [f"file {d.size_diff / 1024:9.0f} KiB {d.count_diff:8d} blocks  {d.traceback[0].filename}"
                      for d in by_file[:25]]
            lines += [f"line {d.size_diff / 1024:9.0f} KiB {d.count_diff:8d} blocks  {d.traceback[0]}"
                      for d in by_line[:40]]
            Path(os.environ["SWITCHBOARD_BENCH_TRACE_OUT"]).write_text("\n".join(lines) + "\n")

    signal.signal(signal.SIGUSR1, on_signal)
    serve(load_settings())


async def trace_sessions(uri: str, n: int, per_endpoint: int) -> str:
    import signal
    import tempfile

    raise_own_fd_limit()
    pool = await open_pool(uri, min_size=1, max_size=4)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    human = await humans.add(core, f"trace-{uuid.uuid4().hex[:6]}")
    lanes = [await endpoints.vend(core, human, agent=f"t{i}", queues=["idle"])
             for i in range(1 + -(-n // per_endpoint))]  # the first for the warm-up sessions
    out = Path(tempfile.mkdtemp()) / "trace.txt"
    proc, url = start_server(uri, {"SWITCHBOARD_MCP_MAX_SESSIONS_PER_ENDPOINT": str(per_endpoint),
                                   "SWITCHBOARD_MAX_CONNECTIONS": str(n + 1000),
                                   "SWITCHBOARD_BENCH_TRACE_OUT": str(out)},
                             command=[sys.executable, str(Path(__file__).resolve()), "--serve-traced"])
    port = int(url.rsplit(":", 1)[1])
    held = []
    try:
        # A few sessions first, so that one-time costs (imports, caches) land before the baseline.
        for _ in range(20):
            ep, credential = lanes[0]
            held.append(await open_idle_session(port, ep["slug"], credential))
        await asyncio.sleep(2.0)
        before = proc_status(proc.pid)
        proc.send_signal(signal.SIGUSR1)
        await asyncio.sleep(3.0)
        for i in range(n):
            ep, credential = lanes[1 + i // per_endpoint]
            held.append(await open_idle_session(port, ep["slug"], credential))
        await asyncio.sleep(3.0)
        after = proc_status(proc.pid)
        proc.send_signal(signal.SIGUSR1)
        for _ in range(1500):
            if out.exists():
                break
            await asyncio.sleep(0.2)
        text = out.read_text()
    finally:
        for w in held:
            w.close()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        await pool.close()
    rss_per = (after["rss_mb"] - before["rss_mb"]) * 1024 / n
    return f"RSS {before['rss_mb']} -> {after['rss_mb']} MB over {n} sessions: {rss_per:.1f} KiB each\n" + text


# --------------------------------------------------------------------------- 4. the endpoint check

async def check_cost(uri: str, *, rounds: int, seconds: float, workers: int) -> dict:
    """claim_next + complete cycles/s with the statement-level endpoint check as shipped and with the
    check's function replaced by a constant, in interleaved rounds."""
    pool = await open_pool(uri, min_size=workers, max_size=workers + 2)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    human = await humans.add(core, f"chk-{uuid.uuid4().hex[:6]}")
    ep, credential = await endpoints.vend(core, human, agent="chk", queues=[QUEUE])
    row = await endpoints.resolve_credential(core, credential)
    caller = endpoints.caller_from_row(row)
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT pg_get_functiondef('switchboard_endpoint_live(uuid)'::regprocedure) AS d")
        shipped = (await cur.fetchone())["d"]
        await conn.execute(BULK_LOAD, {"endpoint_id": ep["endpoint_id"], "queue": QUEUE, "n": 200_000})
    constant = ("CREATE OR REPLACE FUNCTION switchboard_endpoint_live(ep uuid) RETURNS boolean "
                "LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN true; END $$")

    async def use(sql: str) -> None:
        async with pool.connection() as conn:
            await conn.execute(sql)
        # Pooled connections cache plans (and plpgsql function bodies): start from fresh ones.
        await pool.check()

    async def run() -> float:
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                got = await todos.claim_next(core, caller)
                await todos.complete(core, caller, got.todo["id"])
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(workers)))
        return done / (time.perf_counter() - started)

    rates: dict[str, list[float]] = {"with_check": [], "constant": []}
    try:
        for _ in range(rounds):
            for label, sql in (("with_check", shipped), ("constant", constant)):
                await use(sql)
                await run()  # warm-up of this variant's plans
                rates[label].append(await run())
    finally:
        await use(shipped)
        await pool.close()
    med = {k: round(statistics.median(v), 1) for k, v in rates.items()}
    return {"cycles_per_s_median": med, "ratio": round(med["with_check"] / med["constant"], 3),
            "rounds": rounds, "seconds": seconds, "workers": workers}


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
    from datetime import datetime

    from switchboard.core.events import build

    row = {"id": "td_bench", "endpoint_id": uuid.uuid4(), "queue": QUEUE, "source": None, "kind": None,
           "title": "t", "state": "done", "owner": "agent:x", "assignee": None, "attempt": 1, "max_attempts": 5,
           "lease_expires_at": None, "next_retry_at": None, "created_at": datetime.now(UTC),
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
            bus.subscribe(lambda ev, wake=wake: wake.set() if ev.verb in ("create", "complete", "fail") else None)
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
    ap.add_argument("--idle-sessions", help="only part 3: idle session counts, comma separated (1000,10000)")
    ap.add_argument("--per-endpoint", type=int, default=50, help="idle sessions per endpoint (default 50)")
    ap.add_argument("--compare-src", metavar="SRC",
                    help="with --idle-sessions: first run the server from this source tree's src directory "
                         "(an earlier commit, e.g. from `git archive`), then this one, on the same database")
    ap.add_argument("--trace-sessions", type=int, help="only: tracemalloc of N idle sessions in the server")
    ap.add_argument("--check-cost", action="store_true", help="only part 4: the endpoint check's cost")
    ap.add_argument("--serve-traced", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.idle_sessions or args.trace_sessions or args.check_cost:
        out = {"machine": machine()}
        with postgres_server() as server_uri:
            name, uri = await fresh_database(server_uri)
            try:
                if args.trace_sessions:
                    print(await trace_sessions(uri, args.trace_sessions, args.per_endpoint))
                if args.check_cost:
                    out["check_cost"] = await check_cost(uri, rounds=6, seconds=3.0, workers=4)
                    print(json.dumps(out["check_cost"]), flush=True)
                if args.idle_sessions:
                    counts = [int(c) for c in args.idle_sessions.split(",")]
                    if args.compare_src:
                        print(f"before: the server from {args.compare_src}", flush=True)
                        out["idle_sessions_before"] = await idle_sessions(
                            uri, counts, args.per_endpoint, args.todos or 300, server_src=args.compare_src)
                        print("after: this tree's server", flush=True)
                    out["idle_sessions"] = await idle_sessions(uri, counts, args.per_endpoint, args.todos or 300)
            finally:
                await drop_database(server_uri, name)
        out["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(out))
        return
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
    if "--serve-traced" in sys.argv:  # the traced server of --trace-sessions (runs its own event loop)
        serve_traced()
    else:
        asyncio.run(main())
