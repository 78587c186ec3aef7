"""Statements that take rows with FOR UPDATE SKIP LOCKED, under racing takers: the two outboxes'
claims (notify hooks, notification sinks) and the doorbell's re-ring.

Several serving processes run these against one database. A row taken or settled by one must not be
taken again by another whose statement started before that commit: READ COMMITTED's `FOR UPDATE SKIP
LOCKED` rechecks only the conditions of the locking scan on the row's latest version, so the due
conditions must sit there. Real PostgreSQL, real connections racing; outbox messages are settled as
delivered without HTTP, since only the taking is under test.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

from core_world import make_world, sql
from switchboard.core import hooks, rings, sinks

SENDERS = 8
PER_TARGET = 40
TARGETS = 5


async def drain(take, settle=None) -> Counter:
    """SENDERS takers take (and settle) rows until none is due; how often each id was taken."""
    taken: Counter = Counter()

    async def taker() -> None:
        idle = 0
        while idle < 3:
            rows = await take()
            idle = 0 if rows else idle + 1
            for row in rows:
                taken[row["id"]] += 1
                if settle is not None:
                    await settle(row)

    await asyncio.gather(*(taker() for _ in range(SENDERS)))
    twice = {k: v for k, v in taken.items() if v > 1}
    assert not twice, f"taken more than once: {twice}"
    return taken


async def assert_delivered_once(core, taken: Counter, outbox: str) -> None:
    rows = await sql(core, f"SELECT state, attempts FROM {outbox}")
    assert len(taken) == len(rows) == TARGETS * PER_TARGET
    assert {(r["state"], r["attempts"]) for r in rows} == {("delivered", 1)}


async def test_racing_sink_senders_take_each_message_once(core):
    w = await make_world(core)
    ids = [(await sinks.add(core, w.h1, kind="generic", url=f"https://chat{n}.example.com/in",
                            events=["dead_letter"]))["sink_id"] for n in range(TARGETS)]
    await sql(core, "INSERT INTO sink_outbox (sink_id, event, dedup_key, body) "
                    "SELECT s, 'dead_letter', g::text, '{}' FROM unnest(%s::uuid[]) s, generate_series(1, %s) g",
              (ids, PER_TARGET))

    async def settle(row: dict) -> None:
        await sinks.record_attempt(core, outbox_id=row["id"], status_code=200, result="2xx", error=None,
                                   state="delivered")

    taken = await drain(lambda: sinks.claim_due(core, limit=4, lease_seconds=60), settle)
    await assert_delivered_once(core, taken, "sink_outbox")


async def test_racing_hook_senders_take_each_notification_once(core):
    w = await make_world(core)
    ids = [(await hooks.add(core, w.h1, w.slug1, url=f"https://hook{n}.example.com/in"))[0]["hook_id"]
           for n in range(TARGETS)]
    await sql(core, "INSERT INTO hook_outbox (hook_id, event, todo_id, body) "
                    "SELECT h::uuid, 'todo.ready', g::text, '{}' FROM unnest(%s::text[]) h, generate_series(1, %s) g",
              ([str(i) for i in ids], PER_TARGET))

    async def settle(row: dict) -> None:
        await hooks.record_attempt(core, outbox_id=row["id"], attempt=row["attempts"], started_at=datetime.now(UTC),
                                   duration_ms=1, status_code=200, result="2xx", error=None, state="delivered")

    taken = await drain(lambda: hooks.claim_due(core, limit=4, per_hook=1, lease_seconds=60), settle)
    await assert_delivered_once(core, taken, "hook_outbox")


async def test_racing_re_rings_count_each_due_todo_once(core):
    """Two processes whose sessions share an endpoint both run the re-ring tick: a todo is rung once."""
    w = await make_world(core)
    ids = [(await w.todo(f"waiting {n}"))["id"] for n in range(TARGETS * PER_TARGET)]
    await sql(core, "UPDATE todos SET updated_at = now() - interval '6 minutes' WHERE id = ANY(%s)", (ids,))

    rung = await drain(lambda: rings.rering_due(core, [w.e1.endpoint_id], per_endpoint=7))
    rows = await sql(core, "SELECT ring_attempts FROM todos WHERE id = ANY(%s)", (ids,))
    assert len(rung) == len(rows) == len(ids) and {r["ring_attempts"] for r in rows} == {1}
