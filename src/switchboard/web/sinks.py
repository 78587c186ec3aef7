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

import json
import logging
import time
from typing import Any

from .. import __version__
from ..core import sink_messages, sinks
from ..core.models import Core, HumanCaller
from ..runtime import Runtime
from . import outbound
from .outbox_sender import OutboxSender

log = logging.getLogger("switchboard.sinks")

RETRY_DELAYS: tuple[float, ...] = (1, 5, 30, 120, 600, 1800, 3600)  # after attempts 1..7; 8 attempts
GLOBAL = 8
LEASE_SECONDS = 60.0
TICK_EVERY_SECONDS = 30.0  # stuck and digest checks; the sweep interval may be shorter
PRUNE_EVERY_SECONDS = 3600.0
KEEP_DAYS = 30
WAKING_VERBS = frozenset({"fail", "reap", "revoke"})


def encode(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def headers() -> dict[str, str]:
    return {"content-type": "application/json", "user-agent": f"switchboard/{__version__}"}


async def send_test(core: Core, human: HumanCaller, sink_id: Any, *, team: Any = None) -> dict:
    """Post a test message to one of the human's sinks now (with `team`, to one of that team's sinks,
    for its owners and admins); the outcome is kept on the sink."""
    row = (await sinks.get_row_for_team(core, human, team, sink_id) if team is not None
           else await sinks.get_row(core, human, sink_id))
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


class SinkSender(OutboxSender):
    """Delivers `sink_outbox` rows, one at a time per sink, GLOBAL in all; the sweep tick queues the
    stuck-queue and digest messages and prunes."""

    name = "sink-sender"
    in_flight_max = GLOBAL
    waking_verbs = WAKING_VERBS  # a dead letter's message is committed with it
    logger = log

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime, RETRY_DELAYS)
        self.disable_after = sinks.DISABLE_AFTER
        self.tick_every = TICK_EVERY_SECONDS
        self._next_tick = 0.0
        self._next_prune = 0.0

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

    async def claim_due(self, limit: int, busy: list[Any]) -> list[dict]:
        return await sinks.claim_due(self.runtime.core, limit=limit, lease_seconds=LEASE_SECONDS, busy=busy)

    async def next_due_in(self) -> float | None:
        return await sinks.next_due_in(self.runtime.core)

    def target(self, row: dict) -> Any:
        return row["sink_id"]

    async def attempt(self, row: dict) -> str:
        """Send one claimed message and settle it. Returns its state afterwards."""
        body = sink_messages.render(row["kind"], row["event"], dict(row["body"]),
                                    base_url=self.runtime.settings.public_base_url, sink_name=row["name"])
        t0 = time.perf_counter()
        outcome = await outbound.post(self._client, row["url"], encode(body), headers(),
                                      allow_private=self.allow_private)
        state, retry_in = self.settle(outcome.result, outcome.retry, row["attempts"])
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
