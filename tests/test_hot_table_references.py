"""The hot tables' references checked by the statements that write them (migration 0025,
docs/decisions.md D42): no foreign-key trigger runs per row on a bulk push, a claim or a batch claim,
and what the keys did on delete is kept by statement-level triggers; the invariant checker catches a
row that names another that does not exist."""

from __future__ import annotations

import json

from core_world import check, make_world, sql
from switchboard.core import producer, teams, todos
from switchboard.core.queries import Q
from team_world import make_fleet


def _triggers(plan) -> list[dict]:
    """Every trigger an EXPLAIN (ANALYZE, FORMAT JSON) reports as fired by the statement."""
    return [t for entry in plan for t in entry.get("Triggers", [])]


async def _explain(core, statement: str, params: dict) -> list[dict]:
    async with core.pool.connection() as conn:
        async with conn.transaction(force_rollback=True):
            cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
            (row,) = await cur.fetchall()
    plan = row["QUERY PLAN"]
    return json.loads(plan) if isinstance(plan, str) else plan


async def test_a_bulk_push_runs_no_foreign_key_check_per_todo(core):
    """Before migration 0025 the INSERT of 3 todos fired `todos_endpoint_id_fkey`'s check 3 times (one
    lookup query of the same endpoint per row; 1,000 for a full batch)."""
    w = await make_world(core)
    n = 3
    params = {"endpoint_id": w.e1.endpoint_id, "team_id": None, "human_id": None, "source": "operator",
              "ids": json.dumps(producer.new_todo_ids(n)), "queues": json.dumps(["inbox"] * n),
              "kinds": None, "titles": json.dumps([f"t{i}" for i in range(n)]), "payloads": None,
              "assignees": None, "max_attempts": json.dumps([5] * n)}
    plan = await _explain(core, Q.producer.create_batch_keyless, params)
    fired = _triggers(plan)
    assert not [t for t in fired if t.get("Constraint Name", "").endswith("_fkey")], fired
    assert any(t.get("Trigger Name") == "todos_created_events" for t in fired), fired  # the triggers are listed


async def test_a_claim_runs_no_foreign_key_check(core):
    """The claim re-points `claimed_by_endpoint_id` and opens an attempt: before migration 0025 each
    fired a foreign-key check (the endpoint's, the todo's)."""
    w = await make_world(core)
    await w.todo()
    params, _ = todos._claim_params(core, w.e1, None, None, None)
    plan = await _explain(core, Q.todos.claim_next_one, {**params, "queues": ["inbox"], "queue": "inbox",
                                                         "admitted": False})
    fired = _triggers(plan)
    assert not [t for t in fired if t.get("Constraint Name", "").endswith("_fkey")], fired
    assert await check(core) == []


async def test_deleting_an_endpoint_deletes_its_todos_and_clears_it_as_a_holder(core):
    """What ON DELETE CASCADE and ON DELETE SET NULL did, now the statement-level trigger on endpoints:
    its own todos and their attempts go; a team todo it holds stays, with no holder endpoint."""
    w = await make_world(core)
    own = await w.todo()
    assert (await todos.claim_next(core, w.e1)).todo["id"] == own["id"]
    f = await make_fleet(core, endpoints=1)
    team_todo = await f.push()
    ep = f.endpoints[0]
    assert (await todos.claim_next(core, ep, queue=f.label)).todo["id"] == team_todo["id"]
    await sql(core, "DELETE FROM endpoints WHERE id = ANY(%s)", ([w.e1.endpoint_id, ep.endpoint_id],))
    assert await sql(core, "SELECT id FROM todos WHERE id = %s", (own["id"],)) == []
    assert await sql(core, "SELECT seq FROM todo_attempts WHERE todo_id = %s", (own["id"],)) == []
    (held,) = await sql(core, "SELECT claimed_by_endpoint_id FROM todos WHERE id = %s", (team_todo["id"],))
    assert held["claimed_by_endpoint_id"] is None
    left = await sql(core, "SELECT count(*) AS n FROM todo_attempts WHERE todo_id = %s", (team_todo["id"],))
    assert left[0]["n"] == 1


async def test_deleting_a_team_deletes_its_todos_and_their_attempts(core):
    f = await make_fleet(core, endpoints=1)
    a, b = await f.push(), await f.push()
    assert await todos.claim_next(core, f.endpoints[0], queue=f.label) is not None
    await teams.delete(core, f.humans[0], f.slug)
    assert await sql(core, "SELECT id FROM todos WHERE id = ANY(%s)", ([a["id"], b["id"]],)) == []
    assert await sql(core, "SELECT seq FROM todo_attempts WHERE todo_id = ANY(%s)", ([a["id"], b["id"]],)) == []
    assert await check(core) == []


async def test_deleting_todos_deletes_their_attempts(core):
    w = await make_world(core)
    t = await w.todo()
    got = await todos.claim_next(core, w.e1)
    await todos.complete(core, w.e1, got.todo["id"])
    keep = await w.todo()
    await todos.claim_next(core, w.e1)
    await sql(core, "DELETE FROM todos WHERE id = %s", (t["id"],))
    assert await sql(core, "SELECT seq FROM todo_attempts WHERE todo_id = %s", (t["id"],)) == []
    assert len(await sql(core, "SELECT seq FROM todo_attempts WHERE todo_id = %s", (keep["id"],))) == 1
    assert await check(core) == []


async def test_the_checker_reports_a_row_naming_one_that_does_not_exist(core):
    """No key refuses such a row any more; the checker does (and the hypothesis state machines run it
    after every step)."""
    w = await make_world(core)
    t = await w.todo()
    assert await check(core) == []
    await sql(core, "INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at,"
                    " lease_expires_at, ended_at, outcome, disposition)"
                    " VALUES ('td_gone', 1, 1, 'owner', 'x', now(), now(), now(), 'completed', 'done')")
    await sql(core, "UPDATE todos SET claimed_by_endpoint_id = gen_random_uuid() WHERE id = %s", (t["id"],))
    problems = await check(core)
    named = [p for p in problems if "does not exist" in str(p)]
    assert named, problems
    assert "td_gone" in str(named) and t["id"] in str(named)
