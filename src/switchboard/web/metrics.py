"""Prometheus metrics at `GET /metrics` (SYSTEM.md §10, SPEC-0034 REQ-14).

- Auth: `Authorization: Bearer <SWITCHBOARD_METRICS_TOKEN>` (at least 32 bytes). Unset, missing or
  wrong: 401 with an empty body. Both sides are SHA-256 hashed and compared in constant time.
- Counters are driven by the hook bus, after commit, from what this process committed, and by the
  metric spool (`core/metric_spool.py`, migration 0012): what processes without /metrics (the local
  CLI) committed, taken on every sweep tick and before every scrape, each fact by one serving
  process only, so the sum over serving processes counts every transition once:
  `switchboard_todos_created_total{queue,source}`, `switchboard_todos_claimed_total{queue}`,
  `switchboard_todos_completed_total{queue,outcome}` (outcome complete|fail),
  `switchboard_lease_expired_total{queue}` and `switchboard_todo_attempts_closed_total{queue,outcome}`.
  Every attempt closed `lease_expired` (a takeover) or `reaped` is exactly one lease-expiry increment.
- Gauges are read from the database at scrape time: `switchboard_queue_todos{queue,state}` and
  `switchboard_queue_oldest_pending_seconds{queue}`; a failed read omits them and counts
  `switchboard_metrics_collection_errors_total{collector="queue"}`.
- `switchboard_mcp_request_duration_seconds{verb,outcome}`: the composition root (`web/app.py`) hands
  `Metrics.observe_tool_call(verb, seconds, outcome)` to the MCP server.
- The `queue` label admits at most 50 distinct values per process (sticky, shared by every family);
  later ones, and empty, overlong or reserved values, are `__other__`. Aggregates only: no todo ids,
  summaries, artifacts or claimants ever become labels.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import threading
from collections.abc import Callable, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core import gauges, metric_spool
from ..core.events import Event
from ..core.models import VERBS
from ..runtime import Component, Runtime

log = logging.getLogger("switchboard.metrics")

OTHER = "__other__"
QUEUE_LABEL_CAP = 50
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_IN_FLIGHT = 4
_BOUNDED = re.compile(r"^[a-z0-9_-]{1,32}$")
ATTEMPT_OUTCOMES = ("completed", "failed", "released", "lease_expired", "reaped", "canceled", "revoked")
DIED = ("lease_expired", "reaped")
HOLDER_ENDS = {"completed": "complete", "failed": "fail"}  # attempt outcome -> completed_total outcome


class LabelLimiter:
    """The first `cap` distinct values keep their name for the life of the process; the rest fold
    into `__other__`. Empty values, `__other__` itself and values over 128 bytes never take a slot."""

    def __init__(self, cap: int = QUEUE_LABEL_CAP) -> None:
        self.cap = cap
        self._admitted: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        if not isinstance(value, str) or not value or value == OTHER or len(value.encode("utf-8", "replace")) > 128:
            return OTHER
        if value in self._admitted:
            return value
        with self._lock:
            if value in self._admitted:
                return value
            if len(self._admitted) >= self.cap:
                return OTHER
            self._admitted.add(value)
            return value


def bounded(value: object) -> str:
    """A label from a small vocabulary (source, verb): `[a-z0-9_-]{1,32}` or `__other__`."""
    return value if isinstance(value, str) and _BOUNDED.match(value) else OTHER


class _QueueGauges(Collector):
    """Live todos per queue and state, read at scrape. Filled by `Metrics.refresh` just before
    generation (the read is async; prometheus_client collectors are not)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self):
        snap = self.metrics.snapshot
        if snap is None:
            return
        counts, oldest = snap
        todos = GaugeMetricFamily("switchboard_queue_todos", "Live todos by queue and state, read at scrape.",
                                  labels=["queue", "state"])
        for (queue, state), n in sorted(counts.items()):
            todos.add_metric([queue, state], n)
        yield todos
        age = GaugeMetricFamily("switchboard_queue_oldest_pending_seconds",
                                "Age of the oldest pending todo per queue (0 when none is pending).",
                                labels=["queue"])
        for queue, seconds in sorted(oldest.items()):
            age.add_metric([queue], seconds)
        yield age
        statuses, deferred = self.metrics.admission_snapshot
        policies = GaugeMetricFamily("switchboard_admission_policies",
                                     "Admission policies by queue and status, read at scrape (SPEC-0030).",
                                     labels=["queue", "status"])
        for (queue, status), n in sorted(statuses.items()):
            policies.add_metric([queue, status], n)
        yield policies
        held = GaugeMetricFamily("switchboard_admission_deferred_todos",
                                 "Pending todos on queues admission control holds back, by reason.",
                                 labels=["queue", "reason"])
        for (queue, reason), n in sorted(deferred.items()):
            held.add_metric([queue, reason], n)
        yield held

    def describe(self):
        return []


