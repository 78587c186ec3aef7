"""A todo's attempts never overlap in their recorded times (docs/decisions.md D53).

`now()` is the start of a transaction, not of the statement that reads the rows. A claim whose
transaction began before a release (or a reap, a member's removal, a dead letter and its retry)
committed, and whose statement then saw that commit, used to record its attempt as claimed before the
previous attempt ended: one holder at a time, but two at once in the history. The soak saw it under
load, where a claim statement is planned after its transaction began; a round (claim_next with
`complete`) and the locked admission path widen the window to whole statements. Each test here opens
that window on purpose: the claim's transaction begins, the close commits on another connection, then
the claim statement runs in the first transaction.

The other side of the same fact: a statement's snapshot predates the lock waits inside it. A cancel or
a revocation that waited for a claim holding the todo saw the todo claimed (its lock re-reads the row)
but not the attempt the claim had just opened, and ended the todo with that attempt open for good.
The last tests hold a claim open while the transition waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from core_world import attempt_rows, check, lapse, make_world, sql
from switchboard.core import endpoints, events, queries, sweeps, teams, todos
from switchboard.core.models import scope_params
from switchboard.core.queries import Q
from team_world import make_fleet


async def _claim_begun_before(pg_uri: str, close: Callable[[], Awaitable[Any]],
                              statement: Callable[[], tuple[str, dict[str, Any]]]) -> tuple[Any, list[dict]]:
    """Begin a transaction, let `close` commit elsewhere, then run the claim statement in it; the
    transaction's start time and the rows claimed."""
    async with await psycopg.AsyncConnection.connect(pg_uri, row_factory=dict_row) as conn:
        began = (await (await conn.execute("SELECT now() AS t")).fetchone())["t"]
        await close()
        claim_sql, params = statement()
        rows = list(await (await queries.execute(conn, claim_sql, params)).fetchall())
        await conn.commit()
    return began, rows


async def _assert_in_turn(core, todo_id: str, began) -> None:
    first, second = (await attempt_rows(core, todo_id))[-2:]
    assert began < first["ended_at"], "the close did not commit inside the claim's transaction"
    assert first["ended_at"] <= second["claimed_at"], (first["outcome"], first["ended_at"], second["claimed_at"])
    row = (await sql(core, "SELECT claimed_at, updated_at FROM todos WHERE id = %s", (todo_id,)))[0]
    assert row["claimed_at"] == second["claimed_at"] == row["updated_at"]
    assert await check(core) == []


CLOSES = ("release", "reap", "dead_letter_then_retry")
STATEMENTS = ("claim_next_one", "claim", "claim_next_batch_one")


@pytest.mark.parametrize("statement", STATEMENTS)
@pytest.mark.parametrize("how", CLOSES)
async def test_a_claim_begun_before_the_close_starts_after_it(core, pg_uri, how, statement):
    w = await make_world(core)
    t = await w.todo("span")
    await todos.claim_next(core, w.e1)
    if how == "reap":
        await lapse(core, t["id"])

    async def close() -> None:
        if how == "release":
            await todos.release(core, w.e1, t["id"], summary="handing back")
        elif how == "reap":
            assert await sweeps.reap(core) == 1
        else:
            await todos.fail(core, w.e1, t["id"], summary="no luck", retry=False)
            await todos.retry(core, w.h1, t["id"])

    def claim_statement() -> tuple[str, dict[str, Any]]:
        params, _ = todos._claim_params(core, w.e1, None, None, None)
        if statement == "claim":
            return Q.todos.claim, {**params, "id": t["id"]}
        claim_sql, p, _ = todos._claim_statement(["inbox"], params, 5 if "batch" in statement else None, False)
        assert claim_sql == getattr(Q.todos, statement)
        return claim_sql, p

    began, rows = await _claim_begun_before(pg_uri, close, claim_statement)
    assert [r["id"] for r in rows] == [t["id"]]
    await _assert_in_turn(core, t["id"], began)


