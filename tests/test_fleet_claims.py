"""A fleet's claims together (docs/decisions.md D51): concurrent claim_next calls of different endpoints
on one team queue run as one statement (`claim_next_team_group`, or on a policed queue
`claim_next_team_group_admitted`), each todo claimed for the call it goes to exactly as that call alone
would claim it: its endpoint's reach, lease and owner, an attempt with its session, claimant and lease
token, the charge of its policy. A call the statement gives nothing is answered alone. Completes and
fails of endpoints whose one queue is that team queue run together the same way (`complete_fleet`,
`fail_fleet`), each checked against its own endpoint.

Calls started in one turn of the event loop (`asyncio.gather`) join one group. That they shared a
statement is seen in the database: every attempt a statement opens has the same `claimed_at`, and
every attempt it closes the same `ended_at` (`now()` of its transaction), which statements of their
own never share.
"""

from __future__ import annotations

import asyncio
import collections
import random

import pytest

from core_world import attempt_rows, check, sql
from switchboard.core import admission, endpoints, teams, todos
from switchboard.core.errors import Conflict, CoreError
from team_world import make_fleet


async def fleet_callers(f, n: int) -> list:
    """n endpoints granted only the team queue (claim_next searches it alone), one per call."""
    callers = []
    for i in range(n):
        ep = await f.vend(i % len(f.humans), agent=f"solo-{i}", queues=[f.label])
        callers.append(ep.with_session(f"session-{i}"))
    return callers


async def claimed_at_by_todo(core, ids: list[str]) -> dict[str, object]:
    rows = await sql(core, "SELECT todo_id, claimed_at FROM todo_attempts WHERE todo_id = ANY(%s)", (ids,))
    return {r["todo_id"]: r["claimed_at"] for r in rows}


async def test_concurrent_claims_of_different_endpoints_share_one_statement(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 6)
    for k in range(6):
        await f.push(f"t{k}")
    got = await asyncio.gather(*(todos.claim_next(core, c, claimant=f"worker-{i}") for i, c in enumerate(callers)))
    assert all(g is not None for g in got)
    ids = [g.todo["id"] for g in got]
    assert len(set(ids)) == 6
    stamps = await claimed_at_by_todo(core, ids)
    assert len(set(stamps.values())) == 1, "six endpoints' claims did not share one statement"
    for i, (caller, g) in enumerate(zip(callers, got, strict=True)):
        [a] = await attempt_rows(core, g.todo["id"])
        assert a["claimer_endpoint_id"] == caller.endpoint_id
        assert a["claimer_session"] == f"session-{i}"
        assert a["claimant"] == f"worker-{i}"
        assert a["owner"] == caller.owner and g.todo["owner"] == caller.owner
        [row] = await sql(core, "SELECT claimed_by_endpoint_id FROM todos WHERE id = %s", (g.todo["id"],))
        assert row["claimed_by_endpoint_id"] == caller.endpoint_id
        assert g.attempt_seq == 1 and g.prior_attempts == []
    # each holds its own lease: its holder completes it, another endpoint of the fleet cannot
    with pytest.raises(Conflict):
        await todos.complete(core, callers[1], got[0].todo["id"])
    for c, g in zip(callers, got, strict=True):
        await todos.complete(core, c, g.todo["id"])
    assert await check(core) == []


async def test_the_oldest_todos_go_first_and_a_dry_queue_answers_the_rest_empty(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 5)
    pushed = [(await f.push(f"t{k}"))["id"] for k in range(3)]
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    taken = [g.todo["id"] for g in got if g is not None]
    assert sorted(taken) == sorted(pushed)
    assert sum(g is None for g in got) == 2
    assert await check(core) == []


