"""Schema benchmark: PostgreSQL's CPU per claim + complete and per heartbeat on the schema as an earlier
migration left it, beside the schema of this tree, in one run.

    .venv/bin/python bench/schema_bench.py --before 25 --cycles 300 --rounds 10

Two databases on one fresh embedded server (or SWITCHBOARD_DATABASE_URL's): one migrated up to
`--before`, one to the head. In each, the core's own claim_next_one + complete (raw psycopg, the
parameters the core sends), the bare claim + complete of the store benchmark, and the core's
heartbeat of one held todo, each on its own connection, the six variants interleaved cycle by cycle
(the order reversed every cycle, rotated every round), each backend's CPU read from /proc. The
statements are this tree's, so the migrations compared must leave them valid; what differs is what
PostgreSQL does for the schema (constraints, triggers, indexes) on every write.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import store_bench as sb
from switchboard.core import inputs, todos
from switchboard.core.queries import Q
from switchboard.db.migrate import available

KINDS = ("core", "bare", "heartbeat")


class Side:
    """One database: its tenant and a connection per kind of cycle."""

    def __init__(self, tenant: sb.Tenant) -> None:
        self.tenant = tenant
        self.raw = sb.RawCycle(tenant)
        self.conns: dict[str, tuple[psycopg.AsyncConnection, int]] = {}
        self.held: str | None = None  # the todo the heartbeat connection keeps extending

    async def connect(self) -> None:
        for kind in KINDS:
            conn = await psycopg.AsyncConnection.connect(self.tenant.uri, autocommit=True)
            self.conns[kind] = (conn, conn.info.backend_pid)

    async def cycle(self, kind: str) -> None:
        conn = self.conns[kind][0]
        if kind != "heartbeat":
            await self.raw(conn, None if kind == "bare" else (Q.todos.claim_next_one, Q.todos.complete))
            return
        if self.held is None:
            got = await todos.claim_next(self.tenant.core, self.tenant.caller, lease_ttl_seconds=sb.LEASE_TTL)
            assert got is not None
            self.held = got.todo["id"]
        cur = await conn.execute(Q.todos.heartbeat, {**self.raw.scope, "id": self.held, "ttl": sb.LEASE_TTL,
                                                     "note": None, "notes_max": inputs.NOTES_MAX_PER_ATTEMPT})
        if await cur.fetchone() is None:
            raise SystemExit("bench: a heartbeat matched nothing")

    async def close(self) -> None:
        for conn, _ in self.conns.values():
            await conn.close()
        await self.tenant.core.pool.close()


async def main(args: argparse.Namespace) -> int:
    head = max(m.version for m in available())
    if not 1 <= args.before < head:
        raise SystemExit(f"bench: --before must be from 1 to {head - 1} (the head migration is {head})")
    log = (lambda _m: None) if args.silent else (lambda m: print(m, file=sys.stderr, flush=True))
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load0 = sb.loadavg()[0]
    with sb.postgres_server() as (server_uri, how, _pgdata):
        dbs = sb.Databases(server_uri)
        sides: dict[str, Side] = {}
        try:
            for label, target in ((f"before-{args.before:04d}", args.before), (f"head-{head:04d}", None)):
                uri = await dbs.create(label.replace("-", ""), target=target)
                tenant = await sb.open_tenant(uri, pool_max=2)
                await tenant.load(2 * args.cycles * args.rounds + 200)
                await tenant.load_history(args.history)
                await tenant.analyze()
                sides[label] = side = Side(tenant)
                await side.connect()
            keys = [(label, kind) for label in sides for kind in KINDS]
            for key in keys:
                for _ in range(20):  # prepared after five, then the plan PostgreSQL keeps
                    await sides[key[0]].cycle(key[1])
            us: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
            for r in range(args.rounds):
                order = keys[r % len(keys):] + keys[:r % len(keys)]
                before = {k: sb._backend_cpu_us(sides[k[0]].conns[k[1]][1]) for k in keys}
                for i in range(args.cycles):
                    for key in order if i % 2 == 0 else order[::-1]:
                        await sides[key[0]].cycle(key[1])
                for k in keys:
                    us[k].append((sb._backend_cpu_us(sides[k[0]].conns[k[1]][1]) - before[k]) / args.cycles)
                log(f"  round {r + 1}/{args.rounds}: " + ", ".join(f"{a} {b} {us[(a, b)][-1]:.0f}" for a, b in keys))
        finally:
            for side in sides.values():
                await side.close()
            await dbs.drop_all()
    first = next(iter(sides))
    rows = []
    for label, kind in keys:
        rows.append([label, kind, f"{statistics.median(us[(label, kind)]):,.0f}",
                     f"{sb.paired_ratio(us[(label, kind)], us[(first, kind)]):.3f}",
                     f"{sb.paired_ratio(us[(label, 'core')], us[(label, 'bare')]):.3f}" if kind == "core" else ""])
    print(f"Schema benchmark, {started}, {how}; load average (1 min) {load0:.2f} at start, "
          f"{sb.loadavg()[0]:.2f} at end")
    print("PostgreSQL backend CPU per claim_next_one + complete (core, bare) and per heartbeat, µs"
          f" ({args.rounds} rounds of {args.cycles} cycles per variant, interleaved cycle by cycle;"
          " ratios: medians of per-round ratios)")
    print(sb.fmt_table(rows, ["schema", "statements", "median", f"/{first}", "core/bare"]))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=int, required=True, help="the migration the earlier schema stops at")
    p.add_argument("--cycles", type=int, default=300, help="cycles per variant and round (default 300)")
    p.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    p.add_argument("--history", type=int, default=5_000, help="done todos with one attempt each (default 5,000)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
