"""Admission striped over shard rows (migration 0021, docs/decisions.md D38 and D40): the fast-path
claimers of one policed queue hold shards at once instead of taking turns on the policy row, and
admission stays exact: no cap is ever passed, every committed claim is charged once (on the shard its
transaction held), a policy change waits for the shard holders and takes effect on commit."""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest
from psycopg.rows import dict_row

from core_world import check, make_world, sql
from switchboard.core import admission, todos
from switchboard.core.queries import Q
from switchboard.db import migrate

USED = ("SELECT switchboard_admission_used(p.id, switchboard_window_start(p.window_period, p.window_tz,"
        " p.window_start_minute, p.window_weekday, now())) AS n FROM admission_policies p"
        " WHERE p.endpoint_id = %s AND p.queue = 'inbox'")


async def used(core, endpoint_id) -> int:
    return (await sql(core, USED, (endpoint_id,)))[0]["n"]


async def in_flight(core, endpoint_id) -> int:
    rows = await sql(core, "SELECT count(*) AS n FROM todos WHERE endpoint_id = %s AND queue = 'inbox'"
                           " AND (state = 'input-required' OR (state = 'claimed' AND lease_expires_at >= now()))",
                     (endpoint_id,))
    return rows[0]["n"]


async def shards_charged(core, endpoint_id) -> dict[int, int]:
    rows = await sql(core, "SELECT s.shard, s.charged FROM admission_shards s JOIN admission_policies p"
                           " ON p.id = s.policy_id WHERE p.endpoint_id = %s AND s.charged > 0 ORDER BY s.shard",
                     (endpoint_id,))
    return {r["shard"]: r["charged"] for r in rows}


async def test_stripes_and_the_fast_take_follow_the_policy_caps(core):
    """S (shards the fast path uses) and B (the most one fast claim takes) shrink with the smallest cap
    so that S·B stays within a quarter of it; a cap below 4 keeps one shard and claims of one."""
    rows = await sql(core, """
        SELECT m, w, switchboard_admission_stripes(m, w) AS s, switchboard_admission_stripe_take(m, w) AS b
          FROM (VALUES (1, NULL::int), (5, 40), (12, NULL), (NULL, 120), (1000, 1000000), (NULL, NULL))
               AS c(m, w)""")
    got = [(r["m"], r["w"], r["s"], r["b"]) for r in rows]
    assert got == [(1, None, 1, 1), (5, 40, 1, 1), (12, None, 3, 1), (None, 120, 8, 3),
                   (1000, 1000000, 8, 31), (None, None, 8, 100)]
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=5)
    rows = await sql(core, "SELECT s.shard, s.charged FROM admission_shards s JOIN admission_policies p"
                           " ON p.id = s.policy_id WHERE p.endpoint_id = %s ORDER BY s.shard", (w.e1.endpoint_id,))
    assert [(r["shard"], r["charged"]) for r in rows] == [(i, 0) for i in range(8)]


async def test_two_fast_claimers_of_one_queue_hold_their_shards_at_once(core):
    """One transaction holds a shard inside its claim (admitted and charged, not committed): another
    claim of the same queue completes meanwhile on another shard. With the policy row as the lock
    (migration 0020) it waited for the first to end."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=100,
                               max_claims_per_window=1000, window_spec=admission.window("day"))
    await w.todo(), await w.todo()
    held = await core.pool.getconn()
    try:
        async with held.transaction():
            cur = await held.execute("SELECT * FROM switchboard_admission_admit(%s, 'inbox', 1)",
                                     (w.e1.endpoint_id,))
            (first,) = await cur.fetchall()
            assert first["verdict"] == "admitted" and first["shard"] == 0
            got = await asyncio.wait_for(todos.claim_next(core, w.e1), timeout=20)
            assert got is not None and got.admission["used"] == 1
            assert await shards_charged(core, w.e1.endpoint_id) == {1: 1}  # the held charge is not committed
            raise psycopg.Rollback()
    finally:
        await core.pool.putconn(held)
    assert await used(core, w.e1.endpoint_id) == 1
    assert await check(core) == []


async def test_the_exact_path_waits_for_the_shard_holders_and_they_for_it(core):
    """The exact verdict (`verdicts`: the policy and its shards locked) holds every fast claimer back
    until it ends, then they go on; what it judged is exact."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=100,
                               window_spec=admission.window("day"))
    await w.todo()
    held = await core.pool.getconn()
    try:
        async with held.transaction():
            cur = await held.execute("SELECT * FROM switchboard_admission_verdicts(%s, ARRAY['inbox'])",
                                     (w.e1.endpoint_id,))
            (row,) = await cur.fetchall()
            assert (row["verdict"], row["cap"], row["shard"]) == ("admitted", 100, 0)
            claim = asyncio.create_task(todos.claim_next(core, w.e1))
            await asyncio.sleep(0.5)
            assert not claim.done()
            raise psycopg.Rollback()
    finally:
        await core.pool.putconn(held)
    got = await asyncio.wait_for(claim, timeout=20)
    assert got is not None and got.admission["used"] == 1
    assert await check(core) == []