class Metrics:
    """One registry per app: counters fed by the hook bus, gauges read at scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.queue = LabelLimiter()
        r = self.registry
        self.created = Counter("switchboard_todos_created_total", "Todos created (idempotent repeats excluded).",
                               ["queue", "source"], registry=r)
        self.claimed = Counter("switchboard_todos_claimed_total", "Claims committed (each opens an attempt).",
                               ["queue"], registry=r)
        self.completed = Counter("switchboard_todos_completed_total",
                                 "Leases ended by their holder: outcome complete or fail.",
                                 ["queue", "outcome"], registry=r)
        self.lease_expired = Counter("switchboard_lease_expired_total",
                                     "Lapsed leases: each attempt closed lease_expired (takeover) or reaped.",
                                     ["queue"], registry=r)
        self.attempts_closed = Counter("switchboard_todo_attempts_closed_total",
                                       "Attempts closed, by outcome (SPEC-0034 REQ-14).",
                                       ["queue", "outcome"], registry=r)
        self.collection_errors = Counter("switchboard_metrics_collection_errors_total",
                                         "Scrape-time collectors that failed.", ["collector"], registry=r)
        self.collection_errors.labels("queue")
        self.collection_errors.labels("spool")
        self.tool_latency = Histogram("switchboard_mcp_request_duration_seconds",
                                      "MCP tool call latency by verb and outcome.", ["verb", "outcome"],
                                      buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5),
                                      registry=r)
        self.rings = Counter("switchboard_doorbell_notifications_total",
                             "Doorbell notifications sent to live MCP sessions.", registry=r)
        self.hook_attempts = Counter("switchboard_notify_hook_attempts_total",
                                     "Notify hook delivery attempts by result class.", ["result"], registry=r)
        self.hook_notifications = Counter("switchboard_notify_hook_notifications_total",
                                          "Notify hook notifications settled.", ["type", "outcome"], registry=r)
        self.admission_charged = Counter("switchboard_admission_charged_total",
                                         "Claims charged to an admission policy (SPEC-0030).", ["queue"], registry=r)
        self.admission_refusals = Counter("switchboard_admission_refusals_total",
                                          "Claims admission control deferred, by reason.", ["queue", "reason"],
                                          registry=r)
        self.snapshot: tuple[dict, dict] | None = None
        self.admission_snapshot: tuple[dict, dict] = ({}, {})
        self._gauges = _QueueGauges(self)
        r.register(self._gauges)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)

    # ------------------------------------------------------------------------------ the bus

    def on_event(self, ev: Event) -> None:
        verb = ev.verb
        if verb in ("heartbeat", "request_input", "provide_input", "endpoint_revoked"):
            return
        queue = self.queue(ev.queue)
        if verb == "admission_deferred":
            self.admission_refusals.labels(queue, bounded(ev.deferral_reason or "")).inc()
            return
        if ev.admission_charged:
            self.admission_charged.labels(queue).inc()
        if verb == "create":
            self.created.labels(queue, bounded(ev.source or "unknown")).inc()
        elif verb == "claim":
            self.claimed.labels(queue).inc()
        elif verb == "complete":
            self.completed.labels(queue, "complete").inc()
        elif verb == "fail":
            self.completed.labels(queue, "fail").inc()
        outcome = ev.closed_outcome
        if outcome:
            self._closed(queue, outcome)

    def on_events(self, events: Sequence[Event]) -> None:
        """The bus's batch form: a bulk push's `create` events are counted once per queue and source."""
        created: dict[tuple[str, str], int] = {}
        for ev in events:
            if ev.verb == "create" and ev.closed_row is None and not ev.admission_charged:
                key = (ev.queue, ev.source or "unknown")
                created[key] = created.get(key, 0) + 1
            else:
                self.on_event(ev)
        for (queue, source), n in created.items():
            self.created.labels(self.queue(queue), bounded(source)).inc(n)

    def _closed(self, queue: str, outcome: str, n: int = 1) -> None:
        self.attempts_closed.labels(queue, outcome if outcome in ATTEMPT_OUTCOMES else OTHER).inc(n)
        if outcome in DIED:
            self.lease_expired.labels(queue).inc(n)

    def count_spooled(self, facts: list[metric_spool.Fact]) -> None:
        """Count what processes without /metrics committed (taken from the spool by this process):
        the same families and labels as `on_event`. A holder's complete or fail is the attempt
        closing `completed` or `failed`, which is what those verbs do and nothing else does."""
        for f in facts:
            queue = self.queue(f.queue)
            if f.kind == "created":
                self.created.labels(queue, bounded(f.label or "unknown")).inc(f.n)
            elif f.kind == "claimed":
                self.claimed.labels(queue).inc(f.n)
            elif f.kind == "closed":
                if f.label in HOLDER_ENDS:
                    self.completed.labels(queue, HOLDER_ENDS[f.label]).inc(f.n)
                self._closed(queue, f.label, f.n)

    async def drain(self, core) -> None:
        """Take the spool's rows and count them here (each row is counted by one process only)."""
        try:
            facts = await metric_spool.take(core)
        except Exception:
            log.warning("metric spool unavailable", extra={"event": "metrics_collector_failed"})
            self.collection_errors.labels("spool").inc()
            return
        self.count_spooled(facts)

    # ------------------------------------------------------------------------ other surfaces

    def observe_tool_call(self, verb: str, seconds: float, outcome: str = "ok") -> None:
        self.tool_latency.labels(verb if verb in VERBS else OTHER, bounded(outcome)).observe(max(seconds, 0.0))

    def doorbell_rings(self, notifications: int) -> None:
        self.rings.inc(notifications)

    def hook_attempt(self, result: str) -> None:
        self.hook_attempts.labels(bounded(result)).inc()

    def hook_notification(self, event: str, outcome: str) -> None:
        self.hook_notifications.labels(event if event.startswith("todo.") and len(event) < 32 else OTHER,
                                       bounded(outcome)).inc()

    # -------------------------------------------------------------------------------- scrape

    async def refresh(self, core) -> None:
        try:
            rows, scoped, policies = await gauges.queue_states(core)
        except Exception:
            log.warning("queue gauges unavailable", extra={"event": "metrics_collector_failed"})
            self.collection_errors.labels("queue").inc()
            self.snapshot = None
            return
        counts: dict[tuple[str, str], float] = {}
        oldest: dict[str, float] = {}
        for q in {*(r["queue"] for r in rows), *scoped}:
            name = self.queue(q)
            oldest.setdefault(name, 0.0)
            for state in gauges.GAUGE_STATES:
                counts.setdefault((name, state), 0)
        for r in rows:
            name = self.queue(r["queue"])
            counts[(name, r["state"])] += r["n"]  # folded queues are summed
            if r["state"] == "pending":
                oldest[name] = max(oldest[name], float(r["oldest_seconds"]))  # and their age is the max
        statuses: dict[tuple[str, str], float] = {}
        deferred: dict[tuple[str, str], float] = {}
        for p in policies:
            name = self.queue(p["queue"])
            statuses[(name, p["status"])] = statuses.get((name, p["status"]), 0) + 1
            if p["status"] != "open":
                deferred[(name, p["status"])] = deferred.get((name, p["status"]), 0) + p["pending"]
        self.admission_snapshot = (statuses, deferred)
        self.snapshot = (counts, oldest)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


