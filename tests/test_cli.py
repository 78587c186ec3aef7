"""The `switchboard` command as users run it (SYSTEM.md section 15): the real console script as a
subprocess against a test database, `--json` printing exactly one JSON object, exit codes 0/1/2 and
errors as one line on stderr; and the embedded server shared between processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import core_for, create_database, free_port, run_async
from switchboard.core import endpoints, humans, todos

SB = str(Path(sys.executable).parent / "switchboard")


def _base_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}


@pytest.fixture(scope="module")
def cli_env(pg_server):
    uri = create_database(pg_server)
    env = _base_env()
    env.update(SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_LOG_FORMAT="text")
    return env


def sb(env: dict, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([SB, *args], env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


def ok_json(env: dict, *args: str, stdin: str | None = None) -> dict:
    run = sb(env, *args, "--json", stdin=stdin)
    assert run.returncode == 0, (args, run.stderr)
    lines = run.stdout.splitlines()
    assert len(lines) == 1, run.stdout  # exactly one JSON object, on one line
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


def refused(env: dict, *args: str, code: int = 1, contains: str = "", stdin: str | None = None) -> str:
    run = sb(env, *args, stdin=stdin)
    assert run.returncode == code, (args, run.returncode, run.stdout, run.stderr)
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert contains in lines[0], lines[0]
    return lines[0]


def _user(env: dict) -> dict:
    name = f"u{uuid.uuid4().hex[:8]}"
    run = sb(env, "user", "add", name, "--password-stdin", stdin="correct-horse-battery\n")
    assert run.returncode == 0 and f"created user {name}" in run.stdout, run.stderr
    return dict(env, SWITCHBOARD_USER=name)


def _user_core(env: dict, *, vend: bool = True) -> tuple[dict, dict | None, object]:
    """A user (and an endpoint) made in-process, for tests whose subject is another command."""
    name = f"u{uuid.uuid4().hex[:8]}"

    async def go(core):
        h = await humans.add(core, name)
        if not vend:
            return None, None
        ep, cred = await endpoints.vend(core, h, agent="worker")
        return ep, endpoints.caller_from_row(await endpoints.resolve_credential(core, cred))
    ep, caller = _core(env, go)
    return dict(env, SWITCHBOARD_USER=name), ep, caller


def _caller(env: dict, credential: str):
    async def go():
        async with core_for(env["SWITCHBOARD_DATABASE_URL"]) as core:
            return endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
    return run_async(go())


def _core(env: dict, fn):
    async def go():
        async with core_for(env["SWITCHBOARD_DATABASE_URL"]) as core:
            return await fn(core)
    return run_async(go())


# ------------------------------------------------------------------------------------- the tour

def test_readme_tour_user_vend_push_show_list(cli_env):
    env = _user(cli_env)
    ep = ok_json(env, "endpoint", "vend", "--agent", "fixer", "--queue", "inbox")
    assert set(ep) == {"endpoint_id", "slug", "agent", "queues", "verbs", "mcp_url", "credential", "expires_at"}
    assert ep["expires_at"] is None  # no --expires-in: it never expires
    assert ep["credential"].startswith("sbk_") and ep["queues"] == ["inbox"] and ep["agent"] == "fixer"
    assert ep["verbs"] == ["list_todos", "claim", "claim_next", "heartbeat", "complete", "fail", "release",
                           "request_input"]
    assert ep["mcp_url"].endswith(f"/mcp/{ep['slug']}")
    pushed = ok_json(env, "todo", "push", ep["slug"], "--title", "Fix the flaky login test",
                     "--payload", '{"test": "tests/test_login.py::test_remember_me"}', "--key", "k1")
    assert pushed["created"] is True and pushed["todo"]["state"] == "pending"
    todo = pushed["todo"]
    again = ok_json(env, "todo", "push", ep["slug"], "--title", "Fix the flaky login test", "--key", "k1")
    assert again == {"todo": again["todo"], "created": False} and again["todo"]["id"] == todo["id"]
    shown = ok_json(env, "todo", "show", todo["id"])
    assert shown["id"] == todo["id"] and shown["payload"] == {"test": "tests/test_login.py::test_remember_me"}
    assert shown["attempts"] == [] and shown["attempts_total"] == 0 and shown["dead_letter"] is False
    assert shown["endpoint"] == ep["slug"]
    text = sb(env, "todo", "show", todo["id"])
    assert text.returncode == 0 and todo["id"] in text.stdout and "Fix the flaky login test" in text.stdout
    listed = ok_json(env, "todo", "list")
    assert [t["id"] for t in listed["todos"]] == [todo["id"]]
    assert ok_json(env, "todo", "list", ep["slug"], "--state", "done")["todos"] == []
    eps = ok_json(env, "endpoint", "list")["endpoints"]
    assert [e["slug"] for e in eps] == [ep["slug"]] and "credential" not in eps[0]
    assert ep["credential"] not in json.dumps(eps)
    # The credential works: the core resolves it to this endpoint.
    assert _caller(env, ep["credential"]).slug == ep["slug"]
    helped = sb(env, "--help")
    assert helped.returncode == 0 and "todo" in helped.stdout and helped.stderr == ""
    tok = ok_json(env, "token", "create")
    assert tok["token"].startswith("sbh_") and tok["user"] == env["SWITCHBOARD_USER"]


def test_todo_actions_release_fail_retry_input_cancel(cli_env):
    env, ep, caller = _user_core(cli_env)
    tid = ok_json(env, "todo", "push", ep["slug"], "--title", "t", "--max-attempts", "3")["todo"]["id"]

    _core(env, lambda core: todos.claim(core, caller, tid, claimant="w1", require_fence=True))
    released = ok_json(env, "todo", "release", tid, "--summary", "operator took it back")["todo"]
    assert released["state"] == "pending" and released["attempt"] == 1

    _core(env, lambda core: todos.claim(core, caller, tid))
    failed = ok_json(env, "todo", "fail", tid, "--summary", "stuck")["todo"]
    assert failed["state"] == "failed" and failed["next_retry_at"] and failed["dead_letter"] is False

    retried = ok_json(env, "todo", "retry", tid)["todo"]
    assert retried["state"] == "pending" and retried["attempt"] == 0

    async def claim_and_ask(core):
        await todos.claim(core, caller, tid)
        await todos.request_input(core, caller, tid, question="which branch?")
    _core(env, claim_and_ask)
    resumed = ok_json(env, "todo", "input", tid, "--payload", '{"branch": "main"}')["todo"]
    assert resumed["state"] == "claimed" and resumed["input"] == {"branch": "main"}
    refused(env, "todo", "input", tid, "--payload", "@-", stdin='{"x": 1}', contains="conflict")  # claimed again

    canceled = ok_json(env, "todo", "cancel", tid)["todo"]
    assert canceled["state"] == "canceled"
    shown = ok_json(env, "todo", "show", tid)
    assert [(a["seq"], a["outcome"], a["claimant"]) for a in shown["attempts"]] == [
        (3, "canceled", None), (2, "failed", None), (1, "released", "w1")]
    assert shown["attempts"][2]["summary"] == "operator took it back"
    assert "lease_token" not in json.dumps(shown) and "claimer_session" not in json.dumps(shown)
    text = sb(env, "todo", "show", tid).stdout
    assert "#1" in text and "released" in text and "operator took it back" in text

    revoked = ok_json(env, "endpoint", "revoke", ep["slug"])
    assert revoked["state"] == "revoked" and revoked["dead_lettered"] == 0


def test_settings_get_and_set(cli_env):
    values = ok_json(cli_env, "settings", "get")
    assert set(values) == {"attempt_history_max_per_todo", "retention_max_age_days", "retention_max_rows"}
    assert ok_json(cli_env, "settings", "set", "retention_max_age_days", "45") == {"retention_max_age_days": 45}
    assert ok_json(cli_env, "settings", "get", "retention_max_age_days") == {"retention_max_age_days": 45}
    text = sb(cli_env, "settings", "set", "retention_max_age_days", "30")
    assert text.returncode == 0 and text.stdout.strip() == "retention_max_age_days = 30"
    refused(cli_env, "settings", "set", "attempt_history_max_per_todo", "4", contains="from 5 to")
    refused(cli_env, "settings", "get", "nope", contains="unknown setting nope")


def test_sweep_once_reaps_a_lapsed_lease(cli_env):
    env, ep, caller = _user_core(cli_env)

    async def claim_and_lapse(core):
        todo, _ = await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title="t")
        tid = todo["id"]
        await todos.claim(core, caller, tid)
        async with core.pool.connection() as conn:
            await conn.execute("UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE id = %s",
                               (tid,))
        return tid
    tid = _core(env, claim_and_lapse)
    report = ok_json(env, "sweep", "--once")
    assert report["reaped"] >= 1 and set(report) >= {"reaped", "requeued", "expired_endpoints", "retention_deleted"}
    shown = ok_json(env, "todo", "show", tid)
    assert shown["state"] == "pending" and shown["attempts"][0]["outcome"] == "reaped"
    assert shown["attempts"][0]["died"] is True
    refused(env, "sweep", code=2, contains="--once")


def test_migrate_reports_and_is_idempotent(cli_env, scratch_db):
    env = dict(cli_env, SWITCHBOARD_DATABASE_URL=scratch_db)
    first = sb(env, "migrate", "--to", "1")
    assert first.returncode == 0 and first.stdout.strip() == "applied: 0001_queue.sql"
    rest = ok_json(env, "migrate")
    assert rest["applied"][0] == "0002_attempts.sql"
    again = sb(env, "migrate")
    assert again.returncode == 0 and again.stdout.strip() == "database is up to date"


# ------------------------------------------------------------------------------ refusals and usage

def test_refusals_exit_1_with_one_line(cli_env):
    env, ep, _ = _user_core(cli_env)
    other, _, _ = _user_core(cli_env, vend=False)
    tid = ok_json(env, "todo", "push", ep["slug"], "--title", "t")["todo"]["id"]
    random_id = f"td_{uuid.uuid4()}"
    # not found: an unknown id and another user's todo say exactly the same thing
    assert refused(env, "todo", "show", random_id, contains="not_found") == \
        refused(other, "todo", "show", tid, contains="not_found")
    refused(other, "todo", "push", ep["slug"], "--title", "t", contains="not_found")
    # conflict
    refused(env, "todo", "release", tid, contains="conflict")
    # invalid, naming what was wrong
    refused(env, "todo", "push", ep["slug"], "--title", "t", "--max-attempts", "0", contains="max_attempts")
    refused(env, "endpoint", "vend", "--agent", "a", "--verb", "launch_missiles", contains="verb")
    refused(env, "todo", "list", "--state", "bogus", contains="state")
    refused(cli_env, "user", "add", env["SWITCHBOARD_USER"], "--password-stdin", stdin="another-password\n",
            contains="already exists")
    refused(dict(env, SWITCHBOARD_USER="nobody-here"), "todo", "list", contains="no user named nobody-here")


def test_usage_errors_exit_2_with_one_line(cli_env):
    env = dict(cli_env, SWITCHBOARD_USER="whoever")
    refused(env, "nosuch", code=2, contains="No such command")
    refused(env, "todo", "push", "slug", code=2, contains="--title")
    refused(env, "todo", "push", "slug", "--title", "t", "--payload", "{not json", code=2, contains="--payload")
    refused(env, "todo", "push", "slug", "--title", "t", "--max-attempts", "many", code=2, contains="--max-attempts")
    refused(dict(cli_env), "todo", "list", code=2, contains="--user")
    refused(dict(env, SWITCHBOARD_LEASE_TTL_SECONDS="-5"), "todo", "list", code=2,
            contains="SWITCHBOARD_LEASE_TTL_SECONDS")
    bare = sb(env, "todo")
    assert bare.returncode == 2 and "push" in bare.stdout + bare.stderr  # a bare group shows its help


def test_unreachable_database_is_one_line(cli_env):
    env = dict(cli_env, SWITCHBOARD_DATABASE_URL=f"postgresql://nobody@127.0.0.1:{free_port()}/none",
               SWITCHBOARD_USER="x")
    refused(env, "todo", "list", contains="cannot reach the database")
    refused(env, "migrate", contains="cannot reach the database")


# ---------------------------------------------------------------------------- the embedded server

def _postmaster_pid(data: Path) -> int | None:
    pidfile = data / "pgdata" / "postmaster.pid"
    if not pidfile.exists():
        return None
    return int(pidfile.read_text().splitlines()[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_embedded_server_is_shared_and_stopped_by_the_last_process():
    data = Path(tempfile.mkdtemp(prefix="switchboard-cli-"))  # not under pytest's basetemp (see conftest)
    env = _base_env()
    env.update(SWITCHBOARD_DATA_DIR=str(data), SWITCHBOARD_USER="emb", SWITCHBOARD_LOG_FORMAT="text")
    port = free_port()
    serve = subprocess.Popen([SB, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert serve.poll() is None, serve.stderr.read()
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.2)
        pid = _postmaster_pid(data)
        assert pid is not None and _alive(pid)

        # A second process attaches to the running server and lets go without stopping it.
        added = sb(env, "user", "add", "emb", "--password-stdin", stdin="embedded-pass\n")
        assert added.returncode == 0, added.stderr
        ep = ok_json(env, "endpoint", "vend", "--agent", "a")
        assert _postmaster_pid(data) == pid and _alive(pid)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").json()["database"] == "ok"
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
    # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal: -15 is a clean exit here.
    assert serve.returncode in (0, -signal.SIGTERM), serve.stderr.read()
    # The last process stopped the server: no pid file, no postmaster.
    assert _postmaster_pid(data) is None
    assert not _alive(pid)

    # Alone, a command starts the server, works on the same data, and stops it again.
    listed = ok_json(env, "endpoint", "list")
    assert [e["slug"] for e in listed["endpoints"]] == [ep["slug"]]
    assert _postmaster_pid(data) is None
    shutil.rmtree(data, ignore_errors=True)


# --------------------------------------------------------------- accounts: passwords at the prompt

def _on_a_terminal(env: dict, *args: str, keys: list[bytes], timeout: float = 60) -> tuple[int, str]:
    """Run the command on a pseudo-terminal (its controlling terminal, stdin and output), typing each
    of `keys` when a prompt ending in ': ' appears; returns (exit code, all it printed)."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execve(SB, [SB, *args], env)
    output, pending, deadline = b"", list(keys), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if pending and output.endswith(b": "):
                time.sleep(0.2)  # as a person would: the terminal settles before the keys arrive
                os.write(fd, pending.pop(0))
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode("utf-8", "replace")


