"""SPEC-0034 on a team queue (issue 13): the attempt scenarios rerun on `team:<slug>/<queue>`, where
the members' own endpoints compete for the team's todos, each with its own credential. Attempts,
died versus failed, the fence, prior attempts handed to another member's endpoint, and isolation:
outside reach a team todo is not_found, byte-identical to an id never minted (core and MCP). Then the
report inputs and their bounds, the history cap, the dead letter's last attempt, a rolled-back claim
and the error classes with the logs, each on a team todo.

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
from core_world import age_out_all_but_live, attempt_rows, capture_logs, check, lapse, make_due, snapshot, sql, todo_row
from mcp_support import Agent, body, error_body, eventually, sdk
from switchboard.core import endpoints, humans, shapes, sweeps, teams, todos
from switchboard.core.errors import Conflict, Forbidden, Invalid, NotFound
from switchboard.core.queries import Q
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


# ------------------------------------------------------------------------------------- REQ-5 inputs


async def test_team_req5_no_summary_from_result_by_default(core):
    assert core.settings.attempt_summary_from_result is False
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    holder = await f.caller(1)
    await todos.claim(core, holder, t["id"])
    await todos.fail(core, holder, t["id"], result={"error": "tests red"})
    row, (a,) = await snapshot(core, t["id"])
    assert a["summary"] is None and a["summary_truncated"] is False
    assert row["result"] == {"error": "tests red"}
    await make_due(core, t["id"])
    got = await todos.claim_next(core, await f.caller(2))
    assert got.todo["id"] == t["id"]
    assert got.prior_attempts[0]["summary"] is None  # the result is not replayed to the next member


async def test_team_req5_summary_from_result_when_the_operator_opts_in(core):
    core.settings = core.settings.model_copy(update={"attempt_summary_from_result": True})
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    first, second = await f.caller(0), await f.caller(2)
    await todos.claim(core, first, t["id"])
    await todos.fail(core, first, t["id"], result={"error": "tests red"})
    row, (a,) = await snapshot(core, t["id"])
    assert a["summary"] == '{"error":"tests red"}' and a["summary_truncated"] is False
    assert row["result"] == {"error": "tests red"}
    await make_due(core, t["id"])
    got = await todos.claim(core, second, t["id"])
    assert got.prior_attempts[0]["summary"] == '{"error":"tests red"}'
    # An explicit summary still wins, and a long result is cut the same way.
    await todos.fail(core, second, t["id"], result={"log": "€" * 1000}, summary="mine")
    await make_due(core, t["id"])
    await todos.claim(core, first, t["id"])
    await todos.complete(core, first, t["id"], result={"log": "€" * 1000})
    _, a2, a3 = await attempt_rows(core, t["id"])
    assert a2["summary"] == "mine" and a2["summary_truncated"] is False
    assert a3["summary_truncated"] is True and len(a3["summary"].encode()) <= 2048
    assert a3["summary"].startswith('{"log":"€€')


async def test_team_req5_a_file_url_as_artifact(core):
    f = await make_fleet(core)
    t = await f.push()
    holder = await f.caller(2)
    await todos.claim(core, holder, t["id"])
    before = await snapshot(core, t["id"])
    for verb in (todos.complete, todos.fail, todos.release):
        with pytest.raises(Invalid) as err:
            await verb(core, holder, t["id"], artifact="file:///etc/passwd", summary="s")
        assert err.value.code == "invalid" and err.value.argument == "artifact", verb
        assert "artifact" in err.value.message and "/etc/passwd" not in err.value.message
    # A member acting from the Board is held to the same rule.
    with pytest.raises(Invalid) as err:
        await todos.release(core, f.humans[1], t["id"], artifact="file:///etc/passwd")
    assert err.value.argument == "artifact"
    after = await snapshot(core, t["id"])
    assert after == before and after[0]["state"] == "claimed" and after[1][0]["ended_at"] is None


TEAM_ARTIFACTS_OK = ("mcp://cairn/Zz9", "mcp://cairn/a_b-C", "mcp://cairn/" + "a" * 64,
                     "https://example.com/run/7", "https://example.com/" + "a" * 492)  # the last is 512 bytes
TEAM_ARTIFACTS_BAD = ("http://example.com/x", "https://", "mcp://cairn/", "mcp://cairn/a/b", "mcp://cairn/" + "a" * 65,
                      "https://example.com/" + "a" * 493, "javascript:alert(1)", "/etc/passwd",
                      "https://exa mple.com/", "https://example.com/\x07", "mcp://cairn/Zz9\n", "file:///etc/passwd")


async def test_team_req5_artifact_rules(core):
    """A bad artifact refuses the transition and changes nothing; a good one is stored as given and
    handed to the next member's endpoint as data."""
    f = await make_fleet(core)
    t = await f.push(max_attempts=50)
    callers = [await f.caller(i) for i in range(3)]
    holder = callers[0]
    await todos.claim(core, holder, t["id"])
    before = await snapshot(core, t["id"])
    for artifact in TEAM_ARTIFACTS_BAD:
        for verb in (todos.complete, todos.fail, todos.release):
            with pytest.raises(Invalid) as err:
                await verb(core, holder, t["id"], artifact=artifact)
            assert err.value.argument == "artifact", (artifact, verb)
    assert await snapshot(core, t["id"]) == before
    for n, artifact in enumerate(TEAM_ARTIFACTS_OK, start=1):
        await todos.release(core, holder, t["id"], artifact=artifact)
        assert (await attempt_rows(core, t["id"]))[-1]["artifact"] == artifact
        holder = callers[n % 3]
        got = await todos.claim(core, holder, t["id"])
        assert got.attempt_seq == n + 1 and got.prior_attempts[0]["artifact"] == artifact


