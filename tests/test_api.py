"""The producer API over real HTTP: human API tokens, pushing todos, the owner's view and actions."""

from __future__ import annotations

import json

import httpx
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import push, vend
from switchboard.core import api_tokens, endpoints, todos


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, retry_backoff_base_seconds=0, retry_backoff_max_seconds=0))
    yield srv
    srv.stop()


class Api:
    def __init__(self, base: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base + "/api/v1", headers=headers, timeout=30)

    def get(self, path: str, **kw) -> httpx.Response:
        return self.http.get(path, **kw)

    def post(self, path: str, payload: dict | None = None, **kw) -> httpx.Response:
        return self.http.post(path, json=payload, **kw) if payload is not None else self.http.post(path, **kw)


async def api_for(core, base: str, name: str = "alice"):
    agent = await vend(core, name, queues=["build", "deploy"])
    token, _ = await api_tokens.create(core, agent.human)
    return agent, Api(base, token)


async def caller_of(core, agent):
    return endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))


async def test_tokens_are_required(core, server):
    agent, _ = await api_for(core, server.url)
    for token in (None, "sbh_" + "x" * 43, agent.credential):
        r = Api(server.url, token).get("/endpoints")
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == 'Bearer realm="switchboard"'
        assert r.json()["error"]["code"] == "unauthorized"


async def test_push_creates_once_per_idempotency_key(core, server):
    agent, api = await api_for(core, server.url)
    r = api.post(f"/endpoints/{agent.slug}/todos", {
        "title": "compile", "queue": "build", "payload": {"ref": "main"}, "kind": "ci", "key": "k-1",
        "max_attempts": 3, "assignee": "agent:someone"})
    assert r.status_code == 201
    todo = r.json()["todo"]
    assert r.json()["created"] is True
    assert (todo["title"], todo["queue"], todo["payload"], todo["kind"], todo["max_attempts"], todo["assignee"],
            todo["source"], todo["state"]) == ("compile", "build", {"ref": "main"}, "ci", 3, "agent:someone", "api",
                                               "pending")
    again = api.post(f"/endpoints/{agent.slug}/todos", {"title": "compile again", "queue": "build", "key": "k-1"})
    assert again.status_code == 200
    assert again.json()["created"] is False and again.json()["todo"]["id"] == todo["id"]
    listed = api.get(f"/endpoints/{agent.slug}/todos", params={"queue": "build"}).json()["todos"]
    assert [t["id"] for t in listed] == [todo["id"]]


async def test_bad_pushes_are_refused_with_the_argument_named(core, server):
    agent, api = await api_for(core, server.url)
    path = f"/endpoints/{agent.slug}/todos"
    cases = [
        ({"queue": "build"}, "title"),
        ({"title": "t"}, "queue"),  # two queues: which one?
        ({"title": "t", "queue": "elsewhere"}, "queue"),
        ({"title": "t", "queue": "build", "max_attempts": 0}, "max_attempts"),
        ({"title": "t", "queue": "build", "owner": "me"}, "owner"),
    ]
    for payload, argument in cases:
        r = api.post(path, payload)
        assert r.status_code == 400, payload
        assert r.json()["error"]["code"] == "invalid" and r.json()["error"]["argument"] == argument, payload
    r = api.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["argument"] == "body"
    r = api.post(path, content=b"[1]", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    big = json.dumps({"title": "t", "queue": "build", "payload": "x" * (1024 * 1024)})
    assert api.post(path, content=big, headers={"Content-Type": "application/json"}).status_code == 413
    assert api.get(f"/endpoints/{agent.slug}/todos").json()["todos"] == []


async def test_another_humans_objects_are_not_found_like_unknown_ones(core, server):
    agent, api = await api_for(core, server.url)
    other, other_api = await api_for(core, server.url, "bob")
    theirs = await push(core, other, queue="build")
    assert other_api.get(f"/todos/{theirs['id']}").status_code == 200
    foreign = api.get(f"/todos/{theirs['id']}")
    unknown = api.get("/todos/td_00000000-0000-0000-0000-000000000000")
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.content == unknown.content
    for action in ("retry", "cancel", "release", "fail"):
        a = api.post(f"/todos/{theirs['id']}/{action}", {})
        b = api.post(f"/todos/td_00000000-0000-0000-0000-000000000000/{action}", {})
        assert a.status_code == b.status_code == 404 and a.content == b.content, action
    pushed = api.post(f"/endpoints/{other.slug}/todos", {"title": "t", "queue": "build"})
    nowhere = api.post("/endpoints/nosuchslug/todos", {"title": "t", "queue": "build"})
    assert pushed.status_code == nowhere.status_code == 404 and pushed.content == nowhere.content
    assert api.get(f"/endpoints/{other.slug}/todos").status_code == 404
    assert [e["slug"] for e in api.get("/endpoints").json()["endpoints"]] == [agent.slug]
    assert (await todos.get(core, other.human, theirs["id"]))["state"] == "pending"


async def test_owner_view_and_actions(core, server):
    agent, api = await api_for(core, server.url)
    caller = await caller_of(core, agent)
    t = await push(core, agent, queue="build", max_attempts=2)
    await todos.claim(core, caller, t["id"], claimant="w1", require_fence=True)
    # The owner releases a fenced lease without the token (fence-exempt), with a summary.
    r = api.post(f"/todos/{t['id']}/release", {"summary": "stuck, handing back"})
    assert r.status_code == 200 and r.json()["todo"]["state"] == "pending"
    await todos.claim(core, caller, t["id"], claimant="w2")
    r = api.post(f"/todos/{t['id']}/fail", {"summary": "gave up", "retry": False, "result": {"why": "x"}})
    assert r.status_code == 200 and r.json()["todo"]["dead_letter"] is True
    assert api.post(f"/todos/{t['id']}/cancel").status_code == 409  # a dead letter cannot be canceled
    r = api.post(f"/todos/{t['id']}/retry")
    assert r.status_code == 200 and r.json()["todo"]["state"] == "pending"
    view = api.get(f"/todos/{t['id']}").json()["todo"]
    assert view["endpoint"] == agent.slug and view["attempts_total"] == 2
    assert [(x["seq"], x["claimant"], x["outcome"], x["summary"]) for x in view["attempts"]] == [
        (2, "w2", "failed", "gave up"), (1, "w1", "released", "stuck, handing back")]
    assert "lease_expires_at" in view["attempts"][0]
    assert not {"lease_token_hash", "claimer_session"} & set(view["attempts"][0])
    r = api.post(f"/todos/{t['id']}/cancel", {})
    assert r.status_code == 200 and r.json()["todo"]["state"] == "canceled"
    assert api.post(f"/todos/{t['id']}/explode", {}).status_code == 404


async def test_answering_an_input_request(core, server):
    agent, api = await api_for(core, server.url)
    caller = await caller_of(core, agent)
    t = await push(core, agent, queue="deploy")
    await todos.claim(core, caller, t["id"])
    await todos.request_input(core, caller, t["id"], question="which region?")
    assert api.post(f"/todos/{t['id']}/input", {}).json()["error"]["argument"] == "payload"
    assert api.post(f"/todos/{t['id']}/input", {"payload": {"region": "eu"}, "x": 1}).status_code == 400
    r = api.post(f"/todos/{t['id']}/input", {"payload": {"region": "eu"}})
    assert r.status_code == 200
    assert r.json()["todo"]["state"] == "claimed" and r.json()["todo"]["input"] == {"region": "eu"}
    assert api.post(f"/todos/{t['id']}/input", {"payload": 1}).status_code == 409
