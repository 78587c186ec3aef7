"""Migrations (SYSTEM.md section 5, SPEC-0034 REQ-17): the upgrade path with leases in flight, the
shape of the attempts table, a failing file stops and names itself, and two migrators at once."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from conftest import core_for
from switchboard.core import endpoints, invariants, todos
from switchboard.core.models import HumanCaller
from switchboard.db import migrate


async def _connect(uri: str) -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(uri, autocommit=True, row_factory=psycopg.rows.dict_row)
    return conn


async def _rows(conn, statement: str, params=None) -> list[dict]:
    cur = await conn.execute(statement, params)
    return await cur.fetchall() if cur.description else []


async def _seed_v1(conn) -> dict:
    """A human, an agent, an endpoint and todos in every state, written with migration 1's schema."""
    human = (await _rows(conn, "INSERT INTO humans (name) VALUES ('ops') RETURNING id"))[0]["id"]
    agent = (await _rows(conn, "INSERT INTO agents (human_id, name) VALUES (%s, 'fixer') RETURNING id",
                         (human,)))[0]["id"]
    endpoint = (await _rows(conn, """
        INSERT INTO endpoints (agent_id, slug, credential_hash, credential_prefix, scope_verbs, scope_queues)
        VALUES (%s, 'oldslug', %s, 'sbk_old', ARRAY['list_todos','claim','claim_next','heartbeat',
                'complete','fail'], ARRAY['inbox']) RETURNING *""", (agent, b"\x01" * 32)))[0]
    owner = f"agent:{agent}"
    ids = {}
    for name, state, extra in [
        ("claimed", "claimed", "owner = %(o)s, attempt = 1, claimed_at = now() - interval '5 minutes',"
                               " lease_expires_at = now() + interval '10 minutes'"),
        ("lapsed", "claimed", "owner = %(o)s, attempt = 2, claimed_at = now() - interval '1 hour',"
                              " lease_expires_at = now() - interval '1 minute'"),
        ("asking", "input-required", "owner = %(o)s, attempt = 1, claimed_at = now() - interval '2 minutes',"
                                     " input_request = 'which?'"),
        ("pending", "pending", "attempt = 0"),
        ("done", "done", "attempt = 1, completed_at = now(), result = '{}'::jsonb"),
        ("dead", "failed", "attempt = 5, next_retry_at = NULL"),
        ("parked", "failed", "attempt = 1, next_retry_at = now() + interval '1 hour'"),
        ("canceled", "canceled", "attempt = 0"),
    ]:
        tid = f"td_{uuid.uuid4()}"
        await conn.execute("INSERT INTO todos (id, endpoint_id, queue, title) VALUES (%s, %s, 'inbox', %s)",
                           (tid, endpoint["id"], name))
        await conn.execute(f"UPDATE todos SET state = %(s)s, {extra} WHERE id = %(id)s",
                           {"s": state, "o": owner, "id": tid})
        ids[name] = tid
    return {"human": human, "agent": agent, "endpoint": endpoint, "ids": ids}