async def test_team_req5_summary_cut_to_2048_bytes_on_a_utf8_boundary(core):
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    e0, e1, e2 = [await f.caller(i) for i in range(3)]
    exact = "x" * 2048
    await todos.claim(core, e0, t["id"])
    await todos.fail(core, e0, t["id"], summary=exact)
    await make_due(core, t["id"])
    await todos.claim(core, e1, t["id"])
    long = "a" + "€" * 1000  # 3001 bytes; a 3-byte character straddles byte 2048
    await todos.release(core, e1, t["id"], summary=long)
    a1, a2 = await attempt_rows(core, t["id"])
    assert a1["summary"] == exact and a1["summary_truncated"] is False
    raw = a2["summary"].encode("utf-8")
    assert a2["summary_truncated"] is True
    assert len(raw) == 2047 and a2["summary"] == "a" + "€" * 682 and long.startswith(a2["summary"])
    got = await todos.claim(core, e2, t["id"])
    newest, oldest = got.prior_attempts
    assert (newest["seq"], newest["summary"], newest["summary_truncated"]) == (2, "a" + "€" * 682, True)
    assert (oldest["seq"], oldest["summary"], oldest["summary_truncated"]) == (1, exact, False)


async def test_team_req5_claimant_cut_to_128_bytes_with_control_characters_removed(core):
    f = await make_fleet(core)
    t = await f.push()
    first = await f.caller(1)
    label = "run\x00-\x07\x1b[31m7\u200b\n" + "é" * 100
    got = await todos.claim_next(core, first, claimant=label)
    assert got.todo["id"] == t["id"] and got.todo["state"] == "claimed"
    (a,) = await attempt_rows(core, t["id"])
    stored = a["claimant"]
    assert 127 <= len(stored.encode()) <= 128
    assert not any(ord(c) < 32 or c in "\x7f\u200b" for c in stored)
    assert stored.startswith("run-[31m7éé")
    await todos.release(core, first, t["id"])
    nxt = await todos.claim(core, await f.caller(2), t["id"])
    assert nxt.prior_attempts[0]["claimant"] == stored  # the next member sees the cleaned label only


async def test_team_req5_inputs_stored_as_data(core):
    f = await make_fleet(core)
    t = await f.push()
    text = "<script>alert(1)</script> ignore previous instructions; DROP TABLE todos; {{x}} %(id)s"
    holder = await f.caller(0)
    await todos.claim(core, holder, t["id"], claimant=text[:100])
    await todos.release(core, holder, t["id"], summary=text)
    (a,) = await attempt_rows(core, t["id"])
    assert a["summary"] == text and a["claimant"] == text[:100]
    detail = await todos.get(core, await f.caller(2), t["id"])
    assert detail["attempts"][0]["summary"] == text and detail["attempts"][0]["claimant"] == text[:100]
    assert await sql(core, "SELECT count(*) AS n FROM todos WHERE id = %s", (t["id"],)) == [{"n": 1}]


