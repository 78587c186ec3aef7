"""The relay end to end: a real server (uvicorn on a free port, real PostgreSQL), `switchboard relay` as a
real process speaking MCP and the producer API, and scripted workers as real processes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess

import pytest

from conftest import ROOT, clean_database, start_process_server
from relay_world import World, make_world, write_epic
from switchboard.core import api_tokens
from switchboard.relay.receipts import parse_summary

FAST = dict(retry_backoff_base_seconds=0.2, retry_backoff_max_seconds=0.5, rate_limit_rps=500, rate_limit_burst=500)


@pytest.fixture
def world(pg_uri, live_server, tmp_path) -> World:
    clean_database(pg_uri)
    srv = live_server(**FAST)
    return make_world(pg_uri, srv.url, tmp_path / "epic")


def _attempts_by_task(world: World, queue: str) -> dict[str, list[tuple[dict, dict]]]:
    """(todo, attempt) pairs per task from the server, oldest first, the way the ledger orders them."""
    out: dict[str, list] = {}
    views = [v for v in world.server_views(queue) if v.get("kind") == "relay_task"]
    for todo in sorted(views, key=lambda t: (t["created_at"], t["id"])):
        for a in reversed(todo["attempts"]):
            out.setdefault(todo["payload"]["task_id"], []).append((todo, a))
    return out


def assert_ledger_matches_server(world: World, queue: str) -> None:
    """Every attempt of the server is in the ledger file, field for field, and nothing else is."""
    led = world.ledger()
    server = _attempts_by_task(world, queue)
    assert set(led["attempts"]) == set(server)
    for task, pairs in server.items():
        entries = led["attempts"][task]
        assert len(entries) == len(pairs)
        for i, (entry, (todo, a)) in enumerate(zip(entries, pairs, strict=True), start=1):
            assert entry["id"] == i and entry["todo"] == todo["id"] and entry["seq"] == a["seq"]
            assert entry["number"] == a["attempt"] and entry["claimant"] == a["claimant"]
            assert entry["started_at"] == a["claimed_at"] and entry["ended_at"] == a["ended_at"]
            assert entry["last_heartbeat_at"] == a["last_heartbeat_at"]
            assert entry["outcome"] == a["outcome"] and entry["died"] == a["died"]
            assert entry["artifact"] == a["artifact"]
            assert entry["receipt"] == parse_summary(a["summary"])
            if entry["receipt"] is None:
                assert entry.get("summary") == a["summary"]


def _docs_block(heading: str) -> str:
    text = (ROOT / "docs" / "relay.md").read_text()
    section = text.split(heading, 1)[1]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return blocks[1]  # the first block starts the server; the second is the walk-through


def test_the_example_epic_runs_as_documented(pg_uri, tmp_path):
    """docs/relay.md's walk-through, exactly as written, against `switchboard serve` as a process."""
    clean_database(pg_uri)
    srv = start_process_server(pg_uri, {"SWITCHBOARD_RETRY_BACKOFF_BASE_SECONDS": "0.2",
                                        "SWITCHBOARD_RETRY_BACKOFF_MAX_SECONDS": "0.5"})
    try:
        shutil.copytree(ROOT / "examples" / "relay", tmp_path / "examples" / "relay",
                        ignore=shutil.ignore_patterns("build", "attempt-ledger.yml", "__pycache__"))
        (tmp_path / ".venv").symlink_to(ROOT / ".venv")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        env.update(SWITCHBOARD_DATABASE_URL=pg_uri, SWITCHBOARD_PORT=srv.url.rsplit(":", 1)[1])
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", _docs_block("## Try it")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=240)
    finally:
        srv.stop()
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "recorded epic relay-demo (4 tasks: T1, T2, T3, T4)" in out
    assert "no runnable tasks: T3 gated (repeated_failure); T4 blocked by T3" in out
    assert "relay work stopped with exit code 1" in out
    assert "gated: repeated_failure" in out and "waiting on T3" in out  # the status table
    assert "T3 unblocked (was repeated_failure): retried" in out
    assert "epic relay-demo complete" in out and "the rebuilt ledger is identical" in out

    world = World(url="", token="", credential="", pg_uri=pg_uri, human_name="relay-op",
                  dir=tmp_path / "examples" / "relay")
    # Each task ran as often as the story says, and finished work was not redone after the restart.
    runs = [(t, a) for t, a, _, _ in world.runs()]
    assert [r for r in runs if r[0] in ("T1", "T2")] == [("T1", 1), ("T2", 1), ("T2", 2)]
    assert [r for r in runs if r[0] in ("T3", "T4")] == [("T3", 1), ("T3", 2), ("T3", 1), ("T4", 1)]
    # T2's second run received the first failure's receipt in its prior-attempts file.
    seen = world.prior("T2", 2)
    assert seen["attempt"] == 2 and seen["max_attempts"] == 3 and "never instructions" in seen["note"]
    (first,) = seen["prior_attempts"]
    assert first["outcome"] == "failed" and first["died"] is False and first["seq"] == 1
    assert first["receipt"]["error_category"] == "test_failure"
    assert first["receipt"]["error_summary"] == "test_login failed: expected 200, got 500"
    assert first["receipt"]["suggestion"] == "seed the users table before the login test"
    assert world.prior("T2", 1)["prior_attempts"] == []
    assert "seed the users table" in (world.dir / "build" / "T2.txt").read_text()

    # The ledger the relay wrote is the server's history, exactly.
    led = world.ledger()
    assert set(led["task_status"].values()) == {"completed"} and led["gated_tasks"] == {}
    assert [a["receipt"].get("gate") for a in led["attempts"]["T3"]] == [None, "repeated_failure", None]
    assert led["ended_at"] is not None and led["duration_minutes"] is not None
    assert_ledger_matches_server(world, "relay-demo")

    # Every claim was fenced and labelled relay/<host>/<epic>/<pid>.
    rows = world.sql("SELECT claimant, lease_token_hash IS NOT NULL FROM todo_attempts")
    assert len(rows) == 7 and all(fenced for _, fenced in rows)
    label = re.compile(rf"^relay/{re.escape(socket.gethostname())}/relay-demo/\d+$")
    assert all(label.match(claimant) for claimant, _ in rows)
    # The epic's record stayed pending and unclaimed: no agent can take it.
    assert world.sql("SELECT state, attempts_total, assignee FROM todos WHERE kind = 'relay_epic'") == [
        ("pending", 0, "relay:epic-record")]

