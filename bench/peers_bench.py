"""Peer benchmark (issue 17): jobs/s of Switchboard's paths beside other PostgreSQL queues, in one run.

Every system drains the same number of no-op jobs (5,000 by default) at W = 1, 4 and 16 workers,
each measurement on a fresh database of one PostgreSQL server (synchronous commit on), in
interleaved rounds (the order rotates each round and worker count; medians of 3), start-up
excluded, every job verified done exactly once and, for raw SQL and Switchboard, every attempt row
closed. The bulk-enqueue figure of each system is its enqueue of those jobs, timed in the same
measurements. The systems and how each is driven: bench/peers/ (registry.py lists them).

    make bench-peers                                      # installs the peers ([bench] extras), about 10 min
    .venv/bin/python bench/peers_bench.py --quick         # 1,000 jobs, 1 round
    .venv/bin/python bench/peers_bench.py --systems raw-per-job,sb-core --jobs 200 --workers 1
    .venv/bin/python bench/peers_bench.py --write-doc docs/benchmarks.md   # also (re)writes its "Peers" section

Runs on a fresh embedded PostgreSQL in a temporary directory, or on the server of
SWITCHBOARD_DATABASE_URL (its databases are created there and dropped after each measurement).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import sys
import textwrap
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import store_bench  # the PostgreSQL server helper, machine facts, server CPU
from peers import harness, registry

SECTION = "## Peers"


class ServerCpu(store_bench.ServerCpu):
    """The store bench's server CPU plus what the postmaster's exited children used (cutime and
    cstime): peers close their connections inside their run, and a closed backend's CPU would
    otherwise drop out of the sum."""

    def seconds(self) -> float | None:
        live = super().seconds()
        if live is None:
            return None
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2:].split()
        return live + (int(fields[13]) + int(fields[14])) / self.tick


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=None,
                   help="no-op jobs per measurement (default 5000; 1000 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; 1 with --quick)")
    p.add_argument("--workers", default="1,4,16", help="worker counts, comma-separated (default 1,4,16)")
    p.add_argument("--systems", default=None,
                   help=f"systems to run, comma-separated (default all: {', '.join(registry.SYSTEMS)})")
    p.add_argument("--quick", action="store_true", help="1,000 jobs, 1 round (for development)")
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--write-doc", metavar="FILE",
                   help="write the report as the 'Peers' section of FILE (replaced if there, else appended)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="event loop for every system (uvloop, as uvicorn uses it when installed)")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    args.jobs = args.jobs or (1000 if args.quick else 5000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.worker_counts = [int(x) for x in args.workers.split(",")]
    keys = args.systems.split(",") if args.systems else list(registry.SYSTEMS)
    unknown = [k for k in keys if k not in registry.SYSTEMS]
    if unknown:
        p.error(f"unknown system {', '.join(unknown)}; known: {', '.join(registry.SYSTEMS)}")
    if args.jobs < 1 or args.rounds < 1 or any(w < 1 for w in args.worker_counts):
        p.error("--jobs, --rounds and --workers must be at least 1")
    args.keys = keys
    return args


async def measure(args: argparse.Namespace, log) -> dict:
    info = store_bench.machine_info()
    load_start = store_bench.loadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t_start = time.perf_counter()
    with store_bench.postgres_server() as (server_uri, how, pgdata):
        facts = await store_bench.server_facts(server_uri)
        log(f"PostgreSQL {facts['server_version']} ({how}), synchronous_commit {facts['synchronous_commit']}; "
            f"{info['nproc']} CPUs; {args.jobs:,} jobs x {args.rounds} rounds x W={args.workers}")
        dbs = harness.Databases(server_uri)
        cpu = ServerCpu(pgdata)
        try:
            results = await harness.measure_all([registry.SYSTEMS[k] for k in args.keys], dbs, n=args.jobs,
                                                workers=args.worker_counts, rounds=args.rounds,
                                                server_cpu=cpu.seconds, loadavg=lambda: store_bench.loadavg()[0],
                                                log=log)
        finally:
            await dbs.drop_all()
    load_end = store_bench.loadavg()
    return {"results": results, "facts": facts, "how": how, "info": info, "started": started,
            "seconds": time.perf_counter() - t_start, "load": (load_start, load_end)}


def _fmt(x: float | None) -> str:
    return f"{x:,.0f}" if x is not None else "-"


def report(args: argparse.Namespace, m: dict, command: str) -> str:
    r: harness.Results = m["results"]
    ws = args.worker_counts
    makers = {k: registry.SYSTEMS[k]() for k in args.keys}
    w_cpu = ws[min(1, len(ws) - 1)]  # the second worker count (4 by default)
    lines = ["| system | " + " | ".join(f"W={w}" for w in ws) + f" | PostgreSQL CPU µs/job (W={w_cpu}) |",
             "| --- | " + " | ".join("---:" for _ in ws) + " | ---: |"]
    for k, s in makers.items():
        if k in r.skipped:
            lines.append(f"| {s.label} | " + " | ".join(f"skipped: {r.skipped[k]}" if i == 0 else ""
                                                         for i in range(len(ws))) + " | |")
        elif k in r.failed:
            lines.append(f"| {s.label} | " + " | ".join("FAILED" for _ in ws) + " | |")
        else:
            lines.append(f"| {s.label} | " + " | ".join(_fmt(r.median(k, w)) for w in ws)
                         + f" | {_fmt(r.median_of(k, w_cpu, 'pg_us'))} |")
    table = "\n".join(lines)

    seen: dict[str, list[float]] = {}
    for k, s in makers.items():
        med = r.enqueue_median(k)
        if med is not None:
            seen.setdefault(s.enqueue_label, []).append(med)
    enq = ["| bulk enqueue | jobs/s |", "| --- | ---: |"] + [
        f"| {label} | {_fmt(statistics.median(xs))} |" for label, xs in seen.items()]

    # Issue 17's targets that this run measures: (what, system, against, at least this ratio, worker counts).
    targets = [("Switchboard core per claim / raw SQL per job", "sb-core", "raw-per-job", 0.85, ws),
               ("Switchboard core per claim / Oban (Python port)", "sb-core", "oban", 1.0, ws),
               ("Switchboard core batches of 100 / PgQueuer asyncpg batch 100", "sb-core-batch-100",
                "pgqueuer-asyncpg-100", 1.0, [w for w in ws if w >= 4]),
               ("Switchboard core batches of 100, each round one transaction / PgQueuer asyncpg batch 100",
                "sb-core-round-100", "pgqueuer-asyncpg-100", 1.0, [w for w in ws if w >= 4]),
               ("Switchboard MCP batches of 100 / PgQueuer psycopg default batch", "sb-mcp-batch-100",
                "pgqueuer-psycopg-default", 1.0, [w for w in ws if w >= 4]),
               ("Switchboard MCP batches of 100, each round one call / PgQueuer psycopg default batch",
                "sb-mcp-round-100", "pgqueuer-psycopg-default", 1.0, [w for w in ws if w >= 4])]
    target_lines = []
    for what, a_key, b_key, least, at in targets:
        cells = []
        for w in at:
            a, b = r.median(a_key, w), r.median(b_key, w)
            if a and b:
                cells.append(f"W={w} {a / b:.2f}{'' if a / b >= least else ' (missed)'}")
        if cells:
            target_lines.append(f"- {what}: {', '.join(cells)} (target ≥ {least:g})")
    info, facts = m["info"], m["facts"]
    loads = r.loads or [float("nan")]
    load_line = (f"load average (1 min) {m['load'][0][0]:.2f} at start, {min(loads):.2f}-{max(loads):.2f} during"
                 f" (median {statistics.median(loads):.2f}), {m['load'][1][0]:.2f} at end")
    machine = (f"{info['nproc']} CPUs ({platform.machine()}, {info['cpu']}), PostgreSQL {facts['server_version']}"
               f" ({m['how']}; synchronous_commit {facts['synchronous_commit']}, fsync {facts['fsync']}),"
               f" Python {info['python']}, psycopg {info['psycopg']}, event loop {args.loop}")
    out = [
        SECTION,
        "",
        f"Jobs/s of no-op jobs, drained by W workers; each figure the median of {args.rounds} interleaved"
        f" round{'s' if args.rounds > 1 else ''} of {args.jobs:,} jobs, each measurement on a fresh database"
        " of one server, start-up excluded, every job verified done exactly once, and for raw SQL and"
        " Switchboard every attempt row closed. How each system is started and driven: bench/peers/."
        " `make bench-peers` installs the peers (the `[bench]` extras) and runs it;"
        " `bench/peers_bench.py --quick` (1,000 jobs, 1 round) is for development, `--write-doc FILE`"
        " rewrites this section from a run. PostgreSQL CPU per job is the server's CPU time (from /proc)"
        " over the jobs drained, which other load moves less than the rates.",
        "",
        f"Command: `{command}` ({m['started']}, {m['seconds'] / 60:.1f} min).",
        "",
        f"Machine: {machine}.",
        "",
        f"Load: {load_line}; the machine was shared, so compare rows of one run rather than runs.",
        "",
        table,
        "",
    ]
    sb_label = next((s.enqueue_label for k, s in makers.items() if k == "sb-core"), None)
    if sb_label in seen:  # the figure of the bulk-enqueue table's Switchboard row
        target_lines.append(f"- Switchboard bulk enqueue: {statistics.median(seen[sb_label]):,.0f} todos/s"
                            " (target ≥ 50,000)")
    if target_lines:
        out += ["Ratios in this run (issue 17's targets):", ""] + target_lines + [""]
    out += ["\n".join(enq), ""]
    out += [
        "What each system writes per job differs, and the rows say so: raw SQL and Switchboard open and"
        " close one attempt row per job in the claim and complete statements (Switchboard also checks"
        " scope, fence and lease and reads the prior attempts); PgQueuer deletes the job row and writes"
        " `pgqueuer_log` rows through a buffer flushed a batch at a time; procrastinate runs one fetch and one"
        " finish call per job, and its trigger writes `procrastinate_events` rows. PgQueuer on psycopg"
        " shares one connection between queries and its notification watcher, which holds it until the"
        " next notification arrives (its driver reads `notifies(timeout=1.0, stop_after=1)`); on asyncpg"
        " the listener does not hold the connection. Oban's Python port (open-source edition) runs one"
        " fetcher per queue that takes up to its limit W minus the jobs running in one statement, and"
        " marks the jobs finished since the last fetch done in one transaction (one UPDATE per job), so"
        " at W > 1 it claims and acknowledges in small batches; its bulk `enqueue_many` sends one INSERT"
        " per job in one transaction. Its Python CPU is not in this process's figure (it runs in a child"
        " process on Python >= 3.12). Switchboard's per-claim workers, W of one endpoint in one process,"
        " each claim and complete one todo per call; the core runs calls made at the same time together,"
        " one statement per group, each call answered as if alone (core/combine.py, docs/decisions.md"
        " D47); the row with `SWITCHBOARD_COMBINE_CALLS=false` runs every call as its own statement.",
        "",
    ]
    if r.failed:
        out += ["Failed (no figure): " + "; ".join(f"{k}: {e}" for k, e in r.failed.items()), ""]
    return "\n".join(wrap(x) for x in out)


def wrap(block: str) -> str:
    """Prose wrapped at 100 columns as the rest of docs/benchmarks.md; tables, lists, headings as they are."""
    if not block or block.startswith(("|", "-", "#")) or "\n" in block:
        return block
    return textwrap.fill(block, width=100, break_long_words=False, break_on_hyphens=False)


def write_section(path: Path, section: str) -> None:
    """Replace the '## Peers' section of the file (up to the next '## ' heading), or append it."""
    text = path.read_text() if path.exists() else ""
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    body = section.rstrip("\n") + "\n"
    if pattern.search(text):
        text = pattern.sub(lambda _: body + "\n", text, count=1).rstrip("\n") + "\n"
    else:
        text = text.rstrip("\n") + "\n\n" + body
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = (lambda *_: None) if args.silent else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            args.loop = "asyncio"
    m = uvloop.run(measure(args, log)) if args.loop == "uvloop" else asyncio.run(measure(args, log))
    command = "python bench/peers_bench.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])
                                               if (argv if argv is not None else sys.argv[1:]) else "")
    command = re.sub(r"\s*--(write-doc|json)(=|\s+)\S+", "", command)  # output files are not part of the method
    text = report(args, m, command)
    print(text)
    if args.json:
        r = m["results"]
        Path(args.json).write_text(json.dumps({
            "jobs": args.jobs, "rounds": args.rounds, "workers": args.worker_counts,
            "samples": {k: {w: [vars(s) for s in xs] for w, xs in by_w.items()} for k, by_w in r.samples.items()},
            "skipped": r.skipped, "failed": r.failed, "machine": m["info"], "server": m["facts"]}, indent=2))
    if args.write_doc:
        write_section(Path(args.write_doc), text)
    return 1 if m["results"].failed else 0


if __name__ == "__main__":
    sys.exit(main())
