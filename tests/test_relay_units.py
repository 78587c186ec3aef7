"""The relay's parts that need no server: the epic file, receipts and their summary encoding, gating, the
ledger view and the worker runner (with real processes)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import textwrap
import time

import pytest
import yaml

from conftest import ROOT
from switchboard.relay import epic as epics
from switchboard.relay import gating, ledger, receipts, runner
from switchboard.relay.epic import EpicError
from switchboard.relay.receipts import decide, encode_summary, parse_summary
from switchboard.relay.state import EpicState

EXAMPLE = ROOT / "examples" / "relay" / "epic.yml"


def _epic(tasks: dict, **top) -> epics.Epic:
    return epics.parse({"id": "e1", "title": "An epic", "tasks": tasks, **top})


def _problems(data) -> list[str]:
    with pytest.raises(EpicError) as info:
        epics.parse(data)
    return info.value.problems


# ----------------------------------------------------------------------------------------------- epic

def test_the_example_epic_is_valid_and_ordered_by_dependencies():
    e = epics.load(EXAMPLE)
    assert e.id == "relay-demo" and e.order == ["T1", "T2", "T3", "T4"]
    assert e.tasks["T4"].depends_on == ("T2", "T3")
    assert e.max_attempts_per_task == 3 and e.queue == "relay-demo" and e.timeout_minutes == 2
    assert e.tasks["T2"].worker == ("python3", "scripted.py", "flaky")
    assert e.worker == ("python3", "scripted.py", "succeed") and e.gate == ("python3", "scripted.py", "check")


def test_order_puts_dependencies_first_and_keeps_file_order_otherwise():
    e = _epic({"A": {"title": "a", "depends_on": ["C"]}, "B": {"title": "b"}, "C": {"title": "c"}})
    assert e.order == ["B", "C", "A"]


def test_an_unknown_dependency_is_named():
    problems = _problems({"id": "e1", "title": "t", "tasks": {"T1": {"title": "a", "depends_on": ["T9"]}}})
    assert problems == ["tasks.T1.depends_on[0]: T1 depends on T9, which is not a task of this epic"]


def test_a_cycle_is_named_as_a_path():
    problems = _problems({"id": "e1", "title": "t", "tasks": {
        "T1": {"title": "a", "depends_on": ["T3"]}, "T2": {"title": "b", "depends_on": ["T1"]},
        "T3": {"title": "c", "depends_on": ["T2"]}, "T4": {"title": "d"}}})
    assert problems == ["dependency cycle: T1 -> T3 -> T2 -> T1 (each depends on the next)"]
    assert _problems({"id": "e1", "title": "t", "tasks": {"T1": {"title": "a", "depends_on": ["T1"]}}}) == [
        "dependency cycle: T1 -> T1 (each depends on the next)"]


def test_schema_problems_are_all_reported_with_their_place():
    problems = _problems({"id": "bad id!", "tasks": {
        "T1": {"titel": "typo", "points": -1, "files": "one.py"}, "T2": "not a mapping"},
        "settings": {"max_attempts_per_task": 0, "colour": "red"}, "worker": "run {what}"})
    text = "\n".join(problems)
    for expected in ("id: must be", "title: required", "tasks.T1.titel: unknown key", "tasks.T1.title: required",
                     "tasks.T1.points: must be a whole number", "tasks.T1.files: must be a list",
                     "tasks.T2: must be a mapping", "settings.max_attempts_per_task: must be a whole number from 1",
                     "settings.colour: unknown setting", "worker: unknown placeholder 'what'"):
        assert expected in text, expected
    assert _problems({"id": "e", "title": "t", "tasks": {}}) == [
        "tasks: must be a non-empty mapping of task id to task"]


def test_loading_reports_missing_files_and_bad_yaml(tmp_path):
    with pytest.raises(EpicError, match="file not found"):
        epics.load(tmp_path / "nope.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("id: x\ntasks: [\n")
    with pytest.raises(EpicError, match="not valid YAML at line"):
        epics.load(bad)


def test_the_plan_digest_changes_with_the_plan_but_not_with_runtime_settings():
    base = {"T1": {"title": "a"}, "T2": {"title": "b", "depends_on": ["T1"]}}
    d1 = _epic(base).digest()
    assert _epic(base, worker="other {task_id}", settings={"timeout_minutes": 1}).digest() == d1
    changed = _epic({"T1": {"title": "a"}, "T2": {"title": "b"}})
    assert changed.digest() != d1
    assert epics.plan_difference(_epic(base).plan(), changed.plan()) == "tasks.T2.depends_on"
    assert epics.plan_difference(_epic(base).plan(), _epic(base, settings={"queue": "q2"}).plan()) == "settings.queue"


def test_commands_are_split_without_a_shell_and_filled_argument_by_argument():
    argv = epics.parse_command("python3 'my worker.py' {task_id} --epic={epic_id}", "--worker")
    assert epics.render_command(argv, {"task_id": "T1; rm -rf /", "epic_id": "e"}) == [
        "python3", "my worker.py", "T1; rm -rf /", "--epic=e"]
    with pytest.raises(EpicError):
        epics.parse_command("run 'unclosed", "--worker")


# ------------------------------------------------------------------------------------------- receipts

def test_exit_code_and_receipt_decide_the_verdict():
    v = decide(exit_code=0, timed_out=False, receipt=None, receipt_problem=None)
    assert v.ok and "error_category" not in v.fields
    v = decide(exit_code=2, timed_out=False, receipt=None, receipt_problem=None, output_tail="boom")
    assert not v.ok and v.category == "unknown"
    assert v.fields["error_summary"] == "worker exited 2 without a receipt: boom"
    v = decide(exit_code=0, timed_out=False, receipt={"result": "failure", "error_category": "test_failure",
                                                      "error_summary": "red"}, receipt_problem=None)
    assert not v.ok and v.category == "test_failure" and v.fields["error_summary"] == "red"
    v = decide(exit_code=1, timed_out=False, receipt={"result": "success", "summary": "done"}, receipt_problem=None)
    assert not v.ok and v.fields["error_summary"] == "worker exited 1 after reporting success"
    v = decide(exit_code=None, timed_out=True, receipt=None, receipt_problem=None, timeout_minutes=0.5)
    assert not v.ok and v.category == "timeout" and v.fields["exit"] == "timeout"
    v = decide(exit_code=-9, timed_out=False, receipt=None, receipt_problem=None)
    assert not v.ok and "signal 9" in v.fields["error_summary"]


def test_receipt_files_are_read_carefully(tmp_path):
    path = tmp_path / "r.json"
    assert receipts.read_receipt(path) == (None, None)
    path.write_text("{not json")
    assert receipts.read_receipt(path)[1].startswith("receipt file is not valid JSON")
    path.write_text(json.dumps({"result": "maybe", "files_changed": "x", "summary": "ok"}))
    got, problem = receipts.read_receipt(path)
    assert got == {"summary": "ok"} and "result must be success or failure" in problem
    v = decide(exit_code=0, timed_out=False, receipt=got, receipt_problem=problem)
    assert v.ok and "result must be" in v.fields["note"]


def test_only_artifacts_the_server_accepts_are_sent():
    for bad in ("file:///etc/passwd", "http://example.com/x", "https://", "https://a b", "x" * 600):
        v = decide(exit_code=0, timed_out=False, receipt={"result": "success", "artifact": bad}, receipt_problem=None)
        assert v.artifact is None and "not sent" in v.fields["note"]
    for good in ("mcp://cairn/9qz1a", "https://ci.example.com/runs/42"):
        v = decide(exit_code=0, timed_out=False, receipt={"result": "success", "artifact": good}, receipt_problem=None)
        assert v.artifact == good and "note" not in v.fields


def test_the_summary_puts_the_useful_fields_first_and_never_exceeds_2048_bytes():
    fields = {"result": "failure", "gate": "repeated_failure", "error_category": "test_failure",
              "error_summary": "é\"\\" * 900, "suggestion": "try 😀 " * 300, "summary": "s" * 3000,
              "files_changed": [f"src/file_{i}.py" for i in range(500)], "exit": 1, "duration_s": 3.2,
              "note": "n" * 100}
    text = encode_summary(fields)
    assert len(text.encode("utf-8")) <= 2048
    data = json.loads(text)
    assert list(data)[:3] == ["result", "gate", "error_category"]
    assert data["cut"] is True and data["error_summary"].endswith("…")
    assert "note" not in data and "files_changed" not in data  # what gives way first
    small = encode_summary({"result": "success", "summary": "ok", "files_changed": ["a.py"], "exit": 0})
    assert json.loads(small) == {"result": "success", "summary": "ok", "files_changed": ["a.py"], "exit": 0}
    assert parse_summary(small)["summary"] == "ok" and parse_summary("plain words") is None


def test_the_summary_masks_credentials():
    text = encode_summary({"result": "failure", "error_summary": "auth with sbk_abcdefghijklmnop and "
                           "Authorization: Bearer abcdefghijk12345 and my-secret-value"}, secrets=("my-secret-value",))
    assert "sbk_abcdefghijklmnop" not in text and "abcdefghijk12345" not in text and "my-secret-value" not in text
    assert text.count("[redacted]") == 3


# --------------------------------------------------------------------------------------------- gating

def _failed(number: int, category: str | None, *, outcome: str = "failed") -> dict:
    summary = encode_summary({"result": "failure", "error_category": category}) if category else None
    return {"attempt": number, "outcome": outcome, "died": outcome in ("reaped", "lease_expired"),
            "summary": summary, "ended_at": "2026-01-01T00:00:00Z"}


def _verdict(category: str | None) -> receipts.Verdict:
    if category is None:
        return receipts.Verdict(result="success")
    return receipts.Verdict(result="failure", fields={"error_category": category})


def test_the_same_category_twice_in_a_row_is_a_repeated_failure():
    prior = [_failed(1, "code_error")]
    assert gating.decide_gate(_verdict("code_error"), attempt_number=2, max_attempts=5, prior_attempts=prior) \
        == "repeated_failure"
    assert gating.decide_gate(_verdict("test_failure"), attempt_number=2, max_attempts=5, prior_attempts=prior) is None
    assert gating.decide_gate(_verdict(None), attempt_number=2, max_attempts=5, prior_attempts=prior) is None


def test_died_and_released_attempts_do_not_break_or_make_a_row():
    prior = [_failed(3, None, outcome="reaped"), _failed(2, None, outcome="released"), _failed(1, "code_error")]
    assert gating.decide_gate(_verdict("code_error"), attempt_number=4, max_attempts=9, prior_attempts=prior) \
        == "repeated_failure"


def test_a_manual_retry_starts_a_new_row():
    # attempt numbers 1, 2 then (after a manual retry reset the counter) the current attempt 1
    prior = [_failed(2, "code_error"), _failed(1, "code_error")]
    assert gating.decide_gate(_verdict("code_error"), attempt_number=1, max_attempts=3, prior_attempts=prior) is None


def test_the_last_attempt_and_the_quality_gate():
    assert gating.decide_gate(_verdict("x"), attempt_number=3, max_attempts=3, prior_attempts=[]) \
        == "max_attempts_exceeded"
    assert gating.decide_gate(_verdict("quality_gate"), attempt_number=1, max_attempts=3, prior_attempts=[],
                              quality_gate_refused=True) == "quality_gate_blocked"


def test_a_dead_letter_tells_its_gate():
    gated = {"outcome": "failed", "ended_at": "t2",
             "summary": encode_summary({"result": "failure", "gate": "user_blocked", "error_summary": "hold on"})}
    assert gating.gate_of_dead_letter([gated]) == ("user_blocked", "t2", "hold on")
    died = {"outcome": "reaped", "died": True, "ended_at": "t3", "summary": None}
    assert gating.gate_of_dead_letter([died])[0] == "max_attempts_exceeded"


# --------------------------------------------------------------------------------------------- ledger

def _todo(tid: str, state: str, attempts: list[dict], **extra) -> dict:
    base = {"id": f"td_{tid}", "state": state, "attempt": len(attempts), "max_attempts": 3,
            "next_retry_at": None, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:05:00Z",
            "completed_at": None, "payload": {"epic_id": "e1", "task_id": tid}, "attempts": attempts}
    base.update(extra)
    return base


def _attempt(seq: int, outcome: str | None, category: str | None = None, *, gate: str | None = None) -> dict:
    result = {"completed": "success"}.get(outcome or "", "failure")
    summary = None
    if outcome in ("completed", "failed"):
        summary = encode_summary({"result": result, "error_category": category, "gate": gate})
    return {"seq": seq, "attempt": seq, "claimant": "relay/h/e1/1", "claimed_at": f"2026-01-01T00:0{seq}:00Z",
            "ended_at": f"2026-01-01T00:0{seq}:30Z" if outcome else None, "last_heartbeat_at": None,
            "outcome": outcome, "disposition": None, "died": outcome in ("reaped", "lease_expired"),
            "summary": summary, "summary_truncated": False, "artifact": None}


def test_task_status_follows_the_server_and_dependencies():
    e = epics.load(EXAMPLE)
    state = EpicState(record={"created_at": "2026-01-01T00:00:00Z"}, todos={
        "T1": [_todo("T1", "done", [_attempt(1, "completed")], completed_at="2026-01-01T00:01:30Z")],
        "T2": [_todo("T2", "failed", [_attempt(1, "failed", "test_failure")], next_retry_at="2030-01-01T00:00:00Z")],
        "T3": [_todo("T3", "failed", [_attempt(2, "failed", "x", gate="repeated_failure"),
                                      _attempt(1, "failed", "x")])],
    })
    views = ledger.task_views(e, state)
    assert {t: v.status for t, v in views.items()} == {"T1": "completed", "T2": "pending", "T3": "gated",
                                                       "T4": "blocked"}
    assert views["T2"].retry_at == "2030-01-01T00:00:00Z"
    assert views["T3"].gate["reason"] == "repeated_failure" and views["T4"].waiting_on == ["T2", "T3"]
    doc = ledger.document(e, state, views)
    assert doc["gated_tasks"] == {"T3": {"reason": "repeated_failure", "gated_at": "2026-01-01T00:02:30Z"}}
    assert [a["id"] for a in doc["attempts"]["T3"]] == [1, 2]  # oldest first
    assert doc["attempts"]["T3"][0]["receipt"]["error_category"] == "x" and doc["ended_at"] is None
    assert ledger.render(doc) == ledger.render(ledger.document(e, state, ledger.task_views(e, state)))
    assert yaml.safe_load(ledger.render(doc))["task_status"]["T4"] == "blocked"


def test_died_attempts_and_withdrawn_todos_in_the_ledger():
    e = epics.load(EXAMPLE)
    withdrawn = _todo("T4", "canceled", [_attempt(1, "failed", "user_blocked", gate="user_blocked")])
    state = EpicState(record={"created_at": "2026-01-01T00:00:00Z"}, todos={
        "T1": [_todo("T1", "claimed", [_attempt(2, None), _attempt(1, "reaped")])],
        "T4": [withdrawn],
    })
    views = ledger.task_views(e, state)
    assert views["T1"].status == "in_progress" and views["T1"].died == 1
    assert views["T4"].status == "blocked" and views["T4"].todo is None  # withdrawn: waits for its turn again
    entries = ledger.document(e, state, views)["attempts"]
    assert [(a["result"], a["died"]) for a in entries["T1"]] == [("died", True), ("in_progress", False)]
    assert entries["T4"][0]["receipt"]["gate"] == "user_blocked"
    human_canceled = _todo("T1", "canceled", [], completed_at="2026-01-01T00:09:00Z")
    views = ledger.task_views(e, EpicState(record=None, todos={"T1": [human_canceled]}))
    assert views["T1"].gate == {"reason": "user_blocked", "gated_at": "2026-01-01T00:09:00Z",
                                "detail": "todo canceled on the server"}


# --------------------------------------------------------------------------------------------- runner

def _script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "w.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


async def test_a_worker_gets_its_environment_and_no_credentials(tmp_path, monkeypatch):
    for name in [k for k in os.environ if k.startswith("SWITCHBOARD_")]:
        monkeypatch.delenv(name)  # the suite's own settings (a test database URL, say) are not the worker's
    monkeypatch.setenv("SWITCHBOARD_API_TOKEN", "sbh_secret_token_value")
    monkeypatch.setenv("SWITCHBOARD_CREDENTIAL", "sbk_secret_credential")
    monkeypatch.setenv("INNOCENT", "contains sbk_secret_credential inside")
    argv = _script(tmp_path, """
        import json, os
        keys = [k for k in os.environ if k.startswith(("RELAY_", "SWITCHBOARD_")) or k == "INNOCENT"]
        print(json.dumps(sorted(keys)), os.getcwd())
    """)
    env = runner.worker_env({"RELAY_TASK_ID": "T1"}, ("sbk_secret_credential",))
    res = await runner.run_process(argv, cwd=tmp_path, env=env, timeout_s=30)
    assert res.exit_code == 0 and not res.timed_out
    assert res.output_tail.strip() == f'["RELAY_TASK_ID"] {tmp_path}'


async def test_a_hanging_worker_and_its_children_are_killed_at_the_timeout(tmp_path):
    pidfile = tmp_path / "child.pid"
    argv = _script(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(600)
    """)
    started = time.monotonic()
    res = await runner.run_process(argv, cwd=tmp_path, env=dict(os.environ), timeout_s=1.0, kill_grace_s=1.0)
    assert res.timed_out and res.exit_code is not None and res.exit_code < 0
    assert "started" in res.output_tail and time.monotonic() - started < 20
    child = int(pidfile.read_text())
    for _ in range(50):  # the grandchild was in the same process group
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the worker's child outlived the kill")


