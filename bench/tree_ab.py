"""Tree A/B benchmark: the core's claim + complete paths on an earlier revision's schema and statements,
beside this tree's, in one run.

    .venv/bin/python bench/tree_ab.py --before 36 --rev HEAD~1 --kinds batch,core --workers 1,4 --rounds 5

Two databases on one fresh embedded server (or SWITCHBOARD_DATABASE_URL's): one migrated up to
`--before` and driven with the statements of git revision `--rev` (todos.sql with its fragments, as
store_bench.py --compare splices them), one migrated to the head and driven with this tree's. What
differs is everything a change to both the schema and the statements does: triggers, constraints,
indexes and the SQL itself. The Python is this tree's on both sides, so the revision's statements must
answer what it reads. Each kind runs the core's own Python path for 3 s per measurement:

  core    `todos.claim_next` + `todos.complete`, one todo per call
  batch   `todos.claim_next_batch(max_todos=100)` + one `todos.complete_batch` of what it claimed

The two sides alternate within each round, which rotates their order; each measurement reads the
server's CPU from /proc when the server is the embedded one (so run it alone). Reported: todos/s and
PostgreSQL CPU per todo, medians, and the median of the per-round ratios after/before.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import store_bench as sb
from switchboard.db.migrate import available

KINDS = ("core", "batch")
BATCH = 100


async def drain(tenant: sb.Tenant, kind: str, workers: int, seconds: float) -> int:
    deadline = time.perf_counter() + seconds
    if kind == "batch":
        jobs = [sb.batch_worker(tenant, BATCH, deadline) for _ in range(workers)]
    else:
        jobs = [sb.core_worker(tenant, deadline) for _ in range(workers)]
    return sum(n for n, _ in await asyncio.gather(*jobs))


async def main(args: argparse.Namespace) -> int:
    head = max(m.version for m in available())
    if not 1 <= args.before <= head:
        raise SystemExit(f"bench: --before must be from 1 to {head}")
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or any(k not in KINDS for k in kinds):
        raise SystemExit(f"bench: --kinds takes {', '.join(KINDS)}")
    workers = [int(w) for w in args.workers.split(",")]
    old = sb._Overlay("todos", sb.tree_statements(args.rev))
    log = (lambda _m: None) if args.silent else (lambda m: print(m, file=sys.stderr, flush=True))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load0 = sb.loadavg()[0]
    with sb.postgres_server() as (server_uri, how, pgdata):
        cpu = sb.ServerCpu(pgdata)
        dbs = sb.Databases(server_uri)
        sides: dict[str, sb.Tenant] = {}
        try:
            for label, target in (("before", args.before), ("after", None)):
                tenant = await sb.open_tenant(await dbs.create(label, target=target), pool_max=20)
                await tenant.load_history(args.history)
                await tenant.load(args.backlog)
                await tenant.analyze()
                sides[label] = tenant
            got: dict[tuple[str, int, str], list[tuple[float, float | None]]] = {}
            for r in range(args.rounds):
                labels = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for kind in kinds:
                    for w in workers:
                        for label in labels:
                            tenant = sides[label]
                            pg0, t0 = cpu.seconds(), time.perf_counter()
                            if label == "before":
                                with sb.statements_swapped(old):
                                    n = await drain(tenant, kind, w, args.seconds)
                            else:
                                n = await drain(tenant, kind, w, args.seconds)
                            elapsed, pg1 = time.perf_counter() - t0, cpu.seconds()
                            pg_us = (pg1 - pg0) / max(n, 1) * 1e6 if pg0 is not None and pg1 is not None else None
                            got.setdefault((kind, w, label), []).append((n / elapsed, pg_us))
                            await tenant.load(n)  # the backlog stays the same
                log(f"  round {r + 1}/{args.rounds}, load average {sb.loadavg()[0]:.2f}")
        finally:
            for tenant in sides.values():
                await tenant.core.pool.close()
            await dbs.drop_all()
    rows = []
    for kind in kinds:
        for w in workers:
            b, a = got[(kind, w, "before")], got[(kind, w, "after")]

            def pg(xs: list[tuple[float, float | None]]) -> str:
                vals = [x[1] for x in xs if x[1] is not None]
                return f"{statistics.median(vals):.1f}" if vals else "n/a"

            rows.append([kind, str(w), f"{statistics.median(x[0] for x in b):,.0f}", pg(b),
                         f"{statistics.median(x[0] for x in a):,.0f}", pg(a),
                         f"{sb.paired_ratio([x[0] for x in a], [x[0] for x in b]):.2f}"])
    print(f"Tree A/B, {started}, {how}; before: migration {args.before} with {args.rev}'s statements, after: this"
          f" tree; load average (1 min) {load0:.2f} at start, {sb.loadavg()[0]:.2f} at end")
    print(f"todos/s and PostgreSQL CPU per todo (µs), medians of {args.rounds} rounds of {args.seconds} s;"
          " after/before: median of per-round ratios")
    print(sb.fmt_table(rows, ["kind", "workers", "before/s", "before µs", "after/s", "after µs", "after/before"]))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=int, required=True, help="the migration the earlier schema stops at")
    p.add_argument("--rev", required=True, help="the git revision (or tree) whose statements drive it")
    p.add_argument("--kinds", default="batch,core", help="core, batch or both (default both)")
    p.add_argument("--workers", default="1,4", help="worker counts, comma separated (default 1,4)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement (default 3)")
    p.add_argument("--backlog", type=int, default=200_000, help="pending todos kept on each side (default 200,000)")
    p.add_argument("--history", type=int, default=20_000, help="done todos with one attempt each (default 20,000)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:  # the loop uvicorn uses when it is installed
        sys.exit(asyncio.run(main(parse_args())))
    sys.exit(uvloop.run(main(parse_args())))
