"""Group benchmark: what a claim + complete costs per todo when k todos share one statement pair.

    .venv/bin/python bench/group_bench.py --sizes 1,2,4,8,16,100 --todos 2000 --rounds 3
    .venv/bin/python bench/group_bench.py --analyze --backlog 1000000
    .venv/bin/python bench/group_bench.py --no-attempts --sizes 1,16,100

The question behind concurrent calls sharing a statement (core/combine.py, docs/decisions.md D47):
how much of a claim + complete is paid per statement and how much per todo. One database on a fresh
embedded server (or SWITCHBOARD_DATABASE_URL's); one caller drains `--todos` todos per size with
`todos.claim_next_batch(max_todos=k)` + `todos.complete_batch` of what it got, the core's path that a
group of k combined calls runs, on one pooled connection. The sizes run interleaved, the order
rotated every round. Reported per todo: PostgreSQL CPU (the backend's, from /proc), this process's
CPU, and wall time; and per statement pair, the PostgreSQL CPU. Medians over the rounds. Then how
often PostgreSQL used the cached generic plan of each statement and how often it planned the call
afresh (`pg_prepared_statements`): which it does depends on the tables' statistics, so `--analyze`
adds as many done todos, each with its completed attempt, and runs VACUUM ANALYZE after the load (a
fresh installation has no statistics until autovacuum runs). `--no-attempts` drains each size a second
time, in the same rounds, with the store benchmark's statements minus their attempt writes, and reports
what the attempts cost per todo at that size (REQ-18).
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
from switchboard.core import todos


async def drain(tenant: sb.Tenant, k: int, n: int) -> dict[str, float]:
    core, caller = tenant.core, tenant.caller
    conn = await core.pool.getconn()
    pid = conn.info.backend_pid
    await core.pool.putconn(conn)
    done = 0
    cpu0, py0, t0 = sb._backend_cpu_us(pid), time.process_time(), time.perf_counter()
    while done < n:
        got = await todos.claim_next_batch(core, caller, max_todos=k, queue=sb.QUEUE, lease_ttl_seconds=sb.LEASE_TTL)
        if not got:
            raise RuntimeError("the queue ran dry")
        out = await todos.complete_batch(core, caller, [{"id": g.todo["id"]} for g in got])
        if not all(o["ok"] for o in out):
            raise RuntimeError(f"complete_batch refused: {out}")
        done += len(got)
    cpu1, py1, t1 = sb._backend_cpu_us(pid), time.process_time(), time.perf_counter()
    conn = await core.pool.getconn()
    same = conn.info.backend_pid == pid
    await core.pool.putconn(conn)
    if not same:
        raise RuntimeError("the pool changed connections during the drain; the PostgreSQL CPU is not one backend's")
    return {"pg_us": (cpu1 - cpu0) / done, "py_us": 1e6 * (py1 - py0) / done, "wall_us": 1e6 * (t1 - t0) / done,
            "pg_pair_us": (cpu1 - cpu0) / done * k}


PLANS = """SELECT generic_plans, custom_plans, left(regexp_replace(statement, '\\s+', ' ', 'g'), 40) AS head
  FROM pg_prepared_statements ORDER BY generic_plans + custom_plans DESC"""


async def drain_as(tenant: sb.Tenant, k: int, n: int, overlay) -> dict[str, float]:
    """drain, with the core's statements or (overlay given) the store benchmark's others."""
    if overlay is None:
        return await drain(tenant, k, n)
    with sb.statements_swapped(overlay):
        return await drain(tenant, k, n)


async def run(args: argparse.Namespace) -> tuple[dict[tuple[int, str], dict[str, float]], list[tuple]]:
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = {"core": None}
    if args.no_attempts:
        variants["no-attempts"] = sb._Overlay("todos", sb.no_attempts_statements())
    samples: dict[tuple[int, str], list[dict[str, float]]] = {(k, v): [] for k in sizes for v in variants}
    with sb.postgres_server() as (server_uri, how, _):
        dbs = sb.Databases(server_uri)
        try:
            uri = await dbs.create("group")
            tenant = await sb.open_tenant(uri, pool_max=2)
            # each drain may take up to one statement's worth past `--todos`; 500 for the warm-up
            drained = (args.todos + max(sizes)) * len(sizes) * len(variants) * args.rounds + 500
            await tenant.load(drained + args.backlog)
            if args.analyze:  # statistics of tables with rows in both: done todos with their attempts
                await tenant.load_history(max(drained, min(args.backlog, 200_000)))
                await tenant.analyze()
            await drain(tenant, 4, 500)  # warm: prepared statements and caches
            for r in range(args.rounds):
                order = sizes[r % len(sizes):] + sizes[:r % len(sizes)]
                for k in order:
                    for v, overlay in variants.items():
                        samples[k, v].append(await drain_as(tenant, k, args.todos, overlay))
                        print(f"  round {r + 1} k={k} {v}: {samples[k, v][-1]['pg_us']:.0f} µs PostgreSQL per todo",
                              file=sys.stderr)
            conn = await tenant.core.pool.getconn()
            rows = await (await conn.execute(PLANS)).fetchall()
            plans = [(r["generic_plans"], r["custom_plans"], r["head"]) for r in rows]
            await tenant.core.pool.putconn(conn)
            await tenant.core.pool.close()
        finally:
            await dbs.drop_all()
    medians = {kv: {key: statistics.median(s[key] for s in got) for key in got[0]} for kv, got in samples.items()}
    return medians, plans


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,2,4,8,16,100", help="todos per statement pair, comma-separated")
    p.add_argument("--todos", type=int, default=2000, help="todos drained per size and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--analyze", action="store_true", help="done todos with attempts, then VACUUM ANALYZE")
    p.add_argument("--backlog", type=int, default=0, help="pending todos left in the queue beyond those drained")
    p.add_argument("--no-attempts", action="store_true",
                   help="also drain each size without the attempt writes, and report what they cost")
    args = p.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = sb.loadavg()[0]
    out, plans = asyncio.run(run(args))
    print(f"\n{started}, load average {load:.2f} at the start, {sb.loadavg()[0]:.2f} at the end;"
          f" backlog {args.backlog:,} pending;"
          f" statistics {'analysed' if args.analyze else 'none (as a fresh installation)'}\n")
    print("| todos per statement pair | PostgreSQL CPU per todo (µs) | Python CPU per todo (µs) |"
          " wall per todo (µs) | PostgreSQL CPU per pair (µs) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for (k, v), m in out.items():
        if v == "core":
            print(f"| {k} | {m['pg_us']:,.0f} | {m['py_us']:,.0f} | {m['wall_us']:,.0f} | {m['pg_pair_us']:,.0f} |")
    if args.no_attempts:
        print("\n| todos per statement pair | PostgreSQL CPU per todo (µs), with attempts / without |"
              " wall per todo (µs), with / without | throughput, with / without |")
        print("| ---: | ---: | ---: | ---: |")
        for (k, v), m in out.items():
            if v == "core":
                bare = out[k, "no-attempts"]
                print(f"| {k} | {m['pg_us']:,.0f} / {bare['pg_us']:,.0f} | {m['wall_us']:,.0f} /"
                      f" {bare['wall_us']:,.0f} | {bare['wall_us'] / m['wall_us']:.2f} |")
    print("\n| statement | generic plan used | planned afresh |\n| --- | ---: | ---: |")
    for generic, custom, head in plans:
        print(f"| `{head}…` | {generic:,} | {custom:,} |")


if __name__ == "__main__":
    main()
