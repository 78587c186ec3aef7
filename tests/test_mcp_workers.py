"""examples/worker.py as real processes against a live server: two workers drain one queue with no
todo done twice; a worker reads the earlier attempts and reports a failure with summary and
artifact; Ctrl-C releases the lease it holds."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, make_settings, start_thread_server
from mcp_support import eventually, push, vend
from switchboard.core import endpoints, invariants, todos

WORKER = ROOT / "examples" / "worker.py"


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, retry_backoff_base_seconds=0, retry_backoff_max_seconds=0))
    yield srv
    srv.stop()


class WorkerProcess:
    def __init__(self, url: str, credential: str, *args: str) -> None:
        env = dict(os.environ, SWITCHBOARD_MCP_URL=url, SWITCHBOARD_CREDENTIAL=credential)
        self.proc = subprocess.Popen([sys.executable, str(WORKER), "--poll", "0.2", *args], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.lines.append(raw.decode("utf-8", "replace"))

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._reader.join(5)


async def rows(core, sql: str, *params) -> list[dict]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()


async def test_two_worker_processes_drain_one_queue_with_no_todo_done_twice(core, server):
    a = await vend(core)
    ids = [(await push(core, a, f"job {i}"))["id"] for i in range(30)]
    workers = [WorkerProcess(a.url(server.url), a.credential, "--name", name, "--command", "sleep 0.1",
                             "--exit-when-idle", "1.5")
               for name in ("w1", "w2")]
    codes = [w.wait(90) for w in workers]
    assert codes == [0, 0], [w.output[-2000:] for w in workers]
    done = await rows(core, "SELECT id, state FROM todos WHERE id = ANY(%s)", ids)
    assert sorted(r["id"] for r in done) == sorted(ids) and {r["state"] for r in done} == {"done"}
    atts = await rows(core, "SELECT todo_id, claimant, outcome, claimer_session FROM todo_attempts "
                            "WHERE todo_id = ANY(%s)", ids)
    assert len(atts) == 30 and len({x["todo_id"] for x in atts}) == 30  # one attempt each: nothing done twice
    assert {x["outcome"] for x in atts} == {"completed"}
    assert {x["claimant"] for x in atts} == {"w1", "w2"}  # both processes took part
    assert len({x["claimer_session"] for x in atts}) == 2 and None not in {x["claimer_session"] for x in atts}
    async with core.pool.connection() as conn:
        assert await invariants.check(conn) == []


async def test_a_worker_reads_prior_attempts_and_fails_with_summary_and_artifact(core, server, pg_uri):
    core.settings = make_settings(pg_uri, retry_backoff_base_seconds=0)  # the first failure is due at once
    a = await vend(core)
    t = await push(core, a, "flaky", max_attempts=3)
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, a.credential))
    await todos.claim(core, caller, t["id"], claimant="earlier")
    await todos.fail(core, caller, t["id"], summary="first try: tests red in module x")
    command = ('grep -o "tests red in module x" "$SWITCHBOARD_PRIOR_ATTEMPTS_FILE"; '
               'echo "https://ci.example/runs/$SWITCHBOARD_ATTEMPT" > "$SWITCHBOARD_ARTIFACT_FILE"; exit 3')
    w = WorkerProcess(a.url(server.url), a.credential, "--once", "--command", command)
    assert w.wait(60) == 0, w.output
    assert "attempt 1 by earlier: failed; summary: 'first try: tests red in module x'" in w.output
    [second] = await rows(core, "SELECT * FROM todo_attempts WHERE todo_id = %s AND seq = 2", t["id"])
    assert second["outcome"] == "failed" and second["artifact"] == "https://ci.example/runs/2"
    assert "tests red in module x" in second["summary"]
    assert second["lease_token_hash"] is not None  # the worker claims fenced


async def test_ctrl_c_releases_the_lease(core, server):
    a = await vend(core)
    t = await push(core, a, "long job")
    w = WorkerProcess(a.url(server.url), a.credential, "--command", "sleep 30")

    async def claimed():
        [r] = await rows(core, "SELECT state FROM todos WHERE id = %s", t["id"])
        return r["state"] == "claimed"

    deadline = time.monotonic() + 30
    while not await claimed():
        assert time.monotonic() < deadline and w.proc.poll() is None, w.output
        await asyncio.sleep(0.05)
    w.proc.send_signal(signal.SIGINT)
    assert w.wait(30) == 0, w.output
    [row] = await rows(core, "SELECT state, attempt FROM todos WHERE id = %s", t["id"])
    assert (row["state"], row["attempt"]) == ("pending", 1)
    [att] = await rows(core, "SELECT outcome, summary FROM todo_attempts WHERE todo_id = %s", t["id"])
    assert (att["outcome"], att["summary"]) == ("released", "worker stopping")
    await eventually(lambda: "released" in w.output)


@pytest.mark.parametrize("batch", ["1", "3"])
async def test_a_worker_whose_endpoint_cannot_complete_stops_before_claiming(core, server, batch):
    """An endpoint vended without `complete` could claim but never report: the worker says which verbs
    its scope lacks and exits 3 before it claims anything (verbs are fixed for an endpoint's life)."""
    a = await vend(core, verbs=["claim_next", "heartbeat", "fail", "release"])
    t = await push(core, a, "never claimed")
    w = WorkerProcess(a.url(server.url), a.credential, "--batch", batch, "--exit-when-idle", "5")
    assert w.wait(30) == 3, w.output
    assert "scope lacks complete" in w.output and w.output.count("\n") <= 2, w.output
    [row] = await rows(core, "SELECT state, attempts_total FROM todos WHERE id = %s", t["id"])
    assert (row["state"], row["attempts_total"]) == ("pending", 0)