async def test_a_todo_assigned_to_one_agent_goes_to_that_agents_claim(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 4)
    target = callers[2]
    await f.push("open-1")
    assigned = (await f.push("for-two", assignee=target.owner))["id"]
    await f.push("open-2")
    await f.push("open-3")
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    by_caller = {c.endpoint_id: g.todo for c, g in zip(callers, got, strict=True) if g is not None}
    assert by_caller[target.endpoint_id]["id"] == assigned
    assert all(t["id"] != assigned for ep, t in by_caller.items() if ep != target.endpoint_id)
    assert len(by_caller) == 4
    stamps = await claimed_at_by_todo(core, [t["id"] for t in by_caller.values()])
    assert len(set(stamps.values())) == 1
    assert await check(core) == []


async def test_a_todo_assigned_to_an_agent_outside_the_group_is_left_alone(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 3)
    other = await f.vend(0, agent="elsewhere", queues=[f.label])
    kept = (await f.push("not-yours", assignee=other.owner))["id"]
    await f.push("open")
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    assert [g.todo["title"] for g in got if g is not None] == ["open"]
    [row] = await sql(core, "SELECT state FROM todos WHERE id = %s", (kept,))
    assert row["state"] == "pending"
    assert (await todos.claim_next(core, other)).todo["id"] == kept


async def test_an_endpoint_that_lost_its_reach_gets_nothing_and_the_others_their_todos(core):
    """A member removed from the team: their endpoint's claims stop at once, in a group as alone."""
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 6)
    gone = [i for i, c in enumerate(callers) if f.ep_human[i] == 2]
    assert gone
    await teams.remove_member(core, f.humans[0], f.slug, f.humans[2].name)
    for k in range(6):
        await f.push(f"t{k}")
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    for i, g in enumerate(got):
        assert (g is None) == (i in gone), i
    stamps = await claimed_at_by_todo(core, [g.todo["id"] for g in got if g is not None])
    assert len(set(stamps.values())) == 1  # the others' claims shared a statement
    assert await check(core) == []


async def test_a_revoked_endpoint_in_a_group_gets_its_refusal_and_the_others_their_todos(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 4)
    await endpoints.revoke(core, f.humans[f.ep_human[1]], f.ep_slugs[1])
    for k in range(4):
        await f.push(f"t{k}")
    outs = await asyncio.gather(*(todos.claim_next(core, c) for c in callers), return_exceptions=True)
    assert isinstance(outs[1], CoreError), outs[1]
    assert all(outs[i] is not None and not isinstance(outs[i], BaseException) for i in (0, 2, 3)), outs
    stamps = await claimed_at_by_todo(core, [outs[i].todo["id"] for i in (0, 2, 3)])
    assert len(set(stamps.values())) == 1
    assert await check(core) == []


async def test_a_fenced_group_gives_each_call_its_own_lease_token(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 3)
    for k in range(3):
        await f.push(f"t{k}")
    got = await asyncio.gather(*(todos.claim_next(core, c, require_fence=True) for c in callers))
    tokens = [g.lease_token for g in got]
    assert all(tokens) and len(set(tokens)) == 3
    stamps = await claimed_at_by_todo(core, [g.todo["id"] for g in got])
    assert len(set(stamps.values())) == 1
    with pytest.raises(Conflict):  # another call's token does not fit
        await todos.complete(core, callers[0], got[0].todo["id"], lease_token=tokens[1])
    for c, g in zip(callers, got, strict=True):
        await todos.complete(core, c, g.todo["id"], lease_token=g.lease_token)
    assert await check(core) == []


async def test_a_group_takes_over_lapsed_leases_and_closes_their_attempts(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 3)
    lapsed = (await f.push("lapsed"))["id"]
    await todos.claim(core, callers[0], lapsed)
    await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE id = %s", (lapsed,))
    await sql(core, "UPDATE todo_attempts SET lease_expires_at = now() - interval '1 minute' WHERE todo_id = %s",
              (lapsed,))
    await f.push("fresh-1")
    await f.push("fresh-2")
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    took = {g.todo["id"]: g for g in got}
    assert lapsed in took and took[lapsed].attempt_seq == 2
    assert [p["outcome"] for p in took[lapsed].prior_attempts] == ["lease_expired"]
    stamps = await claimed_at_by_todo(core, list(took))
    assert len({v for k, v in stamps.items() if k != lapsed} | {max(
        r["claimed_at"] for r in await attempt_rows(core, lapsed))}) == 1  # one statement took all three
    assert await check(core) == []


