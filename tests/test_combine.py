"""Concurrent calls run together (core/combine.py, docs/decisions.md D47): claim_next, complete and fail
calls of one caller that run at the same time share one statement, and each call still gets exactly
what it would have got alone: its own todo, lease, attempt, prior attempts and lease token; its own
closed attempt, or its own error, byte-identical to the single call's.

A statement's `now()` is its transaction's start, so todos claimed (or closed) by one statement carry
one timestamp and todos claimed by separate statements carry different ones: that is how these
tests see a group. The Combiner's own rules are shown with a runner that records its groups.
"""

from __future__ import annotations

import asyncio
import collections

import pytest

from core_world import attempt_rows, check, lapse, make_world, snapshot, sql, todo_row
from switchboard.core import events, shapes, todos
from switchboard.core.combine import Combiner
from switchboard.core.errors import Conflict, NotFound
from switchboard.core.secrets import sha256

# ------------------------------------------------------------------------------- the Combiner itself


class Recorder:
    """A runner that records each group and answers each item with (item, group size); an item "boom"
    is answered with an error of its own, an item "all" fails the whole group."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, items: list[str]) -> list[object]:
        self.groups.append(list(items))
        await self.release.wait()
        if "all" in items:
            raise RuntimeError("the statement failed")
        return [ValueError(i) if i == "boom" else (i, len(items)) for i in items]

    async def started(self, c: Combiner[str, object], *items: str) -> list[asyncio.Future[object]]:
        """Calls of key "k" made in one turn, their statement started and held until `release`."""
        self.release.clear()
        calls = [asyncio.ensure_future(c.submit("k", x, self)) for x in items]
        await asyncio.sleep(0.01)
        return calls


async def test_a_lone_call_runs_alone_and_leaves_nothing_behind():
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    assert await c.submit("k", "a", run) == ("a", 1)
    assert await c.submit("k", "b", run) == ("b", 1)
    assert run.groups == [["a"], ["b"]]
    assert len(c) == 0


async def test_calls_started_together_run_as_one_group_and_each_gets_its_own_outcome():
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    out = await asyncio.gather(*(c.submit("k", x, run) for x in "abcd"))
    assert out == [("a", 4), ("b", 4), ("c", 4), ("d", 4)]
    assert run.groups == [["a", "b", "c", "d"]]
    assert len(c) == 0


async def test_calls_arriving_while_a_statement_runs_go_together_next_within_the_limit():
    c: Combiner[str, object] = Combiner(limit=3)
    run = Recorder()
    (first,) = await run.started(c, "a")
    later = [asyncio.ensure_future(c.submit("k", x, run)) for x in "bcdef"]
    await asyncio.sleep(0.01)
    assert run.groups == [["a"]]
    run.release.set()
    assert await first == ("a", 1)
    assert await asyncio.gather(*later) == [("b", 3), ("c", 3), ("d", 3), ("e", 2), ("f", 2)]
    assert run.groups == [["a"], ["b", "c", "d"], ["e", "f"]]  # one at a time per key, `limit` each
    assert len(c) == 0


async def test_keys_do_not_mix_and_do_not_wait_for_each_other():
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    out = await asyncio.gather(c.submit("k1", "a", run), c.submit("k2", "b", run), c.submit("k1", "c", run))
    assert out == [("a", 2), ("b", 1), ("c", 2)]
    assert sorted(run.groups) == [["a", "c"], ["b"]]


async def test_an_error_reaches_its_own_call_and_a_failed_statement_every_call_of_it():
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    out = await asyncio.gather(*(c.submit("k", x, run) for x in ("a", "boom", "c")), return_exceptions=True)
    assert out[0] == ("a", 3) and out[2] == ("c", 3)
    assert isinstance(out[1], ValueError) and str(out[1]) == "boom"
    out = await asyncio.gather(*(c.submit("k", x, run) for x in ("x", "all")), return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in out)
    assert await c.submit("k", "after", run) == ("after", 1)  # the key still works
    assert len(c) == 0


async def test_a_runner_that_answers_too_few_fails_its_calls_instead_of_leaving_them_waiting():
    c: Combiner[str, object] = Combiner(limit=100)

    async def short(items: list[str]) -> list[object]:
        return [items[0]]

    out = await asyncio.gather(*(c.submit("k", x, short) for x in "ab"), return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in out)
    assert len(c) == 0


async def test_a_call_cancelled_while_it_waits_is_not_run():
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    (first,) = await run.started(c, "a")
    gone = asyncio.ensure_future(c.submit("k", "gone", run))
    kept = asyncio.ensure_future(c.submit("k", "kept", run))
    await asyncio.sleep(0.01)
    gone.cancel()
    run.release.set()
    assert await first == ("a", 1) and await kept == ("kept", 1)
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert run.groups == [["a"], ["kept"]]
    assert len(c) == 0


async def test_the_call_that_started_a_group_cancelled_does_not_cancel_the_others():
    """A group runs in a task of its own: its first caller gone (a client that hung up) loses only its
    own outcome."""
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    calls = await run.started(c, *"abc")
    assert run.groups == [["a", "b", "c"]]
    calls[0].cancel()
    await asyncio.sleep(0.01)
    run.release.set()
    assert await calls[1] == ("b", 3) and await calls[2] == ("c", 3)
    with pytest.raises(asyncio.CancelledError):
        await calls[0]
    assert len(c) == 0


async def test_a_call_cancelled_before_its_group_starts_is_not_run():
    c: Combiner[str, object] = Combiner(limit=100)
    run = Recorder()
    first = asyncio.ensure_future(c.submit("k", "a", run))
    await asyncio.sleep(0)  # it waits for the end of its turn of the loop
    first.cancel()  # before its group starts
    with pytest.raises(asyncio.CancelledError):
        await first
    assert run.groups == [] and len(c) == 0
    assert await c.submit("k", "b", run) == ("b", 1)


# --------------------------------------------------------------------------------------- claim_next

async def _claimed_at(core, ids: list[str]) -> set:
    rows = await sql(core, "SELECT claimed_at FROM todos WHERE id = ANY(%s)", (ids,))
    return {r["claimed_at"] for r in rows}


async def test_concurrent_claim_next_calls_share_one_statement_each_with_its_own_attempt(core):
    w = await make_world(core)
    made = [(await w.todo(f"t{i}", payload={"n": i}))["id"] for i in range(6)]
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    caller = w.e1.with_session("fleet")
    got = await asyncio.gather(*(todos.claim_next(core, caller, claimant="host/w") for _ in range(4)))
    ids = [g.todo["id"] for g in got]
    assert ids == made[:4]  # oldest first, one each, in the order the calls were made
    assert len(await _claimed_at(core, ids)) == 1  # one statement
    for g in got:
        assert g.attempt_seq == 1 and g.attempts_total == 1 and g.prior_attempts == [] and g.lease_token is None
        row, (a,) = await snapshot(core, g.todo["id"])
        assert row["state"] == "claimed" and a["ended_at"] is None
        assert (a["claimer_session"], a["claimant"], a["claimer_endpoint_id"]) == (
            "fleet", "host/w", w.e1.endpoint_id)
        assert g.todo == shapes.full(row) and g.todo["payload"] == {"n": made.index(g.todo["id"])}
    claims = [e for e in seen if e.verb == "claim"]
    assert sorted(e.todo_id for e in claims) == sorted(ids)
    for e in claims:  # the compact shape, as every event carries: no payload
        assert e.todo == shapes.compact(await todo_row(core, e.todo_id)) and "payload" not in e.todo
    assert await check(core) == []


async def test_without_combining_each_call_is_its_own_statement(core):
    """The control for the timestamp test above: combining off, four statements."""
    core.settings = core.settings.model_copy(update={"combine_calls": False})
    w = await make_world(core)
    for i in range(4):
        await w.todo(f"t{i}")
    got = await asyncio.gather(*(todos.claim_next(core, w.e1) for _ in range(4)))
    assert len(await _claimed_at(core, [g.todo["id"] for g in got])) == 4


async def test_more_claimers_than_ready_todos_some_get_none_and_none_is_claimed_twice(core):
    w = await make_world(core)
    made = [(await w.todo(f"t{i}"))["id"] for i in range(3)]
    got = await asyncio.gather(*(todos.claim_next(core, w.e1) for _ in range(5)))
    taken = [g.todo["id"] for g in got if g is not None]
    assert sorted(taken) == sorted(made) and got[3:] == [None, None]
    assert await check(core) == []


async def test_a_group_takes_over_lapsed_leases_with_each_todos_own_history(core):
    """SPEC-0034 per todo of a group: the takeover closes the lapsed attempt lease_expired / requeued
    and hands it to the new claimer as a prior attempt; a fresh todo in the same group has none."""
    w = await make_world(core)
    lapsed = (await w.todo("lapsed", max_attempts=3))["id"]
    await todos.claim(core, w.e1.with_session("died"), lapsed, claimant="host/old")
    await lapse(core, lapsed)
    fresh = (await w.todo("fresh"))["id"]
    got = await asyncio.gather(todos.claim_next(core, w.e1), todos.claim_next(core, w.e1))
    by = {g.todo["id"]: g for g in got}
    assert set(by) == {lapsed, fresh}
    assert by[fresh].prior_attempts == [] and by[fresh].attempt_seq == 1
    (prior,) = by[lapsed].prior_attempts
    assert (prior["outcome"], prior["disposition"], prior["claimant"]) == ("lease_expired", "requeued", "host/old")
    assert by[lapsed].attempt_seq == 2
    first, second = await attempt_rows(core, lapsed)
    assert first["ended_at"] is not None and second["ended_at"] is None
    assert await check(core) == []


async def test_fenced_claims_in_one_group_each_get_their_own_token(core):
    w = await make_world(core)
    for i in range(3):
        await w.todo(f"f{i}")
    got = await asyncio.gather(*(todos.claim_next(core, w.e1, require_fence=True) for _ in range(3)))
    assert len(await _claimed_at(core, [g.todo["id"] for g in got])) == 1
    tokens = [g.lease_token for g in got]
    assert all(tokens) and len(set(tokens)) == 3
    for g in got:
        (a,) = await attempt_rows(core, g.todo["id"])
        assert bytes(a["lease_token_hash"]) == sha256(g.lease_token)
    a, b, c = got
    with pytest.raises(Conflict):  # another todo's token fences this one out
        await todos.complete(core, w.e1, a.todo["id"], lease_token=b.lease_token)
    out = await asyncio.gather(*(todos.complete(core, w.e1, g.todo["id"], lease_token=g.lease_token) for g in got))
    assert [o["state"] for o in out] == ["done"] * 3
    assert await check(core) == []


async def test_claims_of_different_sessions_or_leases_do_not_share_a_statement(core):
    """What an attempt records of its claimer (the session, the claimant) and the lease are part of a
    group's key: two sessions of one endpoint make two statements."""
    w = await make_world(core)
    for i in range(4):
        await w.todo(f"t{i}")
    got = await asyncio.gather(todos.claim_next(core, w.e1.with_session("s1")),
                               todos.claim_next(core, w.e1.with_session("s2")),
                               todos.claim_next(core, w.e1.with_session("s1"), lease_ttl_seconds=60),
                               todos.claim_next(core, w.e1.with_session("s1"), claimant="other"))
    assert len(await _claimed_at(core, [g.todo["id"] for g in got])) == 4
    sessions = [(await attempt_rows(core, g.todo["id"]))[0]["claimer_session"] for g in got]
    assert sessions == ["s1", "s2", "s1", "s1"]


