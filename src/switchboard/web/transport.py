"""Deadlines on how slowly a client may send: uvicorn's HTTP protocol with a head and a body deadline.

uvicorn bounds the idle time between requests on a kept-alive connection (`timeout_keep_alive`) but
nothing else: a client that sends one header line every few seconds, or a POST body one byte at a
time, holds its socket (and, once the head is in, a running request) for as long as it likes. So:

- **Head deadline** (`SWITCHBOARD_HEADER_TIMEOUT_SECONDS`): from a connection's first moment, and from
  the first byte of every later request on it, the whole request head must arrive within this; if
  not, the server answers 408 and closes the connection.
- **Body deadline** (`SWITCHBOARD_BODY_TIMEOUT_SECONDS`): once the head is in, the whole body must
  arrive within this. If not, the connection is closed and the application sees the client as gone
  (`http.disconnect`), which it logs as one `client disconnected` line. Time the application itself
  spends not reading (flow control paused the socket) does not count against the client.
- **A client gone before its answer** (the connection closed or reset, or a body deadline passed)
  ends its request: the request's task is cancelled instead of running on with nobody to answer
  (with the pinned MCP SDK such a request could otherwise wait until its session ended). As with
  any call whose answer was lost, what it asked for may or may not have taken effect.
- **Connection cap** (`SWITCHBOARD_MAX_CONNECTIONS`): uvicorn's `limit_concurrency`; past it, a new
  request is answered 503 at once instead of queueing.

`server_options(settings)` is the one place these become uvicorn.Config arguments.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..config import Settings

log = logging.getLogger("switchboard.web")

REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class DeadlineHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with a head deadline and a body deadline (class attributes, in seconds).

    A request only records when its head or body is due (one clock read, no timer call): each
    connection has a single timer that is re-armed lazily. When it fires it compares the clock with
    what is due now and either ends the connection or sleeps until the next due time, so a busy
    keep-alive connection costs about one timer per deadline period instead of two timers created and
    cancelled per request.
    """

    head_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # loop time the timer fires at
        self._head_due: float | None = None  # loop time by which the head must be in; None when not awaited
        self._body_due: float | None = None  # by which the body must be in (stale once it is: see _body_late)

    # ------------------------------------------------------------------------------ the timer

    def _due(self, when: float) -> None:
        """Make sure the timer fires no later than `when`."""
        timer = self._timer
        if timer is not None:
            if self._timer_at <= when:
                return  # it fires first and looks again then
            timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._wake)

    def _wake(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        head, body = self._head_due, self._body_due
        if head is not None and now >= head:
            self._head_late()
            return
        if body is not None and now >= body:
            self._body_late()
            body = self._body_due
        due = [t for t in (self._head_due, body) if t is not None]
        if due and not self.transport.is_closing():
            self._due(min(due))

    # ------------------------------------------------------------------------------ the head

    # uvicorn's protocol narrows asyncio's BaseTransport to Transport; this override keeps its signature.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_due = self.loop.time() + self.head_timeout
        self._due(self._head_due)

    def _head_late(self) -> None:
        self._head_due = None
        log.info("request head too slow; connection closed",
                 extra={"reason": "head_timeout", "status": 408, "client": _client(self.client)})
        self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._head_due is None:
            cycle = self.cycle
            if cycle is None or cycle.response_complete:  # the first bytes of the next request's head
                due = self._head_due = self.loop.time() + self.head_timeout
                if self._timer is None or self._timer_at > due:
                    self._due(due)
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_due = None
        super().on_headers_complete()
        due = self._body_due = self.loop.time() + self.body_timeout
        if self._timer is None or self._timer_at > due:
            self._due(due)

    # ------------------------------------------------------------------------------ the body

    def _body_late(self) -> None:
        self._body_due = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or cycle.response_complete:
            return  # the body is in (or no longer wanted)
        if self.flow.read_paused:  # the application is not reading: not the client's delay
            self._body_due = self.loop.time() + 1.0
            return
        log.info("request body too slow; connection closed",
                 extra={"reason": "body_timeout", "client": _client(self.client), "path": cycle.scope["path"][:128]})
        cycle.disconnected = True
        cycle.message_event.set()
        self.transport.close()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if self.config.reset_contextvars:  # uvicorn's opt-in variant: left as it is, not cancellable
            super()._start_asgi_task(cycle, app)
            return
        task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        cycle.request_task = task

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_due = self._body_due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        cycle = self.cycle
        super().connection_lost(exc)
        task = getattr(cycle, "request_task", None)
        if task is not None and not cycle.response_started and not task.done():
            task.cancel()  # nobody is left to answer


def _client(client: Any) -> str | None:
    return f"{client[0]}:{client[1]}" if client else None


def protocol_for(settings: Settings) -> type[DeadlineHttpProtocol]:
    return type("SwitchboardHttpProtocol", (DeadlineHttpProtocol,),
                {"head_timeout": settings.header_timeout_seconds, "body_timeout": settings.body_timeout_seconds})


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn.Config arguments for the slow-client defences."""
    return {"http": protocol_for(settings), "limit_concurrency": settings.max_connections,
            "timeout_keep_alive": 5}
