"""Aggregates over attempt history for the owning human (the Board's queue charts), and the owner of an
endpoint for routing live updates. Every read is scoped to one human in its own statement."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

from .errors import Invalid
from .models import Core, HumanCaller
from .queries import Q

OUTCOMES = ("completed", "failed", "released", "lease_expired", "reaped", "canceled", "revoked")
DAYS_MAX = 90


@dataclass
class QueueOutcomes:
    """Closed attempts of one queue of one endpoint, per UTC day and outcome."""

    endpoint: str
    queue: str
    days: list[date]
    counts: dict[date, dict[str, int]] = field(default_factory=dict)
    open_attempts: int = 0

    @property
    def total(self) -> int:
        return sum(sum(per.values()) for per in self.counts.values())

    def by_outcome(self) -> dict[str, int]:
        out = {o: 0 for o in OUTCOMES}
        for per in self.counts.values():
            for outcome, n in per.items():
                out[outcome] = out.get(outcome, 0) + n
        return out


async def attempt_outcomes(core: Core, human: HumanCaller, *, days: Any = 14, endpoint: str | None = None,
                           now: datetime | None = None) -> list[QueueOutcomes]:
    """The last `days` UTC days (today included) of closed attempts, one entry per queue that has any."""
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= DAYS_MAX:
        raise Invalid(f"days must be an integer from 1 to {DAYS_MAX}", argument="days")
    today = (now or datetime.now(UTC)).astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    since = datetime(first.year, first.month, first.day, tzinfo=UTC)
    params = {"human_id": human.human_id, "since": since, "slug": endpoint or None}
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.board.attempt_outcomes, params)
        rows = await cur.fetchall()
        cur = await conn.execute(Q.board.open_attempts, params)
        open_rows = await cur.fetchall()
    span = [first + timedelta(days=i) for i in range(days)]
    queues: dict[tuple[str, str], QueueOutcomes] = {}
    for r in rows:
        key = (r["endpoint"], r["queue"])
        q = queues.setdefault(key, QueueOutcomes(endpoint=key[0], queue=key[1], days=span))
        q.counts.setdefault(r["day"], {})[r["outcome"]] = r["n"]
    for r in open_rows:
        key = (r["endpoint"], r["queue"])
        q = queues.setdefault(key, QueueOutcomes(endpoint=key[0], queue=key[1], days=span))
        q.open_attempts = r["n"]
    return [queues[k] for k in sorted(queues)]


async def endpoint_owner(core: Core, endpoint_id: Any) -> UUID | None:
    """The human owning an endpoint, or None when there is no such endpoint."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.board.endpoint_owner, {"endpoint_id": endpoint_id})
        row = await cur.fetchone()
    return row["human_id"] if row else None
