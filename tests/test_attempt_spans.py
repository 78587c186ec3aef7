"""A todo's attempts never overlap in their recorded times (docs/decisions.md D53).

`now()` is the start of a transaction, not of the statement that reads the rows. A claim whose
transaction began before a release (or a reap, a member's removal, a dead letter and its retry)
committed, and whose statement then saw that commit, used to record its attempt as claimed before the
previous attempt ended: one holder at a time, but two at once in the history. The soak saw it under
load, where a claim statement is planned after its transaction began; a round (claim_next with
`complete`) and the locked admission path widen the window to whole statements. Each test here opens
that window on purpose: the claim's transaction begins, the close commits on another connection, then
the claim statement runs in the first transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from core_world import attempt_rows, check, lapse, make_world, sql
from switchboard.core import queries, sweeps, teams, todos
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