async def test_req17_a_lease_in_flight_across_the_upgrade(scratch_db):
    conn = await _connect(scratch_db)
    try:
        assert await migrate.migrate(conn, target=1) == ["0001_queue.sql"]
        seeded = await _seed_v1(conn)
        ids = seeded["ids"]
        claimed_at = {r["id"]: r["claimed_at"] for r in await _rows(conn, "SELECT id, claimed_at FROM todos")}
        assert await migrate.migrate(conn, target=2) == ["0002_attempts.sql"]

        attempts = await _rows(conn, "SELECT * FROM todo_attempts ORDER BY todo_id")
        by_todo = {a["todo_id"]: a for a in attempts}
        assert set(by_todo) == {ids["claimed"], ids["lapsed"], ids["asking"]}  # no backfill for the rest
        for name in ("claimed", "lapsed", "asking"):
            a = by_todo[ids[name]]
            assert a["seq"] == 1 and a["claimer_kind"] == "endpoint" and a["claimant"] == "migrated"
            assert a["ended_at"] is None and a["outcome"] is None
            assert a["claimed_at"] == claimed_at[ids[name]]
            assert a["claimer_endpoint_id"] == seeded["endpoint"]["id"]
        totals = {r["id"]: (r["attempts_total"], r["attempts_pruned"])
                  for r in await _rows(conn, "SELECT id, attempts_total, attempts_pruned FROM todos")}
        assert totals == {tid: ((1, 0) if name in ("claimed", "lapsed", "asking") else (0, 0))
                          for name, tid in ids.items()}
        await migrate.migrate(conn)  # the rest of the migrations, if any
    finally:
        await conn.close()

    async with core_for(scratch_db) as core:
        async with core.pool.connection() as c:
            assert await invariants.check(c) == []
        row = (await _rows_pool(core, "SELECT * FROM endpoints WHERE slug = 'oldslug'"))[0]
        caller = endpoints.caller_from_row(row)
        human = HumanCaller(seeded["human"], "ops")
        # The holder completes after the upgrade: the migrated attempt closes completed.
        out = await todos.complete(core, caller, ids["claimed"], summary="finished after upgrade")
        assert out["state"] == "done"
        detail = await todos.get(core, caller, ids["claimed"])
        assert [(a["seq"], a["outcome"], a["disposition"], a["claimant"]) for a in detail["attempts"]] == \
            [(1, "completed", "done", "migrated")]
        # The interrupted one resumes and completes on its migrated attempt.
        await todos.provide_input(core, human, ids["asking"], payload={"answer": "this"})
        await todos.complete(core, caller, ids["asking"])
        assert (await todos.get(core, caller, ids["asking"]))["attempts"][0]["outcome"] == "completed"
        # The lapsed one is taken over: the migrated attempt closes lease_expired, seq 2 opens.
        got = await todos.claim_next(core, caller)
        assert got.todo["id"] == ids["lapsed"] and got.attempt_seq == 2 and got.todo["attempt"] == 3
        assert got.prior_attempts[0]["claimant"] == "migrated" and got.prior_attempts[0]["died"] is True
        # Terminal todos keep no history; a pending one opens seq 1 on its first claim.
        assert (await todos.get(core, human, ids["done"]))["attempts"] == []
        assert (await todos.claim(core, caller, ids["pending"])).attempt_seq == 1
        async with core.pool.connection() as c:
            assert await invariants.check(c) == []


async def _rows_pool(core, statement, params=None):
    async with core.pool.connection() as conn:
        cur = await conn.execute(statement, params)
        return await cur.fetchall()


async def test_attempts_table_has_the_req1_fields_and_a_deferred_exclusion(scratch_db):
    conn = await _connect(scratch_db)
    try:
        await migrate.migrate(conn)
        cols = {r["column_name"]: r["data_type"] for r in await _rows(conn, """
            SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'todo_attempts'""")}
        assert set(cols) == {"todo_id", "seq", "attempt", "claimer_kind", "claimer_endpoint_id", "claimer_session",
                             "owner", "claimant", "claimed_at", "last_heartbeat_at", "lease_expires_at", "ended_at",
                             "outcome", "disposition", "summary", "summary_truncated", "artifact", "lease_token_hash",
                             "owner_extended_at",  # 0005: an owner's lease extension, apart from heartbeats
                             "notes"}  # 0013: the holder's progress notes, newest kept
        assert cols["notes"] == "jsonb"
        assert cols["lease_token_hash"] == "bytea" and cols["claimer_endpoint_id"] == "uuid"
        con = (await _rows(conn, """SELECT contype, condeferrable, condeferred FROM pg_constraint
                                     WHERE conname = 'one_open_attempt'"""))[0]
        assert (con["contype"], con["condeferrable"], con["condeferred"]) == ("x", True, True)
        fk = (await _rows(conn, """SELECT confdeltype FROM pg_constraint
                                    WHERE conrelid = 'todo_attempts'::regclass AND contype = 'f'"""))
        assert fk == []  # 0025: the claim proves the todo; deleting todos deletes their attempts by trigger
        trigger = await _rows(conn, """SELECT tgtype FROM pg_trigger
                                        WHERE tgrelid = 'todos'::regclass AND tgname = 'todos_deleted'""")
        assert len(trigger) == 1
        # The CHECKs refuse what the core never writes.
        tid = f"td_{uuid.uuid4()}"
        await _seed_minimal(conn, tid)
        for bad in ("outcome = 'exploded', ended_at = now(), disposition = 'done'",
                    "summary = repeat('x', 2049)", "claimant = repeat('é', 65)", "artifact = repeat('a', 513)",
                    "ended_at = now()", "outcome = 'reaped', disposition = 'requeued', ended_at = now(), summary = 's'",
                    "notes = '{}'::jsonb"):
            with pytest.raises(psycopg.errors.CheckViolation):
                await conn.execute(f"UPDATE todo_attempts SET {bad} WHERE todo_id = %s", (tid,))
        assert await migrate.migrate(conn) == []  # idempotent
    finally:
        await conn.close()


