"""`switchboard team …`, team queues in `endpoint vend` and `todo push`, and `todo list --team` (issue 13):
the real console script as a subprocess, on the local database (as `SWITCHBOARD_USER`) and against a
live server (as an API token's human) with the same `--json` output and exit codes; what each role
may do; a team is `not_found` to a non-member with exactly the output of a team that does not exist;
text output is inert (no terminal escape from a team's name reaches the terminal)."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import create_database, make_settings, start_thread_server
from test_cli_remote import World, _env, sb


@pytest.fixture(scope="module")
def server(pg_server):
    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri))
    yield srv, uri
    srv.stop()


@pytest.fixture
def config_home():
    path = Path(tempfile.mkdtemp(prefix="sb-cli-teams-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Local:
    """Humans on the server's database, driven through the CLI on this machine (`SWITCHBOARD_USER`)."""

    def __init__(self, server, config_home) -> None:
        _, uri = server
        self.base = _env(config_home, SWITCHBOARD_DATABASE_URL=uri)

    def human(self) -> str:
        name = f"u{uuid.uuid4().hex[:10]}"
        done = sb(self.base, "user", "add", name, "--no-password", "--json")
        assert done.returncode == 0, done.stderr
        return name

    def env(self, name: str) -> dict:
        return dict(self.base, SWITCHBOARD_USER=name)


def ok(env: dict, *args: str) -> dict:
    done = sb(env, *args, "--json")
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    return json.loads(lines[0])


