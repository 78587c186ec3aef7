"""Session-era MCP sessions without a server of their own: the SDK's session manager, light sessions.

The MCP SDK's `StreamableHTTPSessionManager` runs every session as a small server: a task in the
manager's task group, a `StreamableHTTPServerTransport` with four memory streams and a message-router
task, a JSON-RPC dispatcher with its own task group, and, while the client holds its GET stream, an
`EventSourceResponse` with four more tasks and two more streams. An idle session cost about 100 KiB
that way (docs/benchmarks.md, "Idle MCP sessions held open"), and a notification for it travelled
through four task hand-offs before it reached the socket.

`LightSessionManager` keeps the SDK manager (admission, its session ceiling, the rule that a session
is used only with the credential that opened it, the 2026-era single-exchange path) and replaces what
it holds per session by a `LightSession`:

- the session's SDK `Connection` (negotiated protocol version, client capabilities, initialized,
  the exit stack run when the session ends), built at its first request;
- while the client holds its GET stream, that stream's ASGI `send`.

Every POST runs the SDK's own handler kernel (`ServerRunner`: `initialize`, the init gate, the
server's middleware, the handlers, the result shaping) in the request's own task, with a
per-request dispatch context like the SDK's, and is answered as the SDK's transport answers (JSON in
JSON-response mode, else an SSE answer stream). A notification for the session (`Connection.notify`,
the doorbell) is written as one SSE event straight onto the GET stream, or dropped when none is open,
as before. The GET stream's own task waits on the connection for the client to leave; one task per
manager sends keep-alive comments, ends sessions idle for `session_idle_timeout`, and ends the GET
streams when the server is shutting down.

Differences from the SDK's transport, all on purpose:
- ending a session (DELETE, eviction, revocation, idle timeout) does not touch requests in flight:
  they finish and are answered (the SDK answered them HTTP 500, soak finding 4 in
  docs/reliability.md);
- the standalone channel carries notifications only (nothing here sends server-to-client requests);
- `Last-Event-ID` opens a fresh stream (there is no event store to replay from).

Reads and overrides private parts of `StreamableHTTPSessionManager` (`_admit_session`,
`_serve_opening_request`, `_discard_session`, `_server_instances`, `_session_owners`,
`_lifespan_state`); mcp is pinned in pyproject.toml.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from uuid import uuid4

import anyio
import pydantic_core
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner, aclose_shielded
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, REQUEST_CANCELLED, check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.dispatcher import CallOptions, coerce_request_id
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import (
    cancelled_request_id_from_params,
    handler_exception_to_error_data,
    progress_token_from_params,
)
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

log = logging.getLogger("switchboard.mcp")

PING_INTERVAL = 15.0  # keep-alive comment on each GET stream (what the SDK's SSE responses sent)
BATCH = 25  # streams pinged (sessions looked at) between two yields to the event loop
STALL_SECONDS = 2.0  # a write to a GET stream still blocked after this ends the stream (client not reading)
TICK_SECONDS = 0.5  # how often the maintenance task looks for a server shutdown
IDLE_CHECK_SECONDS = 30.0

PING = b": ping\r\n\r\n"
_TRANSPORT = TransportContext(kind="streamable-http", can_send_request=False)
_JSON = (b"content-type", b"application/json")
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
                (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]


# ------------------------------------------------------------------------------------ the wire

def sse_event(message: bytes) -> bytes:
    """One SSE `message` event carrying a JSON-RPC message (compact JSON has no raw line breaks)."""
    return b"event: message\r\ndata: " + message + b"\r\n\r\n"


def notification_bytes(method: str, params: Mapping[str, Any] | None) -> bytes:
    """A JSON-RPC notification as the SDK writes it (`params` left out when None)."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = dict(params)
    return pydantic_core.to_json(msg)


def _error_body(code: int, message: str, request_id: RequestId | None = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}},
                      separators=(",", ":")).encode()


