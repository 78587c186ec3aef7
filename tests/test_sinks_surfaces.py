"""Notification sinks on the human API's operation table and on the CLI's backend (docs/notifications.md,
docs/api.md).

Over the API, a team's sinks (`/api/v1/teams/{team}/sinks…`): its owners and admins add, remove, enable
and test them, every member lists them (a URL's query redacted) and reads their messages, a plain
member's change is 403 naming `team` and changes nothing, and outside the team every route answers
byte for byte what it answers for a team that does not exist. Bad input is 400 `invalid` naming the
field, as on every operation of the table, and the OpenAPI document lists the routes.

Over the CLI, `switchboard sink … --team` runs the same script on this machine's database (as
`SWITCHBOARD_USER`) and against a running server after `switchboard login` (its database unreachable
from the CLI), with the same output; a sink added through the server belongs to the token's human.

A real server, real PostgreSQL, a real HTTP receiver (test_sinks'); no mocks.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import httpx
import psycopg

import cli_twins
from cli_twins import Person, make_people
from conftest import core_for, run_async
from core_world import sql
from switchboard.core import api_tokens, endpoints, humans, producer, sink_messages, sinks, teams, todos
from team_world import make_fleet
from test_hooks import api, server  # noqa: F401  (the fixture and the API helper)
from test_sinks import receiver  # noqa: F401  (the fixture)

cli_server, config_dirs = cli_twins.cli_server, cli_twins.config_dirs  # the fixtures
TEAM_PATH = "/team?token=receiver-query-secret"  # the query checks that lists redact it
GOOD = {"kind": "slack", "url": "https://hooks.example.com/in"}


async def tokens(core, *people) -> list[str]:
    return [(await api_tokens.create(core, p))[0] for p in people]


async def stored(core) -> list[dict]:
    """Every sink and every queued message: what a refused call must leave as it was."""
    return (await sql(core, "SELECT * FROM notification_sinks ORDER BY id")
            + await sql(core, "SELECT * FROM sink_outbox ORDER BY id"))


async def wait_delivered(core, sink_id: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        rows = await sql(core, "SELECT state FROM sink_outbox WHERE sink_id = %s", (uuid.UUID(sink_id),))
        if rows and all(r["state"] == "delivered" for r in rows):
            return
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------------- the API

async def test_owners_and_admins_manage_a_teams_sinks_and_members_read_them(core, server, receiver):  # noqa: F811
    fleet = await make_fleet(core, members=3)
    owner, admin, member = await tokens(core, *fleet.humans)
    base = f"/api/v1/teams/{fleet.slug}/sinks"

    r = api(server, owner, "POST", base, json={"kind": "slack", "url": receiver.url(TEAM_PATH), "name": "crew",
                                               "events": ["dead_letter"]})
    assert r.status_code == 201, r.text
    assert r.headers["cache-control"] == "no-store"
    sink = r.json()["sink"]
    assert sink["url"] == receiver.url(TEAM_PATH)  # shown unredacted, this once
    assert (sink["owner"], sink["kind"], sink["name"], sink["events"], sink["enabled"]) == (
        {"team": fleet.slug}, "slack", "crew", ["dead_letter"], True)
    r = api(server, admin, "POST", base, json={"kind": "generic", "url": receiver.url("/admin"),
                                               "events": ["queue_stuck"], "stuck_minutes": 15})
    assert r.status_code == 201, r.text
    second = r.json()["sink"]
    assert second["owner"] == {"team": fleet.slug} and second["stuck_minutes"] == 15

    # Any member lists them, the URL's query redacted; they are nobody's own sinks.
    r = api(server, member, "GET", base)
    assert r.status_code == 200, r.text
    listed = {s["sink_id"]: s for s in r.json()["sinks"]}
    assert set(listed) == {sink["sink_id"], second["sink_id"]}
    assert listed[sink["sink_id"]]["url"] == receiver.url("/team?redacted") and "receiver-query-secret" not in r.text
    assert all(s["owner"] == {"team": fleet.slug} for s in listed.values())
    for token in (owner, admin, member):
        assert api(server, token, "GET", "/api/v1/sinks").json() == {"sinks": []}

    # A dead letter on the team queue reaches the team's sink; any member reads the message.
    agent = fleet.endpoints[2]
    dead = await fleet.push("doomed deploy", max_attempts=1)
    await todos.claim(core, agent, dead["id"])
    assert (await todos.fail(core, agent, dead["id"], summary="gave up"))["dead_letter"]
    await wait_delivered(core, sink["sink_id"])
    r = api(server, member, "GET", base + "/deliveries")
    assert r.status_code == 200, r.text
    assert [(d["sink_id"], d["event"], d["state"], d["attempts"], d["last_status_code"])
            for d in r.json()["deliveries"]] == [(sink["sink_id"], "dead_letter", "delivered", 1, 200)]
    r = api(server, member, "GET", base + "/deliveries", params={"sink_id": second["sink_id"], "limit": 5})
    assert r.status_code == 200 and r.json() == {"deliveries": []}
    [body] = receiver.bodies(TEAM_PATH)
    assert "doomed deploy" in json.dumps(body)

    # A plain member may not add, remove, enable or test: 403 naming the team, nothing changed or sent.
    before = await stored(core)
    for method, path, body in (("POST", base, GOOD), ("DELETE", f"{base}/{sink['sink_id']}", None),
                               ("POST", f"{base}/{sink['sink_id']}/enable", None),
                               ("POST", f"{base}/{sink['sink_id']}/test", None)):
        r = api(server, member, method, path, json=body)
        assert r.status_code == 403, (method, path, r.text)
        assert (r.json()["error"]["code"], r.json()["error"]["argument"]) == ("forbidden", "team"), r.text
    assert await stored(core) == before
    assert len(receiver.got) == 1

    # An owner sends a test message; an admin enables a disabled sink and removes one.
    r = api(server, owner, "POST", f"{base}/{sink['sink_id']}/test")
    assert r.status_code == 200, r.text
    assert r.json()["test"] == {"sink_id": sink["sink_id"], "delivered": True, "result": "2xx",
                                "status_code": 200, "error": None}
    assert len(receiver.bodies(TEAM_PATH)) == 2
    await sql(core, "UPDATE notification_sinks SET enabled = false, disabled_reason = 'x' WHERE id = %s",
              (uuid.UUID(sink["sink_id"]),))
    r = api(server, admin, "POST", f"{base}/{sink['sink_id']}/enable")
    assert r.status_code == 200 and r.json()["sink"]["enabled"] is True and r.json()["sink"]["disabled_reason"] is None
    r = api(server, admin, "DELETE", f"{base}/{second['sink_id']}")
    assert r.status_code == 200 and r.json()["removed"]["sink_id"] == second["sink_id"]
    assert [s["sink_id"] for s in api(server, member, "GET", base).json()["sinks"]] == [sink["sink_id"]]

    # Another team's sink, named under this team, is an unknown sink; so is a team's sink named as one's own.
    other = await make_fleet(core, members=1)
    theirs = await sinks.add_for_team(core, other.humans[0], other.slug, kind="slack",
                                      url="https://hooks.example.com/other")
    for method, suffix in (("DELETE", ""), ("POST", "/enable"), ("POST", "/test")):
        foreign = api(server, owner, method, f"{base}/{theirs['sink_id']}{suffix}")
        unknown = api(server, owner, method, f"{base}/{uuid.uuid4()}{suffix}")
        garbage = api(server, owner, method, f"{base}/not-a-sink{suffix}")
        assert foreign.status_code == unknown.status_code == garbage.status_code == 404, foreign.text
        assert foreign.content == unknown.content == garbage.content
        as_own = api(server, owner, method, f"/api/v1/sinks/{sink['sink_id']}{suffix}")
        assert as_own.status_code == 404 and as_own.content == unknown.content
    assert len(await sinks.list_for_team(core, other.humans[0], other.slug)) == 1


async def test_outside_the_team_every_sink_route_answers_as_for_a_team_that_does_not_exist(core, server,  # noqa: F811
                                                                                          receiver):  # noqa: F811
    fleet = await make_fleet(core, members=2)
    stranger = await humans.add(core, f"out-{uuid.uuid4().hex[:6]}")
    await teams.create(core, stranger, f"own-{uuid.uuid4().hex[:6]}")  # a team of their own, not this one
    [token] = await tokens(core, stranger)
    sink = await sinks.add_for_team(core, fleet.humans[0], fleet.slug, kind="slack", url=receiver.url("/t"))
    sid = sink["sink_id"]
    before = await stored(core)
    routes = [("GET", "/sinks", None, None), ("POST", "/sinks", GOOD, None),
              ("GET", "/sinks/deliveries", None, None), ("GET", "/sinks/deliveries", None, {"sink_id": sid}),
              ("DELETE", f"/sinks/{sid}", None, None), ("POST", f"/sinks/{sid}/enable", None, None),
              ("POST", f"/sinks/{sid}/test", None, None)]
    for method, suffix, body, params in routes:
        theirs = api(server, token, method, f"/api/v1/teams/{fleet.slug}{suffix}", json=body, params=params)
        nowhere = api(server, token, method, f"/api/v1/teams/no-such-team{suffix}", json=body, params=params)
        assert theirs.status_code == nowhere.status_code == 404, (method, suffix, theirs.text)
        assert theirs.content == nowhere.content, (method, suffix)
        assert theirs.headers["content-type"] == nowhere.headers["content-type"]
        assert theirs.json()["error"] == {"code": "not_found", "message": "team not found", "argument": "team"}
    assert await stored(core) == before
    assert receiver.got == []


async def test_bad_input_is_400_naming_the_field_and_nothing_is_stored(core, server):  # noqa: F811
    fleet = await make_fleet(core, members=1)
    [owner] = await tokens(core, fleet.humans[0])
    cases = [
        ({"kind": "irc"}, "kind"), ({"kind": None}, "kind"), ({"kind": 7}, "kind"),
        ({"url": "ftp://hooks.example.com/in"}, "url"), ({"url": "not a url"}, "url"), ({"url": None}, "url"),
        ({"url": "https://hooks.example.com/in\r\nX: 1"}, "url"), ({"url": "https://" + "a" * 3000}, "url"),
        ({"digest_hour": 24}, "digest_hour"), ({"digest_hour": -1}, "digest_hour"),
        ({"digest_hour": "9"}, "digest_hour"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"), ({"timezone": "../../etc/passwd"}, "timezone"),
        ({"events": ["todo.exploded"]}, "events"), ({"events": "dead_letter"}, "events"),
        ({"stuck_minutes": 0}, "stuck_minutes"), ({"stuck_minutes": sinks.STUCK_MINUTES_MAX + 1}, "stuck_minutes"),
        ({"stuck_minutes": True}, "stuck_minutes"),
        ({"name": "x" * 65}, "name"), ({"name": "a\x07b"}, "name"), ({"colour": "red"}, "colour"),
    ]
    for path in (f"/api/v1/teams/{fleet.slug}/sinks", "/api/v1/sinks"):
        for change, argument in cases:
            r = api(server, owner, "POST", path, json={**GOOD, **change})
            assert r.status_code == 400, (path, change, r.text)
            assert (r.json()["error"]["code"], r.json()["error"]["argument"]) == ("invalid", argument), (change, r.text)
        for body, argument in (({"url": GOOD["url"]}, "kind"), ({"kind": "slack"}, "url")):
            r = api(server, owner, "POST", path, json=body)
            assert r.status_code == 400 and r.json()["error"]["argument"] == argument, (path, body, r.text)
        r = api(server, owner, "POST", path, content=b"[1]")
        assert r.status_code == 400 and r.json()["error"]["argument"] == "body"
    for path in (f"/api/v1/teams/{fleet.slug}/sinks/deliveries", "/api/v1/sinks/deliveries"):
        for params, argument in (({"limit": "many"}, "limit"), ({"surplus": "1"}, "surplus"),
                                 ([("limit", "1"), ("limit", "2")], "limit")):
            r = api(server, owner, "GET", path, params=params)
            assert r.status_code == 400, (path, params, r.text)
            assert (r.json()["error"]["code"], r.json()["error"]["argument"]) == ("invalid", argument), r.text
    assert await sql(core, "SELECT * FROM notification_sinks") == []


async def test_a_sink_added_over_the_api_belongs_to_the_tokens_human(core, server):  # noqa: F811
    fleet = await make_fleet(core, members=3)
    _, _, member = fleet.humans
    [token] = await tokens(core, member)
    r = api(server, token, "POST", "/api/v1/sinks", json={**GOOD, "timezone": "Europe/Berlin", "digest_hour": 7})
    assert r.status_code == 201, r.text
    sink = r.json()["sink"]
    assert sink["owner"] == {"human": str(member.human_id)}
    assert (sink["timezone"], sink["digest_hour"]) == ("Europe/Berlin", 7)
    assert [s["sink_id"] for s in await sinks.list_for_owner(core, member)] == [sink["sink_id"]]
    assert await sinks.list_for_owner(core, fleet.humans[0]) == []
    assert await sinks.list_for_team(core, member, fleet.slug) == []  # a member's own sink is not the team's


async def test_the_openapi_document_lists_the_sink_routes(server):  # noqa: F811
    doc = httpx.get(server.url + "/api/v1/openapi.json", timeout=30).json()
    paths = doc["paths"]
    expected = {"/api/v1/sinks": {"get": "sink_list", "post": "sink_add"},
                "/api/v1/sinks/deliveries": {"get": "sink_deliveries"},
                "/api/v1/sinks/{sink_id}": {"delete": "sink_remove"},
                "/api/v1/sinks/{sink_id}/enable": {"post": "sink_enable"},
                "/api/v1/sinks/{sink_id}/test": {"post": "sink_test"},
                "/api/v1/teams/{team}/sinks": {"get": "team_sink_list", "post": "team_sink_add"},
                "/api/v1/teams/{team}/sinks/deliveries": {"get": "team_sink_deliveries"},
                "/api/v1/teams/{team}/sinks/{sink_id}": {"delete": "team_sink_remove"},
                "/api/v1/teams/{team}/sinks/{sink_id}/enable": {"post": "team_sink_enable"},
                "/api/v1/teams/{team}/sinks/{sink_id}/test": {"post": "team_sink_test"}}
    for path, methods in expected.items():
        assert {m: op["operationId"] for m, op in paths[path].items()} == methods, path
        for op in paths[path].values():
            assert op["tags"] == ["sinks"] and {"400", "401", "403", "404"} <= set(op["responses"]), path
    add = paths["/api/v1/teams/{team}/sinks"]["post"]
    assert "201" in add["responses"] and add["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SinkRequest"}
    deliveries = {p["name"]: p for p in paths["/api/v1/teams/{team}/sinks/deliveries"]["get"]["parameters"]}
    assert set(deliveries) == {"team", "limit", "sink_id"} and deliveries["limit"]["in"] == "query"
    [param] = [p for p in paths["/api/v1/sinks/{sink_id}"]["delete"]["parameters"] if p["name"] == "sink_id"]
    assert param["description"] == "The notification sink's id."
    schemas = doc["components"]["schemas"]
    assert schemas["SinkRequest"]["properties"]["kind"]["enum"] == list(sink_messages.KINDS)
    assert set(schemas["SinkRequest"]["required"]) == {"kind", "url"}
    assert schemas["SinkRequest"]["additionalProperties"] is False
    assert set(schemas["SinkOwner"]["properties"]) == {"human", "team"}
    assert "sinks" in [t["name"] for t in doc["tags"]]
    page = httpx.get(server.url + "/api/v1/docs", timeout=30).text
    assert "POST /api/v1/teams/{team}/sinks/{sink_id}/test" in page


# ------------------------------------------------------------------------------------- the CLI

def _team(uri: str) -> tuple[str, list[str], list[str], str, str]:
    """A team of three (owner, admin, member), their API tokens, an outsider, and the credential of
    the owner's endpoint on the team queue."""

    async def go():
        async with core_for(uri) as c:
            fleet = await make_fleet(c, members=3, endpoints=1)
            outsider = await humans.add(c, f"out-{uuid.uuid4().hex[:6]}")
            toks = [(await api_tokens.create(c, h))[0] for h in [*fleet.humans, outsider]]
            return fleet.slug, [h.name for h in fleet.humans] + [outsider.name], toks, fleet.label, \
                fleet.credentials[0]

    slug, names, toks, label, credential = run_async(go())
    return slug, names, toks, label, credential


