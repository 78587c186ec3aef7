"""`switchboard queue policy set|show|clear|list` and `queue pause|resume` (SPEC-0030, issue 13): the real
console script as a subprocess, on the local database and against a live server with the same
`--json` output and exit codes; an endpoint's queue (`--endpoint SLUG`) and a team queue (its label;
owners and admins change it, members read it, anyone else gets exactly what an unknown team gets);
bad values are `invalid` naming the field and change nothing; an owner's claim on a paused queue is
refused `deferred`."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import create_database, make_settings, start_thread_server
from test_cli_remote import World, sb
from test_cli_teams import Local, ok, refused, team_slug


@pytest.fixture(scope="module")
def server(pg_server):
    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri))
    yield srv, uri
    srv.stop()


@pytest.fixture
def config_home():
    path = Path(tempfile.mkdtemp(prefix="sb-cli-admission-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_an_endpoints_queue_policy_on_the_local_database(server, config_home):
    world = Local(server, config_home)
    alice = world.env(world.human())
    ep = ok(alice, "endpoint", "vend", "--agent", "worker", "--queue", "build", "--queue", "deploy")
    slug = ep["slug"]
    refused(alice, "queue", "policy", "show", "build", "--endpoint", slug, code="not_found")
    assert ok(alice, "queue", "policy", "list") == {"policies": []}

    policy = ok(alice, "queue", "policy", "set", "build", "--endpoint", slug, "--max-in-flight", "2",
                "--max-claims", "10", "--period", "day", "--tz", "Europe/Paris", "--start", "09:00")["policy"]
    assert (policy["queue"], policy["endpoint"], policy["max_in_flight"], policy["max_claims_per_window"]) == (
        "build", slug, 2, 10)
    assert policy["window"] == {"period": "day", "tz": "Europe/Paris", "start": "09:00", "weekday": None}
    assert policy["status"] == "open" and policy["remaining"] == 10
    assert ok(alice, "queue", "policy", "show", "build", "--endpoint", slug)["policy"] == policy
    text = sb(alice, "queue", "policy", "show", "build", "--endpoint", slug)
    assert text.returncode == 0 and "in flight 0 of 2; claims 0 of 10 per day from 09:00 Europe/Paris" in text.stdout

    # Bad values: invalid naming the field (exit 1), or a usage error for a flag that is not a number.
    for args, argument in ((("--max-in-flight", "10001"), "max_in_flight"),
                           (("--max-claims", "1000001"), "max_claims_per_window"),
                           (("--tz", "Mars/Base"), "window.tz"), (("--start", "25:00"), "window.start"),
                           (("--weekday", "mon"), "window.weekday"), (("--period", "week"), "window.weekday"),
                           (("--period", "month"), "window.period")):
        refused(alice, "queue", "policy", "set", "build", "--endpoint", slug, *args, code="invalid",
                argument=argument)
    refused(alice, "queue", "policy", "set", "build", "--endpoint", slug, "--max-in-flight", "abc", code="usage",
            exit_code=2, argument="max_in_flight")
    refused(alice, "queue", "policy", "set", "build", "--max-in-flight", "1", code="invalid", argument="endpoint")
    refused(alice, "queue", "policy", "set", "bad queue", "--endpoint", slug, code="invalid", argument="queue")
    refused(alice, "queue", "policy", "set", "build", "--endpoint", "nosuchslug00", code="not_found")
    assert ok(alice, "queue", "policy", "show", "build", "--endpoint", slug)["policy"] == policy

    paused = ok(alice, "queue", "pause", "build", "--endpoint", slug)["policy"]
    assert paused["paused"] is True and paused["status"] == "paused"
    text = sb(alice, "queue", "policy", "list")
    assert text.returncode == 0 and "PAUSED (the switch is on)" in text.stdout and "paused" not in text.stdout
    kept = ok(alice, "queue", "policy", "set", "build", "--endpoint", slug, "--max-in-flight", "none",
              "--max-claims", "5", "--period", "week", "--weekday", "fri")["policy"]
    assert (kept["max_in_flight"], kept["max_claims_per_window"], kept["paused"]) == (None, 5, True)
    assert kept["window"]["weekday"] == "fri"
    shown = sb(alice, "queue", "policy", "show", "build", "--endpoint", slug).stdout
    assert "in flight 0 of no limit; claims 0 of 5 per week from 00:00 fri UTC, resets " in shown, shown
    resumed = sb(alice, "queue", "resume", "build", "--endpoint", slug)
    assert resumed.returncode == 0 and resumed.stdout == "resumed build (open)\n"
    ok(alice, "queue", "pause", "deploy", "--endpoint", slug)  # a queue without a policy: one that only pauses
    assert [p["queue"] for p in ok(alice, "queue", "policy", "list")["policies"]] == ["build", "deploy"]

    # An owner's claim on a paused queue is refused `deferred`.
    todo = ok(alice, "todo", "push", slug, "--queue", "deploy", "--title", "Ship it")["todo"]
    error = refused(alice, "todo", "claim", todo["id"], code="deferred")
    assert error["message"] == "queue deploy is deferred: paused"
    assert ok(alice, "queue", "policy", "clear", "deploy", "--endpoint", slug) == {"queue": "deploy", "cleared": True}
    refused(alice, "queue", "policy", "clear", "deploy", "--endpoint", slug, code="not_found")
    assert ok(alice, "todo", "claim", todo["id"])["todo"]["state"] == "claimed"


def test_a_team_queues_policy_roles_and_reach(server, config_home):
    world = Local(server, config_home)
    alice, bob, carol, dave = (world.env(world.human()) for _ in range(4))
    team = team_slug()
    label = f"team:{team}/deploys"
    ok(alice, "team", "create", team)
    ok(alice, "team", "add", team, bob["SWITCHBOARD_USER"])
    ok(alice, "team", "add", team, carol["SWITCHBOARD_USER"], "--role", "admin")
    policy = ok(alice, "queue", "policy", "set", label, "--max-in-flight", "3")["policy"]
    assert policy["queue"] == label and policy["endpoint"] is None and policy["max_in_flight"] == 3

    shown = ok(bob, "queue", "policy", "show", label)["policy"]
    assert _same_policy(shown, policy)
    assert [p["queue"] for p in ok(bob, "queue", "policy", "list")["policies"]] == [label]
    refused(bob, "queue", "pause", label, code="forbidden")
    refused(bob, "queue", "policy", "set", label, "--max-in-flight", "1", code="forbidden")
    refused(bob, "queue", "policy", "clear", label, code="forbidden")
    assert ok(carol, "queue", "pause", label)["policy"]["paused"] is True

    todo = ok(bob, "todo", "push", "--queue", label, "--title", "Deploy")["todo"]
    assert refused(alice, "todo", "claim", todo["id"], code="deferred")["message"].endswith("paused")
    assert ok(carol, "queue", "resume", label)["policy"]["status"] == "open"

    for args in (("queue", "policy", "show", "{q}"), ("queue", "pause", "{q}"),
                 ("queue", "policy", "set", "{q}", "--max-in-flight", "1"), ("queue", "policy", "clear", "{q}")):
        for extra in (("--json",), ()):
            theirs = sb(dave, *(a.format(q=label) for a in args), *extra)
            nowhere = sb(dave, *(a.format(q="team:nosuchteam0/deploys") for a in args), *extra)
            assert theirs.returncode == nowhere.returncode == 1, (args, theirs.stderr)
            assert (theirs.stdout, theirs.stderr) == (nowhere.stdout, nowhere.stderr), args
    assert ok(dave, "queue", "policy", "list") == {"policies": []}
    assert ok(alice, "queue", "policy", "show", label)["policy"]["paused"] is False


def _policies_script(w: World) -> None:
    team = team_slug()
    w.remember(team, "<team>")
    ep = w.ok("endpoint", "vend", "--agent", "worker", "--queue", "build")
    w.remember(ep["slug"], "<slug>")
    w.ok("team", "create", team)
    w.ok("queue", "policy", "set", "build", "--endpoint", ep["slug"], "--max-in-flight", "2", "--max-claims", "10",
         "--period", "day", "--tz", "Europe/Paris", "--start", "09:00")
    w.ok("queue", "policy", "show", "build", "--endpoint", ep["slug"])
    w.run("queue", "policy", "show", "build", "--endpoint", ep["slug"])       # the text view
    w.ok("queue", "policy", "set", f"team:{team}/deploys", "--max-claims", "100", "--period", "week",
         "--weekday", "mon", "--start", "06:30")
    w.ok("queue", "pause", f"team:{team}/deploys")
    w.ok("queue", "policy", "list")
    w.run("queue", "policy", "list")                                          # the text view
    w.ok("queue", "resume", f"team:{team}/deploys")
    w.run("queue", "policy", "set", "build", "--endpoint", ep["slug"], "--max-in-flight", "10001", "--json")
    w.run("queue", "policy", "set", "build", "--endpoint", ep["slug"], "--tz", "Mars/Base", "--json")
    w.run("queue", "policy", "set", "build", "--endpoint", ep["slug"], "--start", "25:00", "--json")
    w.run("queue", "policy", "set", "build", "--endpoint", ep["slug"], "--weekday", "mon", "--json")
    w.run("queue", "policy", "set", "build", "--json")                        # invalid: no endpoint
    w.run("queue", "policy", "set", "team:Bad/x", "--json")                   # invalid: the label
    w.run("queue", "policy", "show", "team:nosuchteam0/deploys", "--json")    # not_found
    w.run("queue", "policy", "show", "build", "--endpoint", "nosuchslug00")   # not_found, one line
    w.ok("queue", "policy", "clear", f"team:{team}/deploys")
    w.ok("queue", "policy", "clear", "build", "--endpoint", ep["slug"])
    w.run("queue", "policy", "clear", "build", "--endpoint", ep["slug"], "--json")  # not_found
    w.ok("queue", "policy", "list")


def test_queue_policy_commands_remote_match_local(server, config_home):
    local, far = World(server, config_home, remote=False), World(server, config_home, remote=True)
    _policies_script(local)
    _policies_script(far)
    for a, b in zip(local.transcript(), far.transcript(), strict=True):
        assert a == b, f"\nlocal:  {a}\nremote: {b}"
    codes = [code for _, code, _, _ in far.runs]
    assert codes == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0], codes
    arguments = [json.loads(far.runs[i][2])["error"].get("argument") for i in range(10, 16)]
    assert arguments == ["max_in_flight", "window.tz", "window.start", "window.weekday", "endpoint", "queue"]
    weekly = json.loads(far.runs[5][2])["policy"]
    assert weekly["window"] == {"period": "week", "tz": "UTC", "start": "06:30", "weekday": "mon"}
    assert json.loads(far.runs[-1][2]) == {"policies": []}


def _same_policy(later: dict, earlier: dict) -> bool:
    """The same policy read twice: equal, but for the hourly window's end when the hour turned between
    the two reads."""
    from datetime import datetime, timedelta

    ends = [datetime.fromisoformat(p["window_resets_at"]) for p in (earlier, later)]
    return ({**later, "window_resets_at": None} == {**earlier, "window_resets_at": None}
            and ends[1] - ends[0] in (timedelta(0), timedelta(hours=1)))
