"""What the doorbell reads and writes: ready todos to ring, and the re-ring of unclaimed ones.

Ringing itself (MCP notifications to live sessions) is the surface's business (`mcp/doorbell.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from .models import Core
from .queries import Q

# The widening interval between re-rings of a pending todo nobody claims (seconds): 5 min after it
# became pending, then 20 min, 1 h and 6 h after each previous ring; at most MAX_RERINGS.
RERING_INTERVALS: tuple[float, ...] = (300.0, 1200.0, 3600.0, 21600.0)
MAX_RERINGS = 5  # also literal in rings.sql and in the todos_rering index predicate


async def pending_by_ids(core: Core, ids: Iterable[str]) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.rings.pending_by_ids, {"ids": list(ids)})
        return await cur.fetchall()


async def take_team_turns(core: Core, todo: dict[str, Any], *, want: int, slots: int = 1) -> int:
    """How many of the `slots` rings of a ready team todo this process takes, at most `want` (the
    sessions it could ring); the others were taken by other processes, whose sessions they ring. The
    todo is a `pending_by_ids` row (its version and re-rings name the ring)."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.rings.take_team_turns, {
            "todo_id": todo["id"], "version": todo["updated_at"], "rings": todo["ring_attempts"],
            "slots": max(slots, 1), "want": want})
        return len(await cur.fetchall())


async def prune_team_turns(core: Core) -> None:
    async with core.pool.connection() as conn:
        await conn.execute(Q.rings.prune_team_turns)


async def oldest_pending(core: Core, endpoint_id: UUID | str, queues: Iterable[str],
                         limit: int = 5) -> list[dict[str, Any]]:
    names = list(queues)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.rings.oldest_pending, {
            "endpoint_id": endpoint_id, "queues": names, "limit": limit,
            "team_queues": [q for q in names if q.startswith("team:")]})
        return await cur.fetchall()


async def oldest_in_team_queue(core: Core, team_id: UUID | str, queue: str) -> dict[str, Any] | None:
    """The oldest pending todo of one team queue, whichever endpoint reaches it."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.rings.oldest_in_team_queue, {"team_id": team_id, "queue": queue})
        return await cur.fetchone()


async def rering_due(core: Core, endpoint_ids: Iterable[UUID | str], *, team_queues: Iterable[str] = (),
                     intervals: tuple[float, ...] = RERING_INTERVALS, per_endpoint: int = 3) -> list[dict[str, Any]]:
    """Count one more ring on the due todos of these endpoints and of these team queues (labels);
    their wake-ups go out at commit."""
    ids = [str(e) for e in endpoint_ids]
    labels = sorted({q for q in team_queues if q.startswith("team:")})
    if not ids and not labels:
        return []
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.rings.rering_due, {
            "endpoints": ids, "team_queues": labels, "intervals": list(intervals),
            "min_interval": min(intervals), "per_endpoint": per_endpoint})
        return await cur.fetchall()