async def test_a_policed_group_charges_each_claim_once_and_reports_usage(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 5)
    await admission.set_policy(core, f.humans[0], f.label, max_in_flight=1000, max_claims_per_window=100000)
    for k in range(5):
        await f.push(f"t{k}")
    # the first calls learn that the queue is policed; the next ones run the policed group statement
    first = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    for c, g in zip(callers, first, strict=True):
        await todos.complete(core, c, g.todo["id"])
    for k in range(5):
        await f.push(f"u{k}")
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    ids = [g.todo["id"] for g in got]
    assert len(set(ids)) == 5
    stamps = await claimed_at_by_todo(core, ids)
    assert len(set(stamps.values())) == 1, "the policed claims did not share one statement"
    used = sorted(g.admission["used"] for g in got)
    assert used == [6, 7, 8, 9, 10]
    [row] = await sql(core, "SELECT sum(s.charged)::int AS n FROM admission_shards s JOIN admission_policies p"
                            " ON p.id = s.policy_id WHERE p.queue = %s", (f.label,))
    assert row["n"] == 10  # one unit per committed claim, nothing twice
    assert await check(core) == []


async def test_a_policed_group_never_passes_max_in_flight(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 8)
    await admission.set_policy(core, f.humans[0], f.label, max_in_flight=3)
    for k in range(8):
        await f.push(f"t{k}")
    for _ in range(3):  # the first round learns of the policy, the next ones run as groups would
        await asyncio.gather(*(todos.claim_next(core, c) for c in callers), return_exceptions=True)
        [row] = await sql(core, "SELECT count(*)::int AS n FROM todos WHERE queue = %s AND state = 'claimed'",
                          (f.label,))
        assert row["n"] <= 3
    assert row["n"] == 3
    assert await check(core) == []


async def test_with_combining_off_each_claim_is_its_own_statement(core):
    core.settings = core.settings.model_copy(update={"combine_calls": False})
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 4)
    for k in range(4):
        await f.push(f"t{k}")
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    stamps = await claimed_at_by_todo(core, [g.todo["id"] for g in got])
    assert len(set(stamps.values())) == 4


async def ended_at_by_todo(core, ids: list[str]) -> dict[str, object]:
    rows = await sql(core, "SELECT todo_id, ended_at FROM todo_attempts"
                           " WHERE todo_id = ANY(%s) AND ended_at IS NOT NULL", (ids,))
    return {r["todo_id"]: r["ended_at"] for r in rows}


async def claimed_by_each(core, f, callers) -> list:
    for k in range(len(callers)):
        await f.push(f"c{k}")
    return [await todos.claim_next(core, c) for c in callers]  # one by one: claims of their own


async def test_concurrent_completes_of_different_endpoints_share_one_statement(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 5)
    got = await claimed_by_each(core, f, callers)
    done = await asyncio.gather(*(todos.complete(core, c, g.todo["id"], summary=f"done by {i}", result={"n": i})
                                  for i, (c, g) in enumerate(zip(callers, got, strict=True))))
    assert [d["state"] for d in done] == ["done"] * 5
    ids = [g.todo["id"] for g in got]
    assert len(set((await ended_at_by_todo(core, ids)).values())) == 1, "the completes did not share a statement"
    for i, g in enumerate(got):
        [a] = await attempt_rows(core, g.todo["id"])
        assert (a["outcome"], a["disposition"], a["summary"]) == ("completed", "done", f"done by {i}")
        [row] = await sql(core, "SELECT result FROM todos WHERE id = %s", (g.todo["id"],))
        assert row["result"] == {"n": i}
    assert await check(core) == []


