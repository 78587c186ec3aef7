"""SYSTEM.md section 6: one test per row of the lifecycle table, and the disallowed transitions.

Every disallowed transition is a conflict that changes nothing (the todo row and its attempts are
compared before and after).
"""

from __future__ import annotations

import uuid

import pytest

from core_world import attempt_rows, check, lapse, make_due, make_world, snapshot, sql, todo_row
from switchboard.core import endpoints, sweeps, todos
from switchboard.core.errors import Conflict


@pytest.fixture
async def w(core):
    world = await make_world(core)
    world.seen = []
    core.bus.subscribe(world.seen.append)
    yield world
    assert await check(core) == []


def _verbs(w, todo_id):
    return [e.verb for e in w.seen if e.todo.get("id") == todo_id]


# -------------------------------------------------------------------------------------- table rows

async def test_row_create_is_pending_with_no_attempt(core, w):
    t = await w.todo(payload={"a": 1}, kind="fix", key="k1", max_attempts=3, assignee=None)
    row, rows = await snapshot(core, t["id"])
    assert row["state"] == "pending" and rows == [] and row["attempts_total"] == 0 and row["attempt"] == 0
    assert t["id"].startswith("td_") and t["max_attempts"] == 3 and t["payload"] == {"a": 1}
    again, created = await todos.create(core, endpoint_id=w.e1.endpoint_id, queue="inbox", title="t", key="k1")
    assert created is False and again["id"] == t["id"]
    assert _verbs(w, t["id"]) == ["create"] and w.seen[0].ready == "created"


async def test_row_claim_of_pending_opens_attempt(core, w):
    t = await w.todo()
    got = await todos.claim(core, w.e1, t["id"], lease_ttl_seconds=120)
    row, (a,) = await snapshot(core, t["id"])
    assert row["state"] == "claimed" and row["attempt"] == 1 and row["attempts_total"] == 1
    assert a["seq"] == 1 and (row["lease_expires_at"] - row["claimed_at"]).total_seconds() == 120
    assert got.todo["owner"] == w.e1.owner


async def test_row_claim_next_of_pending_opens_attempt_oldest_first(core, w):
    first = await w.todo("first")
    await w.todo("second")
    got = await todos.claim_next(core, w.e1)
    assert got.todo["id"] == first["id"] and got.attempt_seq == 1
    assert (await attempt_rows(core, first["id"]))[0]["ended_at"] is None


async def test_row_board_claim_by_owner(core, w):
    t = await w.todo()
    got = await todos.claim(core, w.h1, t["id"])
    (a,) = await attempt_rows(core, t["id"])
    assert got.todo["owner"] == w.h1.owner and a["claimer_kind"] == "owner"


@pytest.mark.parametrize("how", ["claim", "claim_next"])
async def test_row_claim_of_due_retry_opens_next_seq(core, w, how):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"])
    await make_due(core, t["id"])
    got = await (todos.claim(core, w.e1, t["id"]) if how == "claim" else todos.claim_next(core, w.e1))
    assert got.todo["id"] == t["id"] and got.attempt_seq == 2 and got.todo["attempt"] == 2
    row = await todo_row(core, t["id"])
    assert row["next_retry_at"] is None and row["state"] == "claimed"


@pytest.mark.parametrize("how", ["claim", "claim_next"])
async def test_row_takeover_closes_lease_expired_opens_new(core, w, how):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    got = await (todos.claim(core, w.e1, t["id"]) if how == "claim" else todos.claim_next(core, w.e1))
    a1, a2 = await attempt_rows(core, t["id"])
    assert (a1["outcome"], a1["disposition"]) == ("lease_expired", "requeued") and a2["ended_at"] is None
    assert a1["ended_at"] == a2["claimed_at"] and got.todo["attempt"] == 2
    assert _verbs(w, t["id"])[-2:] == ["takeover", "claim"]