async def test_a_pause_waits_for_the_shard_holders_and_holds_from_its_commit(core):
    """A pause locks the policy's shards (a trigger on every policy change): it waits for the claim that
    holds one; a claim that takes another shard meanwhile judges under the policy before the pause and
    commits before it; once the pause commits no claim is admitted."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=100,
                               window_spec=admission.window("day"))
    for _ in range(3):
        await w.todo()
    held = await core.pool.getconn()
    try:
        async with held.transaction():
            cur = await held.execute("SELECT * FROM switchboard_admission_admit(%s, 'inbox', 1)",
                                     (w.e1.endpoint_id,))
            assert (await cur.fetchall())[0]["shard"] == 0
            pause = asyncio.create_task(admission.set_paused(core, w.h1, "inbox", True, endpoint=w.slug1))
            await asyncio.sleep(0.5)
            assert not pause.done()
            got = await asyncio.wait_for(todos.claim_next(core, w.e1), timeout=20)
            assert got is not None  # before the pause: it has not committed
            assert not pause.done()
            raise psycopg.Rollback()
    finally:
        await core.pool.putconn(held)
    assert (await asyncio.wait_for(pause, timeout=20))["status"] == "paused"
    for refused in (False, True):  # the fast path, then the locked path
        core.policed.note(w.e1.endpoint_id, "inbox", refused)
        claimed, deferred = await todos.take_next(core, w.e1)
        assert claimed == [] and deferred[0]["reason"] == "paused"
    assert await used(core, w.e1.endpoint_id) == 1
    assert await check(core) == []


async def test_a_charge_from_an_ended_window_leaves_a_newer_window_alone(core):
    """A transaction that began before its window ended charges after a claim of the next window was
    charged on the same shard: the shard keeps the newer window's count."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_claims_per_window=10)
    (p,) = await sql(core, "SELECT id FROM admission_policies WHERE endpoint_id = %s", (w.e1.endpoint_id,))
    await sql(core, "UPDATE admission_shards SET charged_window = date_trunc('hour', now()), charged = 4"
                    " WHERE policy_id = %s AND shard = 0", (p["id"],))
    async with core.pool.connection() as conn:
        await conn.execute(Q.admission.charge, {"ids": [p["id"]], "shards": [0], "ns": [1],
                                                "windows": [await _hour(conn, "-1 hour")]})
        await conn.execute(Q.admission.charge, {"ids": [p["id"]], "shards": [0], "ns": [2],
                                                "windows": [await _hour(conn, "0 hours")]})
    assert await used(core, w.e1.endpoint_id) == 6


async def _hour(conn, shift: str):
    cur = await conn.execute("SELECT date_trunc('hour', now()) + %s::interval AS ws", (shift,))
    return (await cur.fetchone())["ws"]