async def _seed_minimal(conn, tid: str) -> None:
    seeded_human = (await _rows(conn, "INSERT INTO humans (name) VALUES (%s) RETURNING id",
                                (f"h{uuid.uuid4().hex[:8]}",)))[0]["id"]
    agent = (await _rows(conn, "INSERT INTO agents (human_id, name) VALUES (%s, 'a') RETURNING id",
                         (seeded_human,)))[0]["id"]
    ep = (await _rows(conn, """INSERT INTO endpoints (agent_id, slug, credential_hash, credential_prefix,
                               scope_verbs, scope_queues) VALUES (%s, %s, %s, 'p', ARRAY['claim'], ARRAY['inbox'])
                               RETURNING id""", (agent, uuid.uuid4().hex[:12], uuid.uuid4().bytes * 2)))[0]["id"]
    await conn.execute("INSERT INTO todos (id, endpoint_id, queue, title) VALUES (%s, %s, 'inbox', 't')", (tid, ep))
    await conn.execute("""INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at,
                          lease_expires_at) VALUES (%s, 1, 1, 'owner', 'o', now(), now())""", (tid,))


async def test_the_hot_tables_single_column_rules_are_domains_and_still_refuse(scratch_db):
    """Migration 0026 (D46): no CHECK of `todos` or `todo_attempts` reads a single column (PostgreSQL
    recompiles every table CHECK on every write; a domain's is compiled once and checked only where the
    column is set), the four that compare columns stay, and every rule still refuses what it did, with
    the same SQLSTATE. Clients still read the base types."""
    conn = await _connect(scratch_db)
    try:
        await migrate.migrate(conn, target=25)
        tid = f"td_{uuid.uuid4()}"
        await _seed_minimal(conn, tid)  # written before the rewrite: kept through it
        await migrate.migrate(conn)
        checks = await _rows(conn, """SELECT conname, cardinality(conkey) AS cols
                                        FROM pg_constraint WHERE contype = 'c'
                                         AND conrelid IN ('todos'::regclass, 'todo_attempts'::regclass)""")
        assert [c for c in checks if c["cols"] == 1] == []
        assert {c["conname"] for c in checks} == {"todos_one_owner", "todos_team_queue", "attempt_open_or_closed",
                                                   "attempt_died_reports_nothing"}
        row = (await _rows(conn, "SELECT state, title, attempt, queue FROM todos WHERE id = %s", (tid,)))[0]
        assert row == {"state": "pending", "title": "t", "attempt": 0, "queue": "inbox"}
        for bad in ("state = 'exploded'", "title = ''", "title = repeat('x', 513)", "max_attempts = 0",
                    "max_attempts = 101", "attempt = -1", "attempts_total = -1", "attempts_pruned = -1",
                    "input_request = repeat('x', 2049)", "queue = ''", "queue = 'team:a/b'"):
            with pytest.raises(psycopg.errors.CheckViolation):
                await conn.execute(f"UPDATE todos SET {bad} WHERE id = %s", (tid,))
        for bad in ("seq = 0", "attempt = -1", "claimer_kind = 'robot'", "lease_token_hash = '\\x00'::bytea",
                    "outcome = 'exploded', ended_at = now(), disposition = 'done'",
                    "outcome = 'completed', ended_at = now(), disposition = 'kept'", "notes = '{}'::jsonb"):
            with pytest.raises(psycopg.errors.CheckViolation):
                await conn.execute(f"UPDATE todo_attempts SET {bad} WHERE todo_id = %s", (tid,))
        await conn.execute("UPDATE todos SET state = 'claimed', attempt = 1 WHERE id = %s", (tid,))  # good rows pass
        # Retyping dropped the columns' statistics; with rows there, the migration gathered them again.
        stats = await _rows(conn, """SELECT tablename, attname FROM pg_stats
                                      WHERE (tablename, attname) IN (('todos', 'state'),
                                                                     ('todo_attempts', 'outcome'))""")
        assert len(stats) == 2, stats
    finally:
        await conn.close()


async def test_a_new_installation_does_not_analyse_its_empty_hot_tables(scratch_db):
    """Statistics of an empty table make PostgreSQL plan the claims for one that stays empty (40 to 50 %
    more PostgreSQL CPU per claim + complete in a fresh database, docs/benchmarks.md): migration 0026
    gathers them only where there are rows."""
    conn = await _connect(scratch_db)
    try:
        await migrate.migrate(conn)
        rows = await _rows(conn, """SELECT relname, reltuples FROM pg_class
                                     WHERE relname IN ('todos', 'todo_attempts') ORDER BY relname""")
        assert [(r["relname"], r["reltuples"]) for r in rows] == [("todo_attempts", -1), ("todos", -1)]
    finally:
        await conn.close()


