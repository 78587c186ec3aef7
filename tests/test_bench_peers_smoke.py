"""The peer benchmark (bench/peers_bench.py) on its built-in systems, small: so that it cannot rot.

Runs on the suite's PostgreSQL server (SWITCHBOARD_DATABASE_URL points the bench at it) and needs
none of the peer packages: raw SQL and Switchboard's core only, 200 jobs, one worker, one round.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import peers_bench
from peers import registry
from peers.harness import Clock
from peers.raw import RawPerJob
from peers.switchboard import QUEUE, SwitchboardCore
from switchboard.core import todos


@pytest.fixture
def bench_server(pg_server, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_DATABASE_URL", pg_server)
    yield pg_server


def run_bench(tmp_path: Path, systems: str, doc: Path | None = None, jobs: int = 200) -> tuple[int, dict, str]:
    out = tmp_path / "peers.json"
    argv = ["--quick", "--jobs", str(jobs), "--workers", "1", "--systems", systems, "--silent", "--json", str(out)]
    if doc is not None:
        argv += ["--write-doc", str(doc)]
    code = peers_bench.main(argv)
    return code, json.loads(out.read_text()), doc.read_text() if doc else ""


def test_built_in_systems_run_verified_and_land_in_the_doc_section(bench_server, tmp_path, capsys):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nEarlier figures.\n\n## Peers\n\nold figures\n\n## Later\n\nkept\n")
    code, got, text = run_bench(tmp_path, "raw-per-job,raw-batch-10,sb-core,sb-core-batch-100,sb-core-round-100", doc)
    assert code == 0, got["failed"]
    assert got["failed"] == {}
    for key in ("raw-per-job", "raw-batch-10", "sb-core", "sb-core-batch-100", "sb-core-round-100"):
        (sample,) = got["samples"][key]["1"]
        assert sample["rate"] > 0 and sample["enqueue_rate"] > 0
    printed = capsys.readouterr().out
    assert "| raw SQL, per job, with attempt rows |" in printed
    assert "| Switchboard core in process (`claim_next` + `complete`) |" in printed
    assert "- Switchboard core per claim / raw SQL per job: W=1 " in printed
    assert "| Switchboard core in process, batches of 100 (`claim_next_batch` + `complete_batch`) |" in printed
    assert f"| {SwitchboardCore().enqueue_label} |" in printed
    assert "- Switchboard bulk enqueue: " in printed
    # The section replaced in place: what came before and after it kept, the old figures gone.
    assert text.startswith("# Benchmarks\n\nEarlier figures.\n\n## Peers\n")
    assert text.count("## Peers") == 1 and "old figures" not in text
    assert text.rstrip().endswith("## Later\n\nkept")
    (command,) = [ln for ln in text.splitlines() if ln.startswith("Command: ")]
    assert command.startswith("Command: `python bench/peers_bench.py --quick --jobs 200")
    assert "--write-doc" not in command and "--json" not in command  # output files are no part of the method


class TwoAtATime(SwitchboardCore):
    """A batched path added the documented way: override `work`, register one factory."""

    key = "sb-core-two-at-a-time"
    label = "Switchboard core, two claims then two completes"

    async def work(self, state, clock: Clock) -> int:
        core, caller = self.tenant.core, self.tenant.caller
        done = 0
        while True:
            clock.start()
            got = [g for g in [await todos.claim_next(core, caller, queue=QUEUE),
                               await todos.claim_next(core, caller, queue=QUEUE)] if g is not None]
            if not got:
                return done
            for g in got:
                await todos.complete(core, caller, g.todo["id"])
            done += len(got)


class LeavesOneAttemptOpen(RawPerJob):
    """Every todo done, but the first one's attempt left open: the verification must refuse the figure."""

    key = "raw-leaves-one-open"
    label = "raw SQL leaving one attempt open"

    async def work(self, conn, clock: Clock) -> int:
        import store_bench

        ep, owner = self.tenant.caller.endpoint_id, self.tenant.caller.owner
        done = 0
        while True:
            clock.start()
            cur = await conn.execute(store_bench.BARE_CLAIM, (ep, QUEUE, owner, 1800, ep, owner))
            row = await cur.fetchone()
            if row is None:
                return done
            if done:
                await conn.execute(store_bench.BARE_COMPLETE, row)
            else:
                await conn.execute("UPDATE todos SET state = 'done' WHERE id = %s", (row[0],))
            done += 1


@pytest.fixture
def extra_systems():
    keys = [registry.register(TwoAtATime), registry.register(LeavesOneAttemptOpen)]
    yield keys
    for k in keys:
        registry.SYSTEMS.pop(k)


def test_a_registered_system_is_measured_and_an_unclosed_attempt_fails_it(bench_server, tmp_path, capsys,
                                                                          extra_systems):
    code, got, _ = run_bench(tmp_path, ",".join(extra_systems), jobs=50)
    printed = capsys.readouterr().out
    assert got["samples"]["sb-core-two-at-a-time"]["1"][0]["rate"] > 0
    assert "| Switchboard core, two claims then two completes |" in printed
    assert code == 1
    assert "1 open" in got["failed"]["raw-leaves-one-open"]
    assert "| raw SQL leaving one attempt open | FAILED |" in printed


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        peers_bench.main(["--systems", "no-such-system"])
    assert "unknown system no-such-system" in capsys.readouterr().err


class FirstSetupErrors(RawPerJob):
    """Its first setup errors (as a server that does not start would): the measurement is tried again."""

    key = "raw-first-setup-errors"
    label = "raw SQL after one failed start"
    setups = 0

    async def setup(self, db) -> None:
        type(self).setups += 1
        if type(self).setups == 1:
            raise RuntimeError("the server did not start")
        await super().setup(db)


def test_a_measurement_that_errors_is_tried_again(bench_server, tmp_path, monkeypatch):
    from peers import harness

    monkeypatch.setattr(harness, "RETRY_PAUSE_S", 0.0)
    key = registry.register(FirstSetupErrors)
    try:
        code, got, _ = run_bench(tmp_path, key, jobs=50)
    finally:
        registry.SYSTEMS.pop(key)
    assert code == 0 and got["failed"] == {}
    assert FirstSetupErrors.setups == 2
    assert got["samples"][key]["1"][0]["rate"] > 0