@pytest.mark.parametrize(("max_in_flight", "budget", "rounds"), [(5, 40, 200), (12, 400, 60), (None, 120, 40)])
async def test_race_many_claimers_near_the_caps_never_pass_them(core, max_in_flight, budget, rounds):
    """Twenty claimers of one queue, each `rounds` times: claim_next (now and then a batch of two or
    three), hold the lease a moment, complete it. A sampler counts the leases in flight all along: never
    above max_in_flight. At the end the window's charges are exactly the claims committed (the
    attempts opened) and never above the budget; with a budget the whole budget was used (exact: no
    claim refused while room remained at the end). Each empty answer was deferred for a cap."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=max_in_flight,
                               max_claims_per_window=budget, window_spec=admission.window("day"))
    await sql(core, "INSERT INTO todos (id, endpoint_id, queue, title, created_at)"
                    " SELECT 'td_' || gen_random_uuid(), %s, 'inbox', 'race ' || g, now() + g * interval '1 ms'"
                    " FROM generate_series(1, %s) g", (w.e1.endpoint_id, budget + 100))
    rng = random.Random(13)
    stop = asyncio.Event()
    seen: list[int] = []
    committed = 0
    reasons: dict[str, int] = {}

    async def sample() -> None:
        while not stop.is_set():
            seen.append(await in_flight(core, w.e1.endpoint_id))
            await asyncio.sleep(0)

    async def claimer(i: int) -> None:
        nonlocal committed
        for _ in range(rounds):
            batch = rng.choice([None, None, None, 2, 3])
            claimed, deferred = await todos.take_next(core, w.e1, max_todos=batch)
            if not claimed:
                for d in deferred:
                    reasons[d["reason"]] = reasons.get(d["reason"], 0) + 1
                    assert d["reason"] in ("in_flight_full", "window_exhausted"), d
                await asyncio.sleep(0)
                continue
            committed += len(claimed)
            await asyncio.sleep(0.01 + rng.random() * 0.05)
            for got in claimed:
                await todos.complete(core, w.e1, got.todo["id"])

    sampler = asyncio.create_task(sample())
    try:
        await asyncio.gather(*(claimer(i) for i in range(20)))
    finally:
        stop.set()
        await sampler
    opened = (await sql(core, "SELECT count(*) AS n FROM todo_attempts a JOIN todos t ON t.id = a.todo_id"
                              " WHERE t.endpoint_id = %s", (w.e1.endpoint_id,)))[0]["n"]
    total = await used(core, w.e1.endpoint_id)
    print(f"caps {max_in_flight}/{budget}: {committed} claims, in flight max {max(seen)},"
          f" shards {await shards_charged(core, w.e1.endpoint_id)}, deferred {reasons}")
    if max_in_flight is not None:
        assert max(seen) <= max_in_flight, max(seen)
    assert total == committed == opened
    if budget is not None:
        assert total == budget
    assert await check(core) == []
    stripes = (await sql(core, "SELECT switchboard_admission_stripes(%s, %s) AS s", (max_in_flight, budget)))[0]["s"]
    if stripes > 1:  # the claimers held shards at once
        assert len(await shards_charged(core, w.e1.endpoint_id)) > 1


async def test_migration_0021_moves_the_charges_to_shard_zero(scratch_db):
    """A policy of migration 0017 keeps its window's charges: they move to its shard 0, and every
    policy has its shard rows; the policy's own charge columns are gone."""
    async with await psycopg.AsyncConnection.connect(scratch_db, autocommit=True, row_factory=dict_row) as conn:
        await migrate.migrate(conn, target=20)
        cur = await conn.execute("INSERT INTO humans (name) VALUES ('ops') RETURNING id")
        human = (await cur.fetchone())["id"]
        cur = await conn.execute("INSERT INTO agents (human_id, name) VALUES (%s, 'fixer') RETURNING id", (human,))
        agent = (await cur.fetchone())["id"]
        cur = await conn.execute(
            "INSERT INTO endpoints (agent_id, slug, credential_hash, credential_prefix, scope_verbs, scope_queues)"
            " VALUES (%s, 'oldslug', %s, 'sbk_old', ARRAY['claim_next'], ARRAY['inbox', 'other']) RETURNING id",
            (agent, b"\x01" * 32))
        endpoint = (await cur.fetchone())["id"]
        cur = await conn.execute(
            "INSERT INTO admission_policies (endpoint_id, queue, max_claims_per_window, charged, charged_window)"
            " VALUES (%s, 'inbox', 9, 7, date_trunc('hour', now())) RETURNING id", (endpoint,))
        policy = (await cur.fetchone())["id"]
        await migrate.migrate(conn)
        cur = await conn.execute("SELECT shard, charged, charged_window IS NOT NULL AS w FROM admission_shards"
                                 " WHERE policy_id = %s ORDER BY shard", (policy,))
        assert [(r["shard"], r["charged"], r["w"]) for r in await cur.fetchall()] == \
            [(0, 7, True)] + [(i, 0, False) for i in range(1, 8)]
        cur = await conn.execute("SELECT switchboard_admission_used(%s, date_trunc('hour', now())) AS n", (policy,))
        assert (await cur.fetchone())["n"] == 7
        cur = await conn.execute("SELECT column_name FROM information_schema.columns"
                                 " WHERE table_name = 'admission_policies' AND column_name LIKE 'charged%%'")
        assert await cur.fetchall() == []
        cur = await conn.execute("INSERT INTO admission_policies (endpoint_id, queue, paused)"
                                 " VALUES (%s, 'other', true) RETURNING id", (endpoint,))
        fresh = (await cur.fetchone())["id"]
        cur = await conn.execute("SELECT count(*) AS n FROM admission_shards WHERE policy_id = %s", (fresh,))
        assert (await cur.fetchone())["n"] == 8
