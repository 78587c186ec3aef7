"""Scrape-time reads for the metrics surface: aggregates only (counts and ages per queue)."""

from __future__ import annotations

from typing import Any

from .models import Core
from .queries import Q
from .states import GAUGE_STATES

__all__ = ["GAUGE_STATES", "queue_states"]


async def queue_states(core: Core) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """(rows of queue, state, n, oldest_seconds; the queues granted to active endpoints; rows of
    admission policy queue, status, pending), read in one transaction bounded by a 5 s statement
    timeout."""
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.gauges.statement_timeout)
        cur = await conn.execute(Q.gauges.queue_states)
        rows = await cur.fetchall()
        cur = await conn.execute(Q.gauges.scoped_queues)
        scoped = [r["queue"] for r in await cur.fetchall()]
        cur = await conn.execute(Q.gauges.admission_states)
        policies = list(await cur.fetchall())
    return rows, scoped, policies
