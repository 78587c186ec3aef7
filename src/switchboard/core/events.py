"""The hook bus: every committed transition is published once, after commit.

Transitions return what they did; the core hands an `Event` to `HookBus.publish` only once the
statement or transaction has committed, so a rolled-back change publishes nothing. Subscribers
(metrics, doorbell, notify hooks, the Board's live view, logs) are isolated: one that raises never
affects the transition or the others.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import shapes

log = logging.getLogger("switchboard.events")

# verb: what happened. ready: why the todo became claimable ("created", "released", "requeued",
# "retried") or None.
VERB_OUTCOMES = {
    "complete": "completed", "fail": "failed", "release": "released", "reap": "reaped",
    "cancel": "canceled", "revoke": "revoked",
}


@dataclass
class Event:
    verb: str
    todo: dict[str, Any]
    endpoint_id: str
    queue: str
    # The attempt the transition closed, as its statement returned it (a row of todo_attempts);
    # `closed_attempt` is its REQ-7 shape, made when a subscriber first asks for it: a batch of 100
    # closes publishes 100 events, and most subscribers read the outcome alone, if anything.
    closed_row: dict[str, Any] | None = None
    final_attempt: dict[str, Any] | None = None
    ready: str | None = None
    source: str | None = None
    team_id: str = ""  # a team todo's team (its endpoint_id is then "")
    # A claim on a queue under an admission policy: charged one unit (counted by the metrics).
    admission_charged: bool = False
    # `admission_deferred`: why the queue refused claims now (admission.REASONS).
    deferral_reason: str | None = None
    # A transition that dead-lettered a todo with no attempt open to close (a revocation of a todo
    # parked for retry): a dead letter whose last attempt the event does not carry.
    dead_lettered_without_attempt: bool = False
    _closed_shape: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def todo_id(self) -> str:
        return str(self.todo["id"])

    @property
    def closed_attempt(self) -> dict[str, Any] | None:
        """The closed attempt's REQ-7 entry (shapes.attempt), or None when the transition closed none."""
        if self._closed_shape is None and self.closed_row is not None:
            self._closed_shape = shapes.attempt(self.closed_row)
        return self._closed_shape

    @property
    def closed_outcome(self) -> str | None:
        """The closed attempt's outcome (None when none closed), without shaping the attempt."""
        return self.closed_row.get("outcome") if self.closed_row is not None else None

    @property
    def dead_lettered(self) -> bool:
        return self.final_attempt is not None or self.dead_lettered_without_attempt or (
            self.closed_row is not None and self.closed_row.get("disposition") == "dead_lettered")

    def as_dict(self) -> dict[str, Any]:
        out = {"verb": self.verb, "todo": self.todo, "endpoint_id": self.endpoint_id, "queue": self.queue}
        if self.final_attempt is not None:
            out["final_attempt"] = self.final_attempt
        if self.ready:
            out["ready"] = self.ready
        return out


def build(verb: str, row: dict[str, Any], closed_raw: dict[str, Any] | None = None, *, ready: str | None = None,
          source: str | None = None, todo: dict[str, Any] | None = None, todo_is_copy: bool = False,
          admission_charged: bool = False) -> Event:
    """Make the event of one committed transition from the returned todo row and closed attempt.
    `todo`: the row's compact shape when the caller already made it (the event keeps a copy, unless
    `todo_is_copy` says that the caller made it for events alone)."""
    final = None
    if closed_raw and closed_raw.get("disposition") == "dead_lettered":
        closed = shapes.attempt(closed_raw)
        final = {  # SPEC-0034 REQ-15
            "seq": closed["seq"], "outcome": closed["outcome"], "died": closed["died"],
            "summary": closed["summary"], "artifact": closed["artifact"],
            "attempts_total": row["attempts_total"],
        }
    endpoint_id = row.get("endpoint_id")
    team_id = row.get("team_id")
    shaped = (todo if todo_is_copy else dict(todo)) if todo is not None else shapes.compact(row)
    return Event(verb=verb, todo=shaped, endpoint_id=_text(endpoint_id) if endpoint_id else "",
                 queue=row["queue"], closed_row=closed_raw or None, final_attempt=final, ready=ready,
                 source=source, team_id=_text(team_id) if team_id else "", admission_charged=admission_charged)


@functools.lru_cache(maxsize=1024)
def _text(value: object) -> str:
    """str() of an endpoint's or team's id (a UUID): the events of one statement share a few."""
    return str(value)


Subscriber = Callable[[Event], Awaitable[None] | None]
BatchSubscriber = Callable[[Sequence[Event]], Awaitable[None] | None]


class HookBus:
    """Subscribers take each event (`subscribe`) or each publish's events at once (`subscribe_batch`:
    a bulk push publishes up to 1,000 in one call, and a subscriber that counts or wakes a loop does
    that once, not 1,000 times). Each sees the events of one publish in their order."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._batch_subscribers: list[BatchSubscriber] = []

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def subscribe_batch(self, fn: BatchSubscriber) -> Callable[[], None]:
        self._batch_subscribers.append(fn)
        return lambda: self._batch_subscribers.remove(fn) if fn in self._batch_subscribers else None

    async def publish(self, *events: Event) -> None:
        if not events:
            return
        for batch_fn in list(self._batch_subscribers):
            await _deliver(batch_fn, events, events[0].verb)
        for event in events:
            for fn in list(self._subscribers):
                await _deliver(fn, event, event.verb)


async def _deliver(fn: Callable[[Any], Awaitable[None] | None], arg: Any, verb: str) -> None:
    """Call one subscriber; a subscriber never breaks a committed transition."""
    try:
        res = fn(arg)
        if inspect.isawaitable(res):
            await res
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("event subscriber failed", extra={"verb": verb})
