"""Live MCP sessions of this process, for the doorbell and other server-to-client pushes.

The MCP surface creates one `SessionRegistry` (`McpSurface.sessions`, which the doorbell is built
with). It adds a `LiveSession` when a session-era client initializes and removes
it when the session ends; other components (the doorbell) read it and may register `on_added`
callbacks (for example to ring a session that just opened its stream).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.models import EndpointCaller


@dataclass(eq=False)
class LiveSession:
    session_id: str
    caller: EndpointCaller
    session: Any  # the session's own SDK ServerSession: `await session.send_notification(...)`
    channel: bool = False  # the client declared the experimental `claude/channel` capability
    subscriptions: set[str] = field(default_factory=set)  # resource URIs subscribed to
    endpoint_id: str = field(init=False)  # str(caller.endpoint_id), computed once

    def __post_init__(self) -> None:
        self.endpoint_id = str(self.caller.endpoint_id)

    def hears(self, uri: str) -> bool:
        """Whether a ring for the queue resource `uri` reaches this session: it subscribed to the
        resource or declared the channel capability. A session with neither is never sent a push."""
        return self.channel or uri in self.subscriptions


Callback = Callable[[LiveSession], Awaitable[None] | None]


class SessionRegistry:
    def __init__(self) -> None:
        self._by_id: dict[str, LiveSession] = {}
        # Sessions by endpoint id: a ring looks up one endpoint's sessions without scanning every
        # session of the process (thousands of idle ones; docs/benchmarks.md).
        self._by_endpoint: dict[str, dict[str, LiveSession]] = {}
        self.on_added: list[Callback] = []
        self.on_removed: list[Callback] = []

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, session_id: str) -> LiveSession | None:
        return self._by_id.get(session_id)

    def all(self) -> list[LiveSession]:
        return list(self._by_id.values())

    def endpoints(self) -> set[str]:
        """The endpoint ids with at least one live session here."""
        return set(self._by_endpoint)

    def has_endpoint(self, endpoint_id: str) -> bool:
        return endpoint_id in self._by_endpoint

    def for_endpoint(self, endpoint_id: str) -> list[LiveSession]:
        return list(self._by_endpoint.get(str(endpoint_id), {}).values())

    async def add(self, live: LiveSession) -> None:
        old = self._by_id.pop(live.session_id, None)
        if old is not None:
            self._unindex(old)
        self._by_id[live.session_id] = live
        self._by_endpoint.setdefault(live.endpoint_id, {})[live.session_id] = live
        for cb in list(self.on_added):
            res = cb(live)
            if res is not None:
                await res

    def _unindex(self, live: LiveSession) -> None:
        mine = self._by_endpoint.get(live.endpoint_id)
        if mine is not None:
            mine.pop(live.session_id, None)
            if not mine:
                del self._by_endpoint[live.endpoint_id]

    async def remove(self, session_id: str) -> None:
        live = self._by_id.pop(session_id, None)
        if live is None:
            return
        self._unindex(live)
        for cb in list(self.on_removed):
            res = cb(live)
            if res is not None:
                await res


class SessionCap:
    """At most `limit` live sessions of the SDK's session manager per endpoint.

    The SDK opens a session (with its server task) for every `initialize` and keeps it until the
    client deletes it or it has been idle for 30 minutes, whether or not the client ever sends
    `notifications/initialized`; so the count is taken from the manager itself, by the endpoint that
    owns each session. When an endpoint at its cap opens another session, its least recently used
    idle session (no request in flight, no open GET stream) is ended to make room; when every one
    of them is busy, the new session is refused (docs/decisions.md). The gateway reports each
    request's start and end (`enter`/`leave`) so that idleness and recency are known.

    Reads two private attributes of `StreamableHTTPSessionManager` (`_server_instances`,
    `_session_owners`) and calls its `_discard_session`; mcp is pinned in pyproject.toml. With
    `session_host.LightSessionManager` an endpoint's sessions come from the manager's own index
    instead of a scan of every session.
    """

    def __init__(self, manager: Any, limit: int) -> None:
        self.manager = manager
        self.limit = limit
        self.evicted = 0
        self.refused = 0
        self._busy: dict[str, int] = {}
        self._last: dict[str, float] = {}

    def live(self) -> int:
        return len(self.manager._server_instances)

    def of_endpoint(self, endpoint_id: str) -> list[str]:
        indexed = getattr(self.manager, "sessions_of", None)  # session_host.LightSessionManager
        if indexed is not None:
            sessions: list[str] = indexed(endpoint_id)
            return sessions
        owners = self.manager._session_owners
        instances = self.manager._server_instances
        return [sid for sid, owner in list(owners.items())
                if sid in instances and owner.get("client_id") == endpoint_id]

    def enter(self, session_id: str) -> None:
        self._busy[session_id] = self._busy.get(session_id, 0) + 1

    def leave(self, session_id: str) -> None:
        left = self._busy.get(session_id, 0) - 1
        if left > 0:
            self._busy[session_id] = left
        else:
            self._busy.pop(session_id, None)
        self._last[session_id] = time.monotonic()
        if len(self._last) > 4 * max(self.live(), 1) + 1024:  # forget ended sessions now and then
            instances = self.manager._server_instances
            self._last = {sid: t for sid, t in self._last.items() if sid in instances}

    async def make_room(self, endpoint_id: str) -> bool:
        """Before a new session of `endpoint_id`: end its least recently used idle sessions down to
        `limit - 1`. False (refuse the new one) when it is at the cap with every session busy."""
        mine = self.of_endpoint(endpoint_id)
        over = len(mine) - self.limit + 1
        if over <= 0:
            return True
        idle = sorted((sid for sid in mine if not self._busy.get(sid)), key=lambda sid: self._last.get(sid, 0.0))
        if len(idle) < over:
            self.refused += 1
            return False
        instances = self.manager._server_instances
        for sid in idle[:over]:
            transport = instances.get(sid)
            if transport is not None:
                await self.manager._discard_session(sid, transport)
            self._last.pop(sid, None)
            self.evicted += 1
        return True

    def collect(self):
        """Prometheus collector: register with `registry.register(cap)`."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        yield GaugeMetricFamily("switchboard_mcp_sessions", "Live MCP sessions (session-era) in this process.",
                                value=self.live())
        yield CounterMetricFamily("switchboard_mcp_sessions_evicted", "MCP sessions ended to keep an endpoint "
                                  "within SWITCHBOARD_MCP_MAX_SESSIONS_PER_ENDPOINT.", value=self.evicted)
        yield CounterMetricFamily("switchboard_mcp_sessions_refused", "New MCP sessions refused: the endpoint "
                                  "was at its cap with every session busy.", value=self.refused)

    def describe(self):
        return []