def _epic(tasks: dict, **settings) -> dict:
    return {"version": 2, "id": "e2e", "title": "End to end", "worker": "python3 scripted.py succeed",
            "settings": {"queue": "relay-demo", **settings}, "tasks": tasks}


def test_timeouts_and_the_quality_gate_gate_tasks_while_two_run_at_once(world):
    write_epic(world.dir, _epic({
        "T1": {"title": "hangs", "worker": "python3 scripted.py hang"},
        "T2": {"title": "leaves a TODO", "worker": "python3 scripted.py sloppy"},
        "T3": {"title": "after both", "depends_on": ["T1", "T2"]},
        "T4": {"title": "links its log", "worker": "python3 scripted.py succeed https://ci.example.com/logs/4"},
        "T5": {"title": "links a local file", "worker": "python3 scripted.py succeed file:///etc/passwd"},
    }, max_attempts_per_task=1, timeout_minutes=0.02))
    r = world.relay("work", "--workers", "2", "--gate", "python3 scripted.py check")
    assert r.returncode == 1, r.stdout + r.stderr
    status = world.status()
    gates = {t["id"]: (t["gate"] or {}).get("reason") for t in status["tasks"]}
    assert gates == {"T1": "max_attempts_exceeded", "T2": "quality_gate_blocked", "T3": None, "T4": None, "T5": None}
    assert status["counts"]["blocked"] == 1

    led = world.ledger()
    (hung,), (sloppy,) = led["attempts"]["T1"], led["attempts"]["T2"]
    # The hanging worker was killed at timeout_minutes and the attempt reported as a timeout failure.
    assert hung["outcome"] == "failed" and hung["receipt"]["error_category"] == "timeout"
    assert hung["receipt"]["exit"] == "timeout" and hung["receipt"]["gate"] == "max_attempts_exceeded"
    # The worker said success; the gate said no: a failure carrying the gate's output.
    assert sloppy["outcome"] == "failed" and sloppy["receipt"]["gate"] == "quality_gate_blocked"
    assert sloppy["receipt"]["error_category"] == "quality_gate"
    assert "build/T2.txt still has a TODO in it" in sloppy["receipt"]["error_summary"]
    assert sloppy["disposition"] == "dead_lettered" and hung["disposition"] == "dead_lettered"
    # --workers 2: T2 was claimed while T1's worker still ran (with it, in one claim_next, or after it).
    assert hung["started_at"] <= sloppy["started_at"] < hung["ended_at"]
    # An artifact the server accepts is sent with the report; any other is dropped, and the receipt says so.
    (linked,), (local,) = led["attempts"]["T4"], led["attempts"]["T5"]
    assert linked["artifact"] == "https://ci.example.com/logs/4" and linked["result"] == "success"
    assert local["artifact"] is None and local["result"] == "success" and "not sent" in local["receipt"]["note"]
    hung_pid = next(pid for task, _, _, pid in world.runs() if task == "T1")
    assert not _alive(hung_pid)
    assert_ledger_matches_server(world, "relay-demo")


