"""Races for real (SPEC-0034 REQ-2, REQ-20; SYSTEM.md section 17): concurrent connections from one
pool, each race repeated at least 200 times, the invariant checker after every round.
"""

from __future__ import annotations

import asyncio
import collections

import psycopg
import pytest
import pytest_asyncio

from conftest import clean_database, core_for, create_database
from core_world import check, make_world, sql
from switchboard.core import endpoints, sweeps, todos
from switchboard.core.errors import Conflict, Unauthorized

ROUNDS = 200
PLANT = ("INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at, lease_expires_at)"
         " VALUES (%s, %s, 1, 'owner', 'planted', now(), now() + interval '1 minute')")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def race_uri(pg_server):
    return create_database(pg_server)


@pytest_asyncio.fixture(loop_scope="session")
async def rcore(race_uri):
    clean_database(race_uri)
    async with core_for(race_uri) as c:  # max_size 20 >= every race's concurrency
        assert c.pool.max_size >= 4
        yield c


async def test_race_two_claims_of_one_pending_todo(rcore):
    """REQ-2: exactly one claim commits and the todo has exactly one attempt."""
    core = rcore
    w = await make_world(core)
    a, b = w.e1.with_session("a"), w.e1.with_session("b")
    kinds = collections.Counter()
    for i in range(ROUNDS):
        t = (await w.todo(f"r{i}"))["id"]
        # Alternate the shapes of the race: by id against by id, by id against claim_next, and the
        # owning human's Board claim against an agent.
        first = todos.claim(core, a, t)
        second = (lambda: todos.claim(core, b, t), lambda: todos.claim_next(core, b),
                  lambda: todos.claim(core, w.h1, t))[i % 3]()
        results = await asyncio.gather(first, second, return_exceptions=True)
        wins = [r for r in results if isinstance(r, todos.ClaimResult)]
        losses = [r for r in results if isinstance(r, Conflict) or r is None]
        assert len(wins) == 1 and len(losses) == 1, results
        assert wins[0].todo["id"] == t and wins[0].attempt_seq == 1
        rows = await sql(core, "SELECT count(*) AS n, count(*) FILTER (WHERE ended_at IS NULL) AS open,"
                               " (SELECT attempts_total FROM todos WHERE id = %s) AS total"
                               " FROM todo_attempts WHERE todo_id = %s", (t, t))
        assert rows[0] == {"n": 1, "open": 1, "total": 1}
        kinds[results.index(wins[0])] += 1
        await todos.complete(core, w.h1, t)  # keep claim_next's candidate set to the new todo
    assert await check(core) == []
    print("claim race winners by position:", dict(kinds))
    assert sum(kinds.values()) == ROUNDS


async def test_race_reaper_against_claim_next_on_a_lapsed_lease(rcore):
    """REQ-20: exactly one of them closes the open attempt, and at most one stays open."""
    core = rcore
    w = await make_world(core)
    winners = collections.Counter()
    for i in range(ROUNDS):
        t = (await w.todo(f"r{i}", max_attempts=5))["id"]
        await todos.claim(core, w.e1, t)
        await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE id = %s", (t,))
        reaped, got = await asyncio.gather(sweeps.reap(core), todos.claim_next(core, w.e1.with_session("taker")))
        closed = await sql(core, "SELECT seq, outcome FROM todo_attempts WHERE todo_id = %s AND seq = 1", (t,))
        open_ = await sql(core, "SELECT seq FROM todo_attempts WHERE todo_id = %s AND ended_at IS NULL", (t,))
        row = (await sql(core, "SELECT state, attempts_total FROM todos WHERE id = %s", (t,)))[0]
        # Attempt 1 closed exactly once, by exactly one of them.
        assert closed[0]["outcome"] in ("reaped", "lease_expired"), closed
        assert len(open_) <= 1
        if closed[0]["outcome"] == "lease_expired":
            assert got is not None and got.todo["id"] == t and got.attempt_seq == 2 and reaped == 0
            assert row == {"state": "claimed", "attempts_total": 2} and open_ == [{"seq": 2}]
            winners["taker"] += 1
        else:
            assert reaped == 1
            if got is not None:  # the taker came second and claimed the re-queued todo as pending
                assert got.attempt_seq == 2 and got.prior_attempts[0]["outcome"] == "reaped"
                assert row == {"state": "claimed", "attempts_total": 2}
                winners["reaper, then claimed"] += 1
            else:
                assert row == {"state": "pending", "attempts_total": 1} and open_ == []
                winners["reaper"] += 1
        assert await check(core) == []
        await todos.cancel(core, w.h1, t)  # keep claim_next's candidate set to the next round's todo
    print("reaper vs taker:", dict(winners))
    assert sum(winners.values()) == ROUNDS


