"""Open file descriptors: each held MCP connection (a GET notification stream, a listen stream, a
keep-alive POST connection) is one, and the process must refuse new ones clearly before the
operating system refuses them for it.

- `raise_soft_limit()` lifts the soft `RLIMIT_NOFILE` to the hard limit when the MCP surface starts
  (Debian's default soft limit is 1,024; systemd's LimitNOFILE sets the hard one).
- `DescriptorGuard` answers `503` with `Retry-After` and `{"error": {"code": "too_many_connections",
  …}}` to requests that would hold a new descriptor (an `initialize`, a 2026-era request, a GET
  stream) once the open descriptors reach the limit minus a reserve (`RESERVE_FRACTION` of it, at
  least `RESERVE_MIN`), which is left for the database pool, the LISTEN connection, logs, the Board
  and requests of sessions already open. Counting reads `/proc/self/fd` at most every
  `RECOUNT_SECONDS`; between counts each admitted request counts as one more descriptor (an
  overestimate: a session's `initialize` and its GET stream usually share one connection), so before
  refusing, the open descriptors are counted again (at most every `REFUSAL_RECOUNT_SECONDS`).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import time

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("switchboard.mcp")

RESERVE_FRACTION = 0.05
RESERVE_MIN = 64
RECOUNT_SECONDS = 0.25
REFUSAL_RECOUNT_SECONDS = 0.02


def raise_soft_limit() -> tuple[int, int]:
    """Lift the soft descriptor limit to the hard one; returns (soft, hard) as they are afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("could not raise the open-file limit", extra={"soft": soft, "hard": hard})
    return soft, hard


def open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no procfs: count nothing, refuse nothing
        return 0


class DescriptorGuard:
    """ASGI front of `/mcp/<slug>`: refuses new held connections near the descriptor limit."""

    def __init__(self, app: ASGIApp, limit: int | None = None) -> None:
        self.app = app
        if limit is None:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.limit = limit if limit != resource.RLIM_INFINITY else 1 << 30
        self.ceiling = self.limit - max(RESERVE_MIN, int(self.limit * RESERVE_FRACTION))
        self.refused = 0
        self._count = 0
        self._counted_at = float("-inf")

    def _near_limit(self) -> bool:
        now = time.monotonic()
        since = now - self._counted_at
        if since >= RECOUNT_SECONDS or (self._count + 1 >= self.ceiling and since >= REFUSAL_RECOUNT_SECONDS):
            self._count = open_descriptors()
            self._counted_at = now
        else:
            self._count += 1
        return self._count >= self.ceiling

    def _opens_one(self, scope: Scope) -> bool:
        """A GET stream, or a request that is not part of a session already open."""
        if scope["method"] == "GET":
            return True
        return not any(name == b"mcp-session-id" for name, _ in scope["headers"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._opens_one(scope) and self._near_limit():
            self.refused += 1
            body = json.dumps({"error": {"code": "too_many_connections", "message": (
                f"this server holds {self._count} open files of its limit of {self.limit}; "
                "retry later or through another process")}}, separators=(",", ":")).encode()
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("new MCP connection refused: near the open-file limit",
                            extra={"event": "descriptors_near_limit", "open": self._count, "limit": self.limit,
                                   "refused": self.refused})
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"), (b"retry-after", b"5")]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
