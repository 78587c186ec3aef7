"""Live MCP sessions of this process, for the doorbell and other server-to-client pushes.

The MCP server component creates one `SessionRegistry` and publishes it as
`ctx.shared["sessions"]`. It adds a `LiveSession` when a session-era client initializes and removes
it when the session ends; other components (the doorbell) read it and may register `on_added`
callbacks (for example to ring a session that just opened its stream).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..core.models import EndpointCaller


@dataclass(eq=False)
class LiveSession:
    session_id: str
    caller: EndpointCaller
    session: Any  # the SDK's ServerSession: `await session.send_notification(...)`
    channel: bool = False  # the client declared the experimental `claude/channel` capability
    subscriptions: set[str] = field(default_factory=set)  # resource URIs subscribed to

    @property
    def endpoint_id(self) -> str:
        return str(self.caller.endpoint_id)


Callback = Callable[[LiveSession], Awaitable[None] | None]


class SessionRegistry:
    def __init__(self) -> None:
        self._by_id: dict[str, LiveSession] = {}
        self.on_added: list[Callback] = []
        self.on_removed: list[Callback] = []

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, session_id: str) -> LiveSession | None:
        return self._by_id.get(session_id)

    def all(self) -> list[LiveSession]:
        return list(self._by_id.values())

    def for_endpoint(self, endpoint_id: str) -> list[LiveSession]:
        return [s for s in self._by_id.values() if s.endpoint_id == str(endpoint_id)]

    async def add(self, live: LiveSession) -> None:
        self._by_id[live.session_id] = live
        for cb in list(self.on_added):
            res = cb(live)
            if res is not None:
                await res

    async def remove(self, session_id: str) -> None:
        live = self._by_id.pop(session_id, None)
        if live is None:
            return
        for cb in list(self.on_removed):
            res = cb(live)
            if res is not None:
                await res