async def test_race_a_planted_second_open_attempt_fails_at_commit(rcore):
    """REQ-2: the one-open-attempt constraint is deferred: both INSERTs succeed, COMMIT refuses."""
    core = rcore
    w = await make_world(core)
    t = (await w.todo())["id"]
    for i in range(ROUNDS):
        async with core.pool.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute(PLANT, (t, 2 * i + 1))
            await conn.execute(PLANT, (t, 2 * i + 2))  # no error yet: checked at commit
            with pytest.raises(psycopg.errors.ExclusionViolation) as err:
                await conn.execute("COMMIT")
            assert err.value.sqlstate == "23P01"
    assert (await sql(core, "SELECT count(*) AS n FROM todo_attempts"))[0]["n"] == 0
    assert await check(core) == []


async def test_race_two_transactions_planting_open_attempts_concurrently(rcore):
    """The same constraint across connections: of two concurrent transactions that each open an
    attempt for one todo, exactly one commits. The other fails at COMMIT: 23P01, or 40P01 when both
    reached their deferred checks at once and each waited for the other (PostgreSQL then aborts one,
    and the survivor's check still finds the conflict or commits alone)."""
    core = rcore
    w = await make_world(core)
    outcomes = collections.Counter()
    ids = [(await w.todo(f"p{i}"))["id"] for i in range(ROUNDS)]

    async def plant(todo_id: str, seq: int) -> str:
        async with core.pool.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute(PLANT, (todo_id, seq))
            try:
                await conn.execute("COMMIT")
            except (psycopg.errors.ExclusionViolation, psycopg.errors.DeadlockDetected) as exc:
                await conn.rollback()
                return exc.sqlstate
            return "committed"

    for t in ids:
        results = await asyncio.gather(plant(t, 1), plant(t, 2))
        assert results.count("committed") == 1 and set(results) <= {"committed", "23P01", "40P01"}, results
        outcomes.update(results)
    rows = await sql(core, "SELECT todo_id, count(*) AS n FROM todo_attempts GROUP BY todo_id")
    assert len(rows) == ROUNDS and all(r["n"] == 1 for r in rows)
    assert outcomes["committed"] == ROUNDS and outcomes["23P01"] + outcomes["40P01"] == ROUNDS
    print("planted pairs:", dict(outcomes))
    await sql(core, "DELETE FROM todo_attempts")


async def test_race_two_processes_sweeping_at_once(rcore, race_uri):
    """Two cores (as two processes would have) sweep the same lapsed leases and due retries at once:
    every todo is reaped or re-queued exactly once, and the invariants hold."""
    core = rcore
    w = await make_world(core)
    async with core_for(race_uri) as other:
        for r in range(20):
            lapsed = [(await w.todo(f"l{r}-{i}"))["id"] for i in range(5)]
            parked = [(await w.todo(f"p{r}-{i}"))["id"] for i in range(5)]
            for t in lapsed + parked:
                await todos.claim(core, w.e1, t)
            for t in parked:
                await todos.fail(core, w.e1, t)
            await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 minute'"
                            " WHERE id = ANY(%s)", (lapsed,))
            await sql(core, "UPDATE todos SET next_retry_at = now() - interval '1 second' WHERE id = ANY(%s)",
                      (parked,))
            a, b = await asyncio.gather(sweeps.sweep_once(core, with_retention=False),
                                        sweeps.sweep_once(other, with_retention=False))
            assert a.reaped + b.reaped == 5 and a.requeued + b.requeued == 5, (a, b)
            rows = await sql(core, "SELECT outcome, count(*) AS n FROM todo_attempts WHERE todo_id = ANY(%s)"
                                   " GROUP BY outcome", (lapsed + parked,))
            assert {r["outcome"]: r["n"] for r in rows} == {"reaped": 5, "failed": 5}
            states = await sql(core, "SELECT DISTINCT state FROM todos WHERE id = ANY(%s)", (lapsed + parked,))
            assert [s["state"] for s in states] == ["pending"]
            assert await check(core) == []
            for t in lapsed + parked:  # out of the next round's way
                await todos.cancel(core, w.h1, t)


