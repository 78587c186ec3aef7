"""Teams over the human API (issue 13), on a live server and a real database: create, list, show,
members and roles, leave, delete, grants, pushes to a team queue and the team filter of the todo
list; what each role may do (a member cannot manage, an admin can, only an owner deletes; the last
owner stays); a team is `not_found` to a non-member with exactly the body of a team that does not
exist, on every route; bad input is `invalid` naming the field."""

from __future__ import annotations

import uuid

import httpx
import pytest

from conftest import make_settings, start_thread_server
from switchboard.core import api_tokens, endpoints, humans, todos


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, api_rate_limit_per_minute=100_000, api_rate_limit_burst=10_000))
    yield srv
    srv.stop()


class Api:
    def __init__(self, base: str, token: str) -> None:
        self.http = httpx.Client(base_url=base + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def call(self, method: str, path: str, body=None, **kw) -> httpx.Response:
        if body is not None:
            kw["json"] = body
        return self.http.request(method, path, **kw)

    def get(self, path: str, **kw) -> httpx.Response:
        return self.call("GET", path, **kw)

    def post(self, path: str, body=None, **kw) -> httpx.Response:
        return self.call("POST", path, body, **kw)

    def ok(self, method: str, path: str, body=None, status: int = 200, **kw) -> dict:
        r = self.call(method, path, body, **kw)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        return r.json()

    def refused(self, method: str, path: str, body=None, *, status: int, code: str,
                argument: str | None = None, **kw) -> dict:
        r = self.call(method, path, body, **kw)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        error = r.json()["error"]
        assert error["code"] == code, error
        if argument is not None:
            assert error.get("argument") == argument, error
        return error


async def people(core, base: str, *names: str) -> dict[str, Api]:
    out = {}
    for name in names:
        h = await humans.add(core, name)
        token, _ = await api_tokens.create(core, h, scope_name="write")
        out[name] = Api(base, token)
    return out


async def caller_of(core, credential: str):
    return endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))


def slug() -> str:
    return "t" + uuid.uuid4().hex[:10]


# ------------------------------------------------------------------------------------ the team

async def test_create_list_show_and_the_roles_of_members(core, server):
    p = await people(core, server.url, "alice", "bob", "carol", "dave")
    alice, bob, carol = p["alice"], p["bob"], p["carol"]
    team = slug()
    made = alice.ok("POST", "/teams", {"slug": team, "name": "Release crew"}, status=201)
    assert made["team"]["slug"] == team and made["team"]["name"] == "Release crew" and made["team"]["role"] == "owner"
    alice.refused("POST", "/teams", {"slug": team}, status=409, code="conflict")
    assert [t["slug"] for t in alice.ok("GET", "/teams")["teams"]] == [team]
    assert alice.ok("GET", "/teams")["teams"][0]["members"] == 1

    added = alice.ok("POST", f"/teams/{team}/members", {"human": "bob", "role": "admin"}, status=201)
    assert added == {"team": team, "human": "bob", "role": "admin"}
    alice.refused("POST", f"/teams/{team}/members", {"human": "bob"}, status=409, code="conflict")
    # An admin adds members but not owners; a plain member manages nothing.
    assert bob.ok("POST", f"/teams/{team}/members", {"human": "carol"}, status=201)["role"] == "member"
    bob.refused("POST", f"/teams/{team}/members", {"human": "dave", "role": "owner"}, status=403, code="forbidden")
    carol.refused("POST", f"/teams/{team}/members", {"human": "dave"}, status=403, code="forbidden")
    carol.refused("PATCH", f"/teams/{team}/members/bob", {"role": "member"}, status=403, code="forbidden")
    carol.refused("DELETE", f"/teams/{team}/members/bob", status=403, code="forbidden")
    carol.refused("DELETE", f"/teams/{team}", status=403, code="forbidden")
    bob.refused("DELETE", f"/teams/{team}", status=403, code="forbidden")
    bob.refused("DELETE", f"/teams/{team}/members/alice", status=403, code="forbidden")
    alice.refused("POST", f"/teams/{team}/members", {"human": "nosuchhuman"}, status=404, code="not_found",
                  argument="human")

    shown = carol.ok("GET", f"/teams/{team}")["team"]
    assert shown["role"] == "member" and shown["name"] == "Release crew"
    assert [(m["name"], m["role"]) for m in shown["members"]] == [("alice", "owner"), ("bob", "admin"),
                                                                   ("carol", "member")]
    assert shown["queues"] == [] and shown["grants"] == []
    assert {t["slug"]: t["role"] for t in carol.ok("GET", "/teams")["teams"]} == {team: "member"}

    # Roles: an admin changes members' roles, only an owner makes an owner; the last owner stays.
    assert bob.ok("PATCH", f"/teams/{team}/members/carol", {"role": "admin"})["role"] == "admin"
    bob.refused("PATCH", f"/teams/{team}/members/carol", {"role": "owner"}, status=403, code="forbidden")
    alice.refused("PATCH", f"/teams/{team}/members/alice", {"role": "member"}, status=409, code="conflict")
    alice.refused("DELETE", f"/teams/{team}/members/alice", status=409, code="conflict")
    alice.refused("POST", f"/teams/{team}/leave", status=409, code="conflict")
    alice.refused("PATCH", f"/teams/{team}/members/dave", {"role": "admin"}, status=404, code="not_found")
    assert alice.ok("PATCH", f"/teams/{team}/members/bob", {"role": "owner"})["role"] == "owner"
    assert alice.ok("POST", f"/teams/{team}/leave") == {"team": team, "left": True, "leases_handed_back": 0}
    alice.refused("GET", f"/teams/{team}", status=404, code="not_found")
    removed = bob.ok("DELETE", f"/teams/{team}/members/carol")
    assert removed == {"team": team, "human": "carol", "removed": True, "leases_handed_back": 0}
    carol.refused("GET", f"/teams/{team}", status=404, code="not_found")
    assert bob.ok("DELETE", f"/teams/{team}") == {"team": team, "deleted": True}
    bob.refused("GET", f"/teams/{team}", status=404, code="not_found")
    assert bob.ok("GET", "/teams")["teams"] == []


