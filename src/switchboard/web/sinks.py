"""Notification sinks, the outbound side (docs/notifications.md): the sender and the test message.

The dead-letter trigger (migration 0011) and the sweep tick (`core.sinks.tick`, this component's
`on_tick`) write messages to `sink_outbox`; this loop delivers them after commit. A row is taken
under a short lease (`core.sinks.claim_due`, one per sink at a time, SKIP LOCKED so several
processes never send the same row), rendered for the sink's kind (`core.sink_messages`), posted
with the notify hooks' HTTP discipline (`web/outbound.py`: https only, every resolved address
globally routable, the connection pinned to the checked address, no redirects, timeouts) and settled
(`core.sinks.record_attempt`). Retries back off (about 1 s, 5 s, 30 s, 2 min, 10 min, 30 min, 1 h)
on network errors, timeouts, 408, 429 and 5xx; after DISABLE_AFTER failed messages in a row the sink
is disabled with the reason kept, until its owner enables it again.

`send_test` posts a test message at once (same discipline) and reports how it went; it does not go
through the outbox and never counts towards disabling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from .. import __version__
from ..core import sink_messages, sinks
from ..core.events import Event
from ..core.models import Core, HumanCaller
from ..runtime import Runtime
from . import outbound

log = logging.getLogger("switchboard.sinks")

RETRY_DELAYS: tuple[float, ...] = (1, 5, 30, 120, 600, 1800, 3600)  # after attempts 1..7; 8 attempts
GLOBAL = 8
LEASE_SECONDS = 60.0
POLL_SECONDS = 1.0
MIN_PUMP_INTERVAL = 0.05
TICK_EVERY_SECONDS = 30.0  # stuck and digest checks; the sweep interval may be shorter
PRUNE_EVERY_SECONDS = 3600.0
KEEP_DAYS = 30
WAKING_VERBS = frozenset({"fail", "reap", "revoke"})


def encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def headers() -> dict[str, str]:
    return {"content-type": "application/json", "user-agent": f"switchboard/{__version__}"}


async def send_test(core: Core, human: HumanCaller, sink_id: Any) -> dict:
    """Post a test message to one of the human's sinks now; the outcome is kept on the sink."""
    row = await sinks.get_row(core, human, sink_id)
    body = sink_messages.render(row["kind"], "test", {}, base_url=core.settings.public_base_url,
                                sink_name=row["name"])
    async with outbound.new_client(1) as client:
        outcome = await outbound.post(client, row["url"], encode(body), headers(),
                                      allow_private=core.settings.hooks_allow_private)
    status = str(outcome.status) if outcome.status is not None else outcome.result
    await sinks.record_test(core, row["id"], status=status, error=outcome.error)
    log.info("sink test message", extra={"target": str(row["id"]), "status": status})
    return {"sink_id": str(row["id"]), "delivered": outcome.result == "2xx", "result": outcome.result,
            "status_code": outcome.status, "error": outcome.error}


class SinkSender:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.retry_delays: tuple[float, ...] = RETRY_DELAYS
        self.disable_after = sinks.DISABLE_AFTER
        self.tick_every = TICK_EVERY_SECONDS
        self.allow_private = runtime.settings.hooks_allow_private
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        # Set by stop(): the loop also ends on it, since Python 3.11's asyncio.wait_for loses a
        # cancellation that arrives as the event it waits on is set.
        self._stopping = False
        self._jobs: set[asyncio.Task] = set()
        self._busy: set[Any] = set()
        self._client: httpx.AsyncClient | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._next_tick = 0.0
        self._next_prune = 0.0

    @property
    def max_attempts(self) -> int:
        return len(self.retry_delays) + 1

    async def start(self) -> None:
        self._stopping = False
        self._client = outbound.new_client(GLOBAL)
        self._unsubscribe = self.runtime.core.bus.subscribe_batch(self.on_events)
        self._task = asyncio.create_task(self._run(), name="sink-sender")

    async def stop(self) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for job in list(self._jobs):
            job.cancel()
        if self._jobs:
            await asyncio.gather(*self._jobs, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    def on_event(self, ev: Event) -> None:
        self.on_events((ev,))

    def on_events(self, events: Sequence[Event]) -> None:
        if any(ev.verb in WAKING_VERBS for ev in events):
            self._wake.set()  # a dead letter's message is committed with it

    async def on_tick(self, core: Core) -> None:
        """The sweep tick: queue stuck-queue and digest messages (at most every `tick_every` s)."""
        now = time.monotonic()
        if now < self._next_tick:
            return
        self._next_tick = now + self.tick_every
        queued = await sinks.tick(core)
        if any(queued.values()):
            log.info("sink messages queued", extra={"sweep": queued})
            self._wake.set()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_SECONDS
            await sinks.prune(core, days=KEEP_DAYS)

    async def _run(self) -> None:
        last = 0.0
        while not self._stopping:
            pause = last + MIN_PUMP_INTERVAL - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            last = time.monotonic()
            try:
                await self.pump()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sink sender pass failed; continuing")
            timeout = POLL_SECONDS
            with contextlib.suppress(Exception):
                due = await sinks.next_due_in(self.runtime.core)
                if due is not None:
                    timeout = min(POLL_SECONDS, max(0.01, due))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()

    async def pump(self) -> int:
        """Take what is due (one per sink, within the global bound) and start sending it."""
        free = GLOBAL - len(self._jobs)
        if free <= 0:
            return 0
        rows = await sinks.claim_due(self.runtime.core, limit=free, lease_seconds=LEASE_SECONDS,
                                     busy=list(self._busy))
        for row in rows:
            self._busy.add(row["sink_id"])
            job = asyncio.create_task(self._deliver(row), name="sink-delivery")
            self._jobs.add(job)
            job.add_done_callback(self._jobs.discard)
        return len(rows)

    async def _deliver(self, row: dict) -> None:
        try:
            await self.attempt(row)
        finally:
            self._busy.discard(row["sink_id"])
            self._wake.set()

    async def attempt(self, row: dict) -> str:
        """Send one claimed message and settle it. Returns its state afterwards."""
        body = sink_messages.render(row["kind"], row["event"], dict(row["body"]),
                                    base_url=self.runtime.settings.public_base_url, sink_name=row["name"])
        t0 = time.perf_counter()
        outcome = await outbound.post(self._client, row["url"], encode(body), headers(),
                                      allow_private=self.allow_private)
        attempt = row["attempts"]
        if outcome.result == "2xx":
            state, retry_in = "delivered", 0.0
        elif outcome.retry and attempt < self.max_attempts:
            base = self.retry_delays[min(attempt, len(self.retry_delays)) - 1]
            state, retry_in = "pending", base * random.uniform(0.8, 1.2)
        else:
            state, retry_in = "failed", 0.0
        enabled = await sinks.record_attempt(
            self.runtime.core, outbox_id=row["id"], status_code=outcome.status, result=outcome.result,
            error=outcome.error, state=state, retry_in=retry_in, disable_after=self.disable_after)
        log.info("sink message attempt", extra={
            "target": str(row["sink_id"]), "event": row["event"],
            "status": outcome.status if outcome.status is not None else outcome.result, "outcome": state,
            "latency_ms": int((time.perf_counter() - t0) * 1000)})
        if enabled is False and state == "failed":
            log.warning("sink disabled after repeated failures", extra={"target": str(row["sink_id"])})
        return state
