"""The committed-transition hook (SYSTEM.md §10): one event per committed transition, after commit,
isolated subscribers, and the cross-process wake-up (`pg_notify`) that leaves only at commit."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from core_world import lapse, make_due, make_world, sql
from switchboard.core import endpoints, hooks, rings, shapes, sweeps, todos
from switchboard.core.errors import Conflict
from switchboard.core.queries import Q
from switchboard.db.listen import ReadyListener


class Recorder:
    def __init__(self) -> None:
        self.events = []

    def __call__(self, ev) -> None:
        self.events.append(ev)

    @property
    def verbs(self) -> list[str]:
        return [e.verb for e in self.events]


class Heard:
    """Wake-ups heard on a real LISTEN connection."""

    def __init__(self) -> None:
        self.notes: list[dict] = []
        self.changed = asyncio.Event()

    async def __call__(self, batch: list[dict]) -> None:
        self.notes.extend(batch)
        self.changed.set()

    async def wait_for(self, n: int, timeout: float = 10.0) -> list[dict]:
        async def until() -> None:
            while len(self.notes) < n:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(until(), timeout)
        return self.notes


@pytest.fixture
async def heard(pg_uri):
    listener = ReadyListener(pg_uri, backoff=(0.05, 0.2))
    got = Heard()
    listener.on_batch.append(got)
    await listener.start()
    await listener.wait_connected()
    got.listener = listener
    yield got
    await listener.stop()


async def test_a_failing_subscriber_never_affects_the_transition_or_other_subscribers(core):
    w = await make_world(core)
    before, after = Recorder(), Recorder()

    def broken_sync(ev) -> None:
        raise RuntimeError("subscriber bug")

    async def broken_async(ev) -> None:
        raise ValueError("async subscriber bug")

    core.bus.subscribe(before)
    core.bus.subscribe(broken_sync)
    core.bus.subscribe(broken_async)
    core.bus.subscribe(after)

    t = await w.todo("survives")
    claimed = await todos.claim_next(core, w.e1)
    done = await todos.complete(core, w.e1, claimed.todo["id"], summary="ok")

    assert done["state"] == "done"
    assert (await sql(core, "SELECT state FROM todos WHERE id = %s", (t["id"],)))[0]["state"] == "done"
    assert before.verbs == after.verbs == ["create", "claim", "complete"]
    assert after.events[-1].closed_attempt["outcome"] == "completed"


async def test_the_attempt_each_close_ends_reaches_its_event_whole(core):
    """complete, fail and their batched forms return the attempt they close as columns, folded into
    the row the event is built from (D50): each event's closed_attempt is the REQ-7 entry of the
    attempt as stored, report and last note included, and a dead letter's REQ-15 fields are there
    without a subscriber asking for the shape first."""
    w = await make_world(core)
    rec = Recorder()
    unsubscribe = core.bus.subscribe(rec)
    try:
        made = [await w.todo(f"t{i}") for i in range(4)]
        for t in made:
            await todos.claim(core, w.e1, t["id"])
            await todos.heartbeat(core, w.e1, t["id"], note=f"working on {t['title']}")
        await todos.complete(core, w.e1, made[0]["id"], summary="one", artifact="https://example.com/a")
        await todos.fail(core, w.e1, made[1]["id"], summary="two", retry=False)
        await todos.complete_batch(core, w.e1, [{"id": made[2]["id"], "summary": "three"}])
        await todos.fail_batch(core, w.e1, [{"id": made[3]["id"], "artifact": "https://example.com/d"}])
    finally:
        unsubscribe()
    closes = [e for e in rec.events if e.verb in ("complete", "fail")]
    assert [e.todo_id for e in closes] == [t["id"] for t in made]
    assert closes[1].final_attempt is not None and closes[1].final_attempt["summary"] == "two"
    for e in closes:
        (row,) = await sql(core, "SELECT * FROM todo_attempts WHERE todo_id = %s", (e.todo_id,))
        assert e.closed_outcome == row["outcome"]
        assert e.closed_attempt == shapes.attempt(row)
        assert e.closed_attempt["last_note"]["text"] == f"working on {e.todo['title']}"


async def test_a_failing_batch_subscriber_never_affects_the_others(core):
    w = await make_world(core)
    each, batches = Recorder(), []

    def broken(events) -> None:
        raise RuntimeError("batch subscriber bug")

    async def broken_async(events) -> None:
        raise ValueError("async batch subscriber bug")

    core.bus.subscribe_batch(broken)
    core.bus.subscribe_batch(broken_async)
    core.bus.subscribe_batch(lambda events: batches.append([e.verb for e in events]))
    core.bus.subscribe(each)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.complete(core, w.e1, t["id"])
    assert each.verbs == ["create", "claim", "complete"]
    assert batches == [["create"], ["claim"], ["complete"]]  # one call per publish


async def test_one_event_per_transition_and_none_for_a_refused_one(core):
    w = await make_world(core)
    rec = Recorder()
    core.bus.subscribe(rec)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    with pytest.raises(Conflict):
        await todos.claim(core, w.e1, t["id"])  # matched no row: nothing committed, nothing published
    with pytest.raises(Conflict):
        await todos.complete(core, w.e1, t["id"], lease_token="not-the-fence")  # wrong fence: no change
    await todos.heartbeat(core, w.e1, t["id"])
    await todos.release(core, w.e1, t["id"], summary="giving back")
    assert rec.verbs == ["create", "claim", "heartbeat", "release"]
    assert rec.events[-1].ready == "released"
    assert rec.events[-1].closed_attempt["outcome"] == "released"
    assert rec.events[-1].final_attempt is None


async def test_a_takeover_publishes_the_lapsed_attempt_before_the_claim(core):
    w = await make_world(core)
    rec = Recorder()
    core.bus.subscribe(rec)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    await todos.claim(core, w.e1, t["id"])
    assert rec.verbs == ["create", "claim", "takeover", "claim"]
    assert rec.events[2].closed_attempt["outcome"] == "lease_expired"
    assert rec.events[2].closed_attempt["died"] is True


async def test_every_ready_transition_sends_a_wakeup_with_todo_endpoint_queue_and_reason(core, heard):
    w = await make_world(core, queues=("inbox", "ops"))
    endpoint = str(w.e1.endpoint_id)

    created = await w.todo("fresh", queue="ops")
    released = await w.todo("released")
    await todos.claim(core, w.e1, released["id"])
    await todos.release(core, w.e1, released["id"])
    reaped = await w.todo("reaped")
    await todos.claim(core, w.e1, reaped["id"])
    await lapse(core, reaped["id"])
    retried = await w.todo("retried")
    await todos.claim(core, w.e1, retried["id"])
    await todos.fail(core, w.e1, retried["id"], summary="red")
    await make_due(core, retried["id"])
    await sweeps.sweep_once(core, with_retention=False)  # reaps one, re-queues the other
    manual = await w.todo("manual", max_attempts=1)
    await todos.claim(core, w.e1, manual["id"])
    await todos.fail(core, w.e1, manual["id"])
    await todos.retry(core, w.h1, manual["id"])
    # claims, heartbeats, completions and parked retries wake nobody
    done = await w.todo("done")
    await todos.claim(core, w.e1, done["id"])
    await todos.heartbeat(core, w.e1, done["id"])
    await todos.complete(core, w.e1, done["id"])

    notes = await heard.wait_for(9)
    await asyncio.sleep(0.2)
    got = [(n["todo_id"], n["reason"]) for n in heard.notes]
    assert got.count((done["id"], "created")) == 1 and len([g for g in got if g[0] == done["id"]]) == 1
    assert (created["id"], "created") in got
    assert (released["id"], "released") in got
    assert (reaped["id"], "requeued") in got
    assert (retried["id"], "requeued") in got
    assert (manual["id"], "requeued") in got
    assert len(got) == 10  # six creations + release + reap + re-queue + manual retry
    for n in notes:
        assert n["endpoint_id"] == endpoint
        assert n["team_id"] is None  # an endpoint's todo (migration 0018 names a team todo's team)
        # A creation's wake-up stands for its statement's todos on that queue (migration 0014): it
        # names the first and says how many; the other wake-ups name their one todo.
        extra = {"count"} if n["reason"] == "created" else set()
        assert set(n) == {"todo_id", "endpoint_id", "team_id", "queue", "reason"} | extra
        assert n.get("count", 1) == 1
    assert [n["queue"] for n in notes if n["todo_id"] == created["id"]] == ["ops"]


async def test_nothing_leaves_for_a_rolled_back_transition(core, heard):
    """The wake-up and the notify-hook outbox row are written inside the transition's transaction."""
    w = await make_world(core)
    await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in")
    params = {"id": "td_rolled_back", "endpoint_id": w.e1.endpoint_id, "queue": "inbox", "source": "operator",
              "kind": None, "title": "never", "payload": None, "key": None, "assignee": None, "max_attempts": 5}
    async with core.pool.connection() as conn:
        async with conn.transaction(force_rollback=True):
            await conn.execute(Q.todos.create, params)
            rows = await (await conn.execute("SELECT count(*) AS n FROM hook_outbox")).fetchone()
            assert rows["n"] == 2  # visible inside the transaction: todo.created and todo.ready
    await asyncio.sleep(0.3)
    assert heard.notes == []
    assert (await sql(core, "SELECT count(*) AS n FROM hook_outbox"))[0]["n"] == 0
    assert (await sql(core, "SELECT count(*) AS n FROM todos"))[0]["n"] == 0

    async with core.pool.connection() as conn:
        await conn.execute(Q.todos.create, {**params, "id": "td_committed"})
    notes = await heard.wait_for(1)
    assert notes[0]["todo_id"] == "td_committed"
    assert (await sql(core, "SELECT count(*) AS n FROM hook_outbox"))[0]["n"] == 2


