"""A worker's round in one call (docs/decisions.md D52): `claim_next` with `complete` completes the todos
listed and claims the next, in one transaction, so the round costs one commit instead of two.

That the completions and the claims shared a transaction is seen in the database: `now()` is the
transaction's start, so the attempts the call closed end at the instant the attempts it opened were
claimed, which two transactions never give.
"""

from __future__ import annotations

import json

import pytest

from conftest import make_settings, start_thread_server
from core_world import attempt_rows, check, make_world, snapshot, sql, todo_row
from mcp_support import body, error_body, push, sdk, vend
from switchboard.core import admission, events, todos
from switchboard.core.errors import Conflict, Forbidden, Invalid
from switchboard.core.models import VERBS
from team_world import make_fleet
from test_core_inputs import fingerprint

UNKNOWN = "td_00000000-0000-0000-0000-000000000000"


def _ids(got: list[todos.ClaimResult]) -> list[str]:
    return [g.todo["id"] for g in got]


async def test_the_round_completes_and_claims_in_one_transaction(core):
    w = await make_world(core)
    made = [(await w.todo(f"r{i}"))["id"] for i in range(5)]
    caller = w.e1.with_session("round-S")
    first = await todos.claim_next_batch(core, caller, max_todos=2)
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    results, claimed, deferred = await todos.complete_and_take_next(
        core, caller, [{"id": made[0], "summary": "first", "result": {"n": 0}},
                       {"id": made[1], "artifact": "https://ci.example/1"}],
        max_todos=2, claimant="host/round")
    assert [(r["id"], r["ok"], r["todo"]["state"]) for r in results] == [(made[0], True, "done"),
                                                                         (made[1], True, "done")]
    assert _ids(claimed) == made[2:4] and deferred == []
    closed = [(await attempt_rows(core, t))[0] for t in made[:2]]
    opened = [(await attempt_rows(core, t))[0] for t in made[2:4]]
    assert [(a["outcome"], a["disposition"]) for a in closed] == [("completed", "done")] * 2
    assert closed[0]["summary"] == "first" and closed[1]["artifact"] == "https://ci.example/1"
    assert (await todo_row(core, made[0]))["result"] == {"n": 0}
    assert all(a["ended_at"] is None and a["claimant"] == "host/round" and a["claimer_session"] == "round-S"
               for a in opened)
    # one transaction: now() of the close is now() of the claim
    assert {a["ended_at"] for a in closed} == {a["claimed_at"] for a in opened}, "two transactions"
    assert all(g.attempt_seq == 1 and g.prior_attempts == [] and g.lease_token is None for g in claimed)
    assert [(e.verb, e.todo_id) for e in seen] == [("complete", made[0]), ("complete", made[1]),
                                                   ("claim", made[2]), ("claim", made[3])]
    assert _ids(first) == made[:2]
    # one todo, in the single shape's terms: max_todos absent claims at most one
    results, claimed, _ = await todos.complete_and_take_next(core, caller, [{"id": t} for t in made[2:4]])
    assert all(r["ok"] for r in results) and _ids(claimed) == made[4:]
    results, claimed, deferred = await todos.complete_and_take_next(core, caller, [{"id": made[4]}], max_todos=9)
    assert results[0]["ok"] and claimed == [] and deferred == []  # the queue ran dry; the completion stands
    assert [(await todo_row(core, t))["state"] for t in made] == ["done"] * 5
    assert await check(core) == []


async def test_each_item_is_handled_alone_and_a_foreign_id_is_an_unknown_one(core):
    w = await make_world(core)
    held = (await w.todo("held"))["id"]
    idle = (await w.todo("idle"))["id"]
    theirs = (await w.todo("theirs", caller=w.e2))["id"]
    await todos.claim(core, w.e1, held)
    await todos.claim(core, w.e2, theirs)
    before = await snapshot(core, theirs)
    results, claimed, _ = await todos.complete_and_take_next(
        core, w.e1, [{"id": theirs}, {"id": held, "summary": "ok"}, {"id": UNKNOWN}, {"id": idle}])
    assert [r["ok"] for r in results] == [False, True, False, False]
    assert results[0]["error"] == results[2]["error"] == {"code": "not_found", "message": "todo not found"}
    assert json.dumps(results[0]["error"]) == json.dumps(results[2]["error"])  # byte-identical (REQ-10)
    assert results[3]["error"]["code"] == "conflict"  # pending, not held: its claim comes after
    assert _ids(claimed) == [idle]
    assert await snapshot(core, theirs) == before
    assert (await todo_row(core, held))["state"] == "done"
    assert await check(core) == []