# ------------------------------------------------------------------------------------- closes

async def test_concurrent_completes_share_one_statement_each_closing_its_own_attempt(core):
    w = await make_world(core)
    for i in range(4):
        await w.todo(f"t{i}")
    got = await todos.claim_next_batch(core, w.e1, max_todos=4)
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    out = await asyncio.gather(*(todos.complete(core, w.e1.with_session(f"s{i}"), g.todo["id"], summary=f"done {i}",
                                                result={"i": i})
                                 for i, g in enumerate(got)))
    ids = [g.todo["id"] for g in got]
    assert [o["id"] for o in out] == ids and all(o["state"] == "done" for o in out)
    rows = await sql(core, "SELECT completed_at FROM todos WHERE id = ANY(%s)", (ids,))
    assert len({r["completed_at"] for r in rows}) == 1  # one statement, sessions of one endpoint
    for i, t in enumerate(ids):
        row, (a,) = await snapshot(core, t)
        assert (a["outcome"], a["disposition"], a["summary"]) == ("completed", "done", f"done {i}")
        assert row["result"] == {"i": i}
    assert [(e.verb, e.todo_id) for e in seen] == [("complete", t) for t in ids]
    assert await check(core) == []


async def test_in_a_group_a_refused_close_gets_the_single_calls_error_and_the_rest_close(core):
    w = await make_world(core)
    mine = [(await w.todo(f"m{i}"))["id"] for i in range(2)]
    idle = (await w.todo("idle"))["id"]
    theirs = (await w.todo("theirs", caller=w.e2))["id"]
    for t in mine:
        await todos.claim(core, w.e1, t)
    await todos.claim(core, w.e2, theirs)
    unknown = "td_00000000-0000-0000-0000-000000000000"
    alone: dict[str, str] = {}
    settings = core.settings
    core.settings = settings.model_copy(update={"combine_calls": False})
    for t in (theirs, unknown, idle):
        with pytest.raises((NotFound, Conflict)) as exc:
            await todos.complete(core, w.e1, t)
        alone[t] = repr(exc.value.to_dict())
    core.settings = settings
    before = {t: await snapshot(core, t) for t in (idle, theirs)}
    out = await asyncio.gather(todos.complete(core, w.e1, mine[0]), todos.complete(core, w.e1, theirs),
                               todos.complete(core, w.e1, unknown), todos.complete(core, w.e1, idle),
                               todos.complete(core, w.e1, mine[1]), return_exceptions=True)
    assert out[0]["state"] == out[4]["state"] == "done"
    for t, o in zip((theirs, unknown, idle), out[1:4], strict=True):
        assert repr(o.to_dict()) == alone[t]  # byte-identical to the single call's answer
    assert repr(out[1].to_dict()) == repr(out[2].to_dict())  # foreign = unknown
    assert isinstance(out[3], Conflict)
    assert {t: await snapshot(core, t) for t in (idle, theirs)} == before
    assert await check(core) == []