def test_user_add_refuses_an_empty_password_and_ends_cleanly_at_end_of_input(cli_env):
    name = f"u{uuid.uuid4().hex[:8]}"
    # Enter at the prompt: refused, nothing created.
    code, out = _on_a_terminal(cli_env, "user", "add", name, keys=[b"\r"])
    assert code == 2 and "error: a password is required" in out and "Traceback" not in out, out
    # Ctrl-D at the prompt: one line, exit 2, no traceback.
    code, out = _on_a_terminal(cli_env, "user", "add", name, keys=[b"\x04"])
    lines = [ln for ln in out.replace("\r", "").splitlines() if ln.strip()]
    assert code == 2 and lines[-1] == "error: no password given (end of input)", out
    assert "Traceback" not in out and "Abort" not in out and len(lines) <= 2, out
    # Two different passwords: refused.
    code, out = _on_a_terminal(cli_env, "user", "add", name, keys=[b"first-password\r", b"other-password\r"])
    assert code == 2 and "error: the two passwords differ" in out, out
    # Standard input that is not a terminal, without --password-stdin; an empty --password-stdin.
    refused(cli_env, "user", "add", name, code=2, contains="--password-stdin", stdin="")
    refused(cli_env, "user", "add", name, "--password-stdin", code=2, contains="no password", stdin="\n")
    refused(cli_env, "user", "add", name, "--password-stdin", code=2, contains="no password", stdin="")
    # None of that made the user; typed twice, it is made, and its password signs in.
    code, out = _on_a_terminal(cli_env, "user", "add", name, keys=[b"typed-password\r", b"typed-password\r"])
    assert code == 0 and f"created user {name}" in out, out

    async def check(core):
        return await humans.verify_password(core, name, "typed-password")

    assert _core(cli_env, check).name == name
    # A password-less user is made only on purpose, for the dev login.
    dev = ok_json(cli_env, "user", "add", f"d{uuid.uuid4().hex[:8]}", "--no-password")
    assert dev["password"] is False
