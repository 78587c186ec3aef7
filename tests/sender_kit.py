"""Helpers for the outbox senders' tests (web/hooks.py, web/sinks.py)."""

from __future__ import annotations

import asyncio


async def stops_right_after_a_wake_up(sender) -> bool:
    """Start `sender`, let its loop go idle, wake it and stop it at once: whether stop() returned
    within 3 s. Python 3.11's asyncio.wait_for loses a cancellation that arrives as the event it
    waits on is set, so a loop that ends on the cancellation alone kept going and stop() never
    returned; when that happens the loop is cancelled once more here, so the test still ends."""
    await sender.start()
    await asyncio.sleep(0.5)  # the loop is idle, waiting for a wake-up
    sender._wake.set()
    stopping = asyncio.create_task(sender.stop())
    done, _ = await asyncio.wait({stopping}, timeout=3)  # asyncio.wait cancels nothing itself
    if not done:
        assert sender._task is not None
        sender._task.cancel()
        await stopping
    return bool(done)