async def test_the_same_todo_closed_twice_at_once_closes_once(core):
    w = await make_world(core)
    t = (await w.todo("t"))["id"]
    other = (await w.todo("o"))["id"]
    await todos.claim(core, w.e1, t)
    await todos.claim(core, w.e1, other)
    out = await asyncio.gather(todos.complete(core, w.e1, t), todos.complete(core, w.e1, other),
                               todos.complete(core, w.e1, t), return_exceptions=True)
    assert out[0]["state"] == out[1]["state"] == "done" and isinstance(out[2], Conflict)
    assert [a["outcome"] for a in await attempt_rows(core, t)] == ["completed"]
    assert await check(core) == []


async def test_concurrent_fails_keep_each_calls_retry_choice(core):
    core.settings = core.settings.model_copy(update={"retry_backoff_base_seconds": 10})
    w = await make_world(core)
    made = [(await w.todo(f"f{i}", max_attempts=3))["id"] for i in range(3)]
    await todos.claim_next_batch(core, w.e1, max_todos=3)
    out = await asyncio.gather(todos.fail(core, w.e1, made[0], summary="red"),
                               todos.fail(core, w.e1, made[1], retry=False),
                               todos.fail(core, w.e1, made[2], summary="red too"))
    assert [o["dead_letter"] for o in out] == [False, True, False]
    rows = await sql(core, "SELECT updated_at FROM todos WHERE id = ANY(%s)", (made,))
    assert len({r["updated_at"] for r in rows}) == 1
    row, (a,) = await snapshot(core, made[0])
    assert (a["outcome"], a["disposition"], a["summary"]) == ("failed", "retry_scheduled", "red")
    assert round((row["next_retry_at"] - a["ended_at"]).total_seconds()) == 10
    assert (await todo_row(core, made[1]))["next_retry_at"] is None
    assert await check(core) == []


