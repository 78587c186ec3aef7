"""Admission policies over the human API (SPEC-0030, issue 13), on a live server and a real database:
`/api/v1/admission/{scope}/{queue}` for an endpoint's queue (`endpoint:<slug>`) and a team queue
(`team:<team-slug>`): set, show, clear, pause, resume and the list; a team queue's policy is for
its owners and admins (members read it); outside reach it is `not_found`, byte-identical to an
unknown queue identity; bad values are `invalid` naming the field and change nothing; an owner's
claim on a deferred queue is `409 deferred` with the queue, the reason and when it may admit again."""

from __future__ import annotations

import uuid

import httpx
import pytest

from switchboard.core import api_tokens, humans
from test_api_teams import Api, server  # noqa: F401 - server is a fixture


async def people(core, base: str, *names: str) -> dict[str, Api]:
    out = {}
    for name in names:
        h = await humans.add(core, name)
        token, _ = await api_tokens.create(core, h, scope_name="write")
        out[name] = Api(base, token)
    return out


def policy_path(scope: str, queue: str, action: str = "") -> str:
    return f"/admission/{scope}/{queue}" + (f"/{action}" if action else "")


async def test_an_endpoints_queue_set_show_pause_resume_clear_and_list(core, server):  # noqa: F811
    alice = (await people(core, server.url, "alice"))["alice"]
    ep = alice.ok("POST", "/endpoints", {"agent": "worker", "queues": ["build", "deploy"]}, status=201)
    scope = f"endpoint:{ep['slug']}"
    alice.refused("GET", policy_path(scope, "build"), status=404, code="not_found")
    assert alice.ok("GET", "/admission") == {"policies": []}

    body = {"max_in_flight": 2, "max_claims_per_window": 10,
            "window": {"period": "day", "tz": "Europe/Paris", "start": "09:00"}}
    policy = alice.ok("PUT", policy_path(scope, "build"), body)["policy"]
    assert policy["queue"] == "build" and policy["endpoint"] == ep["slug"]
    assert (policy["max_in_flight"], policy["in_flight"], policy["max_claims_per_window"], policy["used"],
            policy["remaining"]) == (2, 0, 10, 0, 10)
    assert policy["window"] == {"period": "day", "tz": "Europe/Paris", "start": "09:00", "weekday": None}
    assert policy["window_resets_at"] and policy["status"] == "open" and policy["paused"] is False
    assert alice.ok("GET", policy_path(scope, "build"))["policy"] == policy

    paused = alice.ok("POST", policy_path(scope, "build", "pause"))["policy"]
    assert paused["paused"] is True and paused["status"] == "paused"
    # Setting again replaces the limits and the window; the pause switch stays as it was.
    replaced = alice.ok("PUT", policy_path(scope, "build"), {"max_claims_per_window": 5})["policy"]
    assert (replaced["max_in_flight"], replaced["max_claims_per_window"], replaced["paused"]) == (None, 5, True)
    assert replaced["window"] == {"period": "hour", "tz": "UTC", "start": "00:00", "weekday": None}
    resumed = alice.ok("POST", policy_path(scope, "build", "resume"))["policy"]
    assert resumed["paused"] is False and resumed["status"] == "open"
    weekly = alice.ok("PUT", policy_path(scope, "build"),
                      {"max_claims_per_window": 0, "window": {"period": "week", "weekday": "mon"}})["policy"]
    assert weekly["window"]["weekday"] == "mon" and weekly["status"] == "paused" and weekly["remaining"] == 0

    # Pausing a queue without a policy makes one that only pauses.
    only = alice.ok("POST", policy_path(scope, "deploy", "pause"))["policy"]
    assert only["paused"] is True and only["max_in_flight"] is None and only["max_claims_per_window"] is None
    listed = alice.ok("GET", "/admission")["policies"]
    assert [(p["queue"], p["endpoint"]) for p in listed] == [("build", ep["slug"]), ("deploy", ep["slug"])]

    assert alice.ok("DELETE", policy_path(scope, "deploy")) == {"queue": "deploy", "cleared": True}
    alice.refused("DELETE", policy_path(scope, "deploy"), status=404, code="not_found")
    alice.refused("GET", policy_path(scope, "deploy"), status=404, code="not_found")
    assert [p["queue"] for p in alice.ok("GET", "/admission")["policies"]] == ["build"]