def refused(env: dict, *args: str, code: str, exit_code: int = 1, argument: str | None = None) -> dict:
    done = sb(env, *args, "--json")
    assert done.returncode == exit_code, (args, done.returncode, done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    error = json.loads(lines[0])["error"]
    assert error["code"] == code, error
    if argument is not None:
        assert error.get("argument") == argument, error
    return error


def team_slug() -> str:
    return "t" + uuid.uuid4().hex[:10]


# ------------------------------------------------------------------------------------ locally

def test_team_commands_and_roles_on_the_local_database(server, config_home):
    world = Local(server, config_home)
    alice, bob, carol, dave = (world.env(world.human()) for _ in range(4))
    names = {e["SWITCHBOARD_USER"]: e for e in (alice, bob, carol, dave)}
    bob_name, carol_name, dave_name = bob["SWITCHBOARD_USER"], carol["SWITCHBOARD_USER"], dave["SWITCHBOARD_USER"]
    assert len(names) == 4
    team = team_slug()
    label = f"team:{team}/deploys"

    made = ok(alice, "team", "create", team, "--name", "Release crew")
    assert made["team"]["slug"] == team and made["team"]["role"] == "owner"
    refused(alice, "team", "create", team, code="conflict")
    refused(alice, "team", "create", "Bad Slug", code="invalid", argument="slug")
    assert ok(alice, "team", "add", team, bob_name, "--role", "admin") == {"team": team, "human": bob_name,
                                                                           "role": "admin"}
    assert ok(bob, "team", "add", team, carol_name)["role"] == "member"
    refused(bob, "team", "add", team, dave_name, "--role", "owner", code="forbidden")
    refused(carol, "team", "add", team, dave_name, code="forbidden")
    refused(carol, "team", "remove", team, bob_name, code="forbidden")
    refused(carol, "team", "role", team, bob_name, "member", code="forbidden")
    refused(alice, "team", "add", team, carol_name, "--role", "boss", code="invalid", argument="role")
    listed = ok(carol, "team", "list")["teams"]
    assert [(t["slug"], t["role"], t["members"]) for t in listed] == [(team, "member", 3)]

    # Vend, grant, push without an endpoint, list the team's todos.
    vended = ok(carol, "endpoint", "vend", "--agent", "worker", "--queue", label, "--queue", "inbox")
    assert vended["awaiting_grant"] == [label]
    text = sb(carol, "endpoint", "vend", "--agent", "second", "--queue", label)
    assert text.returncode == 0 and f"awaiting a grant by a team owner or admin: {label}" in text.stdout
    refused(carol, "team", "grant", team, "deploys", vended["slug"], code="forbidden")
    granted = ok(bob, "team", "grant", team, "deploys", vended["slug"])
    assert granted == {"team": team, "queue": label, "endpoint": vended["slug"], "granted": True}
    pushed = ok(carol, "todo", "push", "--queue", label, "--title", "Deploy 1.2", "--key", "rel-1.2")
    assert pushed["created"] is True and pushed["todo"]["queue"] == label
    assert ok(bob, "todo", "push", "--queue", label, "--title", "Deploy 1.2", "--key", "rel-1.2")["created"] is False
    # The team queue where the endpoint goes is the same push (the key finds the same live todo).
    again = ok(bob, "todo", "push", label, "--title", "Deploy 1.2", "--key", "rel-1.2")
    assert again["created"] is False and again["todo"]["id"] == pushed["todo"]["id"]
    refused(carol, "todo", "push", label, "--queue", label, "--title", "x", code="usage", exit_code=2,
            argument="slug")
    via_endpoint = ok(carol, "todo", "push", vended["slug"], "--queue", label, "--title", "Through the endpoint")
    assert via_endpoint["todo"]["queue"] == label
    refused(carol, "todo", "push", "--title", "No queue", code="usage", exit_code=2, argument="slug")
    refused(carol, "todo", "push", "--queue", "inbox", "--title", "Not a team queue", code="usage", exit_code=2)
    refused(carol, "todo", "push", "--queue", "team:Bad/x", "--title", "x", code="invalid", argument="queue")
    listed = ok(bob, "todo", "list", "--team", team)["todos"]
    assert len(listed) == 2 and {t["team"] for t in listed} == {team}
    assert ok(alice, "todo", "list", "--team", team, "--state", "done")["todos"] == []
    shown = sb(alice, "todo", "show", pushed["todo"]["id"])
    assert shown.returncode == 0 and f"team {team}" in shown.stdout
    show = ok(alice, "team", "show", team)["team"]
    assert [m["role"] for m in show["members"]] == ["owner", "admin", "member"]
    assert show["queues"] == [{"queue": label, "pending": 2, "in_flight": 0, "parked": 0, "dead": 0}]
    assert [(g["endpoint"], g["reaches"]) for g in show["grants"]] == [(vended["slug"], True)]
    text = sb(alice, "team", "show", team)
    assert text.returncode == 0 and "your role: owner" in text.stdout and vended["slug"] in text.stdout

    # Outside the team: exactly what a team that does not exist gets, with --json and without.
    for args in (("team", "show", "{t}"), ("team", "delete", "{t}"), ("team", "leave", "{t}"),
                 ("team", "add", "{t}", dave_name), ("team", "grant", "{t}", "deploys", vended["slug"]),
                 ("todo", "list", "--team", "{t}"), ("todo", "push", "--queue", "team:{t}/deploys", "--title", "x")):
        for extra in (("--json",), ()) if args[1] in ("show", "list") else (("--json",),):
            theirs = sb(dave, *(a.format(t=team) for a in args), *extra)
            nowhere = sb(dave, *(a.format(t="nosuchteam0") for a in args), *extra)
            assert theirs.returncode == nowhere.returncode == 1, (args, theirs.stderr)
            assert (theirs.stdout, theirs.stderr) == (nowhere.stdout, nowhere.stderr), args
    assert json.loads(sb(dave, "team", "show", team, "--json").stdout)["error"]["code"] == "not_found"
    assert ok(dave, "team", "list") == {"teams": []}

    # Roles change; the last owner stays; leave, ungrant, remove, delete.
    assert ok(bob, "team", "role", team, carol_name, "admin")["role"] == "admin"
    refused(alice, "team", "leave", team, code="conflict")
    refused(alice, "team", "role", team, alice["SWITCHBOARD_USER"], "member", code="conflict")
    ungranted = ok(carol, "team", "ungrant", team, label, vended["slug"])
    assert ungranted["granted"] is False and ungranted["leases_handed_back"] == 0
    refused(carol, "team", "delete", team, code="forbidden")
    assert ok(bob, "team", "leave", team) == {"team": team, "left": True, "leases_handed_back": 0}
    removed = ok(alice, "team", "remove", team, carol_name)
    assert removed["removed"] is True
    refused(carol, "team", "show", team, code="not_found")
    assert ok(alice, "team", "delete", team) == {"team": team, "deleted": True}
    refused(alice, "team", "show", team, code="not_found")


def test_team_text_output_is_inert(server, config_home):
    world = Local(server, config_home)
    alice = world.env(world.human())
    team = team_slug()
    hostile = "Crew \x9b31m\u202eexe.gnp"
    ok(alice, "team", "create", team, "--name", hostile)
    for args in (("team", "show", team), ("team", "list")):
        done = sb(alice, *args)
        assert done.returncode == 0, done.stderr
        assert "\x9b" not in done.stdout and "\u202e" not in done.stdout, done.stdout
        assert "\\x9b31m\\u202eexe.gnp" in done.stdout
    assert ok(alice, "team", "show", team)["team"]["name"] == hostile
    lines = sb(alice, "team", "delete", team).stdout.splitlines()
    assert lines == [f"deleted team {team}"]
    error = sb(alice, "team", "show", team)
    assert error.returncode == 1 and error.stdout == "" and error.stderr == "error: not_found: team not found\n"


# ------------------------------------------------------------------------------------ remotely

def _teams_script(other: str, bystander: str):
    def script(w: World) -> None:
        team = team_slug()
        w.remember(team, "<team>")
        w.remember(other, "<other>")
        w.remember(bystander, "<bystander>")
        w.ok("team", "create", team, "--name", "Release crew")
        w.run("team", "create", team, "--json")                      # conflict
        w.run("team", "create", "Bad Slug", "--json")                # invalid
        w.ok("team", "add", team, other, "--role", "admin")
        w.ok("team", "add", team, bystander)
        w.run("team", "add", team, "nosuchhuman", "--json")          # not_found
        w.ok("team", "list")
        w.ok("team", "show", team)
        w.run("team", "show", team)                                  # the text view
        w.ok("team", "role", team, bystander, "admin")
        ep = w.ok("endpoint", "vend", "--agent", "worker", "--queue", f"team:{team}/deploys")
        w.remember(ep["slug"], "<slug>")
        w.ok("team", "ungrant", team, "deploys", ep["slug"])
        w.ok("team", "grant", team, f"team:{team}/deploys", ep["slug"])
        w.ok("todo", "push", "--queue", f"team:{team}/deploys", "--title", "Deploy 1.2", "--key", "k")
        w.ok("todo", "push", "--queue", f"team:{team}/deploys", "--title", "Deploy 1.2", "--key", "k")
        w.run("todo", "push", "--queue", "team:Bad/x", "--title", "x", "--json")   # invalid
        w.run("todo", "push", "--title", "x", "--json")              # usage
        w.ok("todo", "list", "--team", team)
        w.run("todo", "list", "--team", "nosuchteam0", "--json")     # not_found
        w.run("team", "show", "nosuchteam0")                         # one line on stderr
        w.run("team", "leave", team, "--json")                       # the last owner: conflict
        w.ok("team", "remove", team, bystander)
        w.ok("team", "delete", team)
        w.run("team", "show", team, "--json")                        # not_found
    return script


def test_team_commands_remote_match_local(server, config_home):
    world = Local(server, config_home)
    local, far = World(server, config_home, remote=False), World(server, config_home, remote=True)
    _teams_script(world.human(), world.human())(local)
    _teams_script(world.human(), world.human())(far)
    for a, b in zip(local.transcript(), far.transcript(), strict=True):
        assert a == b, f"\nlocal:  {a}\nremote: {b}"
    codes = [code for _, code, _, _ in far.runs]
    assert codes == [0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 1, 1, 1, 0, 0, 1], codes
    vended = json.loads(far.runs[10][2])
    assert vended["awaiting_grant"] == []  # the owner's own vend is granted at once
    pushed = [json.loads(far.runs[i][2]) for i in (13, 14)]
    assert pushed[0]["created"] is True and pushed[1]["created"] is False
    assert pushed[0]["todo"]["source"] == "api"
    assert json.loads(far.runs[17][2])["todos"][0]["id"] == pushed[0]["todo"]["id"]


# ---------------------------------------------------------------------------- a team todo, from outside

def test_a_team_todo_is_to_a_non_member_what_an_unknown_todo_is(server, config_home):
    """`todo show` and `todo cancel` of a team's todo, by someone outside the team, on the local
    database and against the server: stdout, stderr and exit code byte-identical to those for an id
    that does not exist, with --json and without; the todo is untouched."""
    world = Local(server, config_home)
    owner = world.env(world.human())
    team = team_slug()
    label = f"team:{team}/deploys"
    ok(owner, "team", "create", team)
    todo = ok(owner, "todo", "push", "--queue", label, "--title", "Rotate the signing key")["todo"]
    unknown = "td_" + str(uuid.uuid4())
    assert unknown != todo["id"]

    outsiders = {"local": world.env(world.human()),
                 "remote": World(server, config_home, remote=True).env}
    for where, outsider in outsiders.items():
        for command in ("show", "cancel"):
            for extra in (("--json",), ()):
                theirs = sb(outsider, "todo", command, todo["id"], *extra)
                nowhere = sb(outsider, "todo", command, unknown, *extra)
                assert theirs.returncode == nowhere.returncode == 1, (where, command, extra, theirs.stderr)
                assert theirs.stdout == nowhere.stdout, (where, command, extra)
                assert theirs.stderr == nowhere.stderr, (where, command, extra)
                assert "signing key" not in theirs.stdout + theirs.stderr
                if extra:
                    assert json.loads(theirs.stdout)["error"]["code"] == "not_found", (where, command)
        plain = sb(outsider, "todo", "show", todo["id"])
        assert plain.stdout == "" and plain.stderr.startswith("error: not_found"), (where, plain.stderr)
        assert len(plain.stderr.splitlines()) == 1, (where, plain.stderr)

    shown = ok(owner, "todo", "show", todo["id"])
    assert shown["state"] == "pending" and shown["team"] == team
