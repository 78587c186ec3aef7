"""The CLI against a remote server (`switchboard login`, `SWITCHBOARD_URL` + `SWITCHBOARD_TOKEN`): every
queue command over the human API gives the same `--json` output (modulo ids, names and times) and
the same exit codes as on the local database; the saved login is a 0600 file; a wrong token and an
unreachable server are one line and exit 1; another human's todo is not_found byte-identical to an
unknown one (SPEC-0034 REQ-10).

The console script runs as a subprocess against a live server (uvicorn on a free port) and a
database both share. Remote runs get a database URL nothing listens on: a command that quietly
acted locally would fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import create_database, free_port, make_settings, start_thread_server

SB = str(Path(sys.executable).parent / "switchboard")
NOWHERE_DB = "postgresql://sb:sb@127.0.0.1:1/nowhere?connect_timeout=2"


@pytest.fixture(scope="module")
def server(pg_server):
    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri))
    yield srv, uri
    srv.stop()


@pytest.fixture
def config_home():
    path = Path(tempfile.mkdtemp(prefix="sb-cli-remote-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _env(config_home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(XDG_CONFIG_HOME=str(config_home), SWITCHBOARD_LOG_FORMAT="text", SWITCHBOARD_HOOKS_ALLOW_PRIVATE="1")
    env.update(extra)
    return env


def sb(env: dict, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SB, *args], env=env, input=stdin, capture_output=True, text=True, timeout=90)


class World:
    """One human, driven through the CLI either locally (`--user` via SWITCHBOARD_USER, on the database)
    or remotely (their API token, against the server)."""

    def __init__(self, server, config_home: Path, *, remote: bool) -> None:
        srv, uri = server
        self.name = f"u{uuid.uuid4().hex[:10]}"
        local = _env(config_home, SWITCHBOARD_DATABASE_URL=uri)
        made = sb(local, "user", "add", self.name, "--no-password", "--json")
        assert made.returncode == 0, made.stderr
        token = sb(dict(local, SWITCHBOARD_USER=self.name), "token", "create", "--json")
        assert token.returncode == 0, token.stderr
        self.token = json.loads(token.stdout)["token"]
        if remote:
            self.env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB, SWITCHBOARD_URL=srv.url,
                            SWITCHBOARD_TOKEN=self.token, SWITCHBOARD_USER=self.name)
        else:
            self.env = dict(local, SWITCHBOARD_USER=self.name)
        self.known: dict[str, str] = {self.name: "<user>", self.token: "<token>", self.token[:12]: "<token-prefix>",
                                      srv.url: "<base>", "http://127.0.0.1:8080": "<base>"}
        self.runs: list[tuple[tuple, int, str, str]] = []

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        done = sb(self.env, *args, stdin=stdin)
        self.runs.append((args, done.returncode, done.stdout, done.stderr))
        return done

    def ok(self, *args: str) -> dict:
        done = self.run(*args, "--json")
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        lines = done.stdout.splitlines()
        assert len(lines) == 1, done.stdout
        return json.loads(lines[0])

    def remember(self, value: str, placeholder: str) -> None:
        self.known[value] = placeholder

    def normal(self, text: str) -> str:
        for value in sorted(self.known, key=len, reverse=True):
            text = text.replace(value, self.known[value])
        text = re.sub(r"td_[0-9a-f-]{36}", "<todo>", text)
        text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)
        text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", "<time>", text)
        text = re.sub(r"sb[kh]_[A-Za-z0-9_-]+", "<secret>", text)
        text = re.sub(r"whsec_[A-Za-z0-9+/=]+", "<secret>", text)
        # A todo records the surface it was pushed through: "operator" (this machine) or "api".
        text = re.sub(r'"source": "(operator|api)"', '"source": "<surface>"', text)
        text = re.sub(r'"(duration_ms|lease_ttl_seconds)": \d+', r'"\1": <n>', text)
        # The claimant of an owner's claim names the surface it came through (cli:NAME or api:NAME).
        return re.sub(r"\b(cli|api):<user>", "<via>:<user>", text)

    def transcript(self) -> list[tuple]:
        """The runs, normalised. An `invalid` refusal keeps only its code: the server validates a
        body with its own models first, whose words for a bad value differ from the core's."""
        out = []
        for args, code, stdout, stderr in self.runs:
            if stdout.startswith('{"error": {"code": "invalid"'):
                stdout = '{"error": {"code": "invalid"}}'
            if stderr.startswith("error: invalid: "):
                stderr = "error: invalid: ..."
            out.append((tuple(self.normal(a) for a in args), code, self.normal(stdout), self.normal(stderr)))
        return out


