"""The batch statements keep PostgreSQL's cached generic plan (docs/decisions.md D47).

A prepared statement is planned for its values on its first five executions; from then on PostgreSQL
uses the generic plan unless the plans made for the values looked cheaper. The batch claim's LIMIT
and its `admitted` flag, and the batched closes' item arrays, reach the planner through InitPlans, so
both kinds of plan are priced alike. With them in sight every batch claim was planned afresh once the
tables had statistics (about 0.5 to 0.9 ms of PostgreSQL's CPU per statement, bench/group_bench.py
--analyze), and so was every batched close. Before the tables' first ANALYZE a batched close was still
planned for its values on most calls (a plan for an endpoint's call drops the human branch of `scope`,
which the generic plan must price, once per item it expects); since its items are expected to be few
(D48) both kinds of plan price that alike.
"""

from __future__ import annotations

import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import dict_row

from conftest import core_for, create_database
from core_world import make_world, sql
from switchboard.core import producer, todos
from switchboard.core.models import scope_params
from switchboard.core.queries import Q
from team_world import make_fleet

RUNS = 15  # psycopg prepares a statement once it ran 5 times; PostgreSQL plans the first 5 executions for their values


@pytest_asyncio.fixture
async def fresh(pg_server):
    """A core on a database of its own: statistics, if any, are the test's own (a database shared with
    other tests keeps the statistics of their rows)."""
    uri = create_database(pg_server)
    async with core_for(uri) as core:
        yield core, uri
    name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
    async with await psycopg.AsyncConnection.connect(pg_server, autocommit=True) as conn:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _plans(conn: psycopg.AsyncConnection, head: str) -> tuple[int, int]:
    """The plan counts of the one statement prepared on `conn` whose text starts with `head`."""
    cur = await conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                             " WHERE starts_with(statement, %s)", (head,))
    (row,) = await cur.fetchall()
    return row["generic_plans"], row["custom_plans"]


@pytest.mark.parametrize("analysed", [False, True])
async def test_batch_claims_and_closes_use_the_generic_plan(fresh, analysed):
    core, pg_uri = fresh
    w = await make_world(core)
    for first in range(0, 5000, 1000):  # a backlog: what makes a plan for LIMIT 3 look cheap
        await producer.push_many(core, w.h1, w.slug1, [{"title": f"t{i}", "queue": "inbox"}
                                                        for i in range(first, first + 1000)])
    history = await todos.claim_next_batch(core, w.e1, max_todos=100)  # rows in both tables
    await todos.complete_batch(core, w.e1, [{"id": g.todo["id"]} for g in history])
    if analysed:
        await sql(core, "ANALYZE todos")
        await sql(core, "ANALYZE todo_attempts")
    params, _ = todos._claim_params(core, w.e1, None, None, None)
    claim_sql, claim_params, _ = todos._claim_statement(["inbox"], params, 3, False)
    assert claim_sql == Q.todos.claim_next_batch_one
    async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True, row_factory=dict_row) as conn:
        for _ in range(RUNS):
            rows = await (await conn.execute(claim_sql, claim_params)).fetchall()
            assert len(rows) == 3
            each = [{"id": r["id"], "token_hash": None, **todos._report(core, None, None, None), "retry": None}
                    for r in rows]
            closed = await (await conn.execute(Q.todos.complete_batch,
                                               todos._close_arrays(w.e1, each, with_retry=False))).fetchall()
            assert len(closed) == 3
        claim_generic, claim_custom = await _plans(conn, "WITH cand AS")
        close_generic, close_custom = await _plans(conn, Q.todos.complete_batch[:60])
    assert (claim_custom, claim_generic) == (5, RUNS - 10)
    assert (close_custom, close_generic) == (5, RUNS - 10)


@pytest.mark.parametrize("analysed", [False, True])
async def test_single_claims_and_closes_use_the_generic_plan(fresh, analysed):
    """The one-todo claim_next and complete, the per-claim path, with and without statistics."""
    core, pg_uri = fresh
    w = await make_world(core)
    await producer.push_many(core, w.h1, w.slug1, [{"title": f"t{i}", "queue": "inbox"} for i in range(1000)])
    if analysed:
        done = await todos.claim_next_batch(core, w.e1, max_todos=100)
        await todos.complete_batch(core, w.e1, [{"id": g.todo["id"]} for g in done])
        await sql(core, "ANALYZE todos")
        await sql(core, "ANALYZE todo_attempts")
    params, _ = todos._claim_params(core, w.e1, None, None, None)
    claim_sql, claim_params, _ = todos._claim_statement(["inbox"], params, None, False)
    assert claim_sql == Q.todos.claim_next_one
    async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True, row_factory=dict_row) as conn:
        for _ in range(RUNS):
            (row,) = await (await conn.execute(claim_sql, claim_params)).fetchall()
            close = {**scope_params(w.e1), "id": row["id"], "token_hash": None,
                     **todos._report(core, None, None, None)}
            assert len(await (await conn.execute(Q.todos.complete, close)).fetchall()) == 1
        assert await _plans(conn, "WITH cand AS") == (RUNS - 10, 5)
        assert await _plans(conn, "WITH t AS") == (RUNS - 10, 5)