async def test_a_fenced_round_checks_each_token_and_fences_the_new_claims(core):
    w = await make_world(core)
    made = [(await w.todo(f"f{i}"))["id"] for i in range(4)]
    got = await todos.claim_next_batch(core, w.e1, max_todos=2, require_fence=True)
    tokens = {g.todo["id"]: g.lease_token for g in got}
    results, claimed, _ = await todos.complete_and_take_next(
        core, w.e1, [{"id": made[0], "lease_token": tokens[made[0]]}, {"id": made[1], "lease_token": "stale"}],
        max_todos=2, require_fence=True)
    assert [r["ok"] for r in results] == [True, False] and results[1]["error"]["code"] == "conflict"
    assert _ids(claimed) == made[2:] and all(g.lease_token for g in claimed)
    assert len({g.lease_token for g in claimed}) == 2
    for g in claimed:  # each new claim is fenced by its own token
        with pytest.raises(Conflict):
            await todos.complete(core, w.e1, g.todo["id"], lease_token=claimed[0].lease_token
                                 if g is claimed[1] else claimed[1].lease_token)
        await todos.complete(core, w.e1, g.todo["id"], lease_token=g.lease_token)
    await todos.complete(core, w.e1, made[1], lease_token=tokens[made[1]])
    assert await check(core) == []


async def test_bad_input_refuses_the_whole_round_and_changes_nothing(core):
    w = await make_world(core)
    t = (await w.todo("held"))["id"]
    await w.todo("ready")
    await todos.claim(core, w.e1, t)
    before = await fingerprint(core)
    for items in (None, [], "td_x", [{"id": t}] * 2, [{"id": t, "retry": True}], [{"id": t, "surprise": 1}],
                  [{"id": t, "artifact": "file:///etc/passwd"}], [{"id": f"td_{i}"} for i in range(101)]):
        with pytest.raises(Invalid) as err:
            await todos.complete_and_take_next(core, w.e1, items)
        assert err.value.argument == "complete" and "complete" in err.value.message, items
    for kwargs, argument in (({"max_todos": 0}, "max_todos"), ({"max_todos": "5"}, "max_todos"),
                             ({"queue": "elsewhere"}, "queue"), ({"lease_ttl_seconds": "60"}, "lease_ttl_seconds"),
                             ({"require_fence": "yes"}, "require_fence")):
        with pytest.raises((Invalid, Forbidden)) as err:  # the completion waits for every check
            await todos.complete_and_take_next(core, w.e1, [{"id": t}], **kwargs)
        assert err.value.argument == argument or argument in err.value.message, (kwargs, err.value)
    assert await fingerprint(core) == before
    assert await check(core) == []


async def test_a_claim_refused_at_commit_lets_the_completions_stand_and_raises_as_claim_next(core):
    """A stray open attempt on the next todo: the one-open-attempt constraint refuses the claim at
    commit, which rolls back the round; the completions then commit alone and the claim runs as
    claim_next runs it (here refused again, so the call raises its conflict)."""
    w = await make_world(core)
    held = (await w.todo("held"))["id"]
    await todos.claim(core, w.e1, held)
    nxt = (await w.todo("next"))["id"]
    await sql(core, "INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at,"
                    " lease_expires_at) VALUES (%s, 7, 1, 'owner', 'planted', now(), now())", (nxt,))
    with pytest.raises(Conflict):
        await todos.complete_and_take_next(core, w.e1, [{"id": held, "summary": "did it"}])
    assert (await todo_row(core, held))["state"] == "done"
    assert [a["outcome"] for a in await attempt_rows(core, held)] == ["completed"]
    assert (await todo_row(core, nxt))["state"] == "pending" and len(await attempt_rows(core, nxt)) == 1