async def test_a_fleet_of_one_endpoint_drains_a_queue_with_every_attempt_closed_once(core):
    """Sixteen workers of one endpoint in one process, each claiming and completing one todo at a
    time: every todo done once, one attempt each, and the statements were shared."""
    w = await make_world(core)
    n = 120
    for i in range(n):
        await w.todo(f"t{i}")
    done: collections.Counter[str] = collections.Counter()

    async def worker() -> None:
        while (got := await todos.claim_next(core, w.e1)) is not None:
            await todos.complete(core, w.e1, got.todo["id"])
            done[got.todo["id"]] += 1

    await asyncio.gather(*(worker() for _ in range(16)))
    assert len(done) == n and set(done.values()) == {1}
    rows = await sql(core, "SELECT count(*) AS n, count(DISTINCT claimed_at) AS stmts,"
                           " count(*) FILTER (WHERE outcome = 'completed') AS completed FROM todo_attempts")
    assert rows[0]["n"] == rows[0]["completed"] == n
    assert rows[0]["stmts"] < n / 2  # shared statements
    assert len(core.claims) == len(core.closes) == 0
    assert await check(core) == []


async def test_the_setting_turns_combining_off(pg_uri):
    from conftest import clean_database, core_for

    clean_database(pg_uri)
    async with core_for(pg_uri, combine_calls=False) as off:
        w = await make_world(off)
        for i in range(3):
            await w.todo(f"t{i}")
        got = await asyncio.gather(*(todos.claim_next(off, w.e1) for _ in range(3)))
        assert len(await _claimed_at(off, [g.todo["id"] for g in got])) == 3