async def _respond(send: Send, status: int, body: bytes, session_id: str | None,
                   content_type: tuple[bytes, bytes] | None = _JSON) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append(content_type)
    if session_id:
        headers.append((MCP_SESSION_ID_HEADER.encode(), session_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _shutting_down() -> bool:
    """Whether the uvicorn server of this process is shutting down (SIGTERM/SIGINT seen).

    sse-starlette (a dependency of the SDK) patches uvicorn's exit handler to raise its `AppStatus`
    flag; where that patch is not in place, the handler uvicorn installed is a bound method of its
    server, whose `should_exit` says the same. Servers started without signal handlers (in a thread)
    are stopped by their owner and are never seen as shutting down here.
    """
    try:
        from sse_starlette.sse import AppStatus

        if AppStatus.should_exit:
            return True
    except ImportError:  # pragma: no cover - sse-starlette comes with the SDK
        pass
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))


# --------------------------------------------------------------------------- per-request context

class RequestContext:
    """The SDK's `DispatchContext` for one request of a light session.

    Request-scoped notifications (progress, logs) go on the request's SSE answer when there is one;
    a JSON answer carries only the response, so they are dropped, as the SDK's transport does.
    Server-to-client requests are not offered (`can_send_request` is False)."""

    __slots__ = ("request_id", "message_metadata", "cancel_requested", "_progress_token", "_sink", "_closed")

    transport = _TRANSPORT
    can_send_request = False

    def __init__(self, request_id: RequestId | None, request: Request,
                 progress_token: Any = None, sink: Callable[[bytes], Awaitable[None]] | None = None) -> None:
        self.request_id = request_id
        self.message_metadata = ServerMessageMetadata(request_context=request, can_send_request=False)
        self.cancel_requested = anyio.Event()
        self._progress_token = progress_token
        self._sink = sink
        self._closed = False

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None,
                               opts: CallOptions | None = None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        if self._sink is None or self._closed:
            return
        await self._sink(sse_event(notification_bytes(method, params)))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self._progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self._progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)

    def close(self) -> None:
        self._closed = True


class _Standalone:
    """The request side of a session's own `ServerSession` (kept for pushes outside any request): there
    is no request, so request-scoped messages have nowhere to go and are dropped."""

    __slots__ = ()
    transport = _TRANSPORT
    request_id = None
    message_metadata = None
    can_send_request = False

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None,
                               opts: CallOptions | None = None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


STANDALONE: Any = _Standalone()


async def _detached(work: Awaitable[Any]) -> Any:
    """Await a handler in a task of its own, so that cancelling the request (its client left: the
    server ends the request at once, web/transport.py) returns at once: the handler is told to stop
    and finishes its clean-up on its own (a statement waiting on a frozen database is cancelled there,
    which may take until the database answers), instead of holding the request until then."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieved)
        raise


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A detached handler's end, read so that an error after its request ended is not reported unread."""
    if not task.cancelled():
        task.exception()


class _SseAnswer:
    """The answer to one POST in SSE mode: headers at the first event, the response as the last."""

    __slots__ = ("send", "session_id", "started")

    def __init__(self, send: Send, session_id: str) -> None:
        self.send, self.session_id, self.started = send, session_id, False

    async def event(self, frame: bytes) -> None:
        if not self.started:
            self.started = True
            await self.send({"type": "http.response.start", "status": 200, "headers": [
                *_SSE_HEADERS, (MCP_SESSION_ID_HEADER.encode(), self.session_id.encode())]})
        await self.send({"type": "http.response.body", "body": frame, "more_body": True})

    async def finish(self, message: bytes) -> None:
        await self.event(sse_event(message))
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})


# ------------------------------------------------------------------------------- the GET stream