async def test_race_two_batch_claimers_and_a_single_claimer_on_one_queue(rcore):
    """Batched claims (issue 17): two claim_next_batch callers and one claim_next on one queue, with
    batched closes racing the next claims. No todo is claimed twice, every claim opens exactly one
    attempt, and every attempt is closed exactly once. Odd rounds add lapsed leases (takeovers)."""
    core = rcore
    w = await make_world(core)
    a, b, c = (w.e1.with_session(s) for s in ("batch-a", "batch-b", "single"))
    took = collections.Counter()
    for i in range(ROUNDS):
        fresh = [(await w.todo(f"b{i}-{k}", max_attempts=5))["id"] for k in range(7)]
        lapsed: list[str] = []
        if i % 2:
            lapsed = [(await w.todo(f"l{i}-{k}", max_attempts=5))["id"] for k in range(2)]
            for t in lapsed:
                await todos.claim(core, w.e1.with_session("gone"), t)
            await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE id = ANY(%s)",
                      (lapsed,))
        got_a, got_b, got_c = await asyncio.gather(
            todos.claim_next_batch(core, a, max_todos=4), todos.claim_next_batch(core, b, max_todos=4),
            todos.claim_next(core, c))
        claimed = [g.todo["id"] for g in got_a + got_b] + ([got_c.todo["id"]] if got_c else [])
        assert len(claimed) == len(set(claimed)), claimed  # no double claim
        assert set(claimed) <= set(fresh + lapsed)
        took.update({"a": len(got_a), "b": len(got_b), "c": int(got_c is not None)})
        for g in got_a + got_b + ([got_c] if got_c else []):
            expected = 2 if g.todo["id"] in lapsed else 1
            assert g.attempt_seq == expected, (g.todo["id"], g.attempt_seq)
        rows = await sql(core, "SELECT todo_id, count(*) FILTER (WHERE ended_at IS NULL) AS open,"
                               " count(*) AS n FROM todo_attempts WHERE todo_id = ANY(%s) GROUP BY todo_id",
                         (fresh + lapsed,))
        by = {r["todo_id"]: r for r in rows}
        for t in claimed:
            assert by[t]["open"] == 1 and by[t]["n"] == (2 if t in lapsed else 1), (t, by[t])
        # Close them while a third batch claims what is left.
        closes = [todos.complete_batch(core, a, [{"id": g.todo["id"], "summary": "a"} for g in got_a])] if got_a else []
        if got_b:
            closes.append(todos.fail_batch(core, b, [{"id": g.todo["id"]} for g in got_b], retry=False))
        if got_c:
            closes.append(todos.complete(core, c, got_c.todo["id"]))
        results = await asyncio.gather(todos.claim_next_batch(core, a, max_todos=100), *closes)
        late = results[0]
        for out in results[1:-1 if got_c else None]:
            assert all(o["ok"] for o in out), out
        assert not set(g.todo["id"] for g in late) & set(claimed)
        if late:
            out = await todos.complete_batch(core, a, [{"id": g.todo["id"]} for g in late])
            assert all(o["ok"] for o in out)
        rows = await sql(core, "SELECT todo_id, seq, ended_at, outcome FROM todo_attempts"
                               " WHERE todo_id = ANY(%s) ORDER BY todo_id, seq", (fresh + lapsed,))
        assert all(r["ended_at"] is not None and r["outcome"] for r in rows), rows  # every attempt closed
        states = await sql(core, "SELECT state, count(*) AS n FROM todos WHERE id = ANY(%s) GROUP BY state",
                           (fresh + lapsed,))
        assert {s["state"] for s in states} <= {"done", "failed"}
        # Closed once: exactly one attempt per claim (the lapsed todos' first attempt by the takeover).
        per = collections.Counter(r["todo_id"] for r in rows)
        assert all(per[t] == (2 if t in lapsed else 1) for t in fresh + lapsed), per
        assert await check(core) == []
    print("batch race claims:", dict(took))  # SKIP LOCKED may leave a claimer short; `late` takes the rest
    assert took["a"] and took["b"] and took["c"]