async def test_a_close_in_a_group_is_refused_alone_as_it_would_be(core):
    """In one group: a holder's complete, another endpoint's complete of a todo it does not hold
    (conflict), a wrongly fenced complete (conflict), an unknown id (not_found, the bytes of any
    unknown id) and the same todo completed twice by its holder's two sessions (one wins)."""
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 4)
    for k in range(4):
        await f.push(f"c{k}")
    plain = await todos.claim_next(core, callers[0])
    foreign = await todos.claim_next(core, callers[1])
    fenced = await todos.claim_next(core, callers[2], require_fence=True)
    twice = await todos.claim_next(core, callers[3])
    calls = [
        todos.complete(core, callers[0], plain.todo["id"]),
        todos.complete(core, callers[0].with_session("other"), foreign.todo["id"]),
        todos.complete(core, callers[2], fenced.todo["id"], lease_token="x" * 43),
        todos.complete(core, callers[1], "td_00000000-0000-4000-8000-000000000000"),
        todos.complete(core, callers[3], twice.todo["id"]),
        todos.complete(core, callers[3].with_session("twin"), twice.todo["id"]),
    ]
    outs = await asyncio.gather(*calls, return_exceptions=True)
    assert outs[0]["state"] == "done"
    assert isinstance(outs[1], Conflict)
    assert isinstance(outs[2], Conflict)
    assert isinstance(outs[3], CoreError) and outs[3].code == "not_found"
    unknown = await asyncio.gather(todos.complete(core, callers[1], "td_00000000-0000-4000-8000-00000000000f"),
                                   return_exceptions=True)
    assert outs[3].to_dict() | {"message": ""} == unknown[0].to_dict() | {"message": ""}
    assert sorted(type(o).__name__ for o in outs[4:]) == ["Conflict", "dict"]
    stamps = await ended_at_by_todo(core, [plain.todo["id"], twice.todo["id"]])
    assert len(set(stamps.values())) == 1  # the two that closed shared the group's statement
    for c, g in ((callers[1], foreign), (callers[2], fenced)):  # untouched: still held, the holder closes it
        await todos.complete(core, c, g.todo["id"], lease_token=g.lease_token)
    assert await check(core) == []


async def test_concurrent_fails_of_a_fleet_park_or_dead_letter_each_todo(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 3)
    got = await claimed_by_each(core, f, callers)
    outs = await asyncio.gather(todos.fail(core, callers[0], got[0].todo["id"], summary="flaky"),
                                todos.fail(core, callers[1], got[1].todo["id"], retry=False),
                                todos.fail(core, callers[2], got[2].todo["id"]))
    assert [o["state"] for o in outs] == ["failed"] * 3
    assert [o["dead_letter"] for o in outs] == [False, True, False]
    ids = [g.todo["id"] for g in got]
    assert len(set((await ended_at_by_todo(core, ids)).values())) == 1
    dispositions = [(await attempt_rows(core, i))[0]["disposition"] for i in ids]
    assert dispositions == ["retry_scheduled", "dead_lettered", "retry_scheduled"]
    assert await check(core) == []


async def test_a_removed_members_endpoint_cannot_complete_in_a_group(core):
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 3)
    got = await claimed_by_each(core, f, callers)
    gone = f.ep_human[2]
    await teams.remove_member(core, f.humans[0], f.slug, f.humans[gone].name)  # hands their leases back
    outs = await asyncio.gather(*(todos.complete(core, c, g.todo["id"]) for c, g in zip(callers, got, strict=True)),
                                return_exceptions=True)
    for i, o in enumerate(outs):
        if f.ep_human[i] == gone:
            assert isinstance(o, CoreError), o
        else:
            assert o["state"] == "done", o
    assert await check(core) == []