async def test_on_a_policed_queue_the_round_is_charged_and_capped(core):
    w = await make_world(core)
    made = [(await w.todo(f"p{i}"))["id"] for i in range(6)]
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=2, max_claims_per_window=100)
    got = await todos.claim_next_batch(core, w.e1, max_todos=5)
    assert _ids(got) == made[:2]  # capped at 2 in flight
    results, claimed, deferred = await todos.complete_and_take_next(core, w.e1, [{"id": made[0]}], max_todos=5)
    assert results[0]["ok"] and _ids(claimed) == made[2:3] and deferred == []
    assert claimed[0].admission["in_flight"] == 2 and claimed[0].admission["used"] == 3
    results, claimed, deferred = await todos.complete_and_take_next(core, w.e1, [{"id": made[3]}])
    assert results[0]["error"]["code"] == "conflict"  # made[3] is pending, not held
    assert claimed == [] and [d["reason"] for d in deferred] == ["in_flight_full"]
    [p] = await admission.status_for_endpoint(core, w.e1, "inbox")
    assert p["used"] == 3 and p["in_flight"] == 2
    assert await check(core) == []


async def test_a_team_queue_round(core):
    f = await make_fleet(core, endpoints=0)
    ep = await f.vend(2, agent="solo", queues=[f.label])
    made = [(await f.push(f"t{i}"))["id"] for i in range(3)]
    first = await todos.claim_next(core, ep)
    results, claimed, _ = await todos.complete_and_take_next(core, ep, [{"id": first.todo["id"]}], max_todos=5)
    assert results[0]["ok"] and _ids(claimed) == made[1:]
    closed = (await attempt_rows(core, made[0]))[0]
    assert {a["claimed_at"] for t in made[1:] for a in await attempt_rows(core, t)} == {closed["ended_at"]}
    assert all(g.todo["owner"] == ep.owner for g in claimed)
    outsider = await make_world(core)
    results, claimed, _ = await todos.complete_and_take_next(core, outsider.e1, [{"id": made[1]}])
    assert results[0]["error"] == {"code": "not_found", "message": "todo not found"} and claimed == []
    assert await check(core) == []


# -------------------------------------------------------------------------------------------- MCP

@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_mcp_claim_next_with_complete(core, server, mode):
    """Results are validated against the listed output schema (mcp_support.Checked)."""
    a = await vend(core, queues=["work"], verbs=list(VERBS))
    other = await vend(core, "bob", queues=["work"], verbs=list(VERBS))
    made = [(await push(core, a, f"w{i}"))["id"] for i in range(4)]
    theirs = (await push(core, other, "theirs"))["id"]
    async with sdk(server.url, a, mode=mode) as c:
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert listed["claim_next"].input_schema["properties"]["complete"]["maxItems"] == 100
        got = body(await c.call_tool("claim_next", {"max_todos": 2, "require_fence": True}))
        tokens = {x["todo"]["id"]: x["lease_token"] for x in got["todos"]}
        nxt = body(await c.call_tool("claim_next", {"max_todos": 2, "require_fence": True, "complete": [
            {"id": i, "lease_token": t, "summary": "done"} for i, t in tokens.items()] + [{"id": theirs}]}))
        assert [(r["id"], r["ok"]) for r in nxt["completed"]] == [(made[0], True), (made[1], True), (theirs, False)]
        assert nxt["completed"][2]["error"] == {"code": "not_found", "message": "todo not found"}
        assert [x["todo"]["id"] for x in nxt["todos"]] == made[2:] and nxt["empty"] is False
        single = body(await c.call_tool("claim_next", {"complete": [
            {"id": x["todo"]["id"], "lease_token": x["lease_token"]} for x in nxt["todos"]]}))
        assert single == {"empty": True, "completed": single["completed"]}  # the single shape, plus completed
        assert [r["todo"]["state"] for r in single["completed"]] == ["done", "done"]
        err = error_body(await c.call_tool("claim_next", {"complete": [{"id": made[0], "retry": False}]}))
        assert (err["code"], err["argument"]) == ("invalid", "complete")
        err = error_body(await c.call_tool("claim_next", {"complete": []}))
        assert (err["code"], err["argument"]) == ("invalid", "complete")
    narrow = await vend(core, "carol", queues=["work"], verbs=["claim_next", "list_todos"])
    t = (await push(core, narrow, "n"))["id"]
    async with sdk(server.url, narrow, mode=mode) as c:
        err = error_body(await c.call_tool("claim_next", {"complete": [{"id": t}]}))
        assert (err["code"], err["argument"]) == ("forbidden", "complete")
    assert (await sql(core, "SELECT state FROM todos WHERE id = %s", (t,)))[0]["state"] == "pending"
    assert await check(core) == []