async def test_a_failing_migration_names_its_file_and_applies_nothing(scratch_db):
    conn = await _connect(scratch_db)
    try:
        await migrate.migrate(conn, target=1)
        await conn.execute("CREATE TABLE todo_attempts (planted int)")  # makes 0002 fail half-way
        with pytest.raises(migrate.MigrationError) as err:
            await migrate.migrate(conn)
        assert "0002_attempts.sql" in str(err.value)
        versions = [r["version"] for r in await _rows(conn, "SELECT version FROM schema_migrations")]
        assert versions == [1]
        cols = [r["column_name"] for r in await _rows(conn, """SELECT column_name FROM information_schema.columns
                                                               WHERE table_name = 'todos'""")]
        assert "attempts_total" not in cols  # the whole file rolled back with its bookkeeping row
        await conn.execute("DROP TABLE todo_attempts")
        applied = await migrate.migrate(conn)
        assert applied[0] == "0002_attempts.sql"
    finally:
        await conn.close()


async def test_two_migrators_at_once_apply_each_file_once(scratch_db):
    c1, c2 = await _connect(scratch_db), await _connect(scratch_db)
    try:
        a, b = await asyncio.gather(migrate.migrate(c1), migrate.migrate(c2))
        names = [m.name for m in migrate.available()]
        assert sorted(a + b) == sorted(names) and not set(a) & set(b)
        rows = await _rows(c1, "SELECT version FROM schema_migrations ORDER BY version")
        assert [r["version"] for r in rows] == [m.version for m in migrate.available()]
    finally:
        await c1.close()
        await c2.close()


async def test_the_held_leases_index_holds_team_todos_only(scratch_db):
    """Migration 0027 (D48): every claim records the claiming endpoint, but only a team todo's lease is
    ever looked up by it (a revocation's or a removal's hand-back), so an endpoint's own todo no longer
    adds an entry to `todos_held_by` on every claim. The hand-back still finds its leases through it."""
    conn = await _connect(scratch_db)
    try:
        await migrate.migrate(conn)
        (idx,) = await _rows(conn, """SELECT pg_get_expr(i.indpred, i.indrelid) AS pred FROM pg_index i
                                      WHERE i.indexrelid = 'todos_held_by'::regclass""")
        assert "team_id IS NOT NULL" in idx["pred"]
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r["QUERY PLAN"] for r in await _rows(conn, """EXPLAIN SELECT id FROM todos
            WHERE claimed_by_endpoint_id = ANY(ARRAY[gen_random_uuid()]) AND team_id IS NOT NULL
              AND state IN ('claimed', 'input-required')"""))
        assert "todos_held_by" in plan
    finally:
        await conn.close()


async def test_todo_ids_compare_byte_by_byte_and_survive_the_change(scratch_db):
    """Migration 0028 (D49): the columns holding todo ids use the "C" collation (one memcmp per B-tree
    step instead of the locale's comparison), all of them, so no comparison mixes two collations; rows
    written before keep their ids and are still found by them."""
    conn = await _connect(scratch_db)
    try:
        await migrate.migrate(conn, target=27)
        tid = f"td_{uuid.uuid4()}"
        await _seed_minimal(conn, tid)
        await migrate.migrate(conn)
        cols = await _rows(conn, """SELECT c.relname, a.attname, co.collname FROM pg_attribute a
                                      JOIN pg_class c ON c.oid = a.attrelid
                                      JOIN pg_collation co ON co.oid = a.attcollation
                                     WHERE (c.relname, a.attname) IN (
                                           ('todos', 'id'), ('todo_attempts', 'todo_id'),
                                           ('hook_outbox', 'todo_id'), ('intake_seen', 'todo_id'))""")
        assert {(c["relname"], c["collname"]) for c in cols} == {
            ("todos", "C"), ("todo_attempts", "C"), ("hook_outbox", "C"), ("intake_seen", "C")}
        (found,) = await _rows(conn, """SELECT count(*) AS n FROM todos t JOIN todo_attempts a ON a.todo_id = t.id
                                         WHERE t.id = %s""", (tid,))
        assert found["n"] == 1
    finally:
        await conn.close()
