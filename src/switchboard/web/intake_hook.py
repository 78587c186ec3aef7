"""`POST /webhooks/w/{token}`: where other systems deliver webhooks to an intake (docs/intake.md).

In order: the body is read within BODY_MAX_BYTES (413 past it, before anything else), the URL's
token is rate limited (RATE per second, BURST at once; 429), the intake is looked up by the token's
hash, and the delivery is verified over the raw bytes for the intake's source kind, every compare in
constant time:

- `github`: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`; the event and delivery id
  from `X-GitHub-Event` and `X-GitHub-Delivery`. GitHub's `ping` is answered without routing.
- `standard`: Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`) checked by
  the `standardwebhooks` library, with its five-minute timestamp tolerance; the delivery id is
  `webhook-id`, the event the body's `type`.
- `hmac`: `X-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>` with
  `X-Signature-Timestamp: <unix seconds>` within TOLERANCE_SECONDS of now.
- `bearer`: `Authorization: Bearer <secret>`.
  For both, `X-Event` and `X-Delivery` carry the event and the delivery id when the sender has them.

An unknown token, a disabled intake and a failed verification get the same 401 body; a failed
verification also counts against the intake and logs one line (never the body). A verified delivery
goes to `core.intakes.deliver`: 202 with `accepted`, `duplicate` or `quarantined`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, Counter
from standardwebhooks.webhooks import Webhook
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import REQUEST_BODY_MAX_BYTES
from ..core import intakes
from ..core.errors import NotFound
from ..core.models import Core
from ..runtime import Component, Runtime

log = logging.getLogger("switchboard.intake")

BODY_MAX_BYTES = REQUEST_BODY_MAX_BYTES  # 1 MiB
RATE, BURST = 10.0, 20.0                 # per intake URL
TOLERANCE_SECONDS = 300                  # the generic HMAC's timestamp window (Standard Webhooks' own)
LIMITER_MAX_KEYS = 10_000
PRUNE_SECONDS = 300
NO_STORE = {"Cache-Control": "no-store"}
REFUSED = {"error": {"code": "unauthorized", "message": "delivery not verified"}}

# The request headers the rules may read (`headers.<name>`), per source kind. Never a signature or
# an Authorization header.
_COMMON = ("content-type", "user-agent")
SELECTED_HEADERS = {
    "github": ("x-github-event", "x-github-delivery", "x-github-hook-id",
               "x-github-hook-installation-target-id", "x-github-hook-installation-target-type", *_COMMON),
    "standard": ("webhook-id", "webhook-timestamp", *_COMMON),
    "hmac": ("x-event", "x-delivery", "x-signature-timestamp", *_COMMON),
    "bearer": ("x-event", "x-delivery", *_COMMON),
}


class VerifyFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ------------------------------------------------------------------------------------ verification

def _header_bytes(value: str | None) -> bytes:
    return (value or "").encode("latin-1", "replace")


def github_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def hmac_signature(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body,
                                hashlib.sha256).hexdigest()


def verify(source: str, secret: str, headers: Any, body: bytes, *, now: float | None = None) -> tuple[Any, Any]:
    """Check one delivery; returns (event, delivery id) or raises VerifyFailed(reason)."""
    if source == "github":
        given = headers.get("x-hub-signature-256")
        if not given:
            raise VerifyFailed("missing_signature")
        if not hmac.compare_digest(_header_bytes(given), github_signature(secret, body).encode("ascii")):
            raise VerifyFailed("bad_signature")
        return headers.get("x-github-event"), headers.get("x-github-delivery")
    if source == "standard":
        try:
            Webhook(secret).verify(body, {k: headers.get(k, "") for k in
                                          ("webhook-id", "webhook-timestamp", "webhook-signature")},
                                   json_parse=False)
        except Exception as exc:  # the library's own error, or a malformed header it could not split
            text = str(exc).lower()
            raise VerifyFailed("stale_timestamp" if "too old" in text or "too new" in text
                               else "bad_signature") from None
        return None, headers.get("webhook-id")
    if source == "hmac":
        given, stamp = headers.get("x-signature"), headers.get("x-signature-timestamp")
        if not given or not stamp:
            raise VerifyFailed("missing_signature")
        if not stamp.isdigit() or len(stamp) > 12:
            raise VerifyFailed("malformed_signature")
        current = time.time() if now is None else now
        if abs(current - int(stamp)) > TOLERANCE_SECONDS:
            raise VerifyFailed("stale_timestamp")
        if not hmac.compare_digest(_header_bytes(given), hmac_signature(secret, stamp, body).encode("ascii")):
            raise VerifyFailed("bad_signature")
        return headers.get("x-event"), headers.get("x-delivery")
    if source == "bearer":
        auth = headers.get("authorization") or ""
        if auth[:7].lower() != "bearer ":
            raise VerifyFailed("missing_signature")
        given_hash = hashlib.sha256(_header_bytes(auth[7:].strip())).digest()
        if not hmac.compare_digest(given_hash, hashlib.sha256(secret.encode("utf-8")).digest()):
            raise VerifyFailed("bad_signature")
        return headers.get("x-event"), headers.get("x-delivery")
    raise VerifyFailed("unsupported_source")


# ---------------------------------------------------------------------------------- the document

def _clean(value: Any) -> Any:
    """What jsonb can hold: no NUL characters and no lone surrogates, in keys or values."""
    if isinstance(value, str):
        return value.replace("\x00", "").encode("utf-8", "ignore").decode("utf-8")
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def parse_body(body: bytes, content_type: str) -> Any:
    """The parsed JSON body; GitHub's form encoding (`payload=<json>`) too; other bodies as text."""
    try:
        if content_type.split(";")[0].strip().lower() == "application/x-www-form-urlencoded":
            form = parse_qs(body.decode("utf-8"), max_num_fields=100)
            if "payload" in form:
                return _clean(json.loads(form["payload"][0]))
        return _clean(json.loads(body))
    except (ValueError, RecursionError, UnicodeDecodeError):
        return _clean(body.decode("utf-8", "replace"))