async def test_row_heartbeat_extends_lease_and_stamps_attempt(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], lease_ttl_seconds=10)
    await todos.heartbeat(core, w.e1, t["id"], lease_ttl_seconds=500)
    row, (a,) = await snapshot(core, t["id"])
    assert row["state"] == "claimed" and a["lease_expires_at"] == row["lease_expires_at"]
    assert (row["lease_expires_at"] - a["last_heartbeat_at"]).total_seconds() == 500


async def test_row_complete_is_done(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    out = await todos.complete(core, w.e1, t["id"], result={"ok": 1}, summary="fine")
    row, (a,) = await snapshot(core, t["id"])
    assert out["state"] == row["state"] == "done" and row["result"] == {"ok": 1} and row["completed_at"]
    assert (a["outcome"], a["disposition"], a["summary"]) == ("completed", "done", "fine")


async def test_row_fail_below_cap_parks_with_backoff_formula(core, w):
    core.settings = core.settings.model_copy(update={"retry_backoff_base_seconds": 30.0,
                                                     "retry_backoff_max_seconds": 900.0})
    t = await w.todo(max_attempts=10)
    waits = []
    for _ in range(7):
        await todos.claim(core, w.e1, t["id"])
        out = await todos.fail(core, w.e1, t["id"])
        row, rows = await snapshot(core, t["id"])
        assert row["state"] == "failed" and out["dead_letter"] is False
        assert (rows[-1]["outcome"], rows[-1]["disposition"]) == ("failed", "retry_scheduled")
        waits.append((row["next_retry_at"] - rows[-1]["ended_at"]).total_seconds())
        await make_due(core, t["id"])
    assert waits == [30, 60, 120, 240, 480, 900, 900]  # min(base * 2^(attempt-1), cap)


async def test_row_fail_at_cap_dead_letters(core, w):
    t = await w.todo(max_attempts=1)
    await todos.claim(core, w.e1, t["id"])
    out = await todos.fail(core, w.e1, t["id"], summary="last")
    row, (a,) = await snapshot(core, t["id"])
    assert out["dead_letter"] is True and row["state"] == "failed" and row["next_retry_at"] is None
    assert (a["outcome"], a["disposition"]) == ("failed", "dead_lettered")
    assert w.seen[-1].final_attempt["summary"] == "last"


async def test_row_fail_with_retry_false_dead_letters_now(core, w):
    t = await w.todo(max_attempts=5)
    await todos.claim(core, w.e1, t["id"])
    out = await todos.fail(core, w.e1, t["id"], retry=False)
    row, (a,) = await snapshot(core, t["id"])
    assert out["dead_letter"] is True and row["attempt"] == 1 and row["next_retry_at"] is None
    assert a["disposition"] == "dead_lettered"


async def test_row_release_requeues_keeping_the_counter(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    out = await todos.release(core, w.e1, t["id"], summary="bye")
    row, (a,) = await snapshot(core, t["id"])
    assert out["state"] == row["state"] == "pending" and row["owner"] is None and row["lease_expires_at"] is None
    assert row["attempt"] == 1 and (a["outcome"], a["disposition"]) == ("released", "requeued")
    assert w.seen[-1].ready == "released"
    again = await todos.claim(core, w.e1, t["id"])
    assert again.todo["attempt"] == 2 and again.attempt_seq == 2


async def test_row_reaper_below_cap_requeues(core, w):
    t = await w.todo(max_attempts=2)
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    assert (await sweeps.sweep_once(core)).reaped == 1
    row, (a,) = await snapshot(core, t["id"])
    assert row["state"] == "pending" and row["owner"] is None and row["lease_expires_at"] is None
    assert (a["outcome"], a["disposition"]) == ("reaped", "requeued")
    assert w.seen[-1].verb == "reap" and w.seen[-1].ready == "requeued"


async def test_row_reaper_at_cap_dead_letters(core, w):
    t = await w.todo(max_attempts=1)
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    with pytest.raises(Conflict):  # a lapsed lease at the cap cannot be taken over
        await todos.claim(core, w.e1, t["id"])
    assert await todos.claim_next(core, w.e1) is None
    assert await sweeps.reap(core) == 1
    row, (a,) = await snapshot(core, t["id"])
    assert row["state"] == "failed" and row["next_retry_at"] is None
    assert (a["outcome"], a["disposition"]) == ("reaped", "dead_lettered")
    assert w.seen[-1].final_attempt["died"] is True


async def test_row_reaper_leaves_live_leases_alone(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    before = await snapshot(core, t["id"])
    assert await sweeps.reap(core) == 0
    assert await snapshot(core, t["id"]) == before


async def test_row_retry_scheduler_requeues_without_touching_attempts(core, w):
    t = await w.todo()
    parked = await w.todo("not yet due")
    for x in (t, parked):
        await todos.claim(core, w.e1, x["id"])
        await todos.fail(core, w.e1, x["id"])
    await make_due(core, t["id"])
    attempts_before = await attempt_rows(core, t["id"])
    parked_before = await snapshot(core, parked["id"])
    report = await sweeps.sweep_once(core)
    assert report.requeued == 1
    row = await todo_row(core, t["id"])
    assert row["state"] == "pending" and row["next_retry_at"] is None and row["attempt"] == 1
    assert await attempt_rows(core, t["id"]) == attempts_before  # no attempt opened or closed
    assert await snapshot(core, parked["id"]) == parked_before
    ev = w.seen[-1]
    assert ev.verb == "requeue" and ev.ready == "requeued" and ev.closed_attempt is None
    got = await todos.claim_next(core, w.e1)
    assert got.todo["id"] == t["id"] and got.attempt_seq == 2 and got.todo["attempt"] == 2


@pytest.mark.parametrize("start", ["dead_letter", "parked"])
async def test_row_manual_retry_resets_counter_and_keeps_history(core, w, start):
    t = await w.todo(max_attempts=2)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], result={"e": 1}, retry=(start == "parked"))
    attempts_before = await attempt_rows(core, t["id"])
    out = await todos.retry(core, w.h1, t["id"])
    row = await todo_row(core, t["id"])
    assert out["state"] == row["state"] == "pending" and row["attempt"] == 0 and row["result"] is None
    assert row["next_retry_at"] is None and row["attempts_total"] == 1
    assert await attempt_rows(core, t["id"]) == attempts_before
    assert w.seen[-1].ready == "retried"
    got = await todos.claim(core, w.e1, t["id"])
    assert got.attempt_seq == 2 and got.todo["attempt"] == 1


async def test_row_request_input_pauses_the_lease_and_keeps_the_attempt(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    out = await todos.request_input(core, w.e1, t["id"], question="which file?")
    row, (a,) = await snapshot(core, t["id"])
    assert out["state"] == row["state"] == "input-required" and row["owner"] == w.e1.owner
    assert row["lease_expires_at"] is None and row["input_request"] == "which file?" and a["ended_at"] is None
    # The paused lease is not reaped, however long it waits.
    await sql(core, "UPDATE todos SET updated_at = now() - interval '30 days' WHERE id = %s", (t["id"],))
    assert await sweeps.reap(core) == 0


async def test_row_provide_input_resumes_claimed_with_a_fresh_lease(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.request_input(core, w.e1, t["id"], question="q")
    out = await todos.provide_input(core, w.h1, t["id"], payload={"answer": 42}, lease_ttl_seconds=90)
    row, (a,) = await snapshot(core, t["id"])
    assert out["state"] == row["state"] == "claimed" and row["input"] == {"answer": 42}
    assert (row["lease_expires_at"] - row["updated_at"]).total_seconds() == 90
    assert a["ended_at"] is None and a["lease_expires_at"] == row["lease_expires_at"]
    await todos.complete(core, w.e1, t["id"])  # the holder still holds it


@pytest.mark.parametrize("start", ["pending", "claimed", "input-required"])
async def test_row_cancel(core, w, start):
    t = await w.todo()
    if start != "pending":
        await todos.claim(core, w.e1, t["id"])
    if start == "input-required":
        await todos.request_input(core, w.e1, t["id"])
    out = await todos.cancel(core, w.h1, t["id"])
    row, rows = await snapshot(core, t["id"])
    assert out["state"] == row["state"] == "canceled" and row["lease_expires_at"] is None
    if start == "pending":
        assert rows == [] and w.seen[-1].closed_attempt is None
    else:
        assert [(a["outcome"], a["disposition"]) for a in rows] == [("canceled", "canceled")]
        assert w.seen[-1].closed_attempt["outcome"] == "canceled"


async def _live_set(core, w):
    made = {}
    made["pending"] = await w.todo("pending")
    made["claimed"] = await w.todo("claimed")
    await todos.claim(core, w.e1, made["claimed"]["id"])
    made["input"] = await w.todo("input")
    await todos.claim(core, w.e1, made["input"]["id"])
    await todos.request_input(core, w.e1, made["input"]["id"])
    made["parked"] = await w.todo("parked")
    await todos.claim(core, w.e1, made["parked"]["id"])
    await todos.fail(core, w.e1, made["parked"]["id"])
    made["done"] = await w.todo("done")
    await todos.claim(core, w.e1, made["done"]["id"])
    await todos.complete(core, w.e1, made["done"]["id"])
    other = await w.todo("other human's", caller=w.e2)
    return made, other


async def _assert_cascade(core, w, made, other):
    for name in ("pending", "claimed", "input", "parked"):
        row, rows = await snapshot(core, made[name]["id"])
        assert row["state"] == "failed" and row["next_retry_at"] is None, name
        assert row["result"]["error"] == "endpoint_revoked" and row["owner"] is None
        assert all(a["ended_at"] is not None for a in rows)
        if name in ("claimed", "input"):
            assert (rows[-1]["outcome"], rows[-1]["disposition"]) == ("revoked", "dead_lettered")
    assert (await todo_row(core, made["done"]["id"]))["state"] == "done"
    assert (await todo_row(core, other["id"]))["state"] == "pending"
    revoked = [e for e in w.seen if e.verb == "revoke"]
    assert {e.todo_id for e in revoked} == {made[n]["id"] for n in ("pending", "claimed", "input", "parked")}
    assert all(e.dead_lettered for e in revoked)  # the dead-letter hook fires for each
    assert [e for e in revoked if e.todo_id == made["claimed"]["id"]][0].final_attempt["outcome"] == "revoked"
    assert any(e.verb == "endpoint_revoked" for e in w.seen)


async def test_row_endpoint_revoked_dead_letters_every_live_todo(core, w):
    made, other = await _live_set(core, w)
    cred_row = await endpoints.get_for_human(core, w.h1, w.slug1)
    out = await endpoints.revoke(core, w.h1, w.slug1)
    assert out["state"] == "revoked" and out["dead_lettered"] == 4
    await _assert_cascade(core, w, made, other)
    assert (await sql(core, "SELECT count(*) AS n FROM endpoints WHERE id = %s AND state = 'active'",
                      (cred_row["id"],)))[0]["n"] == 0
    # A revoked endpoint cannot be pushed to, and revoking again changes nothing.
    again = await endpoints.revoke(core, w.h1, w.slug1)
    assert again["dead_lettered"] == 0


async def test_row_endpoint_expired_through_the_sweep(core, w):
    made, other = await _live_set(core, w)
    await sql(core, "UPDATE endpoints SET expires_at = now() - interval '1 second' WHERE id = %s",
              (w.e1.endpoint_id,))
    report = await sweeps.sweep_once(core)
    assert report.expired_endpoints == 1
    await _assert_cascade(core, w, made, other)
    assert (await sweeps.sweep_once(core)).expired_endpoints == 0


# ------------------------------------------------------------------------------ disallowed transitions

async def _refused(core, todo_id, call) -> None:
    before = await snapshot(core, todo_id)
    with pytest.raises(Conflict) as err:
        await call()
    assert err.value.code == "conflict" and err.value.todo_id == todo_id
    assert await snapshot(core, todo_id) == before


async def test_disallowed_complete_on_pending(core, w):
    t = await w.todo()
    await _refused(core, t["id"], lambda: todos.complete(core, w.e1, t["id"]))
    for verb in (todos.fail, todos.release, todos.heartbeat, todos.request_input):
        await _refused(core, t["id"], lambda: verb(core, w.e1, t["id"]))
    await _refused(core, t["id"], lambda: todos.complete(core, w.h1, t["id"]))


async def test_disallowed_claim_of_a_live_lease(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await _refused(core, t["id"], lambda: todos.claim(core, w.e1.with_session("other"), t["id"]))
    await _refused(core, t["id"], lambda: todos.claim(core, w.h1, t["id"]))
    assert await todos.claim_next(core, w.e1) is None


async def test_disallowed_claim_of_a_parked_retry_before_due(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"])
    await _refused(core, t["id"], lambda: todos.claim(core, w.e1, t["id"]))
    assert await todos.claim_next(core, w.e1) is None


@pytest.mark.parametrize("end", ["done", "dead_letter", "canceled"])
async def test_disallowed_claim_of_a_finished_todo(core, w, end):
    t = await w.todo()
    if end == "canceled":
        await todos.cancel(core, w.h1, t["id"])
    else:
        await todos.claim(core, w.e1, t["id"])
        if end == "done":
            await todos.complete(core, w.e1, t["id"])
        else:
            await todos.fail(core, w.e1, t["id"], retry=False)
    await _refused(core, t["id"], lambda: todos.claim(core, w.e1, t["id"]))
    await _refused(core, t["id"], lambda: todos.claim(core, w.h1, t["id"]))
    assert await todos.claim_next(core, w.e1) is None
    await _refused(core, t["id"], lambda: todos.complete(core, w.e1, t["id"]))
    await _refused(core, t["id"], lambda: todos.cancel(core, w.h1, t["id"]))
    if end != "dead_letter":
        await _refused(core, t["id"], lambda: todos.retry(core, w.h1, t["id"]))


async def test_disallowed_non_holder_actions(core, w):
    t = await w.todo()
    await todos.claim(core, w.h1, t["id"])  # held by the human from the Board
    for verb in (todos.complete, todos.fail, todos.release, todos.heartbeat, todos.request_input):
        await _refused(core, t["id"], lambda: verb(core, w.e1, t["id"]))


async def test_disallowed_interrupt_transitions(core, w):
    t = await w.todo()
    await _refused(core, t["id"], lambda: todos.provide_input(core, w.h1, t["id"], payload={}))
    await todos.claim(core, w.e1, t["id"])
    await _refused(core, t["id"], lambda: todos.provide_input(core, w.h1, t["id"], payload={}))
    await todos.request_input(core, w.e1, t["id"])
    for verb in (todos.complete, todos.fail, todos.release, todos.heartbeat, todos.request_input):
        await _refused(core, t["id"], lambda: verb(core, w.e1, t["id"]))
    await _refused(core, t["id"], lambda: todos.retry(core, w.h1, t["id"]))


async def test_disallowed_retry_of_pending_or_claimed(core, w):
    t = await w.todo()
    await _refused(core, t["id"], lambda: todos.retry(core, w.h1, t["id"]))
    await todos.claim(core, w.e1, t["id"])
    await _refused(core, t["id"], lambda: todos.retry(core, w.h1, t["id"]))


async def test_claim_next_respects_assignee_and_queue(core):
    w = await make_world(core, queues=("a", "b"))
    await todos.create(core, endpoint_id=w.e1.endpoint_id, queue="a", title="for someone else",
                       assignee="agent:" + str(uuid.uuid4()))
    mine = await w.todo("mine", queue="b", assignee=w.e1.owner)
    got = await todos.claim_next(core, w.e1)
    assert got.todo["id"] == mine["id"]
    assert await todos.claim_next(core, w.e1, queue="a") is None
