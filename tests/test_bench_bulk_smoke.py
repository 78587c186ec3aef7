"""The bulk push benchmark and the store benchmark's latency-only mode, tiny: so that they cannot rot.

Both run as the documented commands, on the suite's PostgreSQL server (SWITCHBOARD_DATABASE_URL
points a bench at it; each creates its own databases there and drops them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], pg_server: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWITCHBOARD_DATABASE_URL=pg_server)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_bulk_push_bench_runs_every_variant_and_counts_every_todo(pg_server):
    done = run(["bench/bulk_push_bench.py", "--seconds", "0.3", "--rounds", "2", "--workers", "1", "--batch", "50",
                "--http-bodies", "2"], pg_server)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = {r["variant"]: r for r in report["results"]}
    assert set(rows) == {"single", "bulk", "bulk-nokey", "http", "raw", "raw-nokey"}
    assert all(r["todos_per_s"] > 0 for r in rows.values())
    assert rows["raw"]["to_raw"] == 1.0 and rows["http"]["server_cpu_ms_per_1000"] is not None
    assert report["todos_stored"] > 0 and report["wakeups"] > 0


def test_store_bench_latency_only_reports_both_backlogs_and_the_plan(pg_server, tmp_path):
    out = tmp_path / "lat.json"
    done = run(["bench/store_bench.py", "--latency-only", "--big", "3000", "--small", "200", "--history", "100",
                "--latency-rounds", "2", "--latency-samples", "10", "--loop", "asyncio", "--silent",
                "--json", str(out)], pg_server)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "claim latency only (--latency-only)" in done.stdout
    assert "claim_next p50 at 3,000 pending <= 1.5 x p50 at 200" in done.stdout
    data = json.loads(out.read_text())
    assert data["latency_ms"]["small"]["n"] == data["latency_ms"]["big"]["n"] == 20
    assert data["sizes"]["pending"] >= 3000