def _both(server, config_home: Path, script) -> tuple[World, World]:
    """Run `script(world)` locally and remotely, and check both transcripts are the same."""
    local, far = World(server, config_home, remote=False), World(server, config_home, remote=True)
    script(local)
    script(far)
    for a, b in zip(local.transcript(), far.transcript(), strict=True):
        assert a == b, f"\nlocal:  {a}\nremote: {b}"
    return local, far


# ------------------------------------------------------------------------------------ the families

def _endpoints(w: World) -> None:
    ep = w.ok("endpoint", "vend", "--agent", "fixer", "--queue", "inbox", "--queue", "review")
    w.remember(ep["slug"], "<slug>")
    w.ok("endpoint", "list")
    w.ok("endpoint", "show", ep["slug"])
    w.run("endpoint", "show", ep["slug"])
    other = w.ok("endpoint", "vend", "--agent", "second", "--lease-ttl", "120")
    w.remember(other["slug"], "<slug2>")
    w.ok("endpoint", "revoke", other["slug"])
    w.ok("endpoint", "revoke", other["slug"])       # revoking again changes nothing
    w.run("endpoint", "show", "nosuchslug", "--json")  # not_found, exit 1
    w.run("endpoint", "revoke", "nosuchslug")       # one line on stderr
    w.run("endpoint", "vend", "--agent", "x", "--verb", "nosuchverb", "--json")  # invalid
    w.run("endpoint", "list")                       # the table


def test_endpoint_commands_remote_match_local(server, config_home):
    local, far = _both(server, config_home, _endpoints)
    codes = [code for _, code, _, _ in far.runs]
    assert codes == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0]
    assert json.loads(far.runs[7][2])["error"]["code"] == "not_found"
    assert far.runs[0][2] and "credential" in json.loads(far.runs[0][2])


def _todos(w: World) -> None:
    ep = w.ok("endpoint", "vend", "--agent", "fixer", "--queue", "inbox")
    w.remember(ep["slug"], "<slug>")
    first = w.ok("todo", "push", ep["slug"], "--title", "Fix the flaky login test", "--key", "k1",
                 "--payload", '{"test": "tests/test_login.py::test_remember_me"}', "--max-attempts", "2")["todo"]
    w.ok("todo", "push", ep["slug"], "--title", "Fix the flaky login test", "--key", "k1")  # created: false
    second = w.ok("todo", "push", ep["slug"], "--title", "Second", "--kind", "chore")["todo"]
    w.run("todo", "push", ep["slug"], "--title", "x", "--max-attempts", "0", "--json")  # invalid
    w.run("todo", "push", "nosuchslug", "--title", "x", "--json")  # not_found
    w.ok("todo", "list")
    w.ok("todo", "list", ep["slug"], "--state", "pending", "--limit", "1")
    w.ok("todo", "list", "--dead-letter")
    w.run("todo", "list", "nosuchslug", "--json")
    w.ok("todo", "show", first["id"])
    w.run("todo", "complete", first["id"], "--json")  # conflict: it is pending
    w.ok("todo", "claim", first["id"], "--lease-ttl-seconds", "120")
    w.ok("todo", "extend", first["id"], "--lease-ttl-seconds", "300")
    w.ok("todo", "release", first["id"], "--summary", "not now")
    w.ok("todo", "claim", first["id"])
    w.ok("todo", "complete", first["id"], "--result", '{"ok": true}', "--summary", "fixed")
    w.ok("todo", "claim", second["id"])
    w.ok("todo", "fail", second["id"], "--no-retry", "--summary", "cannot")
    w.ok("todo", "retry", second["id"])
    w.ok("todo", "cancel", second["id"])
    w.ok("todo", "show", second["id"])
    w.run("todo", "show", first["id"])               # the text view
    w.run("todo", "list")
    w.run("todo", "show", "td_00000000-0000-0000-0000-000000000000", "--json")


def test_todo_commands_remote_match_local(server, config_home):
    local, far = _both(server, config_home, _todos)
    codes = [code for _, code, _, _ in far.runs]
    assert codes.count(1) == 5 and codes[-1] == 1, codes
    shown = json.loads(far.runs[-4][2])
    assert shown["state"] == "canceled" and len(shown["attempts"]) == 1


