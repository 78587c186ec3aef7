"""The policed claim's fast path (migration 0020, docs/decisions.md D38): `admit` judges and charges in
one statement sent with BEGIN and the claim; the transaction commits what the claim took (charging back
the rest) or rolls back when it took nothing; a refusal skips the claim and the locked path reports it.
And the verdict function of 0020: counts per queue identity, a generic plan."""

from __future__ import annotations

import asyncio

import pytest

from core_world import check, lapse, make_world, sql
from switchboard.core import admission, todos
from switchboard.core.errors import Deferred


async def charged(core, endpoint_id, queue="inbox") -> int:
    """The units the policy has charged in its current window, over its shards (migration 0021)."""
    rows = await sql(core, "SELECT switchboard_admission_used(p.id, switchboard_window_start(p.window_period,"
                           " p.window_tz, p.window_start_minute, p.window_weekday, now())) AS n"
                           " FROM admission_policies p WHERE endpoint_id = %s AND queue = %s", (endpoint_id, queue))
    return rows[0]["n"]


async def test_the_committed_charge_is_what_the_claim_took(core):
    """A batch that finds fewer todos than it asked for is charged for those it took (the units
    `admit` charged for the rest are given back before COMMIT); a claim that finds nothing commits
    nothing."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=50, max_claims_per_window=100)
    await w.todo(), await w.todo()
    many = await todos.claim_next_batch(core, w.e1, max_todos=5)
    assert len(many) == 2 and [g.admission["used"] for g in many] == [2, 2]
    assert await charged(core, w.e1.endpoint_id) == 2
    assert await todos.claim_next(core, w.e1) is None  # admitted, nothing to take: rolled back
    assert await charged(core, w.e1.endpoint_id) == 2
    one = await w.todo()
    got = await todos.claim_next(core, w.e1)
    assert got is not None and got.todo["id"] == one["id"]
    assert (got.admission["used"], got.admission["in_flight"], got.admission["remaining"]) == (3, 3, 97)
    assert await charged(core, w.e1.endpoint_id) == 3
    assert await check(core) == []


async def test_a_refusal_on_the_fast_path_changes_nothing_and_is_reported(core):
    """The fast path's refusal (SQLSTATE SBA01) skips the claim sent behind it; the locked path then
    reports why, and the routing hint keeps the next claims on the locked path until the policy
    admits again."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=1)
    a, b = await w.todo(), await w.todo()
    first = await todos.claim_next(core, w.e1)
    assert first is not None and not core.policed.refused(w.e1.endpoint_id, "inbox")
    claimed, deferred = await todos.take_next(core, w.e1)
    assert claimed == [] and deferred[0]["reason"] == "in_flight_full" and deferred[0]["pending"] == 1
    assert core.policed.refused(w.e1.endpoint_id, "inbox")
    assert await charged(core, w.e1.endpoint_id) == 1
    other = b if first.todo["id"] == a["id"] else a
    assert (await sql(core, "SELECT state FROM todos WHERE id = %s", (other["id"],)))[0]["state"] == "pending"
    with pytest.raises(Deferred) as err:  # by id: the same refusal, as the error, with the same facts
        await todos.claim(core, w.e1, other["id"])
    refusal = {k: v for k, v in err.value.to_dict().items() if k in deferred[0]}
    assert refusal == deferred[0]
    await todos.complete(core, w.e1, first.todo["id"])
    again = await todos.claim_next(core, w.e1)  # the locked path admits, and clears the hint
    assert again is not None and again.todo["id"] == other["id"]
    assert not core.policed.refused(w.e1.endpoint_id, "inbox")
    assert await charged(core, w.e1.endpoint_id) == 2
    assert await check(core) == []


