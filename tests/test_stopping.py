"""A background task stops in bounded time even when it loses a cancellation (switchboard/stopping.py).

On Python 3.11 `asyncio.wait_for` drops a cancellation that arrives as the wait it guards completes
(psycopg_pool waits for a connection with it), so the task carries on to its next await. Such a
loss is played here by a task that swallows its first cancellation and waits again: `cancel()` then
`await task`, which the listener, the outbox senders and the sweeper's stop did, waited for ever.
"""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg

from switchboard.db.listen import READY_CHANNEL, ReadyListener
from switchboard.stopping import stop_task, stop_tasks


async def _loses_its_first_cancellation(entered: asyncio.Event | None = None) -> None:
    if entered is not None:
        entered.set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass  # lost: carries on as if it had never been cancelled
    await asyncio.sleep(3600)


async def _ignores_every_cancellation(released: asyncio.Event) -> None:
    while not released.is_set():
        try:
            await released.wait()
        except asyncio.CancelledError:
            continue


async def test_a_task_that_loses_its_first_cancellation_still_stops():
    task = asyncio.create_task(_loses_its_first_cancellation())
    await asyncio.sleep(0)
    started = time.monotonic()
    assert await stop_task(task, within=5) is True
    assert task.cancelled() and time.monotonic() - started < 2.0  # the grace, then one more cancellation


async def test_a_task_that_never_stops_is_given_up_on_in_time(caplog):
    released = asyncio.Event()
    task = asyncio.create_task(_ignores_every_cancellation(released), name="stubborn")
    await asyncio.sleep(0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="switchboard.stopping"):
        assert await stop_task(task, within=0.5) is False
    assert time.monotonic() - started < 1.5
    assert any(getattr(r, "event", None) == "task_not_stopped" and r.reason == "stubborn" for r in caplog.records)
    released.set()  # the test's own clean-up
    await task


async def test_an_ending_error_is_consumed_and_a_done_task_is_stopped_at_once():
    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    assert await stop_task(failed) is True and await stop_task(None) is True
    quick = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(3)]
    started = time.monotonic()
    assert await stop_tasks(*quick, None) is True and time.monotonic() - started < 0.5


async def test_a_listener_stops_even_when_a_subscriber_loses_its_cancellation(pg_uri):
    """A wake-up subscriber (the doorbell, a hook sender) cut off in the middle of a database wait:
    the listener's stop still returns."""
    listener = ReadyListener(pg_uri, backoff=(0.05, 0.2))
    entered = asyncio.Event()

    async def on_batch(batch: list[dict]) -> None:
        await _loses_its_first_cancellation(entered)

    listener.subscribe(on_batch=on_batch)
    await listener.start()
    try:
        await listener.wait_connected()
        async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True) as conn:
            await conn.execute("SELECT pg_notify(%s, %s)",
                               (READY_CHANNEL, '{"todo_id": "td_x", "endpoint_id": "e", "queue": "q"}'))
        await asyncio.wait_for(entered.wait(), 10)
    finally:
        started = time.monotonic()
        async with asyncio.timeout(8):
            await listener.stop()
    assert time.monotonic() - started < 3.0
    assert not listener.connected.is_set()

