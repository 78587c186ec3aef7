"""Stopping a background task for sure, in bounded time.

`task.cancel()` followed by `await task` can wait for ever. On Python 3.11, `asyncio.wait_for` (which
psycopg_pool's wait for a connection uses) drops a cancellation that arrives at the moment the wait
it guards completes: the task goes on to its next await as if it had never been cancelled, and a
loop that waits for work waits on. A shutdown then hangs in the component's `stop`.

`stop_task` cancels, waits a moment for the task to end (its own cleanup runs in that time), cancels
again while it still runs, and after `within` seconds gives up on it with a warning naming the task,
so one stuck task never holds up the others' stops or the process's exit.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("switchboard.stopping")

STOP_SECONDS = 5.0  # the most a stop waits for one task
FIRST_GRACE_SECONDS = 1.0  # after the first cancellation: a task's own cleanup runs undisturbed
RECANCEL_SECONDS = 0.1  # then: cancel again this often


async def stop_task(task: asyncio.Task | None, *, within: float = STOP_SECONDS) -> bool:
    """Cancel `task` and wait for it to end, cancelling again while it runs on (see the module).
    True when it ended, however it ended (its exception, if any, is consumed); False when it still
    ran after `within` seconds. A task already done, or None, is True at once."""
    if task is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    grace = FIRST_GRACE_SECONDS
    while not task.done():
        left = deadline - loop.time()
        if left <= 0:
            log.warning("a background task did not stop", extra={"event": "task_not_stopped",
                                                                  "reason": task.get_name()})
            return False
        task.cancel()
        await asyncio.wait({task}, timeout=min(grace, left))
        grace = RECANCEL_SECONDS
    if not task.cancelled():
        task.exception()  # retrieved: an ending error is not reported again as never retrieved
    return True


async def stop_tasks(*tasks: asyncio.Task | None, within: float = STOP_SECONDS) -> bool:
    """stop_task for several tasks at once; True when every one ended."""
    done = await asyncio.gather(*(stop_task(t, within=within) for t in tasks))
    return all(done)