def _dead_letter(uri: str, owner: str, label: str, credential: str) -> None:
    async def go():
        async with core_for(uri) as c:
            agent = endpoints.caller_from_row(await endpoints.resolve_credential(c, credential))
            todo, _ = await producer.push_team(c, await humans.by_name(c, owner), label, title="doomed",
                                               max_attempts=1)
            await todos.claim(c, agent, todo["id"])
            assert (await todos.fail(c, agent, todo["id"], summary="gave up"))["dead_letter"]

    run_async(go())


def _wait_delivered(uri: str, sink_id: str) -> None:
    deadline = time.monotonic() + 15
    with psycopg.connect(uri, autocommit=True) as conn:
        while True:
            states = [r[0] for r in conn.execute("SELECT state FROM sink_outbox WHERE sink_id = %s", (sink_id,))]
            if states and all(s == "delivered" for s in states):
                return
            assert time.monotonic() < deadline, states
            time.sleep(0.05)


def _people(live, config_dirs: Path, *, remote: bool) -> tuple[list[Person], str, str, str]:
    slug, names, toks, label, credential = _team(live[1])
    known = {slug: "<team>", **{n: f"<{role}>" for n, role in zip(names, ("owner", "admin", "member", "outsider"),
                                                                    strict=True)}}
    crew = make_people(live, config_dirs, names, toks, known, remote=remote,
                       env={"SWITCHBOARD_HOOKS_ALLOW_PRIVATE": "1"},
                       patterns=((r'"delivery_id": \d+', '"delivery_id": <n>'),))
    return crew, slug, label, credential


