"""Background sweeps (SYSTEM.md section 11): reaper, retry scheduler, endpoint expiry, retention.

Each sweep runs in a transaction that first takes a transaction-level advisory lock, so one process
sweeps at a time; the statements also use SKIP LOCKED, so correctness never depends on the lock or
the tick (claims take over lapsed leases and due retries themselves).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import endpoints, events, settings_store
from .models import Core
from .queries import Q, one

log = logging.getLogger("switchboard.sweeps")

BATCH = 500
LOCK_REAP = 0x5377_0001
LOCK_REQUEUE = 0x5377_0002
LOCK_RETENTION = 0x5377_0003


@dataclass
class SweepReport:
    reaped: int = 0
    requeued: int = 0
    expired_endpoints: int = 0
    retention_deleted: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"reaped": self.reaped, "requeued": self.requeued, "expired_endpoints": self.expired_endpoints,
                "retention_deleted": self.retention_deleted, **self.extra}


async def _locked_batch(core: Core, lock: int, sql: str, params: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Run one statement under an advisory transaction lock; None when another process holds it."""
    async with core.pool.connection() as conn:
        async with conn.transaction():
            cur = await conn.execute(Q.sweeps.try_lock, {"key": lock})
            if not (await one(cur))["locked"]:
                return None
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description else []


async def reap(core: Core) -> int:
    """Lapsed leases: the open attempt closes `reaped`; below the cap pending, at the cap dead letter."""
    total = 0
    while True:
        rows = await _locked_batch(core, LOCK_REAP, Q.sweeps.reap, {"batch": BATCH})
        if not rows:
            return total
        total += len(rows)
        await core.bus.publish(*[
            events.build("reap", r, r["closed_attempt"], ready="requeued" if r["state"] == "pending" else None)
            for r in rows])
        if len(rows) < BATCH:
            return total


async def requeue_due(core: Core) -> int:
    """Parked retries whose backoff elapsed go back to pending (and ring again: REQ-16)."""
    total = 0
    while True:
        rows = await _locked_batch(core, LOCK_REQUEUE, Q.sweeps.requeue_due, {"batch": BATCH})
        if not rows:
            return total
        total += len(rows)
        await core.bus.publish(*[events.build("requeue", r, ready="requeued") for r in rows])
        if len(rows) < BATCH:
            return total


async def retention(core: Core) -> int:
    """Delete terminal todos beyond the age and row bounds; attempts go by cascade; never live todos."""
    age = await settings_store.get(core, "retention_max_age_days")
    rows = await settings_store.get(core, "retention_max_rows")
    deleted = 0
    for sql, params in ((Q.sweeps.retention_by_age, {"max_age_days": age}),
                        (Q.sweeps.retention_by_rows, {"max_rows": rows})):
        while True:
            async with core.pool.connection() as conn:
                async with conn.transaction():
                    cur = await conn.execute(Q.sweeps.try_lock, {"key": LOCK_RETENTION})
                    if not (await one(cur))["locked"]:
                        return deleted
                    cur = await conn.execute(sql, {**params, "batch": 5000})
                    n = cur.rowcount
            deleted += n
            if n < 5000:
                break
    return deleted


TickHook = Callable[[Core], Awaitable[None]]


async def sweep_once(core: Core, *, with_retention: bool = True, on_tick: Sequence[TickHook] = ()) -> SweepReport:
    """One pass. `on_tick`: extra work for the tick (the doorbell's re-ring), each called with the core;
    a failing hook is logged and the pass goes on."""
    report = SweepReport()
    report.reaped = await reap(core)
    report.requeued = await requeue_due(core)
    report.expired_endpoints = await endpoints.expire_due(core)
    for hook in on_tick:
        try:
            await hook(core)
        except Exception:
            log.exception("sweep hook failed")
    if with_retention:
        report.retention_deleted = await retention(core)
    return report


async def run_forever(core: Core, stop: asyncio.Event, *, on_tick: Sequence[TickHook] = ()) -> None:
    """The `serve` loop: a sweep every tick, retention at start and then hourly."""
    loop = asyncio.get_running_loop()
    next_retention = loop.time()
    while not stop.is_set():
        try:
            due = loop.time() >= next_retention
            report = await sweep_once(core, with_retention=due, on_tick=on_tick)
            if due:
                next_retention = loop.time() + core.settings.retention_interval_seconds
            if report.reaped or report.requeued or report.expired_endpoints or report.retention_deleted:
                log.info("sweep", extra={"sweep": report.as_dict()})
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sweep failed; continuing")
        try:
            await asyncio.wait_for(stop.wait(), timeout=core.settings.sweep_interval_seconds)
        except TimeoutError:
            pass
