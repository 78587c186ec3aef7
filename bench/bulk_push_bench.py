"""Bulk push benchmark (issue 17, part 3): todos pushed per second by `producer.push_many` (up to
1,000 todos in one INSERT statement) beside `producer.push` (one statement per todo), in one run.

Variants, interleaved in rounds so that noise on the shared machine hits all of them alike:

  single      `producer.push`, one call per todo, each with its own idempotency key
  bulk        `producer.push_many` with --batch todos per call (default 1,000), each with its own key
  bulk-nokey  the same without idempotency keys

Each at every --workers count (concurrent asyncio callers on one pool, one endpoint, two queues);
the todos are the same small ones (title, {"n": i} payload). The rates are medians over --rounds;
CPU seconds per 1,000 todos of this Python process and of the embedded PostgreSQL are reported
next to them. Every pushed todo is checked to be in the database at the end, and the wake-ups a
LISTEN connection received are counted (one per queue per statement for a bulk push).

Runs on a fresh embedded PostgreSQL in a temporary directory, or on the server of
SWITCHBOARD_DATABASE_URL (its own database is created there and dropped afterwards).

    .venv/bin/python bench/bulk_push_bench.py                      # about 2 minutes on 2 cores
    .venv/bin/python bench/bulk_push_bench.py --seconds 2 --rounds 1 --workers 1   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_bench import Databases, ServerCpu, loadavg, machine_info, postgres_server, server_facts
from switchboard.config import load_settings
from switchboard.core import endpoints, humans, producer
from switchboard.core.models import Core
from switchboard.db.listen import READY_CHANNEL
from switchboard.db.pool import open_pool

QUEUES = ("bulk-a", "bulk-b")


def todo_items(n: int, *, keys: bool) -> list[dict]:
    tag = uuid.uuid4().hex[:12]
    return [{"title": f"job {i}", "queue": QUEUES[i % 2], "payload": {"n": i},
             **({"key": f"{tag}-{i}"} if keys else {})} for i in range(n)]


async def run_variant(core: Core, human, slug: str, variant: str, workers: int, batch: int,
                      seconds: float) -> int:
    deadline = time.perf_counter() + seconds

    async def single() -> int:
        done = 0
        while time.perf_counter() < deadline:
            for item in todo_items(50, keys=True):
                await producer.push(core, human, slug, **item)
            done += 50
        return done

    async def bulk(keys: bool) -> int:
        done = 0
        while time.perf_counter() < deadline:
            results = await producer.push_many(core, human, slug, todo_items(batch, keys=keys))
            assert all(created for _, created in results)
            done += len(results)
        return done

    def one():
        return single() if variant == "single" else bulk(variant == "bulk")

    return sum(await asyncio.gather(*(one() for _ in range(workers))))


async def main(args: argparse.Namespace) -> int:
    worker_counts = [int(w) for w in args.workers.split(",")]
    variants = ["single", "bulk", "bulk-nokey"]
    with postgres_server() as (server_uri, how, pgdata):
        dbs = Databases(server_uri)
        try:
            uri = await dbs.create("bulk")
            facts = await server_facts(uri)
            pool = await open_pool(uri, min_size=2, max_size=20)
            core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
            human = await humans.add(core, "bench")
            ep, _ = await endpoints.vend(core, human, agent="bench", queues=list(QUEUES))
            listen = await psycopg.AsyncConnection.connect(uri, autocommit=True)
            await listen.execute(f"LISTEN {READY_CHANNEL}")
            wakeups = 0

            async def count_wakeups() -> None:
                nonlocal wakeups
                async for _ in listen.notifies():
                    wakeups += 1

            counter = asyncio.create_task(count_wakeups())
            server_cpu = ServerCpu(pgdata)
            rows: dict[tuple[str, int], list[dict]] = {}
            total = 0
            # warm-up: plans, pool connections
            await run_variant(core, human, ep["slug"], "bulk", 1, args.batch, 0.5)
            await run_variant(core, human, ep["slug"], "single", 1, args.batch, 0.5)
            async with pool.connection() as conn:
                total = (await (await conn.execute("SELECT count(*) FROM todos")).fetchone())["count"]
            for r in range(args.rounds):
                for w in worker_counts:
                    for v in variants:
                        cpu0, srv0, t0 = time.process_time(), server_cpu.seconds(), time.perf_counter()
                        n = await run_variant(core, human, ep["slug"], v, w, args.batch, args.seconds)
                        wall = time.perf_counter() - t0
                        cpu1, srv1 = time.process_time(), server_cpu.seconds()
                        total += n
                        rows.setdefault((v, w), []).append({
                            "rate": n / wall, "py_ms_per_1000": (cpu1 - cpu0) / n * 1e6,
                            "pg_ms_per_1000": (srv1 - srv0) / n * 1e6 if srv0 is not None else None})
                        print(f"round {r + 1} {v:10s} W={w:<2d} {n / wall:>10,.0f} todos/s", file=sys.stderr)
            await asyncio.sleep(0.5)
            counter.cancel()
            await listen.close()
            async with pool.connection() as conn:
                stored = (await (await conn.execute("SELECT count(*) FROM todos")).fetchone())["count"]
            assert stored == total, f"{stored} todos stored, {total} pushed"
            await pool.close()
        finally:
            await dbs.drop_all()

    def med(xs: list[dict], key: str) -> float | None:
        vals = [x[key] for x in xs if x[key] is not None]
        return statistics.median(vals) if vals else None

    table = [{"variant": v, "workers": w, "todos_per_s": round(med(rows[(v, w)], "rate")),
              "py_cpu_ms_per_1000": round(med(rows[(v, w)], "py_ms_per_1000"), 1),
              "pg_cpu_ms_per_1000": (round(med(rows[(v, w)], "pg_ms_per_1000"), 1)
                                     if med(rows[(v, w)], "pg_ms_per_1000") is not None else None)}
             for w in worker_counts for v in variants]
    report = {"machine": machine_info(), "server": facts, "postgres": how, "batch": args.batch,
              "seconds": args.seconds, "rounds": args.rounds, "todos_stored": total, "wakeups": wakeups,
              "loadavg": loadavg(), "results": table}
    print(json.dumps(report, indent=2))
    print("\n| variant | workers | todos/s | Python CPU ms / 1,000 | PostgreSQL CPU ms / 1,000 |", file=sys.stderr)
    print("| --- | ---: | ---: | ---: | ---: |", file=sys.stderr)
    for row in table:
        print(f"| {row['variant']} | {row['workers']} | {row['todos_per_s']:,} | {row['py_cpu_ms_per_1000']} | "
              f"{row['pg_cpu_ms_per_1000']} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,4", help="comma-separated concurrent callers (default 1,4)")
    parser.add_argument("--batch", type=int, default=1000, help="todos per push_many call (1-1000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    sys.exit(asyncio.run(main(parser.parse_args())))
