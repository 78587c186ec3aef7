"""A team's notify hooks (docs/teams.md "Notify hooks"): signed webhooks of the team's todo events.

A hook belongs to one endpoint or to one team. A team's hooks get its todos' events (whichever
member's endpoint claims them), with a body naming the team (`endpoint` null); an endpoint's hooks
never get a team todo's events, and a team's hooks never an endpoint todo's. The team's owners and
admins add, remove and enable them; any member lists them and reads their delivery log; outside the
team everything is the team's not_found, byte for byte the answer for a team that does not exist.

A real server, a real receiver (an HTTP server started here, verifying with the `standardwebhooks`
library), real PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import psycopg
import pytest
from standardwebhooks import Webhook
from typer.testing import CliRunner

from conftest import clean_database, core_for, make_settings, run_async
from core_world import sql
from switchboard.core import api_tokens, hooks, humans, teams, todos
from switchboard.core.errors import Conflict, Forbidden, Invalid, NotFound
from team_world import make_fleet
from test_hooks import api, server  # noqa: F401  (the fixture and the API helper)
from test_sinks import receiver  # noqa: F401  (the fixture)

TEAM_FIELDS = {"type", "reason", "todo_id", "queue", "kind", "source", "title", "endpoint", "team", "attempt",
               "attempts_total", "created_at"}


# The receiver: test_sinks' (an HTTP server in this process recording path, headers and body).
TEAM_PATH = "/team?token=receiver-query-secret"  # the query checks that lists and logs redact it


async def tokens(core, *people) -> list[str]:
    return [(await api_tokens.create(core, p))[0] for p in people]


async def outbox(core) -> list[dict]:
    return await sql(core, "SELECT hook_id::text AS hook_id, event, todo_id, body FROM hook_outbox ORDER BY id")


# ------------------------------------------------------------------------------- deliveries

async def test_a_team_hook_receives_the_team_todos_events_signed_and_naming_the_team(core, server, receiver):  # noqa: F811
    fleet = await make_fleet(core, members=3)
    owner, _, member = await tokens(core, *fleet.humans)
    r = api(server, owner, "POST", f"/api/v1/teams/{fleet.slug}/hooks", json={"url": receiver.url(TEAM_PATH)})
    assert r.status_code == 201, r.text
    secret = r.json()["signing_secret"]
    hook = r.json()["hook"]
    assert secret.startswith("whsec_") and hook["events"] == list(hooks.EVENTS)
    assert hook["team"] == fleet.slug and hook["endpoint"] is None

    agent = fleet.endpoints[2]  # the plain member's agent works both todos
    done = await fleet.push("ship it", kind="deploy", source="operator")
    await todos.claim(core, agent, done["id"])
    await todos.complete(core, agent, done["id"], summary="green")
    dead = await fleet.push("doomed", max_attempts=1)
    await todos.claim(core, agent, dead["id"])
    assert (await todos.fail(core, agent, dead["id"], summary="compiler crashed"))["dead_letter"]

    await receiver.wait(6)
    got = list(receiver.got)
    await asyncio.sleep(0.3)
    assert len(receiver.got) == 6
    bodies = []
    for path, headers, raw in got:
        assert path == TEAM_PATH and headers["webhook-id"].startswith("msg_")
        bodies.append(Webhook(secret).verify(raw, headers))  # raises when the signature is wrong
    assert sorted((b["todo_id"], b["type"]) for b in bodies) == sorted(
        [(done["id"], "todo.created"), (done["id"], "todo.ready"), (done["id"], "todo.completed"),
         (dead["id"], "todo.created"), (dead["id"], "todo.ready"), (dead["id"], "todo.dead_lettered")])
    for b in bodies:
        assert b["endpoint"] is None and b["team"] == fleet.slug and b["queue"] == fleet.label
    ready = next(b for b in bodies if b["type"] == "todo.ready" and b["todo_id"] == done["id"])
    assert set(ready) == TEAM_FIELDS
    assert ready | {"created_at": None} == {
        "type": "todo.ready", "reason": "created", "todo_id": done["id"], "queue": fleet.label, "kind": "deploy",
        "source": "operator", "title": "ship it", "endpoint": None, "team": fleet.slug, "attempt": 0,
        "attempts_total": 0, "created_at": None}
    completed = next(b for b in bodies if b["type"] == "todo.completed")
    assert (completed["attempt"], completed["attempts_total"]) == (1, 1)
    died = next(b for b in bodies if b["type"] == "todo.dead_lettered")
    assert died["reason"] == "failed" and died["team"] == fleet.slug
    assert died["final_attempt"] == {"seq": 1, "outcome": "failed", "died": False, "summary": "compiler crashed",
                                     "summary_truncated": False, "artifact": None, "attempts_total": 1}

    # Any member reads the delivery log and the list; never a secret nor the URL's query.
    deadline = time.monotonic() + 15
    while True:
        log = api(server, member, "GET", f"/api/v1/teams/{fleet.slug}/hooks/deliveries")
        assert log.status_code == 200, log.text
        rows = log.json()["deliveries"]
        if len(rows) == 6 and all(d["state"] == "delivered" for d in rows):
            break
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)
    assert all(d["team"] == fleet.slug and d["endpoint"] is None and d["hook_id"] == hook["hook_id"] for d in rows)
    assert rows[0]["attempt_log"][0]["status_code"] == 200 and "receiver-query-secret" not in log.text
    listed = api(server, member, "GET", f"/api/v1/teams/{fleet.slug}/hooks")
    assert listed.status_code == 200 and "whsec_" not in listed.text
    [one] = listed.json()["hooks"]
    assert one["hook_id"] == hook["hook_id"] and one["last_status"] == "200" and one["url"].endswith("?redacted")


async def test_endpoint_hooks_and_team_hooks_each_get_their_own_todos_only(core, server, receiver):  # noqa: F811
    fleet = await make_fleet(core, members=3)
    other = await make_fleet(core, members=2)
    _, team_secret = await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url=receiver.url(TEAM_PATH),
                                              events=["todo.created"])
    await hooks.add_for_team(core, other.humans[0], other.slug, url=receiver.url("/other-team"),
                             events=["todo.created"])
    # The plain member's endpoint has a hook of its own; that endpoint also drains the team queue.
    ep_hook, ep_secret = await hooks.add(core, fleet.humans[2], fleet.ep_slugs[2], url=receiver.url("/endpoint"),
                                         events=["todo.created"])
    assert ep_hook["endpoint"] == fleet.ep_slugs[2] and "team" not in ep_hook

    team_todo = await fleet.push("for the team")
    own, _ = await todos.create(core, endpoint_id=fleet.endpoints[2].endpoint_id, queue="own", title="for me")
    await receiver.wait(2)
    got = list(receiver.got)
    await asyncio.sleep(0.5)
    assert len(receiver.got) == 2, receiver.got
    by_path = {path: (headers, raw) for path, headers, raw in got}
    assert set(by_path) == {TEAM_PATH, "/endpoint"}
    team_body = Webhook(team_secret).verify(by_path[TEAM_PATH][1], by_path[TEAM_PATH][0])
    assert team_body["todo_id"] == team_todo["id"] and team_body["team"] == fleet.slug
    own_body = Webhook(ep_secret).verify(by_path["/endpoint"][1], by_path["/endpoint"][0])
    # An endpoint todo's body is what it was before team hooks: the endpoint named, no `team` key.
    assert own_body["todo_id"] == own["id"] and own_body["endpoint"] == fleet.ep_slugs[2] and "team" not in own_body


async def test_what_a_team_todo_queues_and_for_which_hooks(core):
    fleet = await make_fleet(core, members=2)
    other = await make_fleet(core, members=2)
    ready, _ = await hooks.add_for_team(core, fleet.humans[1], fleet.slug, url="https://hooks.example.com/ready",
                                        events=["todo.ready"])
    off, _ = await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url="https://hooks.example.com/off")
    await sql(core, "UPDATE notify_hooks SET enabled = false WHERE id = %s", (off["hook_id"],))
    await hooks.add_for_team(core, other.humans[0], other.slug, url="https://hooks.example.com/other")
    t = await fleet.push("one")
    await todos.claim(core, fleet.endpoints[1], t["id"])
    await todos.release(core, fleet.endpoints[1], t["id"])
    rows = await outbox(core)
    assert [(r["hook_id"], r["event"], r["body"]["reason"]) for r in rows] == [
        (ready["hook_id"], "todo.ready", "created"), (ready["hook_id"], "todo.ready", "released")]

    # Enabled again, the hook gets events from now on; with its team, its hooks go.
    back = await hooks.enable_for_team(core, fleet.humans[1], fleet.slug, off["hook_id"])
    assert back["enabled"] is True
    await fleet.push("two")
    assert [r["event"] for r in await outbox(core) if r["hook_id"] == off["hook_id"]] == [
        "todo.created", "todo.ready"]
    await teams.delete(core, fleet.humans[0], fleet.slug)
    assert [r["team"] for r in await sql(core, "SELECT team_id::text AS team FROM notify_hooks")] == [
        str((await teams.membership(core, other.humans[0], other.slug))["id"])]


async def test_a_hook_belongs_to_exactly_one_endpoint_or_team(core):
    fleet = await make_fleet(core, members=1)
    team_id = (await teams.membership(core, fleet.humans[0], fleet.slug))["id"]
    both = ("INSERT INTO notify_hooks (endpoint_id, endpoint_slug, team_id, team_slug, url, events, secret) "
            "VALUES (%s, %s, %s, %s, 'https://x.example.com', ARRAY['todo.created'], 'whsec_x')")
    with pytest.raises(psycopg.errors.CheckViolation):
        await sql(core, both, (fleet.endpoints[0].endpoint_id, fleet.ep_slugs[0], team_id, fleet.slug))
    with pytest.raises(psycopg.errors.CheckViolation):
        await sql(core, both, (None, None, None, None))
    with pytest.raises(psycopg.errors.CheckViolation):
        await sql(core, both, (None, None, team_id, None))


# ----------------------------------------------------------------------- who manages them

async def test_owners_and_admins_manage_a_teams_hooks_members_read_them_outsiders_see_nothing(core, server):  # noqa: F811
    fleet = await make_fleet(core, members=3)
    outsider = await humans.add(core, f"out-{uuid.uuid4().hex[:6]}")
    owner, admin, member, stranger = await tokens(core, *fleet.humans, outsider)
    base = f"/api/v1/teams/{fleet.slug}/hooks"

    refused = api(server, member, "POST", base, json={"url": "https://member.example.com/in"})
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden" and refused.json()["error"]["argument"] == "team"
    added = api(server, admin, "POST", base, json={"url": "https://admin.example.com/in", "events": ["todo.ready"]})
    assert added.status_code == 201, added.text
    hook_id = added.json()["hook"]["hook_id"]
    bad = api(server, admin, "POST", base, json={"url": "ftp://x.example.com"})
    assert bad.status_code == 400 and bad.json()["error"]["argument"] == "url"
    bad = api(server, admin, "POST", base, json={"url": "https://x.example.com", "events": ["todo.exploded"]})
    assert bad.status_code == 400 and bad.json()["error"]["argument"] == "events"
    assert added.json()["hook"]["events"] == ["todo.ready"]
    assert [h["hook_id"] for h in api(server, member, "GET", base).json()["hooks"]] == [hook_id]
    assert api(server, member, "GET", f"{base}/deliveries").json() == {"deliveries": []}
    for method, path in (("DELETE", f"{base}/{hook_id}"), ("POST", f"{base}/{hook_id}/enable")):
        r = api(server, member, method, path)
        assert r.status_code == 403 and r.json()["error"]["argument"] == "team", r.text

    # Outside the team: every route answers what it answers for a team that does not exist.
    for method, suffix, body in (("GET", "", None), ("POST", "", {"url": "https://x.example.com"}),
                                 ("GET", "/deliveries", None), ("DELETE", f"/{hook_id}", None),
                                 ("POST", f"/{hook_id}/enable", None), ("DELETE", "/not-a-uuid", None)):
        foreign = api(server, stranger, method, f"{base}{suffix}", json=body)
        unknown = api(server, stranger, method, f"/api/v1/teams/no-such-team/hooks{suffix}", json=body)
        assert foreign.status_code == unknown.status_code == 404, (method, suffix, foreign.text)
        assert foreign.content == unknown.content
        assert foreign.json()["error"]["argument"] == "team"
    with pytest.raises(NotFound) as outside:
        await hooks.list_for_team(core, outsider, fleet.slug)
    assert outside.value.argument == "team"

    # An endpoint's hook is not the team's to remove, nor another team's hook.
    ep_hook, _ = await hooks.add(core, fleet.humans[0], fleet.ep_slugs[0], url="https://own.example.com/in")
    assert api(server, owner, "DELETE", f"{base}/{ep_hook['hook_id']}").status_code == 404
    assert api(server, owner, "DELETE", f"/api/v1/endpoints/{fleet.ep_slugs[0]}/hooks/{hook_id}").status_code == 404

    # The ceiling holds per team.
    for n in range(hooks.MAX_PER_ENDPOINT - 1):
        assert api(server, owner, "POST", base, json={"url": f"https://h{n}.example.com/in"}).status_code == 201
    over = api(server, owner, "POST", base, json={"url": "https://one-too-many.example.com"})
    assert over.status_code == 409 and "a team has at most" in over.json()["error"]["message"]
    # A disabled hook is enabled again by an admin; the owner removes it, once.
    await sql(core, "UPDATE notify_hooks SET enabled = false, disabled_reason = 'consecutive_failures', "
                    "consecutive_failures = 10 WHERE id = %s", (hook_id,))
    r = api(server, admin, "POST", f"{base}/{hook_id}/enable")
    assert r.status_code == 200 and r.json()["hook"]["enabled"] is True
    assert r.json()["hook"]["consecutive_failures"] == 0 and r.json()["hook"]["disabled_reason"] is None
    assert api(server, owner, "DELETE", f"{base}/{hook_id}").json()["removed"]["hook_id"] == hook_id
    assert api(server, owner, "DELETE", f"{base}/{hook_id}").status_code == 404
    assert len(api(server, member, "GET", base).json()["hooks"]) == hooks.MAX_PER_ENDPOINT - 1


async def test_concurrent_team_adds_at_the_ceiling_admit_exactly_one(core):
    fleet = await make_fleet(core, members=2)
    for n in range(hooks.MAX_PER_ENDPOINT - 1):
        await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url=f"https://h{n}.example.com")
    results = await asyncio.gather(*[hooks.add_for_team(core, fleet.humans[n % 2], fleet.slug,
                                                        url=f"https://race{n}.example.com") for n in range(6)],
                                   return_exceptions=True)
    assert sum(1 for r in results if not isinstance(r, Exception)) == 1
    assert all(isinstance(r, Conflict) for r in results if isinstance(r, Exception))


async def test_a_team_hooks_target_is_checked_as_an_endpoints_is(own_core, server):  # noqa: F811
    core = own_core
    core.settings = make_settings(core.uri, hooks_allow_private=False)
    fleet = await make_fleet(core, members=3)
    for url in ("https://10.0.0.5/in", "https://127.0.0.1/in", "https://[::1]/in", "https://169.254.169.254/x",
                "https://100.64.1.1/in", "https://localhost/in", "https://[::ffff:10.0.0.1]/in", "https://2130706433/",
                "http://hooks.example.com/in", "https://user:pw@hooks.example.com/in", "ftp://hooks.example.com/in",
                "https:///nohost", "https://hooks.example.com/in\r\nx: y"):
        with pytest.raises(Invalid) as as_endpoint:
            await hooks.add(core, fleet.humans[0], fleet.ep_slugs[0], url=url)
        with pytest.raises(Invalid) as as_team:
            await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url=url)
        assert (as_team.value.message, as_team.value.argument) == (as_endpoint.value.message, "url"), url
    with pytest.raises(Invalid) as bad_event:
        await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url="https://x.example.com", events=["todo.boom"])
    assert bad_event.value.argument == "events"
    # A plain member is refused before the URL is looked at; an outsider gets the team's not_found.
    with pytest.raises(Forbidden):
        await hooks.add_for_team(core, fleet.humans[2], fleet.slug, url="https://10.0.0.5/in")
    assert await hooks.list_for_team(core, fleet.humans[2], fleet.slug) == []
    hook, _ = await hooks.add_for_team(core, fleet.humans[1], fleet.slug, url="https://hooks.example.com/in")
    assert hook["url"] == "https://hooks.example.com/in"



# ------------------------------------------------------------------------------- CLI and OpenAPI

def test_cli_team_hooks(pg_uri):
    from switchboard.cli import app

    clean_database(pg_uri)

    async def setup():
        async with core_for(pg_uri) as c:
            fleet = await make_fleet(c, members=3)
            outsider = await humans.add(c, f"out-{uuid.uuid4().hex[:6]}")
            return fleet.slug, fleet.ep_slugs[0], [h.name for h in fleet.humans], outsider.name

    team, ep_slug, (owner, admin, member), outsider = run_async(setup())
    runner = CliRunner()
    env = {"SWITCHBOARD_DATABASE_URL": pg_uri, "SWITCHBOARD_HOOKS_ALLOW_PRIVATE": "0"}

    def cli(*args: str):
        return runner.invoke(app, list(args), env=env)

    r = cli("hook", "add", "--team", team, "--url", "https://hooks.example.com/in?k=v", "--event", "todo.ready",
            "--event", "todo.dead_lettered", "--user", admin, "--json")
    assert r.exit_code == 0, r.output
    added = json.loads(r.stdout)
    hook_id = added["hook"]["hook_id"]
    assert added["signing_secret"].startswith("whsec_") and added["hook"]["team"] == team
    assert added["hook"]["endpoint"] is None and added["hook"]["events"] == ["todo.ready", "todo.dead_lettered"]
    r = cli("hook", "add", "--team", team, "--url", "https://x.example.com", "--user", admin)
    assert r.exit_code == 0 and f"on team {team}" in r.stdout

    r = cli("hook", "list", "--team", team, "--user", member, "--json")
    assert r.exit_code == 0, r.output
    assert hook_id in [h["hook_id"] for h in json.loads(r.stdout)["hooks"]] and "whsec_" not in r.stdout
    r = cli("hook", "deliveries", "--team", team, "--user", member, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"deliveries": []}

    # A plain member may not add, remove or enable; refused naming the team.
    for args in (("add", "--team", team, "--url", "https://m.example.com"), ("remove", hook_id, "--team", team),
                 ("enable", hook_id, "--team", team)):
        r = cli("hook", *args, "--user", member, "--json")
        assert r.exit_code == 1 and json.loads(r.stdout)["error"] == {
            "code": "forbidden", "message": json.loads(r.stdout)["error"]["message"], "argument": "team"}, r.output

    # An outsider gets what a team that does not exist gets, byte for byte.
    for args in (("list", "--team", "{t}"), ("deliveries", "--team", "{t}"),
                 ("add", "--team", "{t}", "--url", "https://x.example.com"),
                 ("remove", hook_id, "--team", "{t}"), ("enable", hook_id, "--team", "{t}")):
        for as_json in (("--json",), ()):
            foreign = cli("hook", *[a.format(t=team) for a in args], "--user", outsider, *as_json)
            unknown = cli("hook", *[a.format(t="no-such-team") for a in args], "--user", outsider, *as_json)
            assert foreign.exit_code == unknown.exit_code == 1, foreign.output
            assert foreign.output == unknown.output and "team not found" in foreign.output

    # A private target is refused as for an endpoint's hook.
    private = cli("hook", "add", "--team", team, "--url", "https://10.1.2.3/", "--user", owner, "--json")
    same = cli("hook", "add", ep_slug, "--url", "https://10.1.2.3/", "--user", owner, "--json")
    assert private.exit_code == same.exit_code == 1 and private.stdout == same.stdout

    # The endpoint or --team, exactly one.
    for args in (("add", "--url", "https://x.example.com"), ("add", ep_slug, "--team", team, "--url", "https://x.e.com"),
                 ("list",), ("list", ep_slug, "--team", team), ("deliveries",)):
        r = cli("hook", *args, "--user", owner, "--json")
        assert r.exit_code == 2 and json.loads(r.stdout)["error"]["code"] == "usage", r.output
        assert "--team" in json.loads(r.stdout)["error"]["message"]

    r = cli("hook", "enable", hook_id, "--team", team, "--user", owner, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["hook"]["hook_id"] == hook_id
    r = cli("hook", "remove", hook_id, "--team", team, "--user", owner, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["removed"]["hook_id"] == hook_id
    # Without --team, remove names a hook of one of your endpoints: a team's hook is not found there.
    r = cli("hook", "list", "--team", team, "--user", owner, "--json")
    other = json.loads(r.stdout)["hooks"][0]["hook_id"]
    assert cli("hook", "remove", other, "--user", owner).exit_code == 1


def test_the_openapi_document_lists_the_team_hook_routes(server):  # noqa: F811
    doc = httpx.get(server.url + "/api/v1/openapi.json", timeout=30).json()
    paths = doc["paths"]
    assert {"post", "get"} <= set(paths["/api/v1/teams/{team}/hooks"])
    assert "get" in paths["/api/v1/teams/{team}/hooks/deliveries"]
    assert "delete" in paths["/api/v1/teams/{team}/hooks/{hook_id}"]
    assert "post" in paths["/api/v1/teams/{team}/hooks/{hook_id}/enable"]
    add = paths["/api/v1/teams/{team}/hooks"]["post"]
    assert add["operationId"] == "team_hook_add" and "201" in add["responses"] and "403" in add["responses"]
    hook = doc["components"]["schemas"]["Hook"]["properties"]
    assert "team" in hook