async def test_race_combined_claimers_a_batch_claimer_and_the_reaper_on_one_queue(rcore):
    """Combined calls (D47): six concurrent claim_next calls of one caller (shared statements), a
    claim_next_batch of another session and the reaper on one queue, then six concurrent completes
    racing the next claims. No todo is claimed twice, every claim opens exactly one attempt, every
    attempt is closed exactly once. Odd rounds add lapsed leases, below their cap (takeovers) and at it
    (the reaper's)."""
    core = rcore
    w = await make_world(core)
    fleet, batch = w.e1.with_session("fleet"), w.e1.with_session("batch")
    took = collections.Counter()
    for i in range(ROUNDS):
        fresh = [(await w.todo(f"c{i}-{k}", max_attempts=5))["id"] for k in range(6)]
        lapsed: list[str] = []
        if i % 2:
            lapsed = [(await w.todo(f"l{i}-{k}", max_attempts=1 + k % 2))["id"] for k in range(2)]
            for t in lapsed:
                await todos.claim(core, w.e1.with_session("gone"), t)
            await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE id = ANY(%s)",
                      (lapsed,))
        *singles, got_b, _ = await asyncio.gather(*(todos.claim_next(core, fleet) for _ in range(6)),
                                                  todos.claim_next_batch(core, batch, max_todos=3),
                                                  sweeps.sweep_once(core))
        got = [g for g in singles if g is not None]
        claimed = [g.todo["id"] for g in got + got_b]
        assert len(claimed) == len(set(claimed)), claimed  # no double claim
        took.update({"fleet": len(got), "batch": len(got_b)})
        rows = await sql(core, "SELECT todo_id, count(*) FILTER (WHERE ended_at IS NULL) AS open"
                               " FROM todo_attempts WHERE todo_id = ANY(%s) GROUP BY todo_id", (claimed,))
        assert all(r["open"] == 1 for r in rows) and len(rows) == len(claimed), rows
        results = await asyncio.gather(*(todos.complete(core, fleet, g.todo["id"]) for g in got),
                                       todos.claim_next_batch(core, batch, max_todos=100))
        assert all(r["state"] == "done" for r in results[:-1])
        late = results[-1]
        assert not {g.todo["id"] for g in late} & set(claimed)
        rest = got_b + late
        if rest:
            out = await todos.complete_batch(core, batch, [{"id": g.todo["id"]} for g in rest])
            assert all(o["ok"] for o in out), out
        while (left := await todos.claim_next(core, fleet)) is not None:  # what the reaper requeued
            await todos.complete(core, fleet, left.todo["id"])
        rows = await sql(core, "SELECT todo_id, ended_at, outcome FROM todo_attempts WHERE todo_id = ANY(%s)",
                         (fresh + lapsed,))
        assert all(r["ended_at"] is not None and r["outcome"] for r in rows), rows  # every attempt closed
        states = await sql(core, "SELECT id, state FROM todos WHERE id = ANY(%s)", (fresh + lapsed,))
        assert {s["state"] for s in states} <= {"done", "failed"}, states
        assert await check(core) == []
    print("combined race claims:", dict(took))
    assert took["fleet"] and took["batch"]