async def test_a_missing_command_is_a_failure_not_a_crash(tmp_path):
    res = await runner.run_process(["/nonexistent/worker"], cwd=tmp_path, env=dict(os.environ), timeout_s=5)
    assert res.exit_code == 127 and "cannot start" in res.output_tail


def test_attempt_files_are_private():
    files = runner.AttemptFiles()
    try:
        files.write_json(files.prior, {"prior_attempts": []})
        assert stat.S_IMODE(files.dir.stat().st_mode) == 0o700
        assert stat.S_IMODE(files.prior.stat().st_mode) == 0o600
        assert not files.receipt.exists()
    finally:
        files.cleanup()
    assert not files.dir.exists()


def test_the_live_display_shows_tasks_by_state():
    import io

    from rich.console import Console

    from switchboard.relay.display import Display

    e = epics.load(EXAMPLE)
    state = EpicState(record=None, todos={
        "T1": [_todo("T1", "done", [_attempt(1, "completed")])],
        "T2": [_todo("T2", "claimed", [_attempt(2, None), _attempt(1, "reaped")])],
        "T3": [_todo("T3", "failed", [_attempt(1, "failed", "x", gate="quality_gate_blocked")])],
    })
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    with Display(console, "epic relay-demo") as display:
        assert display.live is not None  # a terminal gets the live table
        display.started("T2")
        display.update(ledger.task_views(e, state))
        display.event("T2 attempt 2/3 started")
    text = console.file.getvalue()
    for expected in ("✅ completed", "🔄 in_progress", "🚫 gated", "⏸️ blocked", "1 DIED, 2 running",
                     "gated: quality_gate_blocked", "waiting on T2, T3", "T2 attempt 2/3 started"):
        assert expected in text, expected
    plain = Console(file=io.StringIO(), width=200)
    with Display(plain, "epic relay-demo") as display:
        assert display.live is None  # a pipe gets one line per event
        display.event("T1 pushed")
    assert plain.file.getvalue() == "T1 pushed\n"
