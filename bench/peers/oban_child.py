"""The Oban side of the peer benchmark's Oban row: run by oban_peer.py in a child process, on the
Python (3.12 or newer) of the side environment `.venv-peers-oban` that holds the `oban` package.

It reads one JSON command a line on stdin and answers each with one JSON line on stdout,
{"ok": true, ...} or {"ok": false, "error": "..."}; everything else it or Oban prints goes to stderr.

    {"cmd": "setup", "uri": ..., "queue": ...}  a pool from `Oban.create_pool` (one connection), the
                                                schema from `oban.schema.install`, a client-mode
                                                `Oban(pool=pool)` (no queues: it only inserts)
    {"cmd": "enqueue", "n": n}                  n no-op jobs through `enqueue_many`; answers the seconds
    {"cmd": "run", "w": w}                      a server-mode `Oban(pool=..., queues={queue: w})`
                                                drains the queue; answers jobs, distinct ids, seconds
    {"cmd": "close"}                            closes what is open and exits

`run` closes the setup pool, opens a fresh pool of POOL_SIZE connections (waited for before Oban
starts; Oban's notifier opens its own LISTEN connection besides) and starts Oban with
`await oban.start()`, as its embedded mode does (`async with oban`). The clock starts when the
first job reaches the worker's `process` and stops when Oban's own telemetry reports (event
`oban.producer.ack.stop`, emitted after the acknowledging transaction returned) that as many jobs
have been acknowledged as were available when the run began: the last job recorded done (the
verification in oban_peer.py checks that each is `completed`).
Oban is stopped after the clock stops.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import oban
from oban import Oban, telemetry, worker
from oban.schema import install

POOL_SIZE = 10  # the default max_size of `Oban.create_pool`: opened in full before the run starts
STALL_S = 60.0  # a run in which no job is acknowledged for this long fails


class State:
    def __init__(self) -> None:
        self.uri = ""
        self.queue = ""
        self.pool: Any = None  # the setup pool: schema install and enqueue
        self.client: Oban | None = None
        self.t0: float | None = None
        self.ran = 0
        self.ids: set[int] = set()


STATE = State()


@worker()  # Oban's defaults (max_attempts 20); the queue is set per job, from the harness
class Noop:
    """The no-op job: it notes that it ran, and on which job."""

    async def process(self, job: oban.Job) -> None:
        if STATE.t0 is None:
            STATE.t0 = time.perf_counter()
        STATE.ran += 1
        if job.id is not None:
            STATE.ids.add(job.id)


async def setup(cmd: dict) -> dict:
    STATE.uri, STATE.queue = cmd["uri"], cmd["queue"]
    STATE.pool = await Oban.create_pool(STATE.uri, min_size=1, max_size=1)
    await install(STATE.pool)
    STATE.client = Oban(pool=STATE.pool, name="ObanClient")
    return {"version": oban.__version__, "python": sys.version.split()[0]}


async def enqueue(cmd: dict) -> dict:
    assert STATE.client is not None, "setup first"
    n, queue = int(cmd["n"]), STATE.queue
    t0 = time.perf_counter()
    inserted = await STATE.client.enqueue_many(Noop.new({}, queue=queue) for _ in range(n))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "inserted": len(inserted)}


async def _available() -> int:
    async with STATE.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM oban_jobs WHERE state = 'available' AND queue = %s",
                                 (STATE.queue,))
        row = await cur.fetchone()
    return int(row[0])


async def run(cmd: dict) -> dict:
    w = int(cmd["w"])
    target = await _available()
    await STATE.pool.close()  # the setup pool: the run has its own
    STATE.pool = None

    acked = 0
    t_end: float | None = None
    done = asyncio.Event()

    def on_ack(_name: str, meta: dict) -> None:
        nonlocal acked, t_end
        acked += int(meta.get("count", 0))
        if acked >= target and t_end is None:
            t_end = time.perf_counter()
            done.set()

    pool = await Oban.create_pool(STATE.uri, min_size=POOL_SIZE, max_size=POOL_SIZE)
    server = Oban(pool=pool, queues={STATE.queue: w}, name="ObanBench")
    telemetry.attach("bench-acks", ["oban.producer.ack.stop"], on_ack)
    try:
        await server.start()
        try:
            seen = -1
            while not done.is_set():
                if acked == seen:
                    raise RuntimeError(f"no job acknowledged for {STALL_S:g} s: {acked} of {target},"
                                       f" {STATE.ran} run")
                seen = acked
                try:
                    await asyncio.wait_for(done.wait(), timeout=STALL_S)
                except TimeoutError:
                    pass
        finally:
            await server.stop()
    finally:
        telemetry.detach("bench-acks")
        await pool.close()
    if STATE.t0 is None or t_end is None:
        raise RuntimeError("no job ran")
    return {"jobs": STATE.ran, "distinct": len(STATE.ids), "acked": acked, "target": target,
            "seconds": t_end - STATE.t0}


async def close(_cmd: dict) -> dict:
    if STATE.pool is not None:
        await STATE.pool.close()
        STATE.pool = None
    return {}


COMMANDS = {"setup": setup, "enqueue": enqueue, "run": run, "close": close}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="asyncio")
    args = p.parse_args()
    # The protocol owns the real stdout; anything printed by anyone else goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            name = cmd.get("cmd")
            try:
                reply = {"ok": True, **runner.run(COMMANDS[name](cmd))}
            except Exception as e:
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            out.write(json.dumps(reply) + "\n")
            if name == "close":
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