def _script(people: list[Person], team: str, receiver, uri: str, label: str, credential: str) -> dict:  # noqa: F811
    """The sink commands, --team and not, by an owner, an admin and a plain member."""
    owner, admin, member, _ = people
    url = receiver.url(TEAM_PATH)
    sink = owner.ok("sink", "add", "slack", url, "--team", team, "--name", "crew", "--event", "dead_letter")["sink"]
    assert sink["owner"] == {"team": team} and sink["url"] == url
    owner.run("sink", "add", "slack", receiver.url("/text"), "--team", team, "--name", "text", "--event",
              "queue_stuck")  # the text view of an add
    second = admin.ok("sink", "add", "generic", receiver.url("/admin"), "--team", team, "--event", "queue_stuck",
                      "--stuck-minutes", "15", "--digest-hour", "7", "--timezone", "Europe/Berlin")["sink"]
    listed = member.ok("sink", "list", "--team", team)["sinks"]
    assert {s["sink_id"] for s in listed} >= {sink["sink_id"], second["sink_id"]}
    assert "receiver-query-secret" not in json.dumps(listed)
    member.run("sink", "list", "--team", team)
    assert member.ok("sink", "list") == {"sinks": []}  # the team's sinks are not the member's own
    assert member.ok("sink", "deliveries", "--team", team) == {"deliveries": []}
    member.run("sink", "deliveries", "--team", team)

    # A plain member may not change them: refused naming the team.
    member.refused("sink", "add", "slack", url, "--team", team, code="forbidden", argument="team")
    for command in ("remove", "enable", "test"):
        member.refused("sink", command, sink["sink_id"], "--team", team, code="forbidden", argument="team")
    owner.refused("sink", "add", "irc", url, "--team", team, code="invalid", argument="kind")
    owner.refused("sink", "add", "slack", url, "--team", team, "--digest-hour", "24", code="invalid",
                  argument="digest_hour")

    # A dead letter on the team queue: the member reads its message.
    _dead_letter(uri, owner.name, label, credential)
    _wait_delivered(uri, sink["sink_id"])
    [row] = member.ok("sink", "deliveries", "--team", team, "--sink", sink["sink_id"], "--limit", "5")["deliveries"]
    assert (row["event"], row["state"], row["last_status_code"]) == ("dead_letter", "delivered", 200)
    member.run("sink", "deliveries", "--team", team, "--sink", sink["sink_id"])

    sent = len(receiver.got)
    done = owner.run("sink", "test", sink["sink_id"], "--team", team)
    assert done.exit_code == 0 and "delivered (HTTP 200)" in done.stdout, (done.stdout, done.stderr)
    assert len(receiver.got) == sent + 1
    assert admin.ok("sink", "enable", sink["sink_id"], "--team", team)["sink"]["enabled"] is True
    # Without --team the commands name the human's own sinks: a team's is not found there.
    owner.refused("sink", "remove", sink["sink_id"], code="not_found", argument="sink_id")
    assert admin.ok("sink", "remove", second["sink_id"], "--team", team)["removed"]["sink_id"] == second["sink_id"]

    # The owner's own sink, owned by them.
    own = owner.ok("sink", "add", "generic", receiver.url("/own"), "--event", "queue_stuck")["sink"]
    assert [s["sink_id"] for s in owner.ok("sink", "list")["sinks"]] == [own["sink_id"]]
    assert owner.ok("sink", "deliveries", "--sink", own["sink_id"]) == {"deliveries": []}
    return {"team_sink": sink, "own": own}


