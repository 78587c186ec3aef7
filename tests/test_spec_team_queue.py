"""SPEC-0034 on a team queue (issue 13): the attempt scenarios rerun on `team:<slug>/<queue>`, where
the members' own endpoints compete for the team's todos, each with its own credential. Attempts,
died versus failed, the fence, prior attempts handed to another member's endpoint, and isolation:
outside reach a team todo is not_found, byte-identical to an id never minted (core and MCP).

And the two choices SPEC-0034 leaves open (SYSTEM.md section 19): a revoked endpoint's team todo goes
back to pending (`revoked`, `requeued`) while its own todo is dead-lettered as before; a removed
member's lease goes back to pending (`released`, `requeued`), the attempt counter given back.

Time moves by SQL, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from conftest import make_settings, start_thread_server
from core_world import attempt_rows, check, lapse, make_due, snapshot, sql, todo_row
from mcp_support import Agent, body, error_body, sdk
from switchboard.core import endpoints, humans, shapes, sweeps, teams, todos
from switchboard.core.errors import Conflict, NotFound
from team_world import make_fleet

# --------------------------------------------------------------------------------------- attempts


async def test_team_req1_fields_after_a_claim_by_a_members_endpoint(core):
    f = await make_fleet(core)
    t = await f.push()
    caller = (await f.caller(2)).with_session("mcp-session-S")
    got = await todos.claim(core, caller, t["id"], claimant="harness/box/fixer/run-7")
    assert got.attempt_seq == 1 and got.todo["queue"] == f.label
    row, (a,) = await snapshot(core, t["id"])
    assert row["team_id"] is not None and row["endpoint_id"] is None
    assert row["claimed_by_endpoint_id"] == caller.endpoint_id  # the claim records its endpoint
    assert (a["claimer_kind"], a["claimer_endpoint_id"], a["claimer_session"]) == (
        "endpoint", caller.endpoint_id, "mcp-session-S")
    assert a["claimant"] == "harness/box/fixer/run-7" and a["owner"] == row["owner"] == caller.owner
    assert a["outcome"] is None and a["ended_at"] is None
    assert await check(core) == []


async def test_team_req2_a_lost_claim_race_between_two_members_writes_nothing(core):
    f = await make_fleet(core)
    t = await f.push()
    a, b = await f.caller(1), await f.caller(2)
    results = await asyncio.gather(todos.claim(core, a, t["id"]), todos.claim(core, b, t["id"]),
                                   return_exceptions=True)
    wins = [r for r in results if isinstance(r, todos.ClaimResult)]
    assert len(wins) == 1 and sum(isinstance(r, Conflict) for r in results) == 1, results
    rows = await attempt_rows(core, t["id"])
    assert len(rows) == 1 and rows[0]["claimer_endpoint_id"] in (a.endpoint_id, b.endpoint_id)
    assert (await todo_row(core, t["id"]))["claimed_by_endpoint_id"] == rows[0]["claimer_endpoint_id"]


async def test_team_req2_interrupt_answered_by_another_member_keeps_the_attempt_open(core):
    f = await make_fleet(core)
    t = await f.push()
    holder = await f.caller(2)
    await todos.claim(core, holder, t["id"])
    assert (await todos.request_input(core, holder, t["id"], question="which branch?"))["state"] == "input-required"
    # The team's owner answers: members act on the team's todos as owners do on their own.
    resumed = await todos.provide_input(core, f.humans[0], t["id"], payload={"branch": "main"})
    assert resumed["state"] == "claimed"
    rows = await attempt_rows(core, t["id"])
    assert len(rows) == 1 and rows[0]["ended_at"] is None
    await todos.complete(core, holder, t["id"])
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["disposition"]) == ("completed", "done")
    assert await check(core) == []


async def test_team_req3_only_the_holder_closes_and_fail_below_the_cap(core):
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    holder, other = await f.caller(0), await f.caller(1)
    await todos.claim(core, holder, t["id"])
    before = await snapshot(core, t["id"])
    for verb in (todos.complete, todos.fail, todos.release, todos.heartbeat, todos.request_input):
        with pytest.raises(Conflict):  # in reach (a member's endpoint), but not its lease
            await verb(core, other, t["id"])
    assert await snapshot(core, t["id"]) == before
    out = await todos.fail(core, holder, t["id"], summary="tests still red")
    assert out["state"] == "failed" and out["dead_letter"] is False
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["disposition"]) == ("failed", "retry_scheduled")


async def test_team_req3_takeover_by_another_members_endpoint(core):
    f = await make_fleet(core)
    t = await f.push()
    first, second = (await f.caller(0)).with_session("old"), (await f.caller(2)).with_session("new")
    await todos.claim(core, first, t["id"])
    await lapse(core, t["id"])
    got = await todos.claim_next(core, second)
    assert got is not None and got.todo["id"] == t["id"] and got.attempt_seq == 2
    a1, a2 = await attempt_rows(core, t["id"])
    assert (a1["outcome"], a1["disposition"]) == ("lease_expired", "requeued")
    assert a1["ended_at"] == a2["claimed_at"]  # one transaction
    assert a2["claimer_endpoint_id"] == second.endpoint_id
    assert (await todo_row(core, t["id"]))["claimed_by_endpoint_id"] == second.endpoint_id
    with pytest.raises(Conflict):  # the first holder lost the lease
        await todos.complete(core, first, t["id"])
    assert got.prior_attempts[0]["outcome"] == "lease_expired" and got.prior_attempts[0]["died"] is True
    assert await check(core) == []


# ----------------------------------------------------------------------------------- died, failed


async def test_team_req4_died_versus_failed_seen_by_the_next_members_endpoint(core):
    """Attempt 1 fails with a report (member 0's endpoint); attempt 2 heartbeats once and dies
    (member 1's endpoint, reaped by the sweep); member 2's endpoint claims attempt 3 and reads both."""
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    e0, e1, e2 = [await f.caller(i) for i in range(3)]
    await todos.claim(core, e0, t["id"], claimant="w0")
    await todos.fail(core, e0, t["id"], summary="tests still red", artifact="mcp://cairn/Zz9")
    await make_due(core, t["id"])
    await todos.claim(core, e1, t["id"], claimant="w1")
    await todos.heartbeat(core, e1, t["id"])
    beat = (await attempt_rows(core, t["id"]))[1]["last_heartbeat_at"]
    await lapse(core, t["id"])
    report = await sweeps.sweep_once(core)
    assert report.reaped == 1
    row, (a1, a2) = await snapshot(core, t["id"])
    assert row["state"] == "pending" and row["claimed_by_endpoint_id"] == e1.endpoint_id  # provenance only
    assert (a2["outcome"], a2["disposition"]) == ("reaped", "requeued")
    assert a2["summary"] is None and a2["artifact"] is None and a2["last_heartbeat_at"] == beat
    got = await todos.claim(core, e2, t["id"], claimant="w2")
    assert got.attempt_seq == 3 and got.attempts_total == 3
    died, failed = got.prior_attempts
    assert (died["seq"], died["outcome"], died["died"], died["summary"]) == (2, "reaped", True, None)
    assert died["last_heartbeat_at"] == shapes.ts(beat) and died["claimant"] == "w1"
    assert (failed["seq"], failed["outcome"], failed["died"]) == (1, "failed", False)
    assert failed["summary"] == "tests still red" and failed["artifact"] == "mcp://cairn/Zz9"
    # Prior attempts are provenance-free: no endpoint, session or token hash of another member.
    assert set(died) == set(shapes.ATTEMPT_FIELDS)
    assert not {"claimer_endpoint_id", "claimer_session", "lease_token_hash"} & set(died)
    detail = await todos.get(core, e2, t["id"])
    assert [a["died"] for a in detail["attempts"]] == [False, True, False]
    assert await check(core) == []


# ------------------------------------------------------------------------------------------ fence


async def test_team_req6_fence_on_a_team_todo(core):
    f = await make_fleet(core)
    t = await f.push()
    holder = await f.caller(1)
    got = await todos.claim(core, holder.with_session("harness"), t["id"], require_fence=True)
    before = await snapshot(core, t["id"])
    for call in (lambda: todos.complete(core, holder, t["id"]),
                 lambda: todos.complete(core, holder, t["id"], lease_token="not-the-token"),
                 lambda: todos.heartbeat(core, holder, t["id"]),
                 lambda: todos.release(core, holder, t["id"]),
                 lambda: todos.fail(core, holder, t["id"])):
        with pytest.raises(Conflict):  # never forbidden: that would confirm the fence
            await call()
    other = await f.caller(2)
    with pytest.raises(Conflict):  # the right token does not make another endpoint the holder
        await todos.complete(core, other, t["id"], lease_token=got.lease_token)
    assert await snapshot(core, t["id"]) == before
    await todos.heartbeat(core, holder, t["id"], lease_token=got.lease_token)
    await todos.complete(core, holder, t["id"], lease_token=got.lease_token, summary="done")
    assert (await attempt_rows(core, t["id"]))[0]["outcome"] == "completed"


async def test_team_req6_a_stale_workers_token_after_another_member_took_over(core):
    f = await make_fleet(core)
    t = await f.push()
    old_holder, new_holder = await f.caller(0), await f.caller(1)
    old = await todos.claim(core, old_holder, t["id"], require_fence=True)
    await lapse(core, t["id"])
    new = await todos.claim_next(core, new_holder, require_fence=True)
    assert new.attempt_seq == 2
    before = await snapshot(core, t["id"])
    for caller in (old_holder, new_holder):
        with pytest.raises(Conflict):
            await todos.complete(core, caller, t["id"], lease_token=old.lease_token)
    assert await snapshot(core, t["id"]) == before
    await todos.complete(core, new_holder, t["id"], lease_token=new.lease_token)


async def test_team_req6_members_are_exempt_from_the_fence_as_owners_are(core):
    f = await make_fleet(core)
    t = await f.push()
    await todos.claim(core, await f.caller(0), t["id"], require_fence=True)
    out = await todos.release(core, f.humans[2], t["id"], summary="taken back by a member")  # a plain member
    assert out["state"] == "pending"
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["summary"]) == ("released", "taken back by a member")


# -------------------------------------------------------------------------------- prior attempts


async def test_team_req7_prior_attempts_handed_to_the_next_claimer_from_another_members_endpoint(core):
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    first = await todos.claim(core, await f.caller(0), t["id"], claimant="member-0/run-1")
    assert first.prior_attempts == []
    await todos.fail(core, await f.caller(0), t["id"], summary="tests still red")
    await make_due(core, t["id"])
    got = await todos.claim_next(core, await f.caller(2), claimant="member-2/run-1")
    assert got.todo["id"] == t["id"] and got.attempt_seq == 2
    (p,) = got.prior_attempts
    assert (p["seq"], p["summary"], p["claimant"], p["outcome"]) == (1, "tests still red", "member-0/run-1", "failed")
    assert set(p) == set(shapes.ATTEMPT_FIELDS)


async def test_team_req8_reading_a_dead_letter_from_any_members_endpoint(core):
    f = await make_fleet(core)
    t = await f.push(max_attempts=3)
    for i in range(3):
        caller = await f.caller(i)
        await todos.claim(core, caller, t["id"])
        out = await todos.fail(core, caller, t["id"], summary=f"try {i + 1}")
        if not out["dead_letter"]:
            await make_due(core, t["id"])
    detail = await todos.get(core, await f.caller(1), t["id"])
    assert detail["dead_letter"] is True and detail["next_retry_at"] is None
    assert [a["seq"] for a in detail["attempts"]] == [3, 2, 1]
    assert [a["summary"] for a in detail["attempts"]] == ["try 3", "try 2", "try 1"]


async def test_team_req9_release_on_shutdown(core):
    f = await make_fleet(core)
    t = await f.push()
    holder = await f.caller(2)
    await todos.claim(core, holder, t["id"])
    out = await todos.release(core, holder, t["id"], summary="daemon stopping")
    assert out["state"] == "pending" and out["attempt"] == 1
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["disposition"], a["summary"]) == ("released", "requeued", "daemon stopping")
    got = await todos.claim_next(core, await f.caller(0))  # any member's endpoint takes it next
    assert got.todo["id"] == t["id"] and got.attempt_seq == 2


async def test_team_req12_manual_retry_by_a_member_keeps_history(core):
    f = await make_fleet(core)
    t = await f.push(max_attempts=2)
    for i in range(2):
        await todos.claim(core, await f.caller(i), t["id"])
        out = await todos.fail(core, await f.caller(i), t["id"])
        if not out["dead_letter"]:
            await make_due(core, t["id"])
    retried = await todos.retry(core, f.humans[2], t["id"])  # a plain member retries the team's dead letter
    assert retried["state"] == "pending" and retried["attempt"] == 0
    got = await todos.claim(core, await f.caller(2), t["id"])
    assert got.attempt_seq == 3 and got.todo["attempt"] == 1 and got.prior_attempts[0]["seq"] == 2


# -------------------------------------------------------------------------------------- isolation


async def _outsiders(core, f):
    """Callers that must not see the team's todos: another human and their endpoint, a member's
    endpoint that was never granted the queue, and a removed member with their endpoint."""
    stranger = await humans.add(core, f"stranger-{uuid.uuid4().hex[:6]}")
    _, cred = await endpoints.vend(core, stranger, agent="elsewhere", queues=["own"])
    stranger_ep = endpoints.caller_from_row(await endpoints.resolve_credential(core, cred))
    ungranted = await f.vend(2, agent="ungranted", grant=False)  # a member's vend waits for a grant
    removed_ep = await f.caller(1)  # resolved before the removal: a cache that still believes in it
    await teams.remove_member(core, f.humans[0], f.slug, f.humans[1].name)
    return {"stranger": stranger, "stranger's endpoint": stranger_ep, "ungranted endpoint": ungranted,
            "removed member": f.humans[1], "removed member's endpoint": removed_ep}


async def test_team_req10_outside_reach_a_team_todo_is_not_found_byte_identical(core):
    f = await make_fleet(core)
    t = await f.push()
    held = await f.push()
    await todos.claim(core, await f.caller(0), held["id"])
    await todos.fail(core, await f.caller(0), held["id"], summary="secret summary", retry=True)
    await make_due(core, held["id"])
    await todos.claim(core, await f.caller(0), held["id"], require_fence=True)  # held, fenced, with history
    outsiders = await _outsiders(core, f)
    before = [await snapshot(core, x["id"]) for x in (t, held)]
    for name, who in outsiders.items():
        bodies = set()
        for todo_id in (t["id"], held["id"], f"td_{uuid.uuid4()}"):
            calls = [lambda: todos.get(core, who, todo_id), lambda: todos.claim(core, who, todo_id),
                     lambda: todos.heartbeat(core, who, todo_id), lambda: todos.complete(core, who, todo_id),
                     lambda: todos.fail(core, who, todo_id), lambda: todos.release(core, who, todo_id),
                     lambda: todos.request_input(core, who, todo_id)]
            if isinstance(who, type(f.humans[0])):
                calls += [lambda: todos.cancel(core, who, todo_id), lambda: todos.retry(core, who, todo_id),
                          lambda: todos.provide_input(core, who, todo_id, payload={})]
            for call in calls:
                with pytest.raises(NotFound) as err:
                    await call()
                bodies.add(json.dumps(err.value.to_dict(), sort_keys=True))
        assert bodies == {json.dumps({"code": "not_found", "message": "todo not found"})}, (name, bodies)
    assert [await snapshot(core, x["id"]) for x in (t, held)] == before  # nothing changed
    # Nor do lists and claims show them.
    for name in ("stranger's endpoint", "ungranted endpoint", "removed member's endpoint"):
        who = outsiders[name]
        fresh = endpoints.caller_from_row(await endpoints.resolve_credential(
            core, f.credentials[f.endpoints.index(who)])) if who in f.endpoints else who
        for caller in {who, fresh}:
            listed = {x["id"] for x in await todos.list_for_endpoint(core, caller, limit=200)}
            assert not listed & {t["id"], held["id"]}, name
            claimed, deferred = await todos.take_next(core, caller)
            assert claimed == [] and deferred == [], name
    for name in ("stranger", "removed member"):
        listed = {x["id"] for x in await todos.list_for_human(core, outsiders[name])}
        assert not listed & {t["id"], held["id"]}, name
    assert await check(core) == []


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, mcp_auth_cache_seconds=0))
    yield srv
    srv.stop()


def _agent(f, i: int) -> Agent:
    return Agent(slug=f.ep_slugs[i], credential=f.credentials[i], endpoint_id=str(f.endpoints[i].endpoint_id),
                 human=f.humans[f.ep_human[i]], queues=list(f.endpoints[i].queues))


async def test_team_req10_over_mcp_a_non_member_gets_the_not_found_of_an_unknown_id(core, server):
    """At the wire: a member's endpoint reads the team todo and its attempts with get_todo; an
    endpoint of a member who was removed, and one never granted, get an error text byte-identical to
    an id never minted, for get_todo and for the lease verbs."""
    f = await make_fleet(core)
    t = await f.push()
    await todos.claim(core, await f.caller(0), t["id"])
    await todos.fail(core, await f.caller(0), t["id"], summary="secret summary")
    async with sdk(server.url, _agent(f, 2)) as c:
        got = body(await c.call_tool("get_todo", {"id": t["id"]}))
        assert got["queue"] == f.label and got["attempts"][0]["summary"] == "secret summary"
    ungranted = await f.vend(2, agent="ungranted", grant=False)
    assert ungranted is f.endpoints[-1]
    await teams.remove_member(core, f.humans[0], f.slug, f.humans[1].name)
    for agent in (_agent(f, 1), _agent(f, len(f.endpoints) - 1)):
        async with sdk(server.url, agent) as c:
            for tool, args in (("get_todo", {}), ("claim", {}), ("heartbeat", {}), ("complete", {}),
                               ("fail", {}), ("release", {})):
                tools = {x.name for x in (await c.list_tools()).tools}
                if tool not in tools:
                    continue
                foreign = await c.call_tool(tool, {"id": t["id"], **args})
                unknown = await c.call_tool(tool, {"id": f"td_{uuid.uuid4()}", **args})
                assert error_body(foreign) == error_body(unknown) == {"code": "not_found", "message": "todo not found"}
                assert foreign.content[0].text == unknown.content[0].text  # byte-identical
            listed = body(await c.call_tool("list_todos", {}))
            assert t["id"] not in json.dumps(listed)


# ------------------------------------------------------------------------------------- decisions


async def test_team_revoked_endpoint_hands_its_team_todo_back_and_dead_letters_its_own(core):
    """One revocation, two rows: the team's todo it held is pending again (`revoked`, `requeued`, the
    attempt counter given back) for another member's endpoint; its own todo is a dead letter
    (`revoked`, `dead_lettered`) as SPEC-0034 has it."""
    f = await make_fleet(core)
    team_todo = await f.push(max_attempts=3)
    holder = await f.caller(2)
    own, _ = await todos.create(core, endpoint_id=holder.endpoint_id, queue="own", title="mine")
    await todos.claim(core, holder, team_todo["id"])
    await todos.claim(core, holder, own["id"])
    out = await endpoints.revoke(core, f.humans[2], f.ep_slugs[2])
    assert out["state"] == "revoked"
    row, (a,) = await snapshot(core, team_todo["id"])
    assert (row["state"], row["owner"], row["claimed_by_endpoint_id"], row["attempt"]) == ("pending", None, None, 0)
    assert row["result"] is None
    assert (a["outcome"], a["disposition"]) == ("revoked", "requeued")
    row, (a,) = await snapshot(core, own["id"])
    assert (row["state"], row["next_retry_at"], row["result"]["error"]) == ("failed", None, "endpoint_revoked")
    assert (a["outcome"], a["disposition"]) == ("revoked", "dead_lettered")
    got = await todos.claim_next(core, await f.caller(0))
    assert got.todo["id"] == team_todo["id"] and got.attempt_seq == 2 and got.todo["attempt"] == 1
    assert got.prior_attempts[0]["outcome"] == "revoked" and got.prior_attempts[0]["died"] is False
    assert await check(core) == []


async def test_team_removed_members_lease_goes_back_released(core):
    """Removing a member hands back, in the same transaction, the leases their endpoints hold on the
    team's todos (and one they hold themselves from the Board): `released`, `requeued`, the attempt
    counter given back; their own endpoints' todos are untouched."""
    f = await make_fleet(core, endpoints=4)  # member 0 has two endpoints
    by_endpoint, by_hand, other = await f.push(), await f.push(), await f.push()
    leaving = await f.caller(3)  # member 0's second endpoint
    own, _ = await todos.create(core, endpoint_id=leaving.endpoint_id, queue="own", title="mine")
    await todos.claim(core, leaving, by_endpoint["id"])
    await todos.claim(core, leaving, own["id"])
    await todos.claim(core, await f.caller(1), other["id"])  # another member's lease stays
    # Member 0 hands the team to member 1, who then removes member 0.
    await teams.set_role(core, f.humans[0], f.slug, f.humans[1].name, "owner")
    await todos.claim(core, f.humans[0], by_hand["id"])  # a Board claim of their own
    out = await teams.remove_member(core, f.humans[1], f.slug, f.humans[0].name)
    assert out["leases_handed_back"] == 2
    for t in (by_endpoint, by_hand):
        row, (a,) = await snapshot(core, t["id"])
        assert (row["state"], row["owner"], row["attempt"], row["attempts_total"]) == ("pending", None, 0, 1)
        assert (a["outcome"], a["disposition"]) == ("released", "requeued")
    assert (await todo_row(core, other["id"]))["state"] == "claimed"
    assert (await todo_row(core, own["id"]))["state"] == "claimed"
    with pytest.raises(NotFound):
        await todos.complete(core, leaving, by_endpoint["id"])
    got = await todos.claim_next(core, await f.caller(2))
    assert got.todo["id"] in (by_endpoint["id"], by_hand["id"]) and got.prior_attempts[0]["outcome"] == "released"
    assert await check(core) == []


async def test_team_membership_counts_on_every_call_without_a_cache(core):
    """The endpoint's own credential and cached caller stay valid; only the membership moved: its
    claims see the team queue again when the member is re-added and re-granted, and not before."""
    f = await make_fleet(core)
    t = await f.push()
    cached = await f.caller(2)
    await teams.remove_member(core, f.humans[0], f.slug, f.humans[2].name)
    assert await todos.claim_next(core, cached) is None
    await teams.add_member(core, f.humans[0], f.slug, f.humans[2].name)
    assert await todos.claim_next(core, cached) is None  # the removal took the grant with it
    await teams.grant(core, f.humans[0], f.slug, f.label, f.ep_slugs[2])
    got = await todos.claim_next(core, cached)
    assert got is not None and got.todo["id"] == t["id"]
    count = await sql(core, "SELECT count(*) AS n FROM team_grants WHERE endpoint_id = %s", (cached.endpoint_id,))
    assert count[0]["n"] == 1