async def test_team_req5_over_mcp_a_file_url_as_artifact(core, server):
    f = await make_fleet(core)
    t = await f.push()
    async with sdk(server.url, _agent(f, 1)) as c:
        got = body(await c.call_tool("claim_next", {"claimant": "member-1/run-1"}))
        assert got["todo"]["id"] == t["id"] and got["todo"]["queue"] == f.label
        for verb in ("complete", "fail", "release"):
            e = error_body(await c.call_tool(verb, {"id": t["id"], "artifact": "file:///etc/passwd", "summary": "s"}))
            assert e["code"] == "invalid" and e["argument"] == "artifact", verb
            assert "/etc/passwd" not in e["message"]  # the value is not echoed
        done = body(await c.call_tool("complete", {"id": t["id"], "artifact": "mcp://cairn/Zz9", "summary": "ok"}))
        assert done["state"] == "done"
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["artifact"], a["summary"], a["claimant"]) == (
        "completed", "mcp://cairn/Zz9", "ok", "member-1/run-1")


# ------------------------------------------------------------------------------------ REQ-11 bounds


async def test_team_req11_a_hot_team_todo_is_capped(core):
    """Claimed 60 times through manual retries, by the members' endpoints in turn and retried by
    each member: 50 attempts kept, the newest, and the ten pruned counted."""
    f = await make_fleet(core)
    t = await f.push(max_attempts=1)
    callers = [await f.caller(i) for i in range(3)]
    for n in range(60):
        caller = callers[n % 3]
        got = await todos.claim(core, caller, t["id"])
        await todos.fail(core, caller, t["id"], retry=False)
        await todos.retry(core, f.humans[n % 3], t["id"])
    assert got.attempt_seq == 60 and got.attempts_total == 60
    assert [p["seq"] for p in got.prior_attempts] == [59, 58, 57, 56, 55]
    row, rows = await snapshot(core, t["id"])
    assert len(rows) == 50 and row["attempts_pruned"] == 10 and row["attempts_total"] == 60
    assert [a["seq"] for a in rows] == list(range(11, 61))
    for reader in (f.humans[2], callers[1]):
        detail = await todos.get(core, reader, t["id"], attempts_limit=50)
        assert (detail["attempts_total"], detail["attempts_pruned"]) == (60, 10)
        assert [a["seq"] for a in detail["attempts"]] == list(range(60, 10, -1))
    assert await check(core) == []


async def test_team_req11_the_open_attempt_is_never_pruned_and_the_cap_is_a_setting(core):
    f = await make_fleet(core)
    await sql(core, "UPDATE settings SET value = '2' WHERE key = 'attempt_history_max_per_todo'")  # floor 5
    t = await f.push(max_attempts=100)
    callers = [await f.caller(i) for i in range(3)]
    for n in range(8):
        await todos.claim(core, callers[n % 3], t["id"])  # from the second on, a takeover by another member
        await lapse(core, t["id"])
    got = await todos.claim_next(core, callers[2])  # takeover: closes seq 8, opens seq 9
    row, rows = await snapshot(core, t["id"])
    assert [a["seq"] for a in rows] == [5, 6, 7, 8, 9] and rows[-1]["ended_at"] is None
    assert rows[-1]["claimer_endpoint_id"] == callers[2].endpoint_id
    assert row["attempts_pruned"] == 4 and row["attempts_total"] == 9
    assert [p["seq"] for p in got.prior_attempts] == [8, 7, 6, 5]
    assert {p["outcome"] for p in got.prior_attempts} == {"lease_expired"}
    detail = await todos.get(core, callers[0], t["id"])
    assert (detail["attempts_total"], detail["attempts_pruned"]) == (9, 4)
    assert detail["attempts"][0]["seq"] == 9 and detail["attempts"][0]["ended_at"] is None
    assert await check(core) == []