def _outsider_sees_a_team_that_does_not_exist(outsider: Person, team: str, sink_id: str) -> None:
    for args in (("list",), ("deliveries",), ("add", "slack", "https://hooks.example.com/x"), ("remove", sink_id),
                 ("enable", sink_id), ("test", sink_id)):
        for as_json in (("--json",), ()):
            theirs = outsider.invoke("sink", *args, "--team", team, *as_json)
            nowhere = outsider.invoke("sink", *args, "--team", "no-such-team", *as_json)
            assert theirs.exit_code == nowhere.exit_code == 1, (args, theirs.stdout, theirs.stderr)
            assert (theirs.stdout, theirs.stderr) == (nowhere.stdout, nowhere.stderr), args
            assert "team not found" in theirs.stdout + theirs.stderr


def _owner_id(uri: str, name: str) -> str:
    with psycopg.connect(uri) as conn:
        return str(conn.execute("SELECT id FROM humans WHERE name = %s", (name,)).fetchone()[0])


def test_the_sink_commands_with_team_locally_and_after_login_give_the_same_output(cli_server, config_dirs,
                                                                                  receiver):  # noqa: F811
    srv, uri = cli_server
    local, team_l, label_l, cred_l = _people(cli_server, config_dirs, remote=False)
    far, team_r, label_r, cred_r = _people(cli_server, config_dirs, remote=True)
    made_l = _script(local, team_l, receiver, uri, label_l, cred_l)
    made_r = _script(far, team_r, receiver, uri, label_r, cred_r)
    for near, remote in zip(local, far, strict=True):
        for a, b in zip(near.transcript(), remote.transcript(), strict=True):
            assert a == b, f"\nlocal:  {a}\nremote: {b}"
    # A sink added through the server belongs to the token's human (and locally, to SWITCHBOARD_USER's).
    assert made_r["own"]["owner"] == {"human": _owner_id(uri, far[0].name)}
    assert made_l["own"]["owner"] == {"human": _owner_id(uri, local[0].name)}
    # The remote runs went through the server: their database is unreachable from the CLI.
    assert far[0].env["SWITCHBOARD_DATABASE_URL"] == cli_twins.NOWHERE_DB
    done = far[0].invoke("sink", "list", "--user", far[1].name)
    assert done.exit_code == 2 and "--user" in done.stderr
    for people, team, made in ((local, team_l, made_l), (far, team_r, made_r)):
        _outsider_sees_a_team_that_does_not_exist(people[3], team, made["team_sink"]["sink_id"])
