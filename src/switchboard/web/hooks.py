"""Notify hooks, the outbound side (SYSTEM.md §10): the background sender and the human API.

Sender. The transition trigger (migration 0003) writes each notification to `hook_outbox` in the
transition's own transaction; this loop delivers them after commit, so nothing is lost across a
restart: a row is taken under a short lease (`core.hooks.claim_due`), sent, and settled with its
attempt recorded (`core.hooks.record_attempt`).
- Signed with Standard Webhooks headers (`webhook-id` = the row's message id, the same on every
  attempt; `webhook-timestamp`; `webhook-signature`) by the `standardwebhooks` package.
- Body: the row's JSON, at most 4 KiB (a long final summary is cut further to fit), never a payload.
- Targets (web/outbound.py, shared with the notification sinks): https only; the host is resolved
  before every attempt and every address must be globally routable (`core.hooks.address_refusal`:
  the standard library's `is_global`, after unwrapping the IPv4 address inside IPv4-mapped, 6to4,
  Teredo and NAT64 forms); the request goes to the checked address with TLS verifying the host
  name, so a second lookup cannot redirect it. Redirects are not followed.
  `SWITCHBOARD_HOOKS_ALLOW_PRIVATE=1` (tests only) lifts the address check and admits plain http.
- Retried with backoff (about 1 s, 5 s, 30 s, 2 min, 10 min, 30 min, 1 h; 8 attempts) on network
  errors, timeouts, 408, 429 and 5xx; other answers and refused targets fail at once.
- At most PER_HOOK requests in flight per hook and GLOBAL in all; each attempt times out.

- After ten notifications in a row end `failed`, the hook is disabled (`disabled_reason`
  `consecutive_failures`); its owner re-enables it (`POST …/hooks/{hook_id}/enable`,
  `switchboard hook enable ID`), which clears the failure count.

API. The routes under `/api/v1/endpoints/{slug}/hooks` (list, add → the secret shown once, remove,
enable, the delivery log) are operations of the human API's table (web/api/routes.py), validated by
its models and described by its OpenAPI document.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from standardwebhooks import Webhook

from .. import __version__
from ..core import hooks as core_hooks
from ..core.inputs import cut_utf8
from ..db.listen import ReadyListener
from ..runtime import Component, Runtime
from . import outbound
from .metrics import Metrics
from .outbox_sender import OutboxSender

log = logging.getLogger("switchboard.hooks")

RETRY_DELAYS: tuple[float, ...] = (1, 5, 30, 120, 600, 1800, 3600)  # after attempts 1..7; 8 attempts
PER_HOOK = 4
GLOBAL = 16
LEASE_SECONDS = 60.0
PRUNE_EVERY_SECONDS = 3600.0
KEEP_DAYS = 7
BODY_ORDER = ("type", "reason", "todo_id", "queue", "kind", "source", "title", "endpoint", "attempt",
              "attempts_total", "final_attempt", "created_at")
WAKING_VERBS = frozenset({"create", "complete", "fail", "release", "reap", "requeue", "retry", "revoke"})


def render_body(body: dict) -> str:
    """The JSON sent: fields in a stable order, compact, at most 4 KiB (summary, then title, cut)."""
    ordered = {k: body[k] for k in BODY_ORDER if k in body}
    ordered.update({k: v for k, v in body.items() if k not in ordered})

    def dump() -> str:
        return json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)

    text = dump()
    final = ordered.get("final_attempt")
    while len(text.encode("utf-8")) > core_hooks.BODY_MAX_BYTES:
        excess = len(text.encode("utf-8")) - core_hooks.BODY_MAX_BYTES
        if isinstance(final, dict) and final.get("summary"):
            keep = max(0, len(final["summary"].encode("utf-8")) - excess - 16)
            final["summary"], _ = cut_utf8(final["summary"], keep)
            final["summary_truncated"] = True
        elif ordered.get("title"):
            ordered["title"] = ordered["title"][: max(0, len(ordered["title"]) - excess - 8)]
        else:
            break
        text = dump()
    return text


class HookSender(OutboxSender):
    """Delivers `hook_outbox` rows: at most PER_HOOK at once to one hook, GLOBAL in all."""

    name = "hook-sender"
    in_flight_max = GLOBAL
    waking_verbs = WAKING_VERBS
    logger = log

    def __init__(self, runtime: Runtime, *, listener: ReadyListener | None = None,
                 metrics: Metrics | None = None) -> None:
        """`listener`: the runtime's LISTEN connection (wake-ups from other processes start a scan);
        `metrics`: where attempts and settled notifications are counted."""
        super().__init__(runtime, RETRY_DELAYS)
        self.listener = listener
        self.metrics = metrics
        self._next_prune = 0.0
        self._unlisten: Any = None

    async def start(self) -> None:
        if self.listener is not None:
            self._unlisten = self.listener.subscribe(on_batch=self.on_wakeups)
        await super().start()

    async def stop(self) -> None:
        if self._unlisten:
            self._unlisten()
        await super().stop()

    async def on_wakeups(self, batch: list[dict]) -> None:
        self._wake.set()  # a todo became ready in some process: its outbox rows are committed

    async def claim_due(self, limit: int, busy: list[Any]) -> list[dict]:
        return await core_hooks.claim_due(self.runtime.core, limit=limit, per_hook=PER_HOOK,
                                          lease_seconds=LEASE_SECONDS, busy=busy)

    async def next_due_in(self) -> float | None:
        return await core_hooks.next_due_in(self.runtime.core)

    def target(self, row: dict) -> Any:
        return row["hook_id"]

    async def after_pass(self) -> None:
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY_SECONDS
            await core_hooks.prune(self.runtime.core, days=KEEP_DAYS)

    async def send_once(self, row: dict) -> tuple[str, int | None, str | None, bool]:
        """One HTTP attempt: (result class, status code, error class, retry?)."""
        body = render_body(dict(row["body"]))
        now = datetime.now(UTC)
        headers = {
            "content-type": "application/json",
            "user-agent": f"switchboard/{__version__}",
            "webhook-id": row["message_id"],
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(row["secret"]).sign(row["message_id"], now, body),
        }
        outcome = await outbound.post(self._client, row["url"], body.encode("utf-8"), headers,
                                      allow_private=self.allow_private)
        return outcome.as_tuple()

    async def attempt(self, row: dict) -> str:
        """Send one claimed notification and settle it. Returns its state afterwards."""
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        result, status, error, retry = await self.send_once(row)
        duration_ms = int((time.perf_counter() - t0) * 1000)
        attempt = row["attempts"]
        state, retry_in = self.settle(result, retry, attempt)
        await core_hooks.record_attempt(
            self.runtime.core, outbox_id=row["id"], attempt=attempt, started_at=started, duration_ms=duration_ms,
            status_code=status, result=result, error=error, state=state, retry_in=retry_in)
        log.info("notify hook attempt", extra={
            "target": str(row["hook_id"]), "delivery": row["message_id"], "event": row["event"],
            "status": status if status is not None else result, "outcome": state, "latency_ms": duration_ms})
        if self.metrics is not None:
            self.metrics.hook_attempt(result)
            if state != "pending":
                self.metrics.hook_notification(row["event"], state)
        return state


def component(sender: HookSender) -> Component:
    """The sender's lifecycle; the hook routes of the human API are in web/api (its operation table)."""
    return Component(name="hooks", start=sender.start, stop=sender.stop)
