"""The front of `/mcp/<slug>`: every check an MCP request passes before the SDK sees it, in one ASGI
callable instead of a stack of middleware (one header scan, one closure per request).

Order: body cap (413) → Host and Origin (421 / 403, against DNS rebinding) → bearer credential (401,
the same body for missing, unknown, revoked and expired) → the credential's own slug (403) → the
endpoint's token bucket (429 with Retry-After) → the SDK's session manager. One log line per request.
"""

from __future__ import annotations

import json
import logging
import math
import time
from contextvars import ContextVar
from typing import Callable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import Settings
from ..core.models import Core
from .auth import CredentialCache

log = logging.getLogger("switchboard.mcp")

MAX_BODY_BYTES = 1024 * 1024
CALLER_KEY = "switchboard.caller"  # the EndpointCaller of an authenticated request, in the ASGI scope
LOOPBACK = ("127.0.0.1", "localhost", "::1")

# What the tool call of this request did (verb, todo id, outcome), filled in by the tool handler: the
# SDK hands the request's context to the handler, so a tools/call logs one line, not two.
CALL_FACTS: ContextVar[dict | None] = ContextVar("switchboard_mcp_call_facts", default=None)


def _body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":")).encode()


UNAUTHORIZED = _body("unauthorized", "a valid endpoint credential is required")
FORBIDDEN_SLUG = _body("forbidden", "this credential belongs to another endpoint")
TOO_LARGE = _body("too_large", f"request body over {MAX_BODY_BYTES} bytes")
BAD_HOST = _body("bad_host", "Host header not allowed")
BAD_ORIGIN = _body("bad_origin", "Origin header not allowed")
_JSON = (b"content-type", b"application/json")


async def _respond(send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    headers = [_JSON, (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def allowed_hostnames(settings: Settings) -> frozenset[str]:
    """Loopback, the configured bind host (unless a wildcard) and the host of SWITCHBOARD_BASE_URL."""
    names = set(LOOPBACK)
    if settings.host not in ("", "0.0.0.0", "::"):
        names.add(settings.host.lower())
    if settings.base_url:
        host = urlsplit(settings.base_url).hostname
        if host:
            names.add(host.lower())
    return frozenset(names)


def _hostname(value: str) -> str | None:
    """`host[:port]` or `[v6][:port]` → host, lower-case; None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (len(value) > end + 1 and value[end + 1] != ":"):
            return None
        return value[1:end]
    host, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return host or None


def _origin_hostname(origin: str) -> str | None:
    try:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):
            return None
        return parts.hostname
    except ValueError:
        return None


class RateLimiter:
    """One token bucket per endpoint: `rate` tokens a second, at most `burst` saved up."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._buckets: dict[object, list[float]] = {}

    def take(self, key: object) -> float:
        """0 when a token was taken; otherwise the seconds until one is available."""
        now = time.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = [self.burst - 1.0, now]
            return 0.0
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return 0.0
        bucket[0] = tokens
        return (1.0 - tokens) / self.rate


class Gateway:
    def __init__(self, app: ASGIApp, settings: Settings, core: Callable[[], Core],
                 credentials: CredentialCache) -> None:
        self.app = app
        self.core = core
        self.credentials = credentials
        self.hostnames = allowed_hostnames(settings)
        self.limiter = RateLimiter(settings.rate_limit_rps, settings.rate_limit_burst)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        slug = scope["path_params"].get("slug", "")
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        facts: dict = {}
        reset = CALL_FACTS.set(facts)
        try:
            await self._serve(scope, receive, watch, slug)
        finally:
            CALL_FACTS.reset(reset)
            log.info("tool call" if facts else "mcp request", extra={
                "method": scope["method"], "endpoint": slug, "status": status,
                "latency_ms": round((time.perf_counter() - started) * 1000, 2), **facts})

    async def _serve(self, scope: Scope, receive: Receive, send: Send, slug: str) -> None:
        length = host = origin = authorization = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"authorization":
                authorization = value
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await _respond(send, 413, TOO_LARGE)
            return
        if host is None or _hostname(host.decode("latin-1")) not in self.hostnames:
            await _respond(send, 421, BAD_HOST)
            return
        if origin is not None and _origin_hostname(origin.decode("latin-1")) not in self.hostnames:
            await _respond(send, 403, BAD_ORIGIN)
            return
        principal = None
        if authorization is not None and authorization[:7].lower() == b"bearer ":
            credential = authorization[7:].decode("latin-1").strip()
            principal = await self.credentials.resolve(self.core(), credential)
        if principal is None:
            await _respond(send, 401, UNAUTHORIZED, ((b"www-authenticate", b'Bearer realm="switchboard"'),))
            return
        if principal.slug != slug:
            await _respond(send, 403, FORBIDDEN_SLUG)
            return
        wait = self.limiter.take(principal.caller.endpoint_id)
        if wait:
            seconds = max(1, math.ceil(wait))
            await _respond(send, 429, _body("rate_limited", f"too many requests; retry after {seconds} s"),
                           ((b"retry-after", str(seconds).encode()),))
            return
        scope["user"] = principal.user
        scope[CALLER_KEY] = principal.caller
        await self.app(scope, receive, send)