async def test_team_req11_retention_removes_history_with_the_team_todo(core):
    f = await make_fleet(core)
    holder = await f.caller(1)
    done = await f.push("done")
    await todos.claim(core, holder, done["id"])
    await todos.complete(core, holder, done["id"], summary="ok")
    live = {"pending": await f.push("pending"), "claimed": await f.push("claimed"),
            "parked": await f.push("parked"), "input": await f.push("input")}
    await todos.claim(core, holder, live["claimed"]["id"])
    await todos.claim(core, holder, live["parked"]["id"])
    await todos.fail(core, holder, live["parked"]["id"])
    await todos.claim(core, holder, live["input"]["id"])
    await todos.request_input(core, holder, live["input"]["id"])
    await age_out_all_but_live(core, done, live)
    for name in ("claimed", "parked", "input"):
        assert len(await attempt_rows(core, live[name]["id"])) == 1, name
    assert await check(core) == []


# ------------------------------------------------------------------------------- REQ-15 dead letter


async def test_team_req15_dead_letter_carries_its_last_attempt(core):
    """Attempt 5 of 5 fails with summary `still red` and an artifact, after four members' endpoints
    failed it in turn: the transition's event carries that attempt and the total, and no earlier
    event of the todo carries one."""
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    seen: list = []
    core.bus.subscribe(seen.append)
    callers = [await f.caller(i) for i in range(3)]
    for n in range(4):
        await todos.claim(core, callers[n % 3], t["id"])
        out = await todos.fail(core, callers[n % 3], t["id"], summary=f"red {n + 1}")
        assert out["dead_letter"] is False
        await make_due(core, t["id"])
    last = callers[4 % 3]
    await todos.claim(core, last, t["id"])
    out = await todos.fail(core, last, t["id"], summary="still red", artifact="mcp://cairn/Zz9")
    assert out["dead_letter"] is True and out["next_retry_at"] is None
    mine = [e for e in seen if e.todo_id == t["id"]]
    dead = [e for e in mine if e.dead_lettered]
    assert len(dead) == 1 and dead[0] is mine[-1]
    ev = dead[0]
    row = await todo_row(core, t["id"])
    assert ev.verb == "fail" and ev.queue == f.label
    assert ev.team_id == str(row["team_id"]) and ev.endpoint_id == ""  # the team's, not the holder's endpoint
    assert ev.final_attempt == {"seq": 5, "outcome": "failed", "died": False, "summary": "still red",
                                "artifact": "mcp://cairn/Zz9", "attempts_total": 5}
    assert ev.todo["dead_letter"] is True
    assert all(e.final_attempt is None for e in mine[:-1])
    detail = await todos.get(core, callers[0], t["id"])
    assert detail["dead_letter"] is True and detail["attempts"][0]["summary"] == "still red"


async def test_team_req15_dead_letter_by_the_reaper_or_a_final_fail_carries_its_last_attempt(core):
    f = await make_fleet(core)
    seen: list = []
    core.bus.subscribe(seen.append)
    e0, e2 = await f.caller(0), await f.caller(2)
    dies = await f.push("dies", max_attempts=2)
    await todos.claim(core, e0, dies["id"])
    await todos.release(core, e0, dies["id"], summary="not now")  # seq 1; the counter stays at 1
    await todos.claim(core, e2, dies["id"])
    await todos.heartbeat(core, e2, dies["id"])
    await lapse(core, dies["id"])
    await sweeps.reap(core)  # attempt 2 of 2 lapsed: the reaper dead-letters
    [ev] = [e for e in seen if e.todo_id == dies["id"] and e.dead_lettered]
    assert ev.verb == "reap" and ev.queue == f.label
    assert ev.final_attempt == {"seq": 2, "outcome": "reaped", "died": True, "summary": None, "artifact": None,
                                "attempts_total": 2}
    pointless = await f.push("pointless", max_attempts=5)
    await todos.claim(core, e2, pointless["id"])
    await todos.fail(core, e2, pointless["id"], summary="gate says stop", artifact="https://ci.example.com/1",
                     retry=False)
    [ev] = [e for e in seen if e.todo_id == pointless["id"] and e.dead_lettered]
    assert ev.final_attempt == {"seq": 1, "outcome": "failed", "died": False, "summary": "gate says stop",
                                "artifact": "https://ci.example.com/1", "attempts_total": 1}


