"""Is the database reachable? (`/healthz`)

The probe has one deadline for everything (a free connection, the round trip): past it the answer is
"unreachable" at once, even when the database is frozen and cannot cancel anything. The probe itself
is left to finish or fail on its own (the pool's statement deadline ends it) in the background, so a
stalled database never holds the health check.
"""

from __future__ import annotations

import asyncio
import logging

from .models import Core
from .queries import Q

log = logging.getLogger("switchboard.health")

_pending: set[asyncio.Task[None]] = set()  # probes that outlived their deadline, until they end


async def _ping(core: Core, timeout: float) -> None:
    async with core.pool.connection(timeout=timeout) as conn:
        await conn.execute(Q.health.ping)


def _forget(task: asyncio.Task[None]) -> None:
    _pending.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a late failure is expected, not an unhandled error


async def database_reachable(core: Core, *, timeout: float = 2.0) -> bool:
    probe = asyncio.ensure_future(_ping(core, timeout))
    done, _ = await asyncio.wait((probe,), timeout=timeout)
    if not done:
        log.warning("database health probe timed out", extra={"reason": "health_deadline"})
        _pending.add(probe)
        probe.add_done_callback(_forget)
        return False
    return probe.exception() is None