async def test_an_owners_claim_on_a_deferred_queue_is_409_deferred(core, server):  # noqa: F811
    alice = (await people(core, server.url, "alice"))["alice"]
    ep = alice.ok("POST", "/endpoints", {"agent": "worker", "queues": ["build"]}, status=201)
    scope = f"endpoint:{ep['slug']}"
    first, second = (alice.ok("POST", f"/endpoints/{ep['slug']}/todos", {"title": f"t{n}"}, status=201)["todo"]
                     for n in range(2))
    alice.ok("PUT", policy_path(scope, "build"), {"max_in_flight": 1})
    assert alice.ok("POST", f"/todos/{first['id']}/claim")["todo"]["state"] == "claimed"
    error = alice.refused("POST", f"/todos/{second['id']}/claim", status=409, code="deferred")
    assert error["queue"] == "build" and error["reason"] == "in_flight_full" and "next_eligible_at" in error
    assert error["pending"] == 1
    usage = alice.ok("GET", policy_path(scope, "build"))["policy"]
    assert (usage["in_flight"], usage["used"], usage["status"], usage["pending"]) == (1, 1, "in_flight_full", 1)
    alice.ok("POST", f"/todos/{first['id']}/complete", {"summary": "done"})
    alice.ok("POST", policy_path(scope, "build", "pause"))
    assert alice.refused("POST", f"/todos/{second['id']}/claim", status=409, code="deferred")["reason"] == "paused"
    alice.ok("POST", policy_path(scope, "build", "resume"))
    assert alice.ok("POST", f"/todos/{second['id']}/claim")["todo"]["state"] == "claimed"
    assert alice.ok("GET", policy_path(scope, "build"))["policy"]["used"] == 2


async def test_a_team_queues_policy_roles_and_reach(core, server):  # noqa: F811
    p = await people(core, server.url, "alice", "bob", "carol", "mallory")
    alice, bob, carol, mallory = p["alice"], p["bob"], p["carol"], p["mallory"]
    team = "t" + uuid.uuid4().hex[:10]
    alice.ok("POST", "/teams", {"slug": team}, status=201)
    alice.ok("POST", f"/teams/{team}/members", {"human": "bob"}, status=201)
    alice.ok("POST", f"/teams/{team}/members", {"human": "carol", "role": "admin"}, status=201)
    scope = f"team:{team}"
    window = {"period": "hour", "tz": "Asia/Tokyo", "start": "00:30"}
    policy = alice.ok("PUT", policy_path(scope, "deploys"), {"max_in_flight": 3, "window": window})["policy"]
    assert policy["queue"] == f"team:{team}/deploys" and policy["endpoint"] is None
    assert policy["window"]["start"] == "00:30" and policy["window"]["tz"] == "Asia/Tokyo"

    # A member reads it; only owners and admins change it.
    assert bob.ok("GET", policy_path(scope, "deploys"))["policy"] == policy
    assert [x["queue"] for x in bob.ok("GET", "/admission")["policies"]] == [f"team:{team}/deploys"]
    for method, action, body in (("PUT", "", {"max_in_flight": 1}), ("POST", "pause", None),
                                 ("POST", "resume", None), ("DELETE", "", None)):
        bob.refused(method, policy_path(scope, "deploys", action), body, status=403, code="forbidden")
    assert carol.ok("POST", policy_path(scope, "deploys", "pause"))["policy"]["paused"] is True
    assert carol.ok("PUT", policy_path(scope, "deploys"), {"max_claims_per_window": 50})["policy"]["paused"] is True
    assert alice.ok("GET", policy_path(scope, "deploys"))["policy"]["max_claims_per_window"] == 50

    # Outside the team: byte-identical to a team that does not exist, on every route.
    for method, action, body in (("GET", "", None), ("PUT", "", {"max_in_flight": 1}), ("POST", "pause", None),
                                 ("POST", "resume", None), ("DELETE", "", None)):
        theirs = mallory.call(method, policy_path(scope, "deploys", action), body)
        unknown = mallory.call(method, policy_path("team:nosuchteam0", "deploys", action), body)
        assert theirs.status_code == unknown.status_code == 404, (method, action, theirs.text)
        assert theirs.content == unknown.content, (method, action)
    assert mallory.ok("GET", "/admission") == {"policies": []}
    # Another human's endpoint queue, the same.
    ep = alice.ok("POST", "/endpoints", {"agent": "own", "queues": ["build"]}, status=201)
    alice.ok("PUT", policy_path(f"endpoint:{ep['slug']}", "build"), {"max_in_flight": 4})
    for method, action, body in (("GET", "", None), ("PUT", "", {}), ("POST", "pause", None), ("DELETE", "", None)):
        theirs = mallory.call(method, policy_path(f"endpoint:{ep['slug']}", "build", action), body)
        unknown = mallory.call(method, policy_path("endpoint:nosuchslug00", "build", action), body)
        assert theirs.status_code == unknown.status_code == 404 and theirs.content == unknown.content, method
    assert alice.ok("GET", policy_path(f"endpoint:{ep['slug']}", "build"))["policy"]["max_in_flight"] == 4

    # Leaving the team ends the member's reach at once.
    bob.ok("POST", f"/teams/{team}/leave")
    bob.refused("GET", policy_path(scope, "deploys"), status=404, code="not_found")
    assert alice.ok("DELETE", policy_path(scope, "deploys"))["cleared"] is True