async def test_grants_vend_push_list_and_a_removed_member_hands_back(core, server):
    p = await people(core, server.url, "alice", "bob", "carol")
    alice, bob, carol = p["alice"], p["bob"], p["carol"]
    team = slug()
    alice.ok("POST", "/teams", {"slug": team}, status=201)
    alice.ok("POST", f"/teams/{team}/members", {"human": "bob"}, status=201)
    label = f"team:{team}/deploys"

    # A member names the team queue at vend: it waits for a grant. An owner's vend is granted at once.
    vended = bob.ok("POST", "/endpoints", {"agent": "worker", "queues": [label, "inbox"]}, status=201)
    assert vended["awaiting_grant"] == [label]
    own = alice.ok("POST", "/endpoints", {"agent": "lead", "queues": [label]}, status=201)
    assert own["awaiting_grant"] == []
    plain = alice.ok("POST", "/endpoints", {"agent": "solo"}, status=201)
    assert "awaiting_grant" not in plain
    carol.refused("POST", "/endpoints", {"agent": "x", "queues": [label]}, status=404, code="not_found")

    bob.refused("POST", f"/teams/{team}/grants", {"queue": "deploys", "endpoint": vended["slug"]},
                status=403, code="forbidden")
    alice.refused("POST", f"/teams/{team}/grants", {"queue": "team:other/deploys", "endpoint": vended["slug"]},
                  status=400, code="invalid", argument="queue")
    alice.refused("POST", f"/teams/{team}/grants", {"queue": "deploys", "endpoint": "nosuchslug00"},
                  status=404, code="not_found", argument="endpoint")
    granted = alice.ok("POST", f"/teams/{team}/grants", {"queue": "deploys", "endpoint": vended["slug"]})
    assert granted == {"team": team, "queue": label, "endpoint": vended["slug"], "granted": True}
    grants = alice.ok("GET", f"/teams/{team}")["team"]["grants"]
    assert {(g["endpoint"], g["human"], g["reaches"]) for g in grants} == {(vended["slug"], "bob", True),
                                                                          (own["slug"], "alice", True)}

    # Any member pushes on the team queue, by its name or its label; another team's label is refused.
    first = bob.ok("POST", f"/teams/{team}/todos", {"title": "Deploy 1.2", "queue": "deploys"}, status=201)
    assert first["created"] is True and first["todo"]["queue"] == label
    again = bob.ok("POST", f"/teams/{team}/todos", {"title": "Deploy 1.2", "queue": label},
                   headers={"Idempotency-Key": "rel-1.2"}, status=201)
    same = alice.ok("POST", f"/teams/{team}/todos", {"title": "Deploy 1.2", "queue": "deploys", "key": "rel-1.2"})
    assert same["created"] is False and same["todo"]["id"] == again["todo"]["id"]
    bob.refused("POST", f"/teams/{team}/todos", {"title": "x", "queue": "team:elsewhere/deploys"},
                status=400, code="invalid", argument="queue")
    bob.refused("POST", f"/teams/{team}/todos", {"title": "x", "queue": "bad queue"}, status=400, code="invalid",
                argument="queue")
    bob.refused("POST", f"/teams/{team}/todos", {"title": "x"}, status=400, code="invalid", argument="queue")
    # The endpoint route takes a team label too: the team owns the todo.
    via_ep = bob.ok("POST", f"/endpoints/{vended['slug']}/todos", {"title": "From the endpoint", "queue": label},
                    status=201)["todo"]
    assert via_ep["queue"] == label

    listed = bob.ok("GET", "/todos", params={"team": team})["todos"]
    assert len(listed) == 3 and {t["team"] for t in listed} == {team} and {t["endpoint"] for t in listed} == {None}
    assert alice.ok("GET", "/todos", params={"team": team, "limit": 1})["next_offset"] == 1
    shown = alice.ok("GET", f"/todos/{first['todo']['id']}")["todo"]
    assert shown["team"] == team and shown["endpoint"] is None
    counts = alice.ok("GET", f"/teams/{team}")["team"]["queues"]
    assert counts == [{"queue": label, "pending": 3, "in_flight": 0, "parked": 0, "dead": 0}]

    # Bob's agent claims a team todo; removing bob hands it back to the queue.
    caller = await caller_of(core, vended["credential"])
    claimed = await todos.claim_next(core, caller, queue=label)
    assert claimed is not None
    removed = alice.ok("DELETE", f"/teams/{team}/members/bob")
    assert removed["leases_handed_back"] == 1
    back = alice.ok("GET", f"/todos/{claimed.todo['id']}")["todo"]
    assert back["state"] == "pending" and back["attempts"][0]["outcome"] == "released"
    bob.refused("GET", "/todos", params={"team": team}, status=404, code="not_found")
    assert all(t.get("team") != team for t in bob.ok("GET", "/todos")["todos"])
    grants = alice.ok("GET", f"/teams/{team}")["team"]["grants"]
    assert [g["endpoint"] for g in grants] == [own["slug"]]

    # Take-back of a grant: the endpoint's team leases go back too.
    lead = await caller_of(core, own["credential"])
    held = await todos.claim_next(core, lead, queue=label)
    assert held is not None
    taken = alice.ok("DELETE", f"/teams/{team}/grants", {"queue": label, "endpoint": own["slug"]})
    assert taken == {"team": team, "queue": label, "endpoint": own["slug"], "granted": False,
                     "leases_handed_back": 1}
    alice.refused("DELETE", f"/teams/{team}/grants", {"queue": label, "endpoint": own["slug"]},
                  status=404, code="not_found")