@pytest.mark.parametrize("statement", ("claim_next_team_one", "claim_next_team_group"))
@pytest.mark.parametrize("how", ("release", "member_removed"))
async def test_on_a_team_queue_a_claim_begun_before_the_hand_back_starts_after_it(core, pg_uri, how, statement):
    fleet = await make_fleet(core, members=3)
    t = await fleet.push("span")
    holder = fleet.endpoints[2]  # a member's endpoint
    await todos.claim_next(core, holder, queue=fleet.label)
    claimers = fleet.endpoints[:2]  # the owner's and the admin's

    async def close() -> None:
        if how == "release":
            await todos.release(core, holder, t["id"])
        else:
            out = await teams.remove_member(core, fleet.humans[0], fleet.slug, fleet.humans[2].name)
            assert out["leases_handed_back"] == 1

    def claim_statement() -> tuple[str, dict[str, Any]]:
        if statement == "claim_next_team_one":
            params, _ = todos._claim_params(core, claimers[0], None, None, None)
            claim_sql, p, _ = todos._claim_statement([fleet.label], params, None, False)
            assert claim_sql == Q.todos.claim_next_team_one
            return claim_sql, p
        claims = [todos.FleetClaim(c, fleet.label, todos._claim_params(core, c, None, None, None)[0], None)
                  for c in claimers]
        return Q.todos.claim_next_team_group, todos.fleet_params(fleet.label, claims)[0]

    began, rows = await _claim_begun_before(pg_uri, close, claim_statement)
    assert [r["id"] for r in rows] == [t["id"]]
    await _assert_in_turn(core, t["id"], began)


async def test_the_checker_finds_attempts_that_overlap(core):
    """The invariant behind the tests above, and the soak's: a todo's next attempt is never claimed
    before the one before it ended."""
    w = await make_world(core)
    t = await w.todo("overlap")
    await todos.claim_next(core, w.e1)
    await todos.release(core, w.e1, t["id"])
    await todos.claim_next(core, w.e1)
    assert await check(core) == []
    await sql(core, "UPDATE todo_attempts SET ended_at = ended_at + interval '1 second'"
                    " WHERE todo_id = %s AND seq = 1", (t["id"],))
    assert "attempt claimed before the one before it ended" in "\n".join(await check(core))


async def test_a_round_claims_no_earlier_than_the_todos_last_change(core):
    """The round's completions and claims share one `now()`; a todo released by another holder after
    the round's transaction began is claimed at the release's time, not before it, while the attempts
    the round closed keep the round's own time."""
    w = await make_world(core)
    mine = await w.todo("mine")
    theirs = await w.todo("theirs")
    other = w.e1.with_session("other")
    await todos.claim_next(core, w.e1)  # mine
    await todos.claim_next(core, other)  # theirs
    async with await psycopg.AsyncConnection.connect(core.settings.database_url, row_factory=dict_row) as conn:
        params = {**scope_params(w.e1), "id": mine["id"], "token_hash": None, **todos._report(core, None, None, None)}
        assert len(await (await conn.execute(Q.todos.complete, params)).fetchall()) == 1
        await todos.release(core, other, theirs["id"])
        claim_params, _ = todos._claim_params(core, w.e1, None, None, None)
        claim_sql, p, _ = todos._claim_statement(["inbox"], claim_params, None, False)
        assert [r["id"] for r in await (await queries.execute(conn, claim_sql, p)).fetchall()] == [theirs["id"]]
        await conn.commit()
    (done,) = await attempt_rows(core, mine["id"])
    released, claimed = await attempt_rows(core, theirs["id"])
    assert done["ended_at"] < released["ended_at"] <= claimed["claimed_at"]
    assert await check(core) == []