@pytest.mark.parametrize("body, argument", [
    ({"max_in_flight": 10001}, "max_in_flight"),
    ({"max_in_flight": -1}, "max_in_flight"),
    ({"max_in_flight": "3"}, "max_in_flight"),
    ({"max_claims_per_window": 1_000_001}, "max_claims_per_window"),
    ({"max_claims_per_window": 2.5}, "max_claims_per_window"),
    ({"window": {"tz": "Mars/Base"}}, "window.tz"),
    ({"window": {"tz": 7}}, "window.tz"),
    ({"window": {"start": "25:00"}}, "window.start"),
    ({"window": {"start": "9:00"}}, "window.start"),
    ({"window": {"period": "hour", "weekday": "mon"}}, "window.weekday"),
    ({"window": {"period": "week"}}, "window.weekday"),
    ({"window": {"period": "month"}}, "window.period"),
    ({"window": {"zone": "UTC"}}, "window"),
    ({"window": "hourly"}, "window"),
    ({"paused": "yes"}, "paused"),
    ({"limit": 3}, "limit"),
])
async def test_bad_values_are_invalid_naming_the_field_and_change_nothing(core, server, body, argument):  # noqa: F811
    alice = (await people(core, server.url, "alice"))["alice"]
    ep = alice.ok("POST", "/endpoints", {"agent": "worker", "queues": ["build"]}, status=201)
    path = policy_path(f"endpoint:{ep['slug']}", "build")
    before = alice.ok("PUT", path, {"max_in_flight": 7})["policy"]
    alice.refused("PUT", path, body, status=400, code="invalid", argument=argument)
    assert alice.ok("GET", path)["policy"] == before


async def test_a_scope_that_is_neither_an_endpoint_nor_a_team_is_invalid(core, server):  # noqa: F811
    alice = (await people(core, server.url, "alice"))["alice"]
    for scope in ("build", "agent:x", "endpoint:", "team:Not_A_Slug"):
        alice.refused("GET", policy_path(scope, "build"), status=400, code="invalid", argument="scope")
        alice.refused("PUT", policy_path(scope, "build"), {}, status=400, code="invalid", argument="scope")
    alice.refused("GET", policy_path("endpoint:abc", "bad queue"), status=400, code="invalid", argument="queue")
    alice.refused("GET", policy_path("team:crew", "bad queue"), status=400, code="invalid", argument="queue")


async def test_the_document_lists_the_admission_and_batch_routes(server):  # noqa: F811
    """The served OpenAPI document has the six admission operations and both bulk pushes (an
    endpoint's `todos:batch` and a team's), each under its path with its method and nothing else."""
    document = httpx.get(server.url + "/api/v1/openapi.json").json()
    paths = document["paths"]
    admission = {("/api/v1/admission", "get"): "admission_list",
                 ("/api/v1/admission/{scope}/{queue}", "get"): "admission_show",
                 ("/api/v1/admission/{scope}/{queue}", "put"): "admission_set",
                 ("/api/v1/admission/{scope}/{queue}", "delete"): "admission_clear",
                 ("/api/v1/admission/{scope}/{queue}/pause", "post"): "admission_pause",
                 ("/api/v1/admission/{scope}/{queue}/resume", "post"): "admission_resume"}
    batch = {("/api/v1/endpoints/{slug}/todos:batch", "post"): "todo_push_batch",
             ("/api/v1/teams/{team}/todos:batch", "post"): "team_todo_push_batch"}
    for routes in (admission, batch):
        for path in {p for p, _ in routes}:
            assert set(paths[path]) == {m for p, m in routes if p == path}, path
        for (path, method), operation_id in routes.items():
            assert paths[path][method]["operationId"] == operation_id, (path, method)
    listed = {(path, method) for path, ops in paths.items() for method in ops if path.startswith("/api/v1/admission")}
    assert listed == set(admission)
    tagged = {(path, method) for path, ops in paths.items() for method, op in ops.items()
              if "admission" in op.get("tags", ())}
    assert tagged == set(admission)
    assert {(path, method) for path, ops in paths.items() for method in ops if path.endswith(":batch")} == set(batch)
    for path, parameter in (("/api/v1/admission/{scope}/{queue}", "scope"),
                            ("/api/v1/admission/{scope}/{queue}", "queue"),
                            ("/api/v1/endpoints/{slug}/todos:batch", "slug"),
                            ("/api/v1/teams/{team}/todos:batch", "team")):
        for op in paths[path].values():
            assert any(p["name"] == parameter and p["in"] == "path" for p in op.get("parameters", [])), (path, op)