async def test_outside_a_team_every_route_is_not_found_exactly_as_an_unknown_team(core, server):
    p = await people(core, server.url, "alice", "bob", "mallory")
    alice, mallory = p["alice"], p["mallory"]
    team = slug()
    alice.ok("POST", "/teams", {"slug": team}, status=201)
    alice.ok("POST", f"/teams/{team}/members", {"human": "bob"}, status=201)
    ep = alice.ok("POST", "/endpoints", {"agent": "lead", "queues": [f"team:{team}/q"]}, status=201)
    todo = alice.ok("POST", f"/teams/{team}/todos", {"title": "Secret team work", "queue": "q"}, status=201)["todo"]
    nowhere = "nosuchteam0"
    routes = [("GET", "/teams/{t}", None), ("DELETE", "/teams/{t}", None),
              ("POST", "/teams/{t}/members", {"human": "mallory"}),
              ("PATCH", "/teams/{t}/members/bob", {"role": "member"}),
              ("DELETE", "/teams/{t}/members/bob", None), ("POST", "/teams/{t}/leave", None),
              ("POST", "/teams/{t}/grants", {"queue": "q", "endpoint": ep["slug"]}),
              ("DELETE", "/teams/{t}/grants", {"queue": "q", "endpoint": ep["slug"]}),
              ("POST", "/teams/{t}/todos", {"title": "x", "queue": "q"})]
    for method, path, body in routes:
        theirs = mallory.call(method, path.format(t=team), body)
        unknown = mallory.call(method, path.format(t=nowhere), body)
        assert theirs.status_code == unknown.status_code == 404, (method, path, theirs.text)
        assert theirs.content == unknown.content, (method, path)
    theirs = mallory.get("/todos", params={"team": team})
    unknown = mallory.get("/todos", params={"team": nowhere})
    assert theirs.status_code == unknown.status_code == 404 and theirs.content == unknown.content
    # The team's todo and its queue's label too.
    theirs = mallory.get(f"/todos/{todo['id']}")
    unknown = mallory.get("/todos/td_00000000-0000-0000-0000-000000000000")
    assert theirs.status_code == 404 and theirs.content == unknown.content
    assert mallory.ok("GET", "/teams")["teams"] == [] and mallory.ok("GET", "/todos")["todos"] == []
    # Nothing changed for the members.
    assert len(alice.ok("GET", f"/teams/{team}")["team"]["members"]) == 2
    assert alice.ok("GET", f"/todos/{todo['id']}")["todo"]["state"] == "pending"