def document(source: str, headers: Any, body: bytes, event: Any, delivery: Any) -> dict:
    parsed = parse_body(body, headers.get("content-type") or "")
    if source == "standard" and event is None and isinstance(parsed, dict) and isinstance(parsed.get("type"), str):
        event = parsed["type"]
    selected = {name: _clean(headers[name]) for name in SELECTED_HEADERS[source] if name in headers}
    return {"event": _clean(event) if isinstance(event, str) else None,
            "delivery": _clean(delivery) if isinstance(delivery, str) and delivery else None,
            "headers": selected, "body": parsed}


# ---------------------------------------------------------------------------------- rate limiting

class TokenBuckets:
    """Per-URL token buckets in memory (RATE per second, BURST at once), at most LIMITER_MAX_KEYS."""

    def __init__(self, rate: float = RATE, burst: float = BURST) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()

    def take(self, key: bytes, now: float | None = None) -> bool:
        t = time.monotonic() if now is None else now
        tokens, last = self._buckets.pop(key, (self.burst, t))
        tokens = min(self.burst, tokens + (t - last) * self.rate)
        ok = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if ok else tokens, t)
        while len(self._buckets) > LIMITER_MAX_KEYS:
            self._buckets.popitem(last=False)
        return ok


# ---------------------------------------------------------------------------------------- the route

class IntakeReceiver:
    def __init__(self, runtime: Runtime, registry: CollectorRegistry | None = None) -> None:
        self.runtime = runtime
        self.buckets = TokenBuckets()
        self.deliveries = Counter("switchboard_intake_deliveries", "Webhook intake deliveries by verdict.",
                                  ["source", "verdict"], registry=registry)
        self.verify_failures = Counter("switchboard_intake_verify_failures",
                                       "Webhook intake deliveries refused by verification.",
                                       ["source", "reason"], registry=registry)

    async def _body(self, request: Request) -> bytes | None:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > BODY_MAX_BYTES):
            return None
        raw = bytearray()
        async for chunk in request.stream():
            raw.extend(chunk)
            if len(raw) > BODY_MAX_BYTES:
                return None
        return bytes(raw)

    def _refuse(self, source: str, reason: str, intake: str | None) -> Response:
        self.deliveries.labels(source, "rejected").inc()
        self.verify_failures.labels(source, reason).inc()
        # Whitelisted log keys only (logs.SAFE_KEYS): the intake as `target`, never the body or a header.
        log.warning("intake delivery refused", extra={"event": "intake.refused", "target": intake,
                                                      "reason": f"{source}:{reason}"})
        return JSONResponse(REFUSED, status_code=401, headers=NO_STORE)

    async def receive(self, request: Request) -> Response:
        token = request.path_params["token"]
        body = await self._body(request)
        if body is None:
            return JSONResponse({"error": {"code": "too_large",
                                           "message": f"delivery body over {BODY_MAX_BYTES} bytes"}},
                                status_code=413, headers=NO_STORE)
        if not self.buckets.take(hashlib.sha256(token.encode("utf-8", "replace")).digest()):
            return JSONResponse({"error": {"code": "rate_limited", "message": "too many deliveries; retry later"}},
                                status_code=429, headers={**NO_STORE, "Retry-After": "1"})
        core: Core = self.runtime.core
        intake = await intakes.by_token(core, token)
        if intake is None:
            return self._refuse("unknown", "unknown_intake", None)
        source = intake["source"]
        try:
            event, delivery = verify(source, intake["secret"], request.headers, body)
        except VerifyFailed as failed:
            await intakes.count_verify_failure(core, intake["id"])
            return self._refuse(source, failed.reason, str(intake["id"]))
        if source == "github" and event == "ping":
            self.deliveries.labels(source, "ping").inc()
            return JSONResponse({"status": "pong"}, headers=NO_STORE)
        try:
            outcome = await intakes.deliver(core, intake, document(source, request.headers, body, event, delivery))
        except NotFound:  # removed while this delivery was being routed
            return self._refuse("unknown", "unknown_intake", None)
        self.deliveries.labels(source, outcome["status"]).inc()
        answer = {k: outcome[k] for k in ("status", "todo_id") if k in outcome}
        return JSONResponse(answer, status_code=202, headers=NO_STORE)


def component(receiver: IntakeReceiver) -> Component:
    next_prune = [0.0]

    async def tick(core: Core) -> None:  # quarantine and seen-id retention, at most every PRUNE_SECONDS
        if time.monotonic() >= next_prune[0]:
            next_prune[0] = time.monotonic() + PRUNE_SECONDS
            await intakes.prune(core)

    return Component(name="intake", routes=[Route("/webhooks/w/{token}", receiver.receive, methods=["POST"])],
                     on_tick=tick)

