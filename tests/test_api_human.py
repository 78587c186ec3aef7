"""The whole human API over real HTTP: CLI parity for endpoints, todos, hooks, settings and tokens;
token scopes and expiry; auth failures on every route as documented; foreign ids byte-identical to
unknown ones on every id route; bad input on every route refused naming the field with nothing
changed; the Idempotency-Key header; per-token rate limits; a stalled database as 503; a client that
leaves mid-body logged as 499; the OpenAPI document and the reference page."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import time
from datetime import UTC, datetime

import httpx
import psycopg
import pytest

from conftest import make_settings, start_thread_server, terminate_lock_waiter
from mcp_support import push, vend
from switchboard.core import api_tokens, endpoints, hooks, intakes, sinks, teams, todos
from switchboard.web.api import OPERATIONS
from switchboard.web.api.models import ACTION_MODELS

TABLES = ("humans", "human_tokens", "agents", "endpoints", "todos", "todo_attempts", "settings",
          "notify_hooks", "hook_outbox", "notification_sinks", "sink_outbox", "intakes", "intake_quarantine",
          "intake_seen")
UNKNOWN = {"slug": "nosuchslug00", "id": "td_00000000-0000-0000-0000-000000000000",
           "hook_id": "00000000-0000-0000-0000-000000000000", "ref": "00000000-0000-0000-0000-000000000000",
           "key": "retention_max_age_days", "team": "nosuchteam00", "human": "nosuchhuman00",
           "scope": "endpoint:nosuchslug00", "queue": "build", "sink_id": "00000000-0000-0000-0000-000000000000",
           "intake": "00000000-0000-0000-0000-000000000000", "item": "999999999"}
# A body each operation accepts, so a refusal is about the object and not the body.
GOOD_BODIES = {"todo_push": {"title": "t", "queue": "build"}, "todo_input": {"payload": 1},
               "todo_push_batch": {"todos": [{"title": "t", "queue": "build"}]},
               "hook_add": {"url": "http://127.0.0.1:9/h"}, "team_hook_add": {"url": "http://127.0.0.1:9/h"},
               "sink_add": {"kind": "slack", "url": "http://127.0.0.1:9/s"},
               "team_sink_add": {"kind": "slack", "url": "http://127.0.0.1:9/s"},
               "intake_create": {"name": "in", "endpoint": "nosuchslug00", "source": "github"},
               "intake_rules_set": {"rules": [{"title": "'t'"}]},
               "endpoint_vend": {"agent": "a"},
               "settings_set": {"value": 40}, "team_create": {"slug": "crew"}, "team_member_add": {"human": "bob"},
               "team_member_role": {"role": "member"}, "team_grant": {"queue": "build", "endpoint": "nosuchslug00"},
               "team_ungrant": {"queue": "build", "endpoint": "nosuchslug00"},
               "team_todo_push": {"title": "t", "queue": "build"},
               "team_todo_push_batch": {"todos": [{"title": "t", "queue": "build"}]}}


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, db_lock_timeout_seconds=0.5, db_statement_timeout_seconds=2,
                                            api_rate_limit_per_minute=100_000, api_rate_limit_burst=10_000))
    yield srv
    srv.stop()


class Api:
    def __init__(self, base: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base, headers=headers, timeout=30)

    def call(self, method: str, path: str, body=None, **kw) -> httpx.Response:
        if body is not None:
            kw["json"] = body
        return self.http.request(method, path if path.startswith("/api") else "/api/v1" + path, **kw)

    def get(self, path: str, **kw) -> httpx.Response:
        return self.call("GET", path, **kw)

    def post(self, path: str, body=None, **kw) -> httpx.Response:
        return self.call("POST", path, body, **kw)


async def sql(core, query: str, params: dict | None = None) -> list[dict]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, params or {})
        return await cur.fetchall() if cur.description else []


async def fingerprint(core) -> list:
    parts = " UNION ALL ".join(
        f"SELECT '{t}' AS t, count(*) AS n, md5(coalesce(string_agg(to_jsonb(x)::text, ',' "
        f"ORDER BY to_jsonb(x)::text), '')) AS h FROM {t} x" for t in TABLES)
    return [tuple(r.values()) for r in await sql(core, parts)]


async def world(core, base: str):
    """alice (the first human: the admin) with a write and a read token and two endpoints; bob with
    his own endpoint, todo, hook, sink, token, team (with a sink of its own) and intake (with a
    quarantined delivery)."""
    agent = await vend(core, "alice", queues=["build", "deploy"])
    write, _ = await api_tokens.create(core, agent.human, scope_name="write")
    read, _ = await api_tokens.create(core, agent.human, scope_name="read")
    other = await vend(core, "bob", queues=["build"])
    bobs_todo = await push(core, other, queue="build")
    bobs_hook, _ = await hooks.add(core, other.human, other.slug, url="http://127.0.0.1:9/h")
    _, bobs_token = await api_tokens.create(core, other.human)
    bobs_team = await teams.create(core, other.human, "bobs-team")
    bobs_sink = await sinks.add(core, other.human, kind="slack", url="http://127.0.0.1:9/s")
    await sinks.add_for_team(core, other.human, bobs_team["slug"], kind="slack", url="http://127.0.0.1:9/t")
    bobs_intake, intake_token, _ = await intakes.create(core, other.human, name="bobs-intake", endpoint=other.slug,
                                                        source="github", rules=[])
    held = await intakes.deliver(core, await intakes.by_token(core, intake_token),
                                 {"event": "push", "delivery": "d-1", "headers": {}, "body": {}})
    foreign = {"slug": other.slug, "id": bobs_todo["id"], "hook_id": bobs_hook["hook_id"], "ref": bobs_token["id"],
               "team": bobs_team["slug"], "human": "bob", "scope": f"endpoint:{other.slug}", "queue": "build",
               "sink_id": bobs_sink["sink_id"], "intake": bobs_intake["intake_id"], "item": str(held["item_id"])}
    return agent, Api(base, write), Api(base, read), other, foreign


def served_by_the_table(server, op, path: str) -> bool:
    """Whether the operation table's own handler answers this path (and not a route of another module
    registered before it)."""
    from starlette.routing import Match

    scope = {"type": "http", "path": path, "method": op.method, "root_path": ""}
    for route in server.app.router.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return route.name == op.name
    return False


def concrete(path: str, values: dict) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


# ------------------------------------------------------------------------------------------ parity

async def test_endpoints_vend_list_show_revoke_with_expiry(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    r = api.post("/endpoints", {"agent": "builder", "queues": ["ci"], "verbs": ["claim_next", "complete"],
                                "lease_ttl": 120, "expires_in_seconds": 3600})
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
    vended = r.json()
    assert set(vended) == {"endpoint_id", "slug", "agent", "queues", "verbs", "mcp_url", "credential", "expires_at"}
    assert vended["mcp_url"] == f"{server.settings.public_base_url}/mcp/{vended['slug']}"
    assert (vended["agent"], vended["queues"], vended["verbs"]) == ("builder", ["ci"], ["claim_next", "complete"])
    left = datetime.fromisoformat(vended["expires_at"].replace("Z", "+00:00")) - datetime.now(UTC)
    assert 3500 < left.total_seconds() <= 3600
    assert (await endpoints.resolve_credential(core, vended["credential"]))["slug"] == vended["slug"]

    before = await fingerprint(core)
    for body, argument in (({"agent": "a", "queues": ["bad queue"]}, "queues"),
                           ({"agent": "a", "verbs": ["fly"]}, "verbs"),
                           ({"agent": ""}, "agent"), ({"agent": "a", "lease_ttl": 59}, "lease_ttl"),
                           ({"agent": "a\x07"}, "agent"),
                           ({"agent": "a", "expires_in_seconds": 1}, "expires_in_seconds")):
        r = api.post("/endpoints", body)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, (body, r.text)
    assert await fingerprint(core) == before

    listed = api.get("/endpoints").json()["endpoints"]
    assert {e["slug"] for e in listed} == {agent.slug, vended["slug"]}
    assert all("credential" not in e and e["mcp_url"].endswith(e["slug"]) for e in listed)
    shown = api.get(f"/endpoints/{vended['slug']}").json()["endpoint"]
    assert shown["default_lease_ttl_seconds"] == 120 and shown["state"] == "active"

    r = api.call("PATCH", f"/endpoints/{vended['slug']}",
                 {"expires_in_seconds": None, "default_lease_ttl_seconds": 600})
    assert r.status_code == 200
    assert (r.json()["endpoint"]["expires_at"], r.json()["endpoint"]["default_lease_ttl_seconds"]) == (None, 600)
    r = api.call("PATCH", f"/endpoints/{vended['slug']}", {"expires_in_seconds": 120})
    assert r.json()["endpoint"]["expires_at"] and r.json()["endpoint"]["default_lease_ttl_seconds"] == 600
    before = await fingerprint(core)
    for body, argument in (({"expires_in_seconds": 59}, "expires_in_seconds"), ({"default_lease_ttl_seconds": 5},
                           "default_lease_ttl_seconds"), ({"state": "active"}, "state")):
        r = api.call("PATCH", f"/endpoints/{vended['slug']}", body)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, body
    assert await fingerprint(core) == before

    t = await push(core, agent, queue="build")
    r = api.post(f"/endpoints/{agent.slug}/revoke")
    assert r.status_code == 200 and r.json()["state"] == "revoked" and r.json()["dead_lettered"] == 1
    assert (await todos.get(core, agent.human, t["id"]))["dead_letter"] is True
    assert await endpoints.resolve_credential(core, agent.credential) is None
    assert api.post(f"/endpoints/{agent.slug}/revoke").json()["dead_lettered"] == 0
    r = api.post(f"/endpoints/{agent.slug}/todos", {"title": "t", "queue": "build"})
    assert r.status_code == 400 and r.json()["error"]["argument"] == "endpoint"
    r = api.call("PATCH", f"/endpoints/{agent.slug}", {"expires_in_seconds": None})
    assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"


async def test_todos_list_filters_and_pages_by_offset_and_show_has_attempts(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    spare = await vend(core, "alice", agent="spare", queues=["inbox"])
    made = [await push(core, agent, f"t{n}", queue="build") for n in range(5)]
    await push(core, spare, "elsewhere")
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))
    await todos.claim(core, caller, made[0]["id"], claimant="w1")
    await todos.fail(core, caller, made[0]["id"], summary="broke", retry=False)

    everything = api.get("/todos").json()
    assert len(everything["todos"]) == 6 and everything["next_offset"] is None
    page1 = api.get(f"/endpoints/{agent.slug}/todos", params={"limit": 2}).json()
    page2 = api.get(f"/endpoints/{agent.slug}/todos", params={"limit": 2, "offset": page1["next_offset"]}).json()
    page3 = api.get(f"/endpoints/{agent.slug}/todos", params={"limit": 2, "offset": page2["next_offset"]}).json()
    ids = [t["id"] for p in (page1, page2, page3) for t in p["todos"]]
    assert ids == [t["id"] for t in reversed(made)] and page3["next_offset"] is None
    assert [t["id"] for t in api.get("/todos", params={"endpoint": spare.slug}).json()["todos"]] != []
    dead = api.get("/todos", params={"dead_letter": "true"}).json()["todos"]
    assert [t["id"] for t in dead] == [made[0]["id"]]
    assert len(api.get("/todos", params={"state": "pending", "queue": "build"}).json()["todos"]) == 4

    view = api.get(f"/todos/{made[0]['id']}").json()["todo"]
    assert view["attempts_total"] == 1 and view["attempts"][0]["summary"] == "broke"
    assert view["attempts"][0]["claimant"] == "w1" and view["endpoint"] == agent.slug
    # The CLI's `todo show --json` prints the same object.
    assert view == json.loads(json.dumps(await todos.get(core, agent.human, made[0]["id"])))

    for params, argument in (({"state": "nope"}, "state"), ({"limit": "x"}, "limit"), ({"offset": "-1"}, "offset"),
                             ({"dead_letter": "maybe"}, "dead_letter"), ({"sort": "up"}, "sort"),
                             ({"queue": "bad queue"}, "queue")):
        r = api.get("/todos", params=params)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, params


async def test_idempotency_key_header_is_the_todo_key(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    path = f"/endpoints/{agent.slug}/todos"
    first = api.post(path, {"title": "deploy", "queue": "deploy"}, headers={"Idempotency-Key": "rel-42"})
    assert first.status_code == 201
    again = api.post(path, {"title": "deploy", "queue": "deploy"}, headers={"Idempotency-Key": "rel-42"})
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["todo"]["id"] == first.json()["todo"]["id"]
    same = api.post(path, {"title": "deploy", "queue": "deploy", "key": "rel-42"},
                    headers={"Idempotency-Key": "rel-42"})
    assert same.status_code == 200 and same.json()["todo"]["id"] == first.json()["todo"]["id"]
    before = await fingerprint(core)
    for headers, body in (({"Idempotency-Key": "rel-43"}, {"title": "x", "queue": "deploy", "key": "other"}),
                          ({"Idempotency-Key": "x" * 201}, {"title": "x", "queue": "deploy"}),
                          ({"Idempotency-Key": ""}, {"title": "x", "queue": "deploy"})):
        r = api.post(path, body, headers=headers)
        assert r.status_code == 400 and r.json()["error"]["argument"] == "Idempotency-Key", headers
    assert await fingerprint(core) == before


async def test_hooks_add_list_deliveries_enable_remove(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    r = api.post(f"/endpoints/{agent.slug}/hooks", {"url": "http://127.0.0.1:9/in?token=s", "events": ["todo.created"]})
    assert r.status_code == 201 and r.json()["signing_secret"].startswith("whsec_")
    hook = r.json()["hook"]
    listed = api.get(f"/endpoints/{agent.slug}/hooks").json()["hooks"]
    assert [h["hook_id"] for h in listed] == [hook["hook_id"]] and listed[0]["url"].endswith("?redacted")
    await push(core, agent, queue="build")
    deliveries = api.get(f"/endpoints/{agent.slug}/hooks/deliveries", params={"limit": 5}).json()["deliveries"]
    assert [d["event"] for d in deliveries] == ["todo.created"]
    if any(op.name == "hook_enable" for op in OPERATIONS):
        assert api.post(f"/endpoints/{agent.slug}/hooks/{hook['hook_id']}/enable").json()["hook"]["enabled"] is True
    r = api.call("DELETE", f"/endpoints/{agent.slug}/hooks/{hook['hook_id']}")
    assert r.status_code == 200 and r.json()["removed"]["hook_id"] == hook["hook_id"], r.text
    assert api.get(f"/endpoints/{agent.slug}/hooks").json()["hooks"] == []
    assert api.call("DELETE", f"/endpoints/{agent.slug}/hooks/{hook['hook_id']}").status_code == 404


async def test_settings_are_for_admins(core, server):
    agent, api, read_api, other, _ = await world(core, server.url)
    assert api.get("/me").json()["admin"] is True  # alice was the first human
    assert api.get("/settings").json()["retention_max_age_days"] == 30
    r = api.call("PUT", "/settings/retention_max_age_days", {"value": 12})
    assert r.status_code == 200 and r.json() == {"retention_max_age_days": 12}
    assert read_api.get("/settings/retention_max_age_days").json() == {"retention_max_age_days": 12}
    assert read_api.call("PUT", "/settings/retention_max_age_days", {"value": 13}).status_code == 403
    bob_token, _ = await api_tokens.create(core, other.human)
    bob = Api(server.url, bob_token)
    assert bob.get("/me").json()["admin"] is False
    for method, path, body in (("GET", "/settings", None), ("GET", "/settings/retention_max_age_days", None),
                               ("PUT", "/settings/retention_max_age_days", {"value": 14})):
        r = bob.call(method, path, body)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", path
    before = await fingerprint(core)
    for body, argument in (({"value": 0}, "value"), ({"value": "12"}, "value"), ({}, "value"), ({"v": 1}, "v")):
        r = api.call("PUT", "/settings/retention_max_age_days", body)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, body
    assert api.call("PUT", "/settings/nosuch", {"value": 1}).status_code == 404
    assert await fingerprint(core) == before
    assert bob.post("/sweeps").status_code == 403 and read_api.post("/sweeps").status_code == 403
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))
    t = await push(core, agent, queue="build")
    await todos.claim(core, caller, t["id"], lease_ttl_seconds=1)
    await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 second' WHERE id = %(id)s",
              {"id": t["id"]})
    r = api.post("/sweeps")
    assert r.status_code == 200 and r.json()["reaped"] == 1
    await api_tokens.set_admin(core, other.human, True)
    assert bob.get("/settings").status_code == 200


async def test_tokens_scopes_expiry_and_revocation(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    r = api.post("/tokens", {"scope": "read", "expires_in_seconds": 600})
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
    made = r.json()
    assert set(made) == {"token", "id", "prefix", "user", "scope", "expires_at"}
    assert made["scope"] == "read" and made["user"] == "alice" and made["token"].startswith(made["prefix"])
    reader = Api(server.url, made["token"])
    assert reader.get("/endpoints").status_code == 200
    assert reader.get("/me").json()["token"]["scope"] == "read"
    t = await push(core, agent, queue="build")
    before = await fingerprint(core)
    for method, path, body in (("POST", f"/endpoints/{agent.slug}/todos", {"title": "t", "queue": "build"}),
                               ("POST", f"/todos/{t['id']}/cancel", None), ("POST", "/tokens", {}),
                               ("POST", f"/endpoints/{agent.slug}/revoke", None)):
        r = reader.call(method, path, body)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", path
    assert await fingerprint(core) == before

    listed = api.get("/tokens").json()["tokens"]
    mine = next(x for x in listed if x["id"] == made["id"])
    assert mine["scope"] == "read" and mine["expires_at"] == made["expires_at"] and mine["revoked_at"] is None
    assert all("token" not in x for x in listed)
    # Past its expiry a token is refused like an unknown one.
    await sql(core, "UPDATE human_tokens SET expires_at = now() - interval '1 second' WHERE id = %(id)s",
              {"id": made["id"]})
    assert reader.get("/endpoints").status_code == 401
    r = api.post(f"/tokens/{made['prefix']}/revoke")
    assert r.status_code == 200 and r.json()["revoked"] is True and r.json()["token"]["revoked_at"]
    assert api.post(f"/tokens/{made['id']}/revoke").json()["revoked"] is False
    # Revoking its own token: refused from the next request on.
    me = api.get("/me").json()["token"]
    assert api.post(f"/tokens/{me['id']}/revoke").status_code == 200
    assert api.get("/me").status_code == 401
    # The CLI's `token create` tokens are write tokens, and old ones keep working.
    old, _ = await api_tokens.create(core, agent.human)
    assert Api(server.url, old).get("/me").json()["token"]["scope"] == "write"
    for body, argument in (({"scope": "admin"}, "scope"), ({"expires_in_seconds": 5}, "expires_in_seconds"),
                           ({"expires_in_seconds": "600"}, "expires_in_seconds"), ({"name": "x"}, "name")):
        r = Api(server.url, old).post("/tokens", body)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, body


# --------------------------------------------------------------------------- auth on every route

async def test_every_route_needs_a_token_and_writes_need_a_write_token(core, server):
    agent, api, read_api, _, _ = await world(core, server.url)
    values = dict(UNKNOWN, slug=agent.slug)
    nobody, wrong = Api(server.url, None), Api(server.url, agent.credential)
    before = await fingerprint(core)
    for op in OPERATIONS:
        path = concrete(op.path, values)
        body = GOOD_BODIES.get(op.name, {} if op.body else None)
        for client in (nobody, wrong):
            r = client.call(op.method, path, body)
            assert r.status_code == 401, (op.name, r.text)
            assert r.headers["www-authenticate"] == 'Bearer realm="switchboard"'
            assert r.json()["error"]["code"] == "unauthorized"
        if op.write:
            r = read_api.call(op.method, path, body)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", op.name
    assert await fingerprint(core) == before


async def test_foreign_ids_answer_exactly_like_unknown_ones_on_every_id_route(core, server):
    agent, api, _, other, foreign = await world(core, server.url)
    before = await fingerprint(core)
    checked = 0
    for op in OPERATIONS:
        names = re.findall(r"\{(\w+)\}", op.path)
        if not names or names == ["key"]:
            continue
        body = GOOD_BODIES.get(op.name, {} if op.body else None)
        pairs = [(foreign, UNKNOWN)]
        if len(names) > 1:  # the caller's own endpoint with another human's object in it
            pairs.append((dict(foreign, slug=agent.slug), dict(UNKNOWN, slug=agent.slug)))
        for theirs, nowhere in pairs:
            mine = api.call(op.method, concrete(op.path, theirs), body)
            unknown = api.call(op.method, concrete(op.path, nowhere), body)
            assert mine.status_code == unknown.status_code == 404, (op.name, mine.text, unknown.text)
            assert mine.content == unknown.content, op.name
        checked += 1
    assert checked >= 18
    assert await fingerprint(core) == before


# ------------------------------------------------------------------------------------- bad input

def bad_values(schema: dict) -> list:
    """Values of the wrong JSON type for a property schema (nothing for an any-JSON field)."""
    types = set()
    for arm in schema.get("anyOf", [schema]):
        if "type" in arm:
            types.add(arm["type"])
        if "enum" in arm or "const" in arm:
            types.add("string")
    if not types:
        return []
    out = []
    if "string" not in types:
        out.append("text")
    if not types & {"integer", "number"}:
        out.append(7)
    if "boolean" not in types:
        out.append(True)
    out.append({"nested": "object"})
    if "string" in types and "enum" in json.dumps(schema):
        out.append("not-one-of-them")
    return out


async def test_bad_input_on_every_route_is_refused_naming_the_field_and_changes_nothing(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    t = await push(core, agent, queue="build")
    hook, _ = await hooks.add(core, agent.human, agent.slug, url="http://127.0.0.1:9/h")
    values = dict(UNKNOWN, slug=agent.slug, id=t["id"], hook_id=hook["hook_id"])
    document = api.get("/api/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    before = await fingerprint(core)
    tried = 0
    for op in OPERATIONS:
        path = concrete(op.path, values)
        if op.body is not None:
            base = GOOD_BODIES.get(op.name, {})
            for raw in (b"{not json", b"[1]", b'"text"', b"null"):
                r = api.call(op.method, path, content=raw, headers={"Content-Type": "application/json"})
                assert r.status_code == 400 and r.json()["error"]["argument"] == "body", (op.name, raw, r.text)
            r = api.call(op.method, path, dict(base, surplus=1))
            assert r.status_code == 400 and r.json()["error"]["argument"] == "surplus", op.name
            model = schemas[op.body.__name__]
            for field in model.get("required", []):
                r = api.call(op.method, path, {k: v for k, v in base.items() if k != field})
                assert r.status_code == 400 and r.json()["error"]["argument"] == field, (op.name, field)
            for field, prop in model.get("properties", {}).items():
                for value in bad_values(prop):
                    r = api.call(op.method, path, dict(base, **{field: value}))
                    assert r.status_code == 400, (op.name, field, value, r.text)
                    assert r.json()["error"]["argument"] == field, (op.name, field, value, r.text)
                    tried += 1
            big = json.dumps(dict(base, pad="x" * (1024 * 1024))).encode()
            r = api.call(op.method, path, content=big, headers={"Content-Type": "application/json"})
            assert r.status_code == 413 and r.json()["error"]["code"] == "too_large", op.name
        if op.query is not None and served_by_the_table(server, op, path):
            r = api.call(op.method, path, params={"surplus": "1"})
            assert r.status_code == 400 and r.json()["error"]["argument"] == "surplus", op.name
            for name, prop in op.query.model_json_schema()["properties"].items():
                if any(arm.get("type") in ("integer", "boolean") or "enum" in arm for arm in prop.get("anyOf", [prop])):
                    r = api.call(op.method, path, params={name: "not-a-value"})
                    assert r.status_code == 400 and r.json()["error"]["argument"] == name, (op.name, name)
                    tried += 1
    assert tried > 40
    assert await fingerprint(core) == before
    # Each owner action's body is the action table's fields, no more.
    assert {n: sorted(m.model_fields) for n, m in ACTION_MODELS.items()} == {
        "claim": ["lease_ttl_seconds"], "complete": ["artifact", "result", "summary"],
        "fail": ["artifact", "result", "retry", "summary"], "release": ["artifact", "summary"],
        "extend": ["lease_ttl_seconds"], "retry": [], "cancel": [], "input": ["lease_ttl_seconds", "payload"]}


# ----------------------------------------------------------------------------- limits and faults

async def test_each_token_has_its_own_rate_limit(core, pg_uri):
    srv = start_thread_server(make_settings(pg_uri, api_rate_limit_per_minute=60, api_rate_limit_burst=3))
    try:
        agent = await vend(core, "alice")
        one, _ = await api_tokens.create(core, agent.human)
        two, _ = await api_tokens.create(core, agent.human)
        first = Api(srv.url, one)
        assert [first.get("/endpoints").status_code for _ in range(3)] == [200, 200, 200]
        r = first.get("/endpoints")
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(r.headers["retry-after"]) <= 2
        assert Api(srv.url, two).get("/endpoints").status_code == 200
        time.sleep(1.1)
        assert first.get("/endpoints").status_code == 200
    finally:
        srv.stop()


async def test_a_stalled_database_is_503_with_retry_after(core, server, pg_uri):
    agent, api, _, _, _ = await world(core, server.url)
    assert api.get("/endpoints").status_code == 200
    with psycopg.connect(pg_uri) as holder:
        holder.execute("LOCK TABLE human_tokens IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        r = api.get("/endpoints")
        holder.rollback()
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
    assert r.headers["retry-after"] == "1" and time.monotonic() - started < 5
    assert api.get("/endpoints").status_code == 200


@contextlib.contextmanager
def api_log():
    """The records the API's logger writes meanwhile (from INFO up)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep, logger = Keep(), logging.getLogger("switchboard.api")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(keep)
    try:
        yield records
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)