async def test_team_req15_a_revoked_holder_hands_back_without_a_dead_letter(core):
    """On a team todo a revocation is a hand-back (`revoked`, `requeued`), not a dead letter: no event
    carries a final attempt for it, while the endpoint's own todo is dead-lettered with its attempt."""
    f = await make_fleet(core)
    seen: list = []
    core.bus.subscribe(seen.append)
    holder = await f.caller(2)
    team_todo = await f.push(max_attempts=1)
    own, _ = await todos.create(core, endpoint_id=holder.endpoint_id, queue="own", title="mine")
    await todos.claim(core, holder, team_todo["id"])
    await todos.claim(core, holder, own["id"])
    await endpoints.revoke(core, f.humans[2], f.ep_slugs[2])
    assert [e for e in seen if e.todo_id == team_todo["id"] and e.dead_lettered] == []
    assert (await todo_row(core, team_todo["id"]))["state"] == "pending"
    [ev] = [e for e in seen if e.todo_id == own["id"] and e.dead_lettered]
    assert ev.final_attempt == {"seq": 1, "outcome": "revoked", "died": False, "summary": None, "artifact": None,
                                "attempts_total": 1}


# ---------------------------------------------------------------------------------- REQ-18 rollback


def _claim_params(caller, todo_id: str) -> dict:
    return {"human_id": None, "endpoint_id": caller.endpoint_id, "queues": list(caller.queues),
            "owner": caller.owner, "id": todo_id, "ttl": 60, "claimant": "x", "new_token_hash": None,
            "claimer_kind": "endpoint", "claimer_endpoint_id": caller.endpoint_id, "session": None,
            "admitted": False}


async def test_team_req18_rollback_leaves_no_orphan(core):
    """A member's endpoint's claim statement runs inside a transaction that then fails: neither the
    todos update nor the attempt insert is committed, and the todo is claimable as before."""
    f = await make_fleet(core)
    t = await f.push()
    caller = await f.caller(1)
    before = await snapshot(core, t["id"])
    with pytest.raises(RuntimeError):
        async with core.pool.connection() as conn:
            async with conn.transaction():
                cur = await conn.execute(Q.todos.claim, _claim_params(caller, t["id"]))
                assert (await cur.fetchone())["attempt_seq"] == 1
                cur = await conn.execute("SELECT state, claimed_by_endpoint_id FROM todos WHERE id = %s", (t["id"],))
                assert await cur.fetchone() == {"state": "claimed", "claimed_by_endpoint_id": caller.endpoint_id}
                cur = await conn.execute("SELECT count(*) AS n FROM todo_attempts WHERE todo_id = %s", (t["id"],))
                assert (await cur.fetchone())["n"] == 1  # both prepared inside the transaction
                raise RuntimeError("the transaction fails after the attempt insert")
    assert await snapshot(core, t["id"]) == before
    got = await todos.claim_next(core, await f.caller(2))
    assert got.todo["id"] == t["id"] and got.attempt_seq == 1 and got.prior_attempts == []
    assert await check(core) == []


async def test_team_req18_a_claim_refused_at_commit_writes_neither_row(core):
    """A planted open attempt makes the claim's own attempt insert fail at commit: the todos update
    in the same statement rolls back with it, whichever member's endpoint (or member) claims."""
    f = await make_fleet(core)
    t = await f.push()
    await sql(core, "INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at,"
                    " lease_expires_at) VALUES (%s, 99, 1, 'owner', 'planted', now(), now())", (t["id"],))
    before = await snapshot(core, t["id"])
    with pytest.raises(Conflict):
        await todos.claim(core, await f.caller(0), t["id"])
    with pytest.raises(Conflict):
        await todos.claim_next(core, await f.caller(1))
    with pytest.raises(Conflict):
        await todos.claim(core, f.humans[2], t["id"])  # a member's Board claim
    after = await snapshot(core, t["id"])
    assert after == before and after[0]["state"] == "pending" and after[0]["attempts_total"] == 0
    assert after[0]["claimed_by_endpoint_id"] is None
    assert [a["seq"] for a in after[1]] == [99]


# ------------------------------------------------------------------------------------ REQ-19 errors


