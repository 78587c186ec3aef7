"""Security headers on every HTTP response of the app (SYSTEM.md section 9, SPEC-0034 security section).

A pure ASGI wrapper, outermost: it only appends four precomputed headers to `http.response.start`,
so MCP and metrics traffic pass through it at the cost of one list scan. A response that already
carries one of these headers (a surface with a stricter policy of its own) keeps its value.
`Cache-Control: no-store` is set by the Board on pages that carry data, not here.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..runtime import Component

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; script-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
_NAMES = frozenset(name for name, _ in HEADERS)


class SecurityHeaders:
    """ASGI middleware: add the security headers a response does not set itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers if name.lower() in _NAMES}
                if len(present) < len(HEADERS):
                    headers.extend(h for h in HEADERS if h[0] not in present)
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def component() -> Component:
    return Component(name="security", wrap=SecurityHeaders)
