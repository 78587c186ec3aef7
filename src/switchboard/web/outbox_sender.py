"""The delivery loop shared by the outbound senders (notify hooks, notification sinks).

Each sender drains an outbox table that transitions fill in their own transactions: a row is taken
under a short lease (SKIP LOCKED, so several processes never send the same row), sent, and settled
with the attempt recorded; a failed attempt that may be retried is due again after a backoff. This
module holds what the two have in common: the loop that wakes on the hook bus (and on whatever
else a sender wires to `wake`), coalesces wake-ups, and sleeps until the next row is due; the bound
on deliveries in flight, overall and per target; the start and stop; and the backoff. A sender says
how to take due rows, when the next one is due, and how to send and settle one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from ..core.events import Event
from ..runtime import Runtime
from ..stopping import stop_task, stop_tasks
from . import outbound

MIN_PUMP_INTERVAL = 0.05  # seconds between two outbox scans
POLL_SECONDS = 1.0  # the longest sleep: rows made due by other processes are found this late at most


class OutboxSender:
    """One outbox's delivery loop. Subclasses set the class attributes and implement `claim_due`,
    `next_due_in`, `target` and `attempt`; `after_pass` runs after every scan."""

    name = "outbox-sender"  # the loop task's name
    in_flight_max = 8  # deliveries at once, over all targets
    waking_verbs: frozenset[str] = frozenset()  # transitions that may have written a row
    logger = logging.getLogger("switchboard.outbox")

    def __init__(self, runtime: Runtime, retry_delays: tuple[float, ...]) -> None:
        self.runtime = runtime
        self.retry_delays = retry_delays  # after attempts 1..n; n + 1 attempts in all
        self.allow_private = runtime.settings.hooks_allow_private
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        # Set by stop(): the loop also ends on it, since Python 3.11's asyncio.wait_for loses a
        # cancellation that arrives as the event it waits on is set.
        self._stopping = False
        self._jobs: set[asyncio.Task] = set()
        self._busy: Counter[Any] = Counter()  # deliveries in flight per target
        self._client: httpx.AsyncClient | None = None
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def max_attempts(self) -> int:
        return len(self.retry_delays) + 1

    # ------------------------------------------------------------------------ what a sender says

    async def claim_due(self, limit: int, busy: list[Any]) -> list[dict]:
        """Lease up to `limit` due rows, none for a target in `busy` (one delivery in flight there)."""
        raise NotImplementedError

    async def next_due_in(self) -> float | None:
        """Seconds until the next row is due (None: none is waiting)."""
        raise NotImplementedError

    def target(self, row: dict) -> Any:
        """The target a row goes to (a hook, a sink): deliveries in flight are counted per target."""
        raise NotImplementedError

    async def attempt(self, row: dict) -> str:
        """Send one leased row and settle it; returns its state afterwards."""
        raise NotImplementedError

    async def after_pass(self) -> None:
        """Housekeeping after each scan (pruning old rows, say)."""

    # ----------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._stopping = False
        self._client = outbound.new_client(self.in_flight_max)
        self._unsubscribe = self.runtime.core.bus.subscribe_batch(self.on_events)
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        self._stopping = True
        self._wake.set()
        await stop_task(self._task)
        await stop_tasks(*self._jobs)
        if self._client is not None:
            await self._client.aclose()

    def wake(self) -> None:
        self._wake.set()

    def on_event(self, ev: Event) -> None:
        self.on_events((ev,))

    def on_events(self, events: Sequence[Event]) -> None:
        if any(ev.verb in self.waking_verbs for ev in events):
            self._wake.set()  # the transition's rows are committed with it

    # ---------------------------------------------------------------------------------------- loop

    async def _run(self) -> None:
        last_pump = 0.0
        while not self._stopping:
            # Wake-ups come with every transition; coalesce them so a busy queue costs the outbox
            # at most a few queries per second, not two per transition.
            pause = last_pump + MIN_PUMP_INTERVAL - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            last_pump = time.monotonic()
            try:
                await self.pump()
                await self.after_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.logger.exception("%s pass failed; continuing", self.name)
            timeout = POLL_SECONDS
            with contextlib.suppress(Exception):
                due = await self.next_due_in()
                if due is not None:
                    timeout = min(POLL_SECONDS, max(0.01, due))
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()

    async def pump(self) -> int:
        """Take what is due (within the bounds on deliveries in flight) and start sending it."""
        free = self.in_flight_max - len(self._jobs)
        if free <= 0:
            return 0
        rows = await self.claim_due(free, [t for t, n in self._busy.items() if n > 0])
        for row in rows:
            self._busy[self.target(row)] += 1
            job = asyncio.create_task(self._deliver(row), name=f"{self.name}-delivery")
            self._jobs.add(job)
            job.add_done_callback(self._jobs.discard)
        return len(rows)

    async def _deliver(self, row: dict) -> None:
        try:
            await self.attempt(row)
        finally:
            target = self.target(row)
            self._busy[target] -= 1
            if self._busy[target] <= 0:
                del self._busy[target]
            self._wake.set()

    def settle(self, result: str, retry: bool, attempt: int) -> tuple[str, float]:
        """The row's state after attempt number `attempt` ended with `result` (a class such as "2xx"),
        and the seconds until it is due again when it is retried: the backoff of `retry_delays`, each
        jittered by ±20 %."""
        if result == "2xx":
            return "delivered", 0.0
        if retry and attempt < self.max_attempts:
            base = self.retry_delays[min(attempt, len(self.retry_delays)) - 1]
            return "pending", base * random.uniform(0.8, 1.2)
        return "failed", 0.0