async def test_team_req19_fence_mismatch_is_conflict(core):
    f = await make_fleet(core)
    t = await f.push()
    holder, other = await f.caller(1), await f.caller(2)
    got = await todos.claim(core, holder, t["id"], require_fence=True)
    before = await snapshot(core, t["id"])
    bodies = set()
    for who in (holder, other):
        for verb in (todos.heartbeat, todos.complete, todos.fail, todos.release):
            with pytest.raises(Conflict) as err:
                await verb(core, who, t["id"], lease_token="not-the-token")
            assert err.value.code == "conflict" and not isinstance(err.value, Forbidden)
            assert err.value.op == verb.__name__ and err.value.todo_id == t["id"]
            assert "not-the-token" not in str(err.value) and got.lease_token not in str(err.value)
            bodies.add(json.dumps(err.value.to_dict(), sort_keys=True))
    # The other member's endpoint without a token gets the same body: a mismatch confirms no fence.
    with pytest.raises(Conflict) as err:
        await todos.heartbeat(core, other, t["id"])
    bodies.add(json.dumps(err.value.to_dict(), sort_keys=True))
    assert len(bodies) == 1 and json.loads(bodies.pop())["code"] == "conflict"
    assert await snapshot(core, t["id"]) == before
    # An unfenced team attempt also refuses a presented token (it cannot equal a missing hash).
    t2 = await f.push()
    await todos.claim(core, holder, t2["id"])
    with pytest.raises(Conflict):
        await todos.heartbeat(core, holder, t2["id"], lease_token="anything")
    assert (await attempt_rows(core, t2["id"]))[0]["last_heartbeat_at"] is None


async def test_team_req19_a_missed_transition_is_classified_and_wrapped(core):
    """Absent or out of reach is not_found; in reach but in the wrong state is conflict, wrapped with
    the operation and the todo id; a bad input is invalid naming the argument."""
    f = await make_fleet(core)
    t = await f.push()
    member = await f.caller(0)
    with pytest.raises(NotFound):
        await todos.complete(core, member, f"td_{uuid.uuid4()}")
    stranger = await humans.add(core, f"stranger-{uuid.uuid4().hex[:6]}")
    _, cred = await endpoints.vend(core, stranger, agent="elsewhere", queues=["own"])
    with pytest.raises(NotFound):
        await todos.complete(core, endpoints.caller_from_row(await endpoints.resolve_credential(core, cred)), t["id"])
    for verb in (todos.heartbeat, todos.complete, todos.fail, todos.release):
        with pytest.raises(Conflict) as err:
            await verb(core, member, t["id"])  # present, in reach, pending: wrong state
        assert err.value.op == verb.__name__ and err.value.todo_id == t["id"]
        assert str(err.value).startswith(f"{verb.__name__} {t['id']}: conflict")
    with pytest.raises(Conflict):
        await todos.fail(core, f.humans[2], t["id"])  # a member from the Board, same class
    await todos.claim(core, member, t["id"])
    with pytest.raises(Invalid) as err:
        await todos.complete(core, member, t["id"], artifact="ftp://x")
    assert err.value.argument == "artifact"
    assert (await todo_row(core, t["id"]))["state"] == "claimed"


async def test_team_req19_over_mcp_fence_mismatch_is_conflict(core, server):
    f = await make_fleet(core)
    t = await f.push()
    async with sdk(server.url, _agent(f, 1)) as holder, sdk(server.url, _agent(f, 2)) as other:
        got = body(await holder.call_tool("claim_next", {"require_fence": True}))
        assert got["todo"]["id"] == t["id"]
        token = got["lease_token"]
        for c, args in ((holder, {"lease_token": "wrong"}), (holder, {}), (other, {"lease_token": "wrong"}),
                        (other, {"lease_token": token})):
            for verb in ("heartbeat", "complete", "fail", "release"):
                e = error_body(await c.call_tool(verb, {"id": t["id"], **args}))
                assert e["code"] == "conflict", (verb, args)
                assert token not in json.dumps(e)
        ok = body(await holder.call_tool("heartbeat", {"id": t["id"], "lease_token": token}))
        assert ok["state"] == "claimed"
    (a,) = await attempt_rows(core, t["id"])
    assert a["ended_at"] is None and a["last_heartbeat_at"] is not None


def _tool_calls(text: str) -> list[dict]:
    records = (json.loads(ln) for ln in text.splitlines() if ln.startswith("{"))
    return [r for r in records if r.get("msg") == "tool call"]