def _hooks(w: World) -> None:
    ep = w.ok("endpoint", "vend", "--agent", "fixer")
    w.remember(ep["slug"], "<slug>")
    added = w.ok("hook", "add", ep["slug"], "--url", "https://127.0.0.1:9/hook", "--event", "todo.created")
    w.remember(added["hook"]["hook_id"], "<hook>")
    w.ok("hook", "list", ep["slug"])
    w.ok("hook", "deliveries", ep["slug"], "--limit", "5")
    w.ok("hook", "enable", added["hook"]["hook_id"])
    w.run("hook", "add", ep["slug"], "--url", "ftp://example.com/", "--json")  # invalid
    w.ok("hook", "remove", added["hook"]["hook_id"])
    w.run("hook", "remove", added["hook"]["hook_id"], "--json")                # not_found
    w.run("hook", "enable", str(uuid.uuid4()))                                 # not_found, one line
    w.run("hook", "list", ep["slug"])


def test_hook_commands_remote_match_local(server, config_home):
    local, far = _both(server, config_home, _hooks)
    assert [code for _, code, _, _ in far.runs] == [0, 0, 0, 0, 0, 1, 0, 1, 1, 0]


def _tokens(w: World) -> None:
    made = w.ok("token", "create", "--scope", "read", "--expires-in", "3600")
    w.remember(made["token"], "<token2>")
    w.ok("token", "list")
    w.ok("token", "revoke", made["prefix"])
    w.ok("token", "revoke", made["id"])              # revoked: false
    w.run("token", "revoke", "sbh_nosuchtoken", "--json")
    w.run("token", "create", "--scope", "admin", "--json")  # invalid


def test_token_commands_remote_match_local(server, config_home):
    local, far = _both(server, config_home, _tokens)
    assert [code for _, code, _, _ in far.runs] == [0, 0, 0, 0, 1, 1]
    made = json.loads(far.runs[0][2])
    assert made["scope"] == "read" and made["expires_at"] and made["user"] == far.name


def test_settings_and_sweep_remote_match_local_for_an_admin(server, config_home):
    srv, uri = server
    admin = World(server, config_home, remote=True)
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:  # an operator makes them an admin
        conn.execute("UPDATE humans SET is_admin = true WHERE name = %s", (admin.name,))
    local = World(server, config_home, remote=False)
    for w in (local, admin):
        w.ok("settings", "get")
        w.ok("settings", "set", "retention_max_age_days", "45")
        w.ok("settings", "get", "retention_max_age_days")
        w.ok("settings", "set", "retention_max_age_days", "30")
        w.run("settings", "set", "retention_max_age_days", "0", "--json")   # invalid
        w.run("settings", "get", "nosuchsetting", "--json")
    for a, b in zip(local.transcript(), admin.transcript(), strict=True):
        assert a == b, f"\nlocal:  {a}\nremote: {b}"
    swept = admin.ok("sweep", "--once")
    assert set(swept) == set(local.ok("sweep", "--once"))
    # A human who is not an admin: forbidden, exit 1, one line.
    other = World(server, config_home, remote=True)
    done = other.run("settings", "get")
    assert done.returncode == 1 and done.stdout == "" and done.stderr.startswith("error: forbidden")
    assert len(done.stderr.splitlines()) == 1


# ---------------------------------------------------------------------------- isolation, credentials

def test_a_remote_cli_cannot_read_another_humans_todo(server, config_home):
    a = World(server, config_home, remote=True)
    b = World(server, config_home, remote=False)
    ep = b.ok("endpoint", "vend", "--agent", "private")
    todo = b.ok("todo", "push", ep["slug"], "--title", "B's secret work")["todo"]
    unknown = "td_" + str(uuid.uuid4())
    for extra in (("--json",), ()):
        theirs = sb(a.env, "todo", "show", todo["id"], *extra)
        never = sb(a.env, "todo", "show", unknown, *extra)
        assert theirs.returncode == never.returncode == 1
        assert theirs.stdout.replace(todo["id"], "ID") == never.stdout.replace(unknown, "ID")
        assert theirs.stderr.replace(todo["id"], "ID") == never.stderr.replace(unknown, "ID")
        assert "secret work" not in theirs.stdout + theirs.stderr
    assert json.loads(sb(a.env, "todo", "show", todo["id"], "--json").stdout)["error"]["code"] == "not_found"
    assert sb(a.env, "todo", "cancel", todo["id"]).returncode == 1
    assert json.loads(sb(a.env, "todo", "list", "--json").stdout) == {"todos": []}
    assert b.ok("todo", "show", todo["id"])["state"] == "pending"