class GetStream:
    """A session's open GET stream: its ASGI `send` and the task serving it."""

    __slots__ = ("send", "task", "ended", "_writing")

    def __init__(self, send: Send, task: asyncio.Task | None) -> None:
        self.send, self.task = send, task
        self.ended = False
        self._writing = 0

    @property
    def writing(self) -> bool:
        return self._writing > 0

    async def write(self, frame: bytes) -> bool:
        """Write one frame; False when the stream is gone or the client stopped reading (then it ends)."""
        if self.ended:
            return False
        self._writing += 1
        try:
            async with asyncio.timeout(STALL_SECONDS):
                await self.send({"type": "http.response.body", "body": frame, "more_body": True})
            return True
        except TimeoutError:
            log.warning("mcp GET stream not read; ending it", extra={"event": "get_stream_stalled"})
            self.abort()
            return False
        except (RuntimeError, OSError):  # the response was completed under us, or the socket broke
            self.ended = True
            return False
        finally:
            self._writing -= 1

    async def end(self) -> None:
        """Complete the response (the client sees the stream end); its task then returns."""
        if self.ended:
            return
        self.ended = True
        try:
            async with asyncio.timeout(STALL_SECONDS):
                await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            self._cancel()
        except (RuntimeError, OSError):
            pass

    def abort(self) -> None:
        self.ended = True
        self._cancel()

    def _cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


# ------------------------------------------------------------------------------------ a session