@pytest.mark.parametrize("analysed", [False, True])
async def test_a_claim_over_several_queues_uses_the_generic_plan(fresh, analysed):
    """claim_next over a list of queues: its length reaches the planner through an InitPlan; in sight,
    it made PostgreSQL plan every claim afresh until the tables had statistics."""
    core, pg_uri = fresh
    w = await make_world(core, queues=("a", "b", "c"))
    for q in ("a", "b", "c"):
        await producer.push_many(core, w.h1, w.slug1, [{"title": f"t{i}", "queue": q} for i in range(300)])
    if analysed:
        await sql(core, "ANALYZE todos")
        await sql(core, "ANALYZE todo_attempts")
    params, _ = todos._claim_params(core, w.e1, None, None, None)
    for n, name in ((3, "claim_next_batch"), (None, "claim_next")):
        claim_sql, claim_params, _ = todos._claim_statement(["a", "b", "c"], params, n, False)
        assert claim_sql == getattr(Q.todos, name)
        async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True, row_factory=dict_row) as conn:
            for _ in range(RUNS):
                assert await (await conn.execute(claim_sql, claim_params)).fetchall()
            assert await _plans(conn, "WITH cand AS") == (RUNS - 10, 5), name


@pytest.mark.parametrize("analysed", [False, True])
async def test_team_queue_claims_use_the_generic_plan(fresh, analysed):
    """claim_next on one team queue (`claim_next_team_one`), one todo and a batch (`claim_next_mixed_batch`)."""
    from team_world import make_fleet

    core, pg_uri = fresh
    fleet = await make_fleet(core, endpoints=1)
    await producer.push_team_many(core, fleet.humans[0], fleet.slug,
                                  [{"title": f"t{i}", "queue": "work"} for i in range(600)])
    if analysed:
        await sql(core, "ANALYZE todos")
        await sql(core, "ANALYZE todo_attempts")
    caller = fleet.endpoints[0]
    params, _ = todos._claim_params(core, caller, None, None, None)
    for n, name in ((None, "claim_next_team_one"), (3, "claim_next_mixed_batch")):
        claim_sql, claim_params, _ = todos._claim_statement([fleet.label], params, n, False)
        assert claim_sql == getattr(Q.todos, name)
        async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True, row_factory=dict_row) as conn:
            for _ in range(RUNS):
                assert await (await conn.execute(claim_sql, claim_params)).fetchall()
            assert await _plans(conn, "WITH") == (RUNS - 10, 5), name


async def test_a_native_statement_is_prepared_and_keeps_its_generic_plan(fresh):
    """claim_next of an endpoint with its own queue and a team queue (`claim_next_mixed`, longer than
    psycopg's parse cache) runs through queries.execute's raw cursor: psycopg still prepares it on the
    server, and PostgreSQL keeps its generic plan."""
    from switchboard.core import queries
    from team_world import make_fleet

    core, pg_uri = fresh
    fleet = await make_fleet(core, endpoints=1)  # its endpoint has "own" and the team queue
    await producer.push_team_many(core, fleet.humans[0], fleet.slug,
                                  [{"title": f"t{i}", "queue": "work"} for i in range(100)])
    caller = fleet.endpoints[0]
    params, _ = todos._claim_params(core, caller, None, None, None)
    claim_sql, claim_params, _ = todos._claim_statement(list(caller.queues), params, None, False)
    assert claim_sql == Q.todos.claim_next_mixed and isinstance(claim_sql, queries.NativeStatement)
    async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True, row_factory=dict_row) as conn:
        for _ in range(RUNS):
            (row,) = await (await queries.execute(conn, claim_sql, claim_params)).fetchall()
            assert row["team_id"] is not None and row["state"] == "claimed" and row["attempt_seq"] == 1
        cur = await conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        (prepared,) = [r for r in await cur.fetchall() if r["statement"] == claim_sql.native]
    assert (prepared["generic_plans"], prepared["custom_plans"]) == (RUNS - 10, 5)