async def test_a_group_larger_than_its_policy_takes_at_once_goes_as_several_statements(core):
    """max_in_flight 64: the policy's fast path admits two claims per statement (B, migration 0021).
    A group of six is refused once, learns B, and then runs as three statements of two at once."""
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 6)
    await admission.set_policy(core, f.humans[0], f.label, max_in_flight=64)
    for k in range(18):
        await f.push(f"t{k}")
    for _ in range(2):  # learn that the queue is policed, then how much one statement may take
        got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
        assert all(g is not None for g in got)
        for c, g in zip(callers, got, strict=True):
            await todos.complete(core, c, g.todo["id"])
    assert core.policed.take(f.label) == 2
    got = await asyncio.gather(*(todos.claim_next(core, c) for c in callers))
    stamps = await claimed_at_by_todo(core, [g.todo["id"] for g in got])
    assert sorted(collections.Counter(stamps.values()).values()) == [2, 2, 2]
    [row] = await sql(core, "SELECT sum(s.charged)::int AS n FROM admission_shards s JOIN admission_policies p"
                            " ON p.id = s.policy_id WHERE p.queue = %s", (f.label,))
    assert row["n"] == 18
    assert await check(core) == []


async def test_random_groups_pair_every_claim_with_a_todo_it_may_take(core):
    """Rounds of random groups over a queue holding todos assigned at random (to agents in the group,
    out of it, or to nobody): every call gets a todo while one it may take is left; nobody gets a todo
    assigned to someone else; no todo goes twice; what a group takes through the statement is the
    oldest of what it may take (the pairing is numbered and zipped by position: fragments.sql
    `team_group_search`)."""
    rng = random.Random(20261205)
    f = await make_fleet(core, endpoints=0)
    callers = await fleet_callers(f, 8)
    outsider = (await fleet_callers(f, 1))[0]
    owners = [c.owner for c in callers]
    together = alone = 0
    for _ in range(12):
        for k in range(rng.randint(0, 12)):
            pick = rng.random()
            assignee = (rng.choice(owners) if pick < 0.3 else outsider.owner if pick < 0.4 else None)
            await f.push(f"r{k}", assignee=assignee)
        group = rng.sample(callers, rng.randint(2, len(callers)))
        before = await sql(core, "SELECT id, assignee, created_at FROM todos WHERE queue = %s AND state = 'pending'"
                                 " ORDER BY created_at, id", (f.label,))
        got = await asyncio.gather(*(todos.claim_next(core, c) for c in group))
        taken = [g.todo["id"] for g in got if g is not None]
        assert len(taken) == len(set(taken))
        by_id = {r["id"]: r for r in before}
        for c, g in zip(group, got, strict=True):
            if g is not None:
                assert by_id[g.todo["id"]]["assignee"] in (None, c.owner)
        for c, g in zip(group, got, strict=True):  # nobody left empty-handed while a todo it may take waits
            if g is None:
                left = [r for r in before if r["id"] not in taken and r["assignee"] in (None, c.owner)]
                assert left == [], (c.owner, left)
        mayfree = [r["id"] for r in before if r["assignee"] is None]
        free_taken = [i for i in taken if by_id[i]["assignee"] is None]
        assert sorted(free_taken, key=mayfree.index) == mayfree[:len(free_taken)]  # the oldest free ones
        stamps = collections.Counter((await claimed_at_by_todo(core, taken)).values())
        shared = max(stamps.values(), default=0)
        together += shared if shared > 1 else 0
        alone += len(taken) - (shared if shared > 1 else 0)
        for c, g in zip(group, got, strict=True):
            if g is not None:
                await todos.complete(core, c, g.todo["id"])
    # Most went through the group statement: a statement that failed would send every call alone,
    # which answers each call correctly too, and so would hide a broken pairing from the checks above.
    assert together > 2 * alone, (together, alone)
    assert await check(core) == []