async def test_bad_input_is_invalid_naming_the_field(core, server):
    p = await people(core, server.url, "alice", "bob")
    alice = p["alice"]
    team = slug()
    alice.ok("POST", "/teams", {"slug": team}, status=201)
    for body, argument in (({"slug": "Bad Slug"}, "slug"), ({"slug": "x" * 33}, "slug"), ({}, "slug"),
                           ({"slug": 7}, "slug"), ({"slug": "ok-slug", "name": "n" * 129}, "name"),
                           ({"slug": "ok-slug", "owner": "bob"}, "owner")):
        alice.refused("POST", "/teams", body, status=400, code="invalid", argument=argument)
    for body, argument in (({"human": "bob", "role": "boss"}, "role"), ({}, "human"), ({"human": 7}, "human")):
        alice.refused("POST", f"/teams/{team}/members", body, status=400, code="invalid", argument=argument)
    alice.ok("POST", f"/teams/{team}/members", {"human": "bob"}, status=201)
    for body, argument in (({"role": "boss"}, "role"), ({}, "role"), ({"role": None}, "role")):
        alice.refused("PATCH", f"/teams/{team}/members/bob", body, status=400, code="invalid", argument=argument)
    for body, argument in (({"queue": "q"}, "endpoint"), ({"endpoint": "e"}, "queue"),
                           ({"queue": "bad queue", "endpoint": "nosuchslug00"}, "queue")):
        alice.refused("POST", f"/teams/{team}/grants", body, status=400, code="invalid", argument=argument)
    for body, argument in (({"title": "", "queue": "q"}, "title"), ({"title": "t", "queue": "q", "max_attempts": 0},
                                                                    "max_attempts")):
        alice.refused("POST", f"/teams/{team}/todos", body, status=400, code="invalid", argument=argument)
    alice.refused("GET", "/todos", params={"team": "Not A Slug"}, status=404, code="not_found")
    shown = alice.ok("GET", f"/teams/{team}")["team"]
    assert [m["role"] for m in shown["members"]] == ["owner", "member"] and shown["queues"] == []
    # A read token reads teams but changes nothing.
    reader, _ = await api_tokens.create(core, await humans.by_name(core, "alice"), scope_name="read")
    ro = Api(server.url, reader)
    assert ro.ok("GET", f"/teams/{team}")["team"]["slug"] == team
    ro.refused("POST", f"/teams/{team}/members", {"human": "bob"}, status=403, code="forbidden")
    ro.refused("DELETE", f"/teams/{team}", status=403, code="forbidden")


async def test_a_batch_push_refuses_the_idempotency_header_and_pushes_nothing(core, server):
    """A batch's keys are per item; one header cannot name them, so it is refused, not ignored (a
    retried batch would otherwise push every todo again)."""
    alice = (await people(core, server.url, "alice"))["alice"]
    team = slug()
    alice.ok("POST", "/teams", {"slug": team}, status=201)
    vended = alice.ok("POST", "/endpoints", {"agent": "batcher", "queues": ["inbox"]}, status=201)
    batch = {"todos": [{"title": "one"}, {"title": "two"}]}
    for path, body in ((f"/endpoints/{vended['slug']}/todos:batch", batch),
                       (f"/teams/{team}/todos:batch", {"todos": [{"title": "one", "queue": "q"}]})):
        for _ in range(2):
            alice.refused("POST", path, body, status=400, code="invalid", argument="Idempotency-Key",
                          headers={"Idempotency-Key": "nightly-1"})
    assert alice.ok("GET", "/todos")["todos"] == []
    assert alice.ok("POST", f"/endpoints/{vended['slug']}/todos:batch", batch, status=201)["created"] == 2


async def test_the_document_lists_the_team_routes(core, server):
    document = httpx.get(server.url + "/api/v1/openapi.json").json()
    for path, methods in (("/api/v1/teams", {"get", "post"}), ("/api/v1/teams/{team}", {"get", "delete"}),
                          ("/api/v1/teams/{team}/members", {"post"}),
                          ("/api/v1/teams/{team}/members/{human}", {"patch", "delete"}),
                          ("/api/v1/teams/{team}/leave", {"post"}), ("/api/v1/teams/{team}/grants", {"post", "delete"}),
                          ("/api/v1/teams/{team}/todos", {"post"})):
        assert set(document["paths"][path]) == methods, path
    todo_list = document["paths"]["/api/v1/todos"]["get"]
    assert any(p["name"] == "team" and p["in"] == "query" for p in todo_list["parameters"])
    assert "team" in document["components"]["schemas"]["Todo"]["properties"]