async def test_a_lost_listen_connection_reconnects_and_resyncs(core, pg_uri, heard):
    w = await make_world(core)
    resynced = asyncio.Event()

    async def on_reconnect() -> None:
        resynced.set()

    heard.listener.on_reconnect.append(on_reconnect)
    first_pid = heard.listener.backend_pid
    async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (first_pid,))
    await asyncio.wait_for(resynced.wait(), 10)
    assert heard.listener.connections == 2 and heard.listener.backend_pid != first_pid
    t = await w.todo("after the reconnect")
    notes = await heard.wait_for(1)
    assert notes[-1]["todo_id"] == t["id"]


async def test_rering_counts_a_ring_only_when_due_and_at_most_five_times(core, heard):
    w = await make_world(core)
    t = await w.todo("nobody claims me")
    await heard.wait_for(1)
    # not due yet at the real intervals
    assert await rings.rering_due(core, [w.e1.endpoint_id]) == []
    # with zero intervals: one ring per call until five
    counts = []
    for _ in range(7):
        got = await rings.rering_due(core, [w.e1.endpoint_id], intervals=(0.0,))
        counts.append([r["ring_attempts"] for r in got])
    assert counts == [[1], [2], [3], [4], [5], [], []]
    notes = await heard.wait_for(6)
    assert [n["reason"] for n in notes] == ["created"] + ["rering"] * 5
    row = (await sql(core, "SELECT ring_attempts, last_ringed_at, updated_at, state FROM todos WHERE id = %s",
                     (t["id"],)))[0]
    assert row["ring_attempts"] == 5 and row["last_ringed_at"] is not None and row["state"] == "pending"
    # the widening schedule: the next ring is due only after the interval for its number
    await sql(core, "UPDATE todos SET ring_attempts = 1, last_ringed_at = now() - interval '10 minutes'"
                    " WHERE id = %s", (t["id"],))
    assert await rings.rering_due(core, [w.e1.endpoint_id]) == []  # the 2nd re-ring waits 20 minutes
    await sql(core, "UPDATE todos SET last_ringed_at = now() - interval '21 minutes' WHERE id = %s", (t["id"],))
    assert [r["id"] for r in await rings.rering_due(core, [w.e1.endpoint_id])] == [t["id"]]
    # a claimed todo is never re-rung
    await todos.claim(core, w.e1, t["id"])
    await sql(core, "UPDATE todos SET ring_attempts = 0, last_ringed_at = NULL WHERE id = %s", (t["id"],))
    assert await rings.rering_due(core, [w.e1.endpoint_id], intervals=(0.0,)) == []


async def test_a_revocation_publishes_one_event_per_todo_it_dead_letters(core):
    w = await make_world(core)
    rec = Recorder()
    core.bus.subscribe(rec)
    pending = await w.todo("pending")
    held = await w.todo("held")
    await todos.claim(core, w.e1, held["id"])
    await endpoints.revoke(core, w.h1, w.slug1)
    revoked = [e for e in rec.events if e.verb == "revoke"]
    assert sorted(e.todo_id for e in revoked) == sorted([pending["id"], held["id"]])
    assert all(e.dead_lettered for e in revoked)
    assert rec.verbs[-1] == "endpoint_revoked"
    assert json.dumps([e.as_dict() for e in revoked])  # serialisable for any consumer