async def test_race_two_round_workers_a_single_claimer_and_the_reaper_on_one_queue(rcore):
    """A worker's round in one call (D52): two workers each complete the todos of their last round and
    claim the next in one transaction (todos.complete_and_take_next), racing a claim_next and the
    reaper on one queue; odd rounds add lapsed leases. No todo is claimed twice, every completion of a
    held todo lands, every claim opens exactly one attempt and every attempt is closed once."""
    core = rcore
    w = await make_world(core)
    a, b, c = (w.e1.with_session(s) for s in ("round-a", "round-b", "single"))
    held: dict[str, list[str]] = {"a": [], "b": []}
    everything: list[str] = []
    took = collections.Counter()

    async def round_of(caller, ids: list[str]) -> tuple[list[dict], list[todos.ClaimResult]]:
        if not ids:
            return [], await todos.claim_next_batch(core, caller, max_todos=3)
        results, claimed, _ = await todos.complete_and_take_next(core, caller, [{"id": t} for t in ids], max_todos=3)
        return results, claimed

    for i in range(ROUNDS):
        fresh = [(await w.todo(f"r{i}-{k}", max_attempts=5))["id"] for k in range(6)]
        everything += fresh
        if i % 2:
            lapsed = [(await w.todo(f"l{i}-{k}", max_attempts=5))["id"] for k in range(2)]
            everything += lapsed
            for t in lapsed:
                await todos.claim(core, w.e1.with_session("gone"), t)
            await sql(core, "UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE id = ANY(%s)",
                      (lapsed,))
        (done_a, got_a), (done_b, got_b), got_c, _ = await asyncio.gather(
            round_of(a, held["a"]), round_of(b, held["b"]), todos.claim_next(core, c), sweeps.sweep_once(core))
        assert [r["id"] for r in done_a] == held["a"] and [r["id"] for r in done_b] == held["b"]
        assert all(r["ok"] for r in done_a + done_b), done_a + done_b  # each held todo's completion lands
        claimed = [g.todo["id"] for g in got_a + got_b] + ([got_c.todo["id"]] if got_c else [])
        assert len(claimed) == len(set(claimed)), claimed  # no double claim
        assert not set(claimed) & set(held["a"] + held["b"])
        took.update({"a": len(got_a), "b": len(got_b), "c": int(got_c is not None)})
        if got_c:
            await todos.complete(core, c, got_c.todo["id"])
        held = {"a": [g.todo["id"] for g in got_a], "b": [g.todo["id"] for g in got_b]}
        assert await check(core) == []
    for caller, key in ((a, "a"), (b, "b")):
        if held[key]:
            assert all(o["ok"] for o in await todos.complete_batch(core, caller, [{"id": t} for t in held[key]]))
    while rest := await todos.claim_next_batch(core, c, max_todos=100):
        assert all(o["ok"] for o in await todos.complete_batch(core, c, [{"id": g.todo["id"]} for g in rest]))
    rows = await sql(core, "SELECT todo_id, ended_at, outcome FROM todo_attempts WHERE todo_id = ANY(%s)",
                     (everything,))
    assert all(r["ended_at"] is not None and r["outcome"] for r in rows)  # every attempt closed
    states = await sql(core, "SELECT DISTINCT state FROM todos WHERE id = ANY(%s)", (everything,))
    assert [s["state"] for s in states] == ["done"]
    print("round race claims:", dict(took))
    assert took["a"] and took["b"] and took["c"]


async def test_race_a_humans_cancel_against_claim_next(rcore):
    """D54: whichever goes first, the todo ends canceled and an attempt the claim opened is closed
    `canceled`, never left open (the cancel that waits for the claim sees its attempt)."""
    core = rcore
    w = await make_world(core)
    order = collections.Counter()
    for i in range(ROUNDS):
        t = (await w.todo(f"c{i}"))["id"]
        canceled, got = await asyncio.gather(todos.cancel(core, w.h1, t), todos.claim_next(core, w.e1))
        assert canceled["state"] == "canceled"
        rows = await sql(core, "SELECT outcome, disposition, claimed_at, ended_at FROM todo_attempts"
                               " WHERE todo_id = %s", (t,))
        if got is None:
            assert rows == []
            order["cancel first"] += 1
        else:
            assert got.todo["id"] == t
            (a,) = rows
            assert (a["outcome"], a["disposition"]) == ("canceled", "canceled") and a["ended_at"] >= a["claimed_at"]
            order["claim first"] += 1
        assert await check(core) == []
    print("cancel vs claim_next:", dict(order))
    assert sum(order.values()) == ROUNDS


async def test_race_a_revocation_against_claim_next(rcore):
    """D54: the endpoint's todo ends a dead letter whichever goes first; an attempt the claim opened is
    closed `revoked`, and a claim after the revocation is refused."""
    core = rcore
    w = await make_world(core)
    order = collections.Counter()
    for i in range(ROUNDS):
        ep, credential = await endpoints.vend(core, w.h1, agent=f"racer-{i % 5}", queues=["inbox"])
        caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
        t, _ = await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title=f"v{i}")
        revoked, got = await asyncio.gather(endpoints.revoke(core, w.h1, ep["slug"]),
                                            todos.claim_next(core, caller), return_exceptions=True)
        assert revoked["dead_lettered"] == 1, revoked
        row = (await sql(core, "SELECT state, next_retry_at FROM todos WHERE id = %s", (t["id"],)))[0]
        assert row == {"state": "failed", "next_retry_at": None}
        rows = await sql(core, "SELECT outcome, disposition, claimed_at, ended_at FROM todo_attempts"
                               " WHERE todo_id = %s", (t["id"],))
        if isinstance(got, todos.ClaimResult):
            (a,) = rows
            assert (a["outcome"], a["disposition"]) == ("revoked", "dead_lettered") and a["ended_at"] >= a["claimed_at"]
            order["claim first"] += 1
        else:
            assert isinstance(got, Unauthorized) or got is None, got
            assert rows == []
            order["revocation first"] += 1
        assert await check(core) == []
    print("revocation vs claim_next:", dict(order))
    assert sum(order.values()) == ROUNDS