async def test_a_request_whose_backend_is_terminated_is_503_and_logs_the_sqlstate(core, server, pg_uri):
    """A lost connection, or a transaction PostgreSQL rolled back (a deadlock), is retryable: 503 with
    Retry-After, and one warning naming PostgreSQL's SQLSTATE, so a deadlock can be told apart."""
    agent, api, _, _, _ = await world(core, server.url)
    with api_log() as records:
        with psycopg.connect(pg_uri, autocommit=True) as admin, psycopg.connect(pg_uri) as holder:
            holder.execute("LOCK TABLE human_tokens IN ACCESS EXCLUSIVE MODE")
            call = asyncio.create_task(asyncio.to_thread(api.get, "/endpoints"))
            await terminate_lock_waiter(admin, "the token lookup (on human_tokens)")
            r = await asyncio.wait_for(call, 10)
            holder.rollback()
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable" and r.headers["retry-after"] == "1"
    assert [getattr(x, "sqlstate", None) for x in records
            if x.getMessage() == "api request failed on the database"] == ["57P01"]
    assert api.get("/endpoints").status_code == 200


async def test_a_client_leaving_mid_body_is_logged_as_499(core, server):
    agent, api, _, _, _ = await world(core, server.url)
    token = api.http.headers["authorization"].split()[1]
    with api_log() as records:
        port = int(server.url.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall((f"POST /api/v1/endpoints/{agent.slug}/todos HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                   f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n"
                   '{"title":').encode())
        time.sleep(0.3)
        s.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(getattr(r, "status", None) == 499 for r in records):
            time.sleep(0.05)
    lines = [r for r in records if r.getMessage() == "api request"]
    assert [(r.status, r.reason) for r in lines] == [(499, "client_disconnect")]
    assert api.get(f"/endpoints/{agent.slug}/todos").json()["todos"] == []


# ---------------------------------------------------------------------------------- the document

async def test_the_document_is_generated_from_the_operation_table(core, server):
    document = httpx.get(server.url + "/api/v1/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearer"]["description"]}
    operations = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
    assert operations == {(op.method, op.path) for op in OPERATIONS}
    for path, item in document["paths"].items():
        for method, op in item.items():
            documented = set(op["responses"])
            assert {"400", "401", "403", "404", "429", "503"} <= documented, (method, path)
            if method != "get":
                assert {"409", "413"} <= documented, (method, path)
            assert "Retry-After" in op["responses"]["429"]["headers"]
    for name in ("todo_claim", "todo_complete", "todo_fail", "todo_release", "todo_extend", "todo_retry",
                 "todo_cancel", "todo_input", "endpoint_vend", "endpoint_revoke", "hook_add", "token_create",
                 "settings_set"):
        assert any(op.name == name for op in OPERATIONS), name
    push_op = document["paths"]["/api/v1/endpoints/{slug}/todos"]["post"]
    assert any(p["in"] == "header" and p["name"] == "Idempotency-Key" for p in push_op["parameters"])


async def test_the_reference_page_is_local_html_under_the_csp(core, server):
    r = httpx.get(server.url + "/api/v1/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    page = r.text
    assert "<script" not in page and "style=" not in page and "http://" not in page and "https://" not in page
    for op in OPERATIONS:
        assert f"{op.method} {op.path}" in page.replace("&#x27;", "'"), op.name
    assert httpx.get(server.url + "/api/v1/docs.css").headers["content-type"].startswith("text/css")
    r = httpx.get(server.url + "/api/v1/no/such/route")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