def _rows_touched(node: dict) -> int:
    """Rows the plan node and everything under it produced or threw away, over all its loops."""
    own = (node.get("Actual Rows", 0) * node.get("Actual Loops", 1) + node.get("Rows Removed by Filter", 0)
           + node.get("Rows Removed by Join Filter", 0))
    return own + sum(_rows_touched(child) for child in node.get("Plans", []))


@pytest.mark.parametrize("analysed", [False, True])
@pytest.mark.parametrize("op", ["complete_batch", "fail_batch"])
async def test_a_batched_close_does_work_in_proportion_to_its_items(fresh, analysed, op):
    """A batched close of n items looks each one up by key: neither the items nor the queue's other
    leases are walked once per item. Its generic plan saw neither the array's length nor the
    table's, and joined the queue's claimed todos to the items and the open attempts to the locked
    todos by comparing every pair: 50 items beside 150 other leases touched 3,659 rows (10,659 before
    the first ANALYZE), where looking each up by key touches about 800."""
    core, pg_uri = fresh
    w = await make_world(core)
    await producer.push_many(core, w.h1, w.slug1, [{"title": f"t{i}", "queue": "inbox"} for i in range(400)])
    await todos.claim_next_batch(core, w.e1, max_todos=100)  # other leases of the same queue
    await todos.claim_next_batch(core, w.e1, max_todos=50)
    mine = await todos.claim_next_batch(core, w.e1, max_todos=50)
    if analysed:
        await sql(core, "ANALYZE todos")
        await sql(core, "ANALYZE todo_attempts")
    each = [{"id": g.todo["id"], "token_hash": None, **todos._report(core, None, None, None), "retry": False}
            for g in mine]
    params = todos._close_arrays(w.e1, each, with_retry=op == "fail_batch")
    params.update(backoff_base=1, backoff_max=1)
    async with await psycopg.AsyncConnection.connect(pg_uri, row_factory=dict_row) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + getattr(Q.todos, op), params)
        (plan,) = (await cur.fetchone())["QUERY PLAN"]
        await conn.rollback()
    touched = _rows_touched(plan["Plan"])
    assert touched <= 30 * len(mine), f"{touched} rows touched to close {len(mine)} todos"


@pytest.mark.parametrize("analysed", [False, True])
@pytest.mark.parametrize("others", [0, 6000])
async def test_a_fleet_group_claim_does_work_in_proportion_to_its_claims(fresh, analysed, others):
    """A fleet's group claim (claim_next_team_group) pairs its n claims with n todos once. The planner
    takes the group's locked reach for one row and joins by nested loops: with the pairing inlined it
    ran the pairing once per claim, each time sorting and numbering all the candidates, and joined the
    pairs back to the candidates and the claims pair by pair: 40 claims touched 209,328 rows (in the
    team benchmark, 2.3 of a 20-claim statement's 3.2 ms). Numbered once and zipped by position they
    touch about 2,100 (docs/benchmarks.md, "Team queues and admission"). Among 6,000 other endpoints
    too: the claimers are found by key, not by a walk of every endpoint."""
    core, pg_uri = fresh
    fleet = await make_fleet(core, endpoints=40)
    await producer.push_team_many(core, fleet.humans[0], fleet.slug,
                                  [{"title": f"t{i}", "queue": fleet.label} for i in range(400)])
    await sql(core, "INSERT INTO endpoints (id, agent_id, slug, credential_hash, credential_prefix, scope_verbs,"
              " scope_queues, state) SELECT gen_random_uuid(), agent_id, slug || '-' || n,"
              " sha256(credential_hash || int4send(n)), credential_prefix, scope_verbs, scope_queues, state"
              " FROM endpoints, generate_series(1, %s) n", (others // 40,))
    if analysed:
        await sql(core, "ANALYZE")
    claims = [todos.FleetClaim(ep, fleet.label, todos._claim_params(core, ep, None, None, None)[0], None)
              for ep in fleet.endpoints]
    params, _ = todos.fleet_params(fleet.label, claims)
    async with await psycopg.AsyncConnection.connect(pg_uri, row_factory=dict_row) as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q.todos.claim_next_team_group, params)
        (plan,) = (await cur.fetchone())["QUERY PLAN"]
        await conn.rollback()
    assert plan["Plan"]["Actual Rows"] == len(claims)  # every claim got a todo
    touched = _rows_touched(plan["Plan"])
    assert touched <= 80 * len(claims), f"{touched} rows touched to claim {len(claims)} todos"
