"""The chaos soak, short (issue 15): two serving processes, eight agents (one at a time, batches with
max_todos and items, rounds with claim_next's complete), a human cancelling live todos, every fault kind at
least once, then the drain and every check of bench/soak.py. It fails on any violation the soak reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import ROOT

FAULT_KINDS = ("server_kill", "agent_kill", "agent_cancel", "pg_terminate", "pg_restart_fast",
               "pg_restart_immediate", "pg_sigstop", "revoke", "slow_clients", "member_remove")


def test_short_soak_survives_every_fault_kind():
    env = {k: v for k, v in os.environ.items() if k != "SWITCHBOARD_DATABASE_URL"}  # its own PostgreSQL: pg_ctl
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", "60", "--servers", "2",
                           "--agents", "8"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    elapsed = time.monotonic() - t0
    out = proc.stdout
    lines = [line for line in out.splitlines() if line.startswith("SOAK-SUMMARY ")]
    assert lines, f"no summary (exit {proc.returncode}):\n{out[-3000:]}\n{proc.stderr[-3000:]}"
    summary = json.loads(lines[-1].removeprefix("SOAK-SUMMARY "))
    assert proc.returncode == 0, "violations:\n" + "\n".join(summary["violations"][:40]) + "\n" + out[-4000:]
    assert summary["violations"] == []
    for kind in FAULT_KINDS:
        assert summary["faults"].get(kind, 0) >= 1, f"fault {kind} never injected: {summary['faults']}"
    assert summary["done"] > 0 and summary["claims"] > 0
    modes = summary["modes"]
    assert modes["single"]["todos_claimed"] > 0, modes
    assert modes["batch"]["todos_claimed"] > 0 and modes["batch"]["acked_items"] > 0, modes
    assert modes["round"]["todos_claimed"] > 0 and modes["round"]["acked_round"] > 0, modes
    assert summary["cancels"].get("ok", 0) > 0 and summary["canceled"] > 0, summary["cancels"]
    team = summary["team"]  # the team lanes worked their queue, under its in-flight cap
    assert team["done"] > 0 and team["attempts"] > 0, team
    assert 0 <= team["in_flight_max_sampled"] <= team["max_in_flight"], team
    assert team["charged"] == team["attempts_opened"], team
    print(f"short soak: {elapsed:.0f} s, {summary['pushed']} pushed, {summary['done']} done")