def test_free_worker_slots_are_filled_by_one_batched_claim(world):
    """Issue 17: the relay claims for all its free slots at once (claim_next with max_todos), each todo
    under its own fenced lease and attempt. One call is one statement: the attempts share their
    claimed_at, which separate claims never do."""
    write_epic(world.dir, _epic({"A": {"title": "a"}, "B": {"title": "b"}, "C": {"title": "c"},
                                 "D": {"title": "after all three", "depends_on": ["A", "B", "C"]}}))
    r = world.relay("work", "--workers", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = world.sql("SELECT t.payload->>'task_id', a.claimed_at, a.lease_token_hash IS NOT NULL, a.outcome"
                     " FROM todo_attempts a JOIN todos t ON t.id = a.todo_id ORDER BY 1")
    assert [(task, fenced, outcome) for task, _, fenced, outcome in rows] == [
        ("A", True, "completed"), ("B", True, "completed"), ("C", True, "completed"), ("D", True, "completed")]
    first_three = {claimed_at for task, claimed_at, _, _ in rows if task != "D"}
    assert len(first_three) == 1, "A, B and C were not claimed in one call"
    assert rows[3][1] > next(iter(first_three))
    assert_ledger_matches_server(world, "relay-demo")


def test_a_stranger_on_the_epics_queue_stops_the_relay_and_its_batch_is_released(world):
    """A todo on the queue that is not a task of the epic stops the relay before any worker starts; it
    is released, and so is the task claimed in the same call, each with a note saying why."""
    import httpx

    base, slug = world.url.split("/mcp/")
    r = httpx.post(f"{base}/api/v1/endpoints/{slug}/todos", json={"title": "stranger", "queue": "relay-demo"},
                   headers={"Authorization": f"Bearer {world.token}"})
    assert r.status_code == 201, r.text
    write_epic(world.dir, _epic({"A": {"title": "a"}, "B": {"title": "b"}}))
    r = world.relay("work", "--workers", "2")
    assert r.returncode == 1 and "which is not a task of epic e2e" in r.stderr, r.stdout + r.stderr
    rows = world.sql("SELECT t.title, t.state, a.outcome, a.summary FROM todo_attempts a"
                     " JOIN todos t ON t.id = a.todo_id ORDER BY t.created_at")
    assert [(title, state, outcome) for title, state, outcome, _ in rows] == [
        ("stranger", "pending", "released"), ("e2e/A: a", "pending", "released")]
    notes = [parse_summary(summary)["note"] for *_, summary in rows]
    assert notes == ["not a task of this relay's epic", "released unstarted: the relay stopped"]
    assert world.runs() == []


def _wait(predicate, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_a_relay_killed_hard_leaves_a_died_attempt_and_the_next_relay_carries_on(world):
    import os

    write_epic(world.dir, _epic({
        "T1": {"title": "quick"},
        "T2": {"title": "hangs on its first try", "depends_on": ["T1"], "worker": "python3 scripted.py hang-first"},
        "T3": {"title": "last", "depends_on": ["T2"]},
    }, lease_ttl_seconds=2))
    proc = world.start_relay("work")
    _, _, _, worker_pid = world.wait_for_run("T2", 1)
    _wait(lambda: world.sql("SELECT 1 FROM todo_attempts WHERE ended_at IS NULL AND last_heartbeat_at IS NOT NULL"))
    os.killpg(proc.pid, signal.SIGKILL)  # no goodbye: no release, no report
    proc.wait(10)
    _wait(lambda: not _alive(worker_pid))  # the worker does not outlive its relay
    (claimed,) = world.sql("SELECT id FROM todos WHERE state = 'claimed'")
    # Let the 2-second lease lapse without waiting for it, then one reaper pass.
    world.sql("UPDATE todos SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (claimed[0],))
    assert world.sweep()["reaped"] == 1

    r = world.relay("work")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [(t, a) for t, a, _, _ in world.runs()] == [("T1", 1), ("T2", 1), ("T2", 2), ("T3", 1)]
    died = world.prior("T2", 2)["prior_attempts"][0]
    assert died["died"] is True and died["outcome"] == "reaped" and died["summary"] is None
    assert died["claimant"].endswith(f"/e2e/{proc.pid}") and died["last_heartbeat_at"] is not None
    led = world.ledger()
    assert [a["result"] for a in led["attempts"]["T2"]] == ["died", "success"]
    code, out, _ = world.cli("status")
    assert code == 0 and "2 success" in out and "1 DIED" in out
    assert_ledger_matches_server(world, "relay-demo")


def test_ctrl_c_releases_the_todo_and_the_next_run_sees_the_release(world):
    write_epic(world.dir, _epic({"T1": {"title": "slow", "worker": "python3 scripted.py hang-first"}}))
    proc = world.start_relay("work")
    _, _, _, worker_pid = world.wait_for_run("T1", 1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "T1 released" in out and not _alive(worker_pid)
    (todo,) = [v for v in world.server_views("relay-demo") if v["kind"] == "relay_task"]
    assert todo["state"] == "pending" and todo["attempts"][0]["outcome"] == "released"
    assert parse_summary(todo["attempts"][0]["summary"]) == {"result": "released", "note": "relay interrupted"}

    r = world.relay("work", "--once")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = world.prior("T1", 2)["prior_attempts"]
    assert [a["outcome"] for a in seen] == ["released"]
    assert world.ledger()["task_status"] == {"T1": "completed"}


def test_missing_or_wrong_connection_settings_stop_before_any_work(world, live_server):
    from conftest import free_port

    write_epic(world.dir, _epic({"T1": {"title": "never runs"}}))
    bare = {k: v for k, v in world.env().items() if not k.startswith("SWITCHBOARD_")}

    code, _, err = world.cli("work", env=bare)
    assert code == 2
    for name in ("SWITCHBOARD_URL", "SWITCHBOARD_API_TOKEN", "SWITCHBOARD_CREDENTIAL"):
        assert name in err
    cases = [
        (dict(SWITCHBOARD_CREDENTIAL="sbk_" + "x" * 43), "the endpoint credential was refused"),
        (dict(SWITCHBOARD_API_TOKEN="sbh_" + "x" * 43), "the human API token was refused"),
        (dict(SWITCHBOARD_API_TOKEN="hunter2"), "must start with sbh_"),
        (dict(SWITCHBOARD_URL=world.url.rsplit("/mcp/", 1)[0]), "must be an endpoint's MCP URL"),
        (dict(SWITCHBOARD_URL=world.url + "-other"), "does not belong to endpoint"),
        (dict(SWITCHBOARD_URL=f"http://127.0.0.1:{free_port()}/mcp/x"), "cannot reach the server"),
    ]
    for override, message in cases:
        code, _, err = world.cli("work", env=world.env(**override))
        assert code == 2 and message in err, (override, err)
    other_token = _token_of_another_human(world)
    code, _, err = world.cli("work", env=world.env(SWITCHBOARD_API_TOKEN=other_token))
    assert code == 2 and "does not belong to the API token's user" in err, err
    write_epic(world.dir, _epic({"T1": {"title": "never runs"}}, queue="elsewhere"))
    code, _, err = world.cli("init", "epic.yml")
    assert code == 2 and "is not vended with queue elsewhere (its queues: relay-demo)" in err, err
    assert world.runs() == [] and world.sql("SELECT count(*) FROM todos") == [(0,)]

    # The same checks guard every command, and a bad epic is named before the server is asked anything.
    code, _, err = world.cli("status", env=world.env(SWITCHBOARD_CREDENTIAL="sbk_" + "y" * 43))
    assert code == 2 and "the endpoint credential was refused" in err
    write_epic(world.dir, _epic({"T1": {"title": "a", "depends_on": ["T2"]},
                                 "T2": {"title": "b", "depends_on": ["T1"]}}))
    code, _, err = world.cli("init", "epic.yml", env=bare)
    assert code == 1 and "dependency cycle: T1 -> T2 -> T1" in err
    write_epic(world.dir, _epic({"T1": {"title": "a", "depends_on": ["T7"]}}))
    code, _, err = world.cli("init", "epic.yml")
    assert code == 1 and "T1 depends on T7, which is not a task of this epic" in err
    assert world.sql("SELECT count(*) FROM todos") == [(0,)]


def _token_of_another_human(world: World) -> str:
    from conftest import core_for, run_async
    from switchboard.core import humans

    async def make() -> str:
        async with core_for(world.pg_uri) as core:
            return (await api_tokens.create(core, await humans.add(core, "mallory", "password123")))[0]

    return run_async(make())


def test_block_and_unblock_by_hand(world):
    write_epic(world.dir, _epic({"T1": {"title": "first"}, "T2": {"title": "second", "depends_on": ["T1"]}}))
    assert world.cli("init", "epic.yml")[0] == 0

    code, out, err = world.cli("block", "T2", "--reason", "waiting for the design review")
    assert code == 0 and "T2 gated: user_blocked" in out, err
    t2 = next(t for t in world.status()["tasks"] if t["id"] == "T2")
    assert t2["status"] == "gated" and t2["gate"]["reason"] == "user_blocked"
    assert t2["gate"]["detail"] == "waiting for the design review"
    code, _, err = world.cli("block", "T2")
    assert code == 1 and "T2 is already gated (user_blocked)" in err
    code, _, err = world.cli("block", "T9")
    assert code == 1 and "T9 is not a task of epic e2e (tasks: T1, T2)" in err
    code, _, err = world.cli("unblock", "T1")
    assert code == 1 and "T1 is not gated (it is pending)" in err

    # T1 has not run yet, so T2 is withdrawn rather than retried: it must still wait for T1.
    code, out, err = world.cli("unblock", "T2")
    assert code == 0 and "withdrawn until T1 complete" in out, err
    t2 = next(t for t in world.status()["tasks"] if t["id"] == "T2")
    assert t2["status"] == "blocked" and t2["waiting_on"] == ["T1"]

    r = world.relay("work")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [(t, a) for t, a, _, _ in world.runs()] == [("T1", 1), ("T2", 1)]
    led = world.ledger()
    assert len(led["todos"]["T2"]) == 2  # the withdrawn todo and the one that ran
    assert [a["result"] for a in led["attempts"]["T2"]] == ["failure", "success"]
    assert led["attempts"]["T2"][0]["receipt"]["gate"] == "user_blocked"
    assert_ledger_matches_server(world, "relay-demo")

    # A recorded plan is fixed: changing it under the same id is refused, naming what changed.
    write_epic(world.dir, _epic({"T1": {"title": "first"}, "T2": {"title": "second"}}))
    code, _, err = world.cli("status")
    assert code == 1 and "tasks.T2.depends_on changed" in err


def test_blocking_a_running_task_stops_its_worker(world):
    write_epic(world.dir, _epic({"T1": {"title": "slow", "worker": "python3 scripted.py hang"}}, lease_ttl_seconds=3))
    proc = world.start_relay("work")
    _, _, _, worker_pid = world.wait_for_run("T1", 1)
    code, out, err = world.cli("block", "T1")
    assert code == 0 and "failed by the owner" in out, err
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out  # the only task is gated now
    assert "T1 lease lost: worker stopped, nothing reported" in out
    assert "no runnable tasks: T1 gated (user_blocked)" in out
    assert not _alive(worker_pid)
    (todo,) = [v for v in world.server_views("relay-demo") if v["kind"] == "relay_task"]
    assert todo["dead_letter"] is True and len(todo["attempts"]) == 1
    assert parse_summary(todo["attempts"][0]["summary"])["gate"] == "user_blocked"
