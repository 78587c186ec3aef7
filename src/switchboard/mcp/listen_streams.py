"""The 2026-era doorbell: `subscriptions/listen` streams (protocol 2026-07-28, SEP-2575).

A 2026-era client has no session and no GET stream; it opts in to server events by sending
`subscriptions/listen`, whose response is the stream. We serve it ourselves instead of with the SDK's
`ListenHandler` because events here are per endpoint: two endpoints may both drain a queue called
`inbox`, and the SDK's bus would announce one's todos to the other.

- The honored filter is the requested `resourceSubscriptions` that name one of the caller's queue
  resources (`resources.QUEUE_URI`); every other kind and URI is left out of the acknowledgement and
  never sent (the list-changed kinds never change while a stream is open).
- The acknowledgement is the first frame; each later frame is `notifications/resources/updated` for
  a queue URI, stamped with the listen request's id under `_meta["io.modelcontextprotocol/subscriptionId"]`.
- The doorbell (`doorbell.py`) offers rings to the streams of a todo's endpoint under the same rules
  as session-era rings (the per-todo gate, cleared by a re-queue; the widening re-rings), and rings
  a new stream for the todos already pending in its queues.
- A stream whose client stops reading is ended when its small backlog fills (no replay: the client
  re-listens and reads the queue resource); a revoked endpoint's streams end at once (`close_endpoint`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY, ResourceUpdated, event_to_notification
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST

from ..core.models import EndpointCaller
from .resources import queue_of

log = logging.getLogger("switchboard.mcp")

MAX_BUFFERED = 64  # queue URIs waiting to be written on one stream; more ends the stream


@dataclass(eq=False)
class ListenStream:
    caller: EndpointCaller
    uris: frozenset[str]  # the honored queue URIs
    send: Any  # anyio MemoryObjectSendStream[str]: queue URIs to announce
    closed: bool = False
    sent: int = field(default=0)

    @property
    def endpoint_id(self) -> str:
        return str(self.caller.endpoint_id)

    @property
    def queues(self) -> list[str]:
        return sorted(q for q in (queue_of(u) for u in self.uris) if q)

    def offer(self, uri: str) -> bool:
        """Queue `uri` for the stream; False when it is not subscribed or the stream is gone."""
        if self.closed or uri not in self.uris:
            return False
        try:
            self.send.send_nowait(uri)
            return True
        except anyio.WouldBlock:
            log.warning("listen stream backlog full; ending the stream", extra={"endpoint": self.caller.slug})
            self.close()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.closed = True
        return False

    def close(self) -> None:
        self.closed = True
        self.send.close()


Callback = Callable[[ListenStream], None]


class ListenRegistry:
    """The open listen streams of this process, by endpoint; serves `subscriptions/listen`."""

    def __init__(self, max_streams: int = 20_000) -> None:
        self.max_streams = max_streams
        self._by_endpoint: dict[str, set[ListenStream]] = {}
        self._count = 0
        self.on_added: list[Callback] = []

    def __len__(self) -> int:
        return self._count

    def endpoints(self) -> set[str]:
        return set(self._by_endpoint)

    def has_endpoint(self, endpoint_id: str) -> bool:
        return endpoint_id in self._by_endpoint

    def for_endpoint(self, endpoint_id: str) -> list[ListenStream]:
        return list(self._by_endpoint.get(str(endpoint_id), ()))

    def all(self) -> list[ListenStream]:
        return [s for streams in list(self._by_endpoint.values()) for s in streams]

    def close_endpoint(self, endpoint_id: str) -> int:
        streams = self.for_endpoint(endpoint_id)
        for stream in streams:
            stream.close()
        return len(streams)

    def close_all(self) -> None:
        for stream in self.all():
            stream.close()

    def _add(self, stream: ListenStream) -> None:
        self._by_endpoint.setdefault(stream.endpoint_id, set()).add(stream)
        self._count += 1

    def _remove(self, stream: ListenStream) -> None:
        streams = self._by_endpoint.get(stream.endpoint_id)
        if streams is not None and stream in streams:
            streams.discard(stream)
            self._count -= 1
            if not streams:
                del self._by_endpoint[stream.endpoint_id]

    async def serve(self, ctx: ServerRequestContext, params: types.SubscriptionsListenRequestParams,
                    caller: EndpointCaller) -> types.SubscriptionsListenResult:
        """One `subscriptions/listen` request: acknowledge, then forward rings until the client leaves
        (the request is cancelled) or the stream is closed (the result is then the last frame)."""
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if self._count >= self.max_streams:
            raise MCPError(INTERNAL_ERROR, "too many listen streams on this server; retry later")
        requested = params.notifications.resource_subscriptions or []
        honored = sorted({u for u in requested if queue_of(u) in caller.queues})
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        send, recv = anyio.create_memory_object_stream[str](MAX_BUFFERED)
        stream = ListenStream(caller=caller, uris=frozenset(honored), send=send)
        self._add(stream)
        try:
            ack = types.SubscriptionsAcknowledgedNotification(params=types.SubscriptionsAcknowledgedNotificationParams(
                notifications=types.SubscriptionFilter(resource_subscriptions=honored or None), _meta=meta))
            await ctx.session.send_notification(ack, related_request_id=subscription_id)
            for cb in list(self.on_added):
                cb(stream)
            async for uri in recv:
                await ctx.session.send_notification(event_to_notification(ResourceUpdated(uri=uri), meta),
                                                    related_request_id=subscription_id)
                stream.sent += 1
        finally:
            self._remove(stream)
            stream.close()
            recv.close()
        return types.SubscriptionsListenResult(_meta=meta)