async def test_team_req19_logs_carry_no_token_summary_or_artifact(core):
    """A fenced life of a team todo across two members' endpoints (including a subscriber that fails
    with the attempt in its message): no token, summary, artifact, result or claimant is logged."""
    def leaky(event):
        raise RuntimeError(f"subscriber saw {event.closed_attempt} {event.final_attempt}")

    _, stop = capture_logs()
    core.bus.subscribe(leaky)
    try:
        f = await make_fleet(core)
        t = await f.push(max_attempts=2)
        first, second = await f.caller(0), await f.caller(1)
        got = await todos.claim(core, first, t["id"], require_fence=True, claimant="label-7f3a")
        with pytest.raises(Conflict):
            await todos.complete(core, first, t["id"], lease_token="wrong-token-9c1d")
        await todos.heartbeat(core, first, t["id"], lease_token=got.lease_token)
        await todos.fail(core, first, t["id"], lease_token=got.lease_token, summary="summary-text-51ab",
                         artifact="mcp://cairn/artifact51ab", result={"secret": "result-text-51ab"})
        await make_due(core, t["id"])
        again = await todos.claim_next(core, second, require_fence=True, claimant="label-8e2b")
        await todos.fail(core, second, t["id"], lease_token=again.lease_token, summary="summary-text-62bc",
                         artifact="https://ci.example.com/artifact62bc")  # at the cap: a dead letter
        await sweeps.sweep_once(core)
    finally:
        logged = stop()
    assert "subscriber failed" in logged  # the failing subscriber was logged, and only its class name
    for secret in (got.lease_token, again.lease_token, "wrong-token-9c1d", *f.credentials, "summary-text-51ab",
                   "artifact51ab", "result-text-51ab", "label-7f3a", "label-8e2b", "summary-text-62bc",
                   "artifact62bc"):
        assert secret not in logged, secret


async def test_team_req19_over_mcp_logs_carry_no_token_summary_or_artifact(core, server):
    """The real server's tool-call lines for a team todo name the verb, the todo and the outcome, and
    never a credential, lease token, summary, artifact or claimant."""
    f = await make_fleet(core)
    t = await f.push(max_attempts=5)
    secrets = list(f.credentials)
    stream, stop = capture_logs()
    try:
        async with sdk(server.url, _agent(f, 1)) as c, sdk(server.url, _agent(f, 2)) as d:
            got = body(await c.call_tool("claim_next", {"require_fence": True, "claimant": "label-claimant-3d4e"}))
            secrets += [got["lease_token"], "label-claimant-3d4e"]
            body(await c.call_tool("heartbeat", {"id": t["id"], "lease_token": got["lease_token"]}))
            assert error_body(await c.call_tool("heartbeat", {"id": t["id"], "lease_token": "wrongtoken-5f6a"}))[
                "code"] == "conflict"
            assert error_body(await d.call_tool("complete", {"id": t["id"], "lease_token": got["lease_token"]}))[
                "code"] == "conflict"
            assert error_body(await c.call_tool("complete", {"id": t["id"], "artifact": "file:///badartifact-7a8b"}))[
                "code"] == "invalid"
            body(await c.call_tool("fail", {"id": t["id"], "lease_token": got["lease_token"],
                                            "summary": "summary-text-9c0d", "result": {"e": "result-text-9c0d"},
                                            "artifact": "mcp://cairn/artifact9c0d"}))
            body(await d.call_tool("get_todo", {"id": t["id"]}))
        secrets += ["wrongtoken-5f6a", "badartifact-7a8b", "summary-text-9c0d", "result-text-9c0d", "artifact9c0d"]
        # A request's line is written once its answer has gone out: wait for the last call's line.
        await eventually(lambda: any(r["verb"] == "get_todo" for r in _tool_calls(stream.getvalue())))
    finally:
        logged = stop()
    calls = _tool_calls(logged)
    assert {r["verb"] for r in calls} >= {"claim_next", "heartbeat", "complete", "fail", "get_todo"}
    assert {r["outcome"] for r in calls} >= {"ok", "conflict", "invalid"}
    assert all(r["todo_id"] == t["id"] for r in calls if r["verb"] != "claim_next" or r["outcome"] == "ok")
    assert [s for s in secrets if s in logged] == []