class LightSession:
    """One session-era MCP session: what `StreamableHTTPSessionManager` keeps as its transport."""

    __slots__ = ("manager", "mcp_session_id", "endpoint_id", "connection", "busy", "last_active",
                 "_terminated", "_stream", "_in_flight")

    def __init__(self, manager: LightSessionManager, session_id: str, endpoint_id: str | None) -> None:
        self.manager = manager
        self.mcp_session_id = session_id
        self.endpoint_id = endpoint_id
        self.connection: Connection | None = None
        self.busy = 0  # requests being served, an open GET stream included
        self.last_active = time.monotonic()
        self._terminated = False
        self._stream: GetStream | None = None
        self._in_flight: dict[RequestId, tuple[anyio.CancelScope, RequestContext]] | None = None

    @property
    def is_terminated(self) -> bool:
        return self._terminated

    @property
    def stream(self) -> GetStream | None:
        """The open GET stream, if any."""
        stream = self._stream
        return stream if stream is not None and not stream.ended else None

    @property
    def stream_open(self) -> bool:
        return self.stream is not None

    def _connection(self) -> Connection:
        if self.connection is None:  # built late: the session id is final by now (session_ids.py)
            self.connection = Connection.for_loop(self, session_id=self.mcp_session_id)
        return self.connection

    # ------------------------------------------------ the standalone channel (`Connection.outbound`)

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None,
                               opts: CallOptions | None = None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        """A notification for the session: one event on its GET stream, dropped when none is open."""
        stream = self._stream
        if stream is None or stream.ended:
            log.debug("dropped %s: no GET stream open", method)
            return
        await stream.write(sse_event(notification_bytes(method, params)))

    # ---------------------------------------------------------------------------- ending

    def close_standalone_sse_stream(self) -> None:
        """End the GET stream now (the client may open another); the session stays."""
        stream = self._stream
        if stream is not None and not stream.ended:
            self.manager.spawn(stream.end())

    async def terminate(self) -> None:
        """End the session: its GET stream ends, later requests naming it get 404, its connection's exit
        stack runs. Requests already in flight finish and are answered."""
        if self._terminated:
            return
        self._terminated = True
        stream = self._stream
        if stream is not None:
            await stream.end()
        if self.connection is not None:
            await aclose_shielded(self.connection)

    # ---------------------------------------------------------------------------- requests

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        method = scope["method"]
        refused = await self.manager.security.validate_request(request, is_post=method == "POST")
        if refused is not None:
            await refused(scope, receive, send)
            return
        if self._terminated:
            await _respond(send, 404, _error_body(INVALID_REQUEST, "Not Found: Session has been terminated"),
                           self.mcp_session_id)
            return
        self.busy += 1
        try:
            if method == "POST":
                await self._post(request, send)
            elif method == "GET":
                await self._get(request, receive, send)
            elif method == "DELETE":
                await self._delete(request, send)
            else:
                await _respond(send, 405, _error_body(INVALID_REQUEST, "Method Not Allowed"), self.mcp_session_id)
        finally:
            self.busy -= 1
            self.last_active = time.monotonic()

    def _names_session(self, request: Request) -> bool:
        return request.headers.get(MCP_SESSION_ID_HEADER) is not None

    async def _missing_session(self, send: Send) -> None:
        await _respond(send, 400, _error_body(INVALID_REQUEST, "Bad Request: Missing session ID"), self.mcp_session_id)

    async def _post(self, request: Request, send: Send) -> None:
        sid = self.mcp_session_id
        json_mode = self.manager.json_response
        has_json, has_sse = check_accept_headers(request)
        if not has_json or (not json_mode and not has_sse):
            wanted = "application/json" if json_mode else "both application/json and text/event-stream"
            await _respond(send, 406, _error_body(INVALID_REQUEST, f"Not Acceptable: Client must accept {wanted}"), sid)
            return
        content_type = request.headers.get("content-type", "")
        if not any(p.strip() == "application/json" for p in content_type.split(";")[0].split(",")):
            await _respond(send, 415, _error_body(
                INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json"), sid)
            return
        body = await request.body()
        try:
            raw = pydantic_core.from_json(body)
        except ValueError as exc:
            await _respond(send, 400, _error_body(PARSE_ERROR, f"Parse error: {exc}"), sid)
            return
        try:
            message = jsonrpc_message_adapter.validate_python(raw, by_name=False)
        except ValidationError as exc:
            await _respond(send, 400, _error_body(INVALID_PARAMS, f"Validation error: {exc}"), sid)
            return
        initializing = isinstance(message, JSONRPCRequest) and message.method == "initialize"
        if not initializing and not self._names_session(request):
            await self._missing_session(send)
            return
        if isinstance(message, JSONRPCRequest):
            await self._request(message, request, send, json_mode)
            return
        await _respond(send, 202, b"", sid)  # a notification, or a response nothing here waits for
        if isinstance(message, JSONRPCNotification):
            await self._notification(message, request)

    def _runner(self) -> ServerRunner:
        return ServerRunner(self.manager.app, self._connection(), self.manager._lifespan_state)

    async def _notification(self, message: JSONRPCNotification, request: Request) -> None:
        if message.method == "notifications/cancelled" and self._in_flight:
            rid = cancelled_request_id_from_params(message.params)
            entry = self._in_flight.get(coerce_request_id(rid)) if rid is not None else None
            if entry is not None:
                entry[1].cancel_requested.set()
                entry[0].cancel()
        await self._runner().on_notify(RequestContext(None, request), message.method, message.params)

    async def _request(self, message: JSONRPCRequest, request: Request, send: Send, json_mode: bool) -> None:
        answer_sse = None if json_mode else _SseAnswer(send, self.mcp_session_id)
        dctx = RequestContext(message.id, request, progress_token_from_params(message.params),
                              answer_sse.event if answer_sse is not None else None)
        key = coerce_request_id(message.id)
        scope = anyio.CancelScope()
        if self._in_flight is None:
            self._in_flight = {}
        self._in_flight[key] = (scope, dctx)
        answer: bytes | None = None
        try:
            with scope:
                try:
                    result = await _detached(self._runner().on_request(dctx, message.method, message.params))
                    answer = pydantic_core.to_json({"jsonrpc": "2.0", "id": message.id, "result": result})
                except Exception as exc:
                    error = handler_exception_to_error_data(exc)
                    if error is None:
                        log.exception("mcp handler raised", extra={"method": message.method[:64]})
                        error = ErrorData(code=INTERNAL_ERROR, message="Internal server error")
                    answer = JSONRPCError(jsonrpc="2.0", id=message.id, error=error).model_dump_json(
                        by_alias=True, exclude_unset=True).encode()
        finally:
            dctx.close()
            if self._in_flight is not None and self._in_flight.get(key, (None, None))[1] is dctx:
                del self._in_flight[key]
        if answer is None or dctx.cancel_requested.is_set():  # the client cancelled it (2025-era wire: told so)
            answer = _error_body(REQUEST_CANCELLED, "Request cancelled", message.id)
        if answer_sse is not None:
            await answer_sse.finish(answer)
        else:
            await _respond(send, 200, answer, self.mcp_session_id)

    async def _get(self, request: Request, receive: Receive, send: Send) -> None:
        sid = self.mcp_session_id
        _, has_sse = check_accept_headers(request)
        if not has_sse:
            await _respond(send, 406, _error_body(
                INVALID_REQUEST, "Not Acceptable: Client must accept text/event-stream"), sid)
            return
        if not self._names_session(request):
            await self._missing_session(send)
            return
        if self._stream is not None and not self._stream.ended:
            await _respond(send, 409, _error_body(
                INVALID_REQUEST, "Conflict: Only one SSE stream is allowed per session"), sid)
            return
        stream = GetStream(send, asyncio.current_task())
        self._stream = stream
        self.manager.streams.add(stream)
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*_SSE_HEADERS, (MCP_SESSION_ID_HEADER.encode(), sid.encode())]})
            # The stream's task only waits for the client to leave (or for `end()`, which completes the
            # response); notifications are written onto it by whoever sends them.
            while (await receive())["type"] != "http.disconnect":
                pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not stream.ended or task is None or not task.cancelling():
                raise
            task.uncancel()  # ended by us (the client stopped reading): the connection is closed below
        finally:
            stream.ended = True
            self.manager.streams.discard(stream)
            if self._stream is stream:
                self._stream = None

    async def _delete(self, request: Request, send: Send) -> None:
        if not self._names_session(request):
            await self._missing_session(send)
            return
        await self.terminate()
        await _respond(send, 200, b"", self.mcp_session_id)


