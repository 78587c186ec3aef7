"""The front of `/mcp/<slug>`: every check an MCP request passes before the SDK sees it, in one ASGI
callable instead of a stack of middleware (one header scan, one closure per request).

Order: body cap (413) → Host and Origin (421 / 403, against DNS rebinding) → bearer credential (401,
the same body for missing, unknown, revoked and expired) → the credential's own slug (403) → the
endpoint's token bucket (429 with Retry-After) → room for a new session within the endpoint's cap
(`SessionCap`: its least recently used idle session ends; 503 when all are busy) → the SDK's session
manager. One log line per request. The Host allow-list and the one-credential rule run before any of
this, for the whole app (`web/hosts.py`); the Host check here is the same rule (`hostnames.py`), kept
for defence in depth.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from contextvars import ContextVar

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import REQUEST_BODY_MAX_BYTES, Settings
from ..core.errors import Unavailable
from ..core.models import Core
from ..hostnames import allowed_hostnames, host_allowed, origin_hostname
from .auth import CredentialCache
from .sessions import SessionCap

log = logging.getLogger("switchboard.mcp")

MAX_BODY_BYTES = REQUEST_BODY_MAX_BYTES
MAX_KNOWN_HOSTS = 256
CALLER_KEY = "switchboard.caller"  # the EndpointCaller of an authenticated request, in the ASGI scope

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
        self._known_hosts: set[bytes] = set()  # exact Host values found allowed (bounded), as in web/hosts.py
        self.limiter = RateLimiter(settings.rate_limit_rps, settings.rate_limit_burst)
        self.base_url = settings.public_base_url  # the 401 names the endpoint's OAuth metadata (RFC 9728)
        manager = getattr(app, "session_manager", None)  # the SDK's StreamableHTTPASGIApp
        self.sessions_cap = (SessionCap(manager, settings.mcp_max_sessions_per_endpoint)
                             if manager is not None else None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        slug = scope["path_params"].get("slug", "")
        status = 0
        gone = False  # the client left before an answer began (a body cut short, a closed socket)

        async def watch(message: Message) -> None:
            nonlocal status
            if gone and status == 0:
                return  # nobody to answer: whatever the SDK makes of the cut-short request is not logged as its status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        async def listen() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect" and status == 0:
                gone = True
            return message

        facts: dict = {}
        reset = CALL_FACTS.set(facts)
        try:
            await self._serve(scope, listen, watch, slug)
        except asyncio.CancelledError:
            gone = True  # the server ends a request whose client left before its answer (web/transport.py)
            raise
        finally:
            CALL_FACTS.reset(reset)
            extra = {"method": scope["method"], "endpoint": slug, "status": 499 if gone and status == 0 else status,
                     "latency_ms": round((time.perf_counter() - started) * 1000, 2), **facts}
            if gone and status == 0:
                extra["reason"] = "client_disconnect"
            log.info("tool call" if facts else "mcp request", extra=extra)

    def challenge(self, slug: str) -> bytes:
        """`WWW-Authenticate` of a 401: where an OAuth-only host finds how to authorize (docs/mcp.md)."""
        if not slug.isalnum() or not slug.isascii() or len(slug) > 64:
            return b'Bearer realm="switchboard"'
        metadata = f"{self.base_url}/.well-known/oauth-protected-resource/mcp/{slug}"
        return f'Bearer realm="switchboard", resource_metadata="{metadata}"'.encode()

    async def _serve(self, scope: Scope, receive: Receive, send: Send, slug: str) -> None:
        length = host = origin = authorization = session_id = version = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = value
            elif name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"authorization":
                authorization = value
            elif name == b"mcp-session-id":
                session_id = value
            elif name == b"mcp-protocol-version":
                version = value
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            await _respond(send, 413, TOO_LARGE)
            return
        if host not in self._known_hosts:  # the app's front door checked it already
            if not host_allowed(host, self.hostnames):
                await _respond(send, 421, BAD_HOST)
                return
            if host is not None and len(self._known_hosts) < MAX_KNOWN_HOSTS:
                self._known_hosts.add(host)
        if origin is not None and origin_hostname(origin.decode("latin-1")) not in self.hostnames:
            await _respond(send, 403, BAD_ORIGIN)
            return
        principal = None
        if authorization is not None and authorization[:7].lower() == b"bearer ":
            credential = authorization[7:].decode("latin-1").strip()
            try:
                named = session_id.decode("latin-1")[:128] if session_id and scope["method"] == "POST" else None
                principal = await self.credentials.resolve(self.core(), credential, named)
            except Unavailable as exc:
                await _respond(send, 503, _body(exc.code, exc.message), ((b"retry-after", b"1"),))
                return
        if principal is None:
            await _respond(send, 401, UNAUTHORIZED, ((b"www-authenticate", self.challenge(slug)),))
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
        cap = self.sessions_cap
        if cap is None:
            await self.app(scope, receive, send)
            return
        if session_id is None:
            if (scope["method"] == "POST"
                    and (version is None or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS)
                    and not await cap.make_room(str(principal.caller.endpoint_id))):
                await _respond(send, 503, _body(
                    "too_many_sessions", f"this endpoint has {cap.limit} live MCP sessions, all busy; end one "
                    "(DELETE with its Mcp-Session-Id) or retry later"), ((b"retry-after", b"5"),))
                return
            await self.app(scope, receive, send)
            return
        sid = session_id.decode("latin-1")[:128]
        cap.enter(sid)
        try:
            await self.app(scope, receive, send)
        finally:
            cap.leave(sid)