class MetricsSurface:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.metrics = Metrics()
        token = (runtime.settings.metrics_token or "").strip()
        self._token_digest = _digest(token) if token else None
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._render = asyncio.Lock()
        self._unsubscribe: Callable[[], object] | None = None

    def _authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        presented = presented.strip()
        if self._token_digest is None or scheme.lower() != "bearer" or not presented:
            return False
        return hmac.compare_digest(_digest(presented), self._token_digest)

    async def scrape(self, request: Request) -> Response:
        if not self._authorized(request):
            return Response(b"", status_code=401,
                            headers={"WWW-Authenticate": 'Bearer realm="switchboard-metrics"',
                                     "Cache-Control": "no-store"})
        if self._in_flight.locked():
            return Response(b"", status_code=503, headers={"Retry-After": "1", "Cache-Control": "no-store"})
        async with self._in_flight, self._render:
            await self.metrics.drain(self.runtime.core)
            await self.metrics.refresh(self.runtime.core)
            body = self.metrics.render()
        return Response(body, media_type=None, headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})

    async def start(self) -> None:
        self._unsubscribe = self.runtime.core.bus.subscribe_batch(self.metrics.on_events)

    async def stop(self) -> None:
        if self._unsubscribe:
            self._unsubscribe()


def component(surface: MetricsSurface) -> Component:
    return Component(name="metrics", routes=[Route("/metrics", surface.scrape, methods=["GET"])],
                     start=surface.start, stop=surface.stop, on_tick=surface.metrics.drain)
