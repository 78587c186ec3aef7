"""The front door of the whole app: checks every HTTP request passes before any routing.

Outermost ASGI wrapper, one header scan per request:

- **Host allow-list** (against DNS rebinding): the `Host` must name loopback (`localhost`,
  `127.0.0.1`, `[::1]`), the configured bind address (unless a wildcard) or the host of
  `SWITCHBOARD_BASE_URL`; any port. Anything else, a missing Host or more than one gets 421 before a
  route, a redirect (`/mcp/<slug>/` → `/mcp/<slug>`) or a page could be built from it. The MCP gateway
  applies the same rule (`host_allowed`) to the `Origin` header.
- **One credential per request**: a request carrying more than one `Authorization` header is refused
  with 400 (otherwise which one counts would depend on the framework reading them).

Both refusals are JSON `{"error": {"code", "message"}}` with `Cache-Control: no-store`.
"""

from __future__ import annotations

import json
import logging

from starlette.types import ASGIApp, Receive, Scope, Send

from ..config import Settings
from ..hostnames import allowed_hostnames, host_allowed
from ..runtime import Component

log = logging.getLogger("switchboard.web")

def _body(code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}, separators=(",", ":")).encode()


BAD_HOST = _body("bad_host", "Host header not allowed")
TWO_CREDENTIALS = _body("invalid", "more than one Authorization header")


async def refuse(send: Send, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


MAX_KNOWN_HOSTS = 256  # exact Host values already found allowed, remembered so the next parse is skipped


class KnownHosts:
    """The Host rule (`hostnames.host_allowed`) with the exact header values it allowed remembered: a
    served request's Host is one set lookup. Only allowed values are kept, at most MAX_KNOWN_HOSTS
    (many ports of one allowed name cannot grow it further; past the bound values are parsed again)."""

    def __init__(self, hostnames: frozenset[str]) -> None:
        self.hostnames = hostnames
        self._known: set[bytes] = set()

    def allowed(self, value: bytes | None) -> bool:
        if value in self._known:
            return True
        if not host_allowed(value, self.hostnames):
            return False
        if len(self._known) < MAX_KNOWN_HOSTS and value is not None:
            self._known.add(value)
        return True


class FrontDoor:
    """ASGI middleware: the Host allow-list and the one-credential rule, before routing."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.hostnames = allowed_hostnames(settings)
        self.hosts = KnownHosts(self.hostnames)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and kind != "websocket":
            await self.app(scope, receive, send)
            return
        host = None
        hosts = authorizations = 0
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
                hosts += 1
            elif name == b"authorization":
                authorizations += 1
        if hosts != 1 or not self.hosts.allowed(host):
            log.warning("request refused", extra={"reason": "bad_host", "status": 421, "path": scope["path"][:128]})
            if scope["type"] == "http":
                await refuse(send, 421, BAD_HOST)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        if authorizations > 1:
            log.warning("request refused", extra={"reason": "two_credentials", "status": 400,
                                                  "path": scope["path"][:128]})
            if scope["type"] == "http":
                await refuse(send, 400, TWO_CREDENTIALS)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        await self.app(scope, receive, send)


def component(settings: Settings) -> Component:
    """Install last in the composition, so its wrap is outermost."""
    return Component(name="hosts", wrap=lambda app: FrontDoor(app, settings))