def test_user_is_refused_against_a_server(server, config_home):
    a = World(server, config_home, remote=True)
    done = sb(a.env, "endpoint", "list", "--user", "someone-else")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "--user" in done.stderr


def test_login_saves_a_private_file_and_logout_removes_it(server, config_home):
    srv, _ = server
    a = World(server, config_home, remote=False)
    env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB)
    done = sb(env, "login", srv.url + "/", "--token-stdin", stdin=a.token + "\n")
    assert done.returncode == 0, done.stderr
    assert a.token not in done.stdout + done.stderr and a.name in done.stdout
    saved = config_home / "switchboard" / "remote.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert json.loads(saved.read_text()) == {"url": srv.url, "token": a.token}
    # Every queue command now goes to the server as that human (the local database is unreachable).
    ep = json.loads(sb(env, "endpoint", "vend", "--agent", "fixer", "--json").stdout)
    assert ep["mcp_url"].startswith(srv.url + "/mcp/") or ep["mcp_url"].endswith("/mcp/" + ep["slug"])
    assert [e["slug"] for e in a.ok("endpoint", "list")["endpoints"]] == [ep["slug"]]
    # Logging in again replaces the file, still 0600.
    assert sb(env, "login", srv.url, "--token-stdin", "--json", stdin=a.token + "\n").returncode == 0
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    out = sb(env, "logout", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["removed"] is True and not saved.exists()
    assert json.loads(sb(env, "logout", "--json").stdout)["removed"] is False
    # Logged out: the CLI is back on this machine's database (here, one that cannot be reached).
    local = sb(dict(env, SWITCHBOARD_USER=a.name), "endpoint", "list")
    assert local.returncode == 1 and "cannot reach the database" in local.stderr


def test_login_with_a_wrong_token_is_one_line_and_saves_nothing(server, config_home):
    srv, _ = server
    env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB)
    done = sb(env, "login", srv.url, "--token-stdin", stdin="sbh_" + "x" * 40 + "\n")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: unauthorized: a valid API token is required"]
    assert not (config_home / "switchboard" / "remote.json").exists()
    assert sb(env, "login", srv.url).returncode == 2  # no terminal, no --token-stdin: usage


def test_a_wrong_token_in_the_environment_is_one_line_exit_1(server, config_home):
    srv, _ = server
    env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB, SWITCHBOARD_URL=srv.url,
               SWITCHBOARD_TOKEN="sbh_" + "y" * 40)
    done = sb(env, "todo", "list")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == ["error: unauthorized: a valid API token is required"]
    as_json = sb(env, "todo", "list", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error"]["code"] == "unauthorized"
    no_token = sb({k: v for k, v in env.items() if k != "SWITCHBOARD_TOKEN"}, "todo", "list")
    assert no_token.returncode == 2 and "SWITCHBOARD_TOKEN" in no_token.stderr


def test_an_unreachable_server_is_one_line_exit_1(config_home):
    url = f"http://127.0.0.1:{free_port()}"
    env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB, SWITCHBOARD_URL=url,
               SWITCHBOARD_TOKEN="sbh_" + "z" * 40)
    done = sb(env, "endpoint", "list")
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach the server at {url}")
    as_json = sb(env, "endpoint", "list", "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["error"]["code"] == "unavailable"


def test_help_says_where_commands_act(config_home):
    env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB)
    top = sb(env, "--help")
    text = " ".join(top.stdout.replace("│", " ").split())
    assert top.returncode == 0
    assert "SWITCHBOARD_URL" in text and "switchboard login URL" in text and "local-admin act" in text
    assert "this machine's database as its operator" in text
    option = " ".join(sb(env, "todo", "show", "--help").stdout.replace("│", " ").split())
    assert "Local-admin act" in option and "without their credential" in option


def test_the_relays_environment_names_the_same_server(server, config_home):
    """docs/relay.md exports SWITCHBOARD_URL as an endpoint's MCP URL and the human token as
    SWITCHBOARD_API_TOKEN: queue commands in that shell go to the same server as that human."""
    srv, _ = server
    a = World(server, config_home, remote=True)
    ep = a.ok("endpoint", "vend", "--agent", "relay")
    env = _env(config_home, SWITCHBOARD_DATABASE_URL=NOWHERE_DB, SWITCHBOARD_URL=ep["mcp_url"],
               SWITCHBOARD_API_TOKEN=a.token)
    listed = sb(env, "endpoint", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["slug"] for e in json.loads(listed.stdout)["endpoints"]] == [ep["slug"]]