async def test_a_claim_by_id_takes_the_fast_path(core):
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_claims_per_window=2)
    t = await w.todo()
    got = await todos.claim(core, w.e1, t["id"])
    assert got.admission["used"] == 1 and got.admission["remaining"] == 1
    await lapse(core, t["id"])
    taken = await todos.claim(core, w.e1, t["id"])  # a takeover: charged again
    assert taken.admission["used"] == 2 and taken.admission["remaining"] == 0
    assert await charged(core, w.e1.endpoint_id) == 2
    assert await check(core) == []


async def test_concurrent_fast_path_claimers_never_pass_the_cap(core):
    """Twelve claim_next at once on one queue admitting three leases in flight, all starting on the fast
    path: exactly three claims commit, each charged once."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=3)
    for _ in range(10):
        await w.todo()
    for _ in range(3):
        got = await asyncio.gather(*(todos.take_next(core, w.e1) for _ in range(12)))
        claims = [c for c, _ in got if c]
        live = (await sql(core, "SELECT count(*) AS n FROM todos WHERE queue = 'inbox' AND state = 'claimed'"
                                " AND endpoint_id = %s", (w.e1.endpoint_id,)))[0]["n"]
        assert len(claims) == live == 3
        assert all(d[0]["reason"] == "in_flight_full" for c, d in got if not c)
        assert await check(core) == []
        for c in claims:
            await todos.release(core, w.e1, c[0].todo["id"])
        core.policed.note(w.e1.endpoint_id, "inbox", False)  # every claimer starts on the fast path again
    assert await charged(core, w.e1.endpoint_id) == 9


async def test_verdicts_count_in_flight_per_identity(core):
    """0020's counts: an identity's live leases plus its leases parked for input; a lapsed lease, and
    the leases of another endpoint's queue of the same name, do not count."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=10)
    for _ in range(3):
        await w.todo()
    await w.todo(caller=w.e2)
    await todos.claim_next(core, w.e2)  # someone else's queue named inbox
    live = await todos.claim_next(core, w.e1)
    lapsed = await todos.claim_next(core, w.e1)
    parked = await todos.claim_next(core, w.e1)
    assert live and lapsed and parked
    await lapse(core, lapsed.todo["id"])
    await todos.request_input(core, w.e1, parked.todo["id"], question="which?")
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute("SELECT * FROM switchboard_admission_verdicts(%s, ARRAY['inbox'])",
                                 (w.e1.endpoint_id,))
        (row,) = await cur.fetchall()
    assert (row["verdict"], row["in_flight"], row["cap"], row["used"]) == ("admitted", 2, 8, 3)


async def test_the_verdict_functions_keep_a_generic_plan(core):
    rows = await sql(core, "SELECT proname, proconfig FROM pg_proc WHERE proname IN"
                           " ('switchboard_admission_verdicts', 'switchboard_admission_admit') ORDER BY proname")
    assert [(r["proname"], r["proconfig"]) for r in rows] == [
        ("switchboard_admission_admit", ["plan_cache_mode=force_generic_plan"]),
        ("switchboard_admission_verdicts", ["plan_cache_mode=force_generic_plan"])]


async def test_a_revoked_endpoint_is_refused_on_both_policed_paths(core):
    """In pipeline mode the statement's 28000 surfaces where its result is read: it is still the
    core's `unauthorized`, as the pool's cursor reports it for a statement sent alone."""
    from switchboard.core import endpoints
    from switchboard.core.errors import Unauthorized

    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=5)
    t = await w.todo()
    core.policed.mark(w.e1.endpoint_id, True)
    await endpoints.revoke(core, w.h1, w.slug1)
    for refused in (False, True):  # the fast path, then the locked path
        core.policed.note(w.e1.endpoint_id, "inbox", refused)
        with pytest.raises(Unauthorized):
            await todos.take_next(core, w.e1)
    assert await charged(core, w.e1.endpoint_id) == 0
    assert (await sql(core, "SELECT state FROM todos WHERE id = %s", (t["id"],)))[0]["state"] in ("pending", "failed")