# ------------------------------------------------------------------------------------ the manager

async def _send_and_report_status(app: Callable[[Scope, Receive, Send], Awaitable[None]], scope: Scope,
                                  receive: Receive, send: Send) -> int | None:
    status: int | None = None

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watch)
    return status


class LightSessionManager(StreamableHTTPSessionManager):
    """`StreamableHTTPSessionManager` whose sessions are `LightSession`s (see the module's docstring)."""

    def __init__(self, *args: Any, ping_interval: float = PING_INTERVAL, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ping_interval = ping_interval
        # Asked about a request naming a session this manager does not hold (any more), right before
        # the SDK would answer 404: True when it answered the request itself.
        self.unknown_session: Callable[[str, Scope, Send], Awaitable[bool]] | None = None
        self.security = TransportSecurityMiddleware(self.security_settings)  # one for every session
        self._by_endpoint: dict[str, set[LightSession]] = {}
        self._tasks: set[asyncio.Task] = set()
        self.streams: set[GetStream] = set()  # the open GET streams, for the keep-alive pass
        self._limited = self.asgi_app  # the SDK's body limit in front of `_handle_request`
        self.asgi_app = self._front  # type: ignore[assignment]  # the SDK types it as its body-limit class

    async def _front(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The GET stream of a session held here goes straight to the session. Its task lives as long as
        the stream, so every frame and buffer on the way (the body limit's, the SDK's request routing)
        would be kept by every idle session; the checks those frames make are made here instead."""
        if scope["method"] == "GET" and self._task_group is not None:
            session = self._stream_target(scope)
            if session is not None:
                await session.handle_request(scope, receive, send)
                return
        await self._limited(scope, receive, send)

    def _stream_target(self, scope: Scope) -> LightSession | None:
        """The session a GET names, when the SDK's routing would hand the request to it: a handshake-era
        (or absent) protocol version, a session held here, opened with the same credential."""
        named = version = None
        for key, value in scope["headers"]:
            if key == b"mcp-session-id":
                named = value
            elif key == b"mcp-protocol-version":
                version = value
        if named is None or (version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS):
            return None
        session: Any = self._server_instances.get(named.decode("latin-1"))
        if not isinstance(session, LightSession):
            return None
        user = scope.get("user")
        requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
        if requestor != self._session_owners.get(session.mcp_session_id):
            return None  # the SDK's routing answers it (404, as if the session did not exist)
        return session

    # ------------------------------------------------------------------------------ bookkeeping

    def sessions(self) -> list[LightSession]:
        held: list[Any] = list(self._server_instances.values())  # LightSessions, typed as the SDK's transport
        return [s for s in held if isinstance(s, LightSession)]

    def sessions_of(self, endpoint_id: str) -> list[str]:
        """The live session ids opened with `endpoint_id`'s credential."""
        return [s.mcp_session_id for s in self._by_endpoint.get(endpoint_id, ()) if not s.is_terminated]

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _admit_session(self, requestor: Any) -> LightSession | None:  # type: ignore[override]
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        endpoint_id = requestor.get("client_id") if requestor is not None else None
        session = LightSession(self, uuid4().hex, endpoint_id)
        sid = session.mcp_session_id
        if requestor is not None:
            self._session_owners[sid] = requestor
        self._server_instances[sid] = session  # type: ignore[assignment]
        if endpoint_id is not None:
            self._by_endpoint.setdefault(endpoint_id, set()).add(session)
        return session

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.unknown_session is not None:
            named = next((v for k, v in scope["headers"] if k == b"mcp-session-id"), None)
            if named is not None:
                sid = named.decode("latin-1")
                if sid not in self._server_instances and await self.unknown_session(sid, scope, send):
                    return
        await super()._handle_stateful_request(scope, receive, send)

    async def _serve_opening_request(self, http_transport: Any, scope: Scope, receive: Receive,
                                     send: Send) -> None:
        """Answer the request that opens the session (no server task to start); a session whose opening
        request did not succeed is discarded again."""
        established = False
        try:
            status = await _send_and_report_status(http_transport.handle_request, scope, receive, send)
            established = status is not None and status < 400
        finally:
            if not established:
                await self._discard_session(http_transport.mcp_session_id, http_transport)

    async def _discard_session(self, session_id: str, transport: Any) -> None:
        if isinstance(transport, LightSession) and transport.endpoint_id is not None:
            mine = self._by_endpoint.get(transport.endpoint_id)
            if mine is not None:
                mine.discard(transport)
                if not mine:
                    del self._by_endpoint[transport.endpoint_id]
        await super()._discard_session(session_id, transport)

    # ------------------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with super().run():
            assert self._task_group is not None
            self._task_group.start_soon(self._maintain)
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await self._end_all()

    async def _end_all(self) -> None:
        for sid, session in list(self._server_instances.items()):
            with contextlib.suppress(Exception):
                await self._discard_session(sid, session)
        for task in list(self._tasks):
            task.cancel()

    async def _maintain(self) -> None:
        """One task for every session: keep-alive pings, idle sessions ended, streams ended at shutdown."""
        loop = asyncio.get_running_loop()
        last_ping = last_idle = loop.time()
        shut = False
        while True:
            await anyio.sleep(min(TICK_SECONDS, self.ping_interval))
            if not shut and _shutting_down():
                shut = True  # the streams end now; requests in flight finish (uvicorn's graceful shutdown)
                for stream in list(self.streams):
                    self.spawn(stream.end())
            now = loop.time()
            if now - last_ping >= self.ping_interval:
                last_ping = now
                await self._ping_all()
            idle = self.session_idle_timeout
            if idle is not None and now - last_idle >= min(IDLE_CHECK_SECONDS, idle / 2):
                last_idle = now
                await self._end_idle(idle)

    async def _ping_all(self) -> None:
        """A keep-alive comment on every open GET stream, a few at a time: at 10,000 streams the pass
        takes about 0.3 s of CPU, and a ring arriving meanwhile waits for one batch at most."""
        for i, stream in enumerate(list(self.streams)):
            if not stream.ended and not stream.writing:
                await stream.write(PING)
            if i % BATCH == BATCH - 1:
                await asyncio.sleep(0)

    async def _end_idle(self, timeout: float) -> None:
        cutoff = time.monotonic() - timeout
        for i, session in enumerate(self.sessions()):
            if not session.busy and session.last_active < cutoff and not session.is_terminated:
                log.info("mcp session idle; ended", extra={"event": "session_idle_timeout"})
                await self._discard_session(session.mcp_session_id, session)
            if i % (BATCH * 40) == BATCH * 40 - 1:
                await asyncio.sleep(0)
