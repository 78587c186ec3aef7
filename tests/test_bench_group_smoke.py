"""The group benchmark (bench/group_bench.py), small, on the suite's PostgreSQL server: so that it
cannot rot, and so that the figures it reports stay what they claim (one backend's CPU, every todo
drained, the plan counts of the two statements)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import group_bench


async def test_the_group_bench_measures_each_size_and_reports_the_plans(pg_server, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", pg_server)
    args = argparse.Namespace(sizes="1,3", todos=40, rounds=1, analyze=True, backlog=100, no_attempts=True)
    medians, plans = await group_bench.run(args)
    assert set(medians) == {(1, "core"), (3, "core"), (1, "no-attempts"), (3, "no-attempts")}
    for m in medians.values():
        assert m["pg_us"] > 0 and m["py_us"] > 0 and m["wall_us"] > 0
        assert m["pg_pair_us"] >= m["pg_us"]
    used = [head for generic, _, head in plans if generic > 0]  # the generic plans were used
    assert any(h.startswith("WITH cand AS") for h in used), plans
    assert any(h.startswith("WITH t AS ( SELECT x.id") for h in used), plans  # complete_batch (held_batch)