async def _while_a_claim_is_uncommitted(pg_uri: str, core, caller, queue: str,
                                        transition: Callable[[], Awaitable[Any]]) -> Any:
    """Claim on a connection of its own and, before it commits, start `transition`; it must wait for
    the claim's lock. Then commit the claim and return what the transition answered."""
    async with await psycopg.AsyncConnection.connect(pg_uri, row_factory=dict_row) as conn:
        params, _ = todos._claim_params(core, caller, None, None, None)
        claim_sql, p, _ = todos._claim_statement([queue], params, None, False)
        assert len(await (await queries.execute(conn, claim_sql, p)).fetchall()) == 1
        task = asyncio.create_task(transition())
        await asyncio.sleep(0.3)
        assert not task.done(), "the transition did not wait for the claim"
        await conn.commit()
        return await task


async def test_a_cancel_that_waited_for_a_claim_closes_the_attempt_it_opened(core, pg_uri):
    w = await make_world(core)
    t = await w.todo("cancel me")
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    out = await _while_a_claim_is_uncommitted(pg_uri, core, w.e1, "inbox",
                                              lambda: todos.cancel(core, w.h1, t["id"]))
    assert out["state"] == "canceled"
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["disposition"]) == ("canceled", "canceled") and a["ended_at"] >= a["claimed_at"]
    row = (await sql(core, "SELECT completed_at, updated_at FROM todos WHERE id = %s", (t["id"],)))[0]
    assert row["completed_at"] == row["updated_at"] == a["ended_at"]
    (ev,) = [e for e in seen if e.verb == "cancel"]
    assert ev.closed_row is not None and ev.closed_row["outcome"] == "canceled"
    assert await check(core) == []


async def test_a_revocation_that_waited_for_a_claim_closes_the_attempt_it_opened(core, pg_uri):
    w = await make_world(core)
    t = await w.todo("revoked while claimed")
    other = await w.todo("pending when revoked")
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    out = await _while_a_claim_is_uncommitted(pg_uri, core, w.e1, "inbox",
                                              lambda: endpoints.revoke(core, w.h1, w.slug1))
    assert out["dead_lettered"] == 2
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["disposition"]) == ("revoked", "dead_lettered") and a["ended_at"] >= a["claimed_at"]
    row = (await sql(core, "SELECT completed_at, updated_at FROM todos WHERE id = %s", (t["id"],)))[0]
    assert row["completed_at"] == row["updated_at"] == a["ended_at"]
    assert await attempt_rows(core, other["id"]) == []
    revoked = {e.todo_id: e for e in seen if e.verb == "revoke"}
    assert revoked[t["id"]].final_attempt is not None and revoked[t["id"]].final_attempt["outcome"] == "revoked"
    assert await check(core) == []


@pytest.mark.parametrize("how", ("member_removed", "endpoint_revoked", "grant_withdrawn"))
async def test_a_team_hand_back_that_waited_for_a_claim_closes_the_attempt_it_opened(core, pg_uri, how):
    """On a team queue the claim takes the reach's locks, which these transitions' first statements
    wait for; their hand-back, a later statement, then sees the attempt."""
    fleet = await make_fleet(core, members=3)
    t = await fleet.push("handed back")

    async def transition() -> Any:
        if how == "member_removed":
            return await teams.remove_member(core, fleet.humans[0], fleet.slug, fleet.humans[2].name)
        if how == "endpoint_revoked":
            return await endpoints.revoke(core, fleet.humans[2], fleet.ep_slugs[2])
        return await teams.ungrant(core, fleet.humans[0], fleet.slug, fleet.label, fleet.ep_slugs[2])

    await _while_a_claim_is_uncommitted(pg_uri, core, fleet.endpoints[2], fleet.label, transition)
    (a,) = await attempt_rows(core, t["id"])
    assert a["disposition"] == "requeued" and a["ended_at"] >= a["claimed_at"]
    assert (await sql(core, "SELECT state FROM todos WHERE id = %s", (t["id"],)))[0]["state"] == "pending"
    assert await check(core) == []
