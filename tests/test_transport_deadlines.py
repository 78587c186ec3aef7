"""The head and body deadlines of `web/transport.py` on one connection, driven without sockets: the
protocol object gets a fake transport and a small ASGI app, and deadlines of a fraction of a second.
The slow-client tests (test_hardening_slow_clients.py) attack a real server; these pin the timing
rules of the one lazily re-armed timer per connection."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from switchboard.web.transport import DeadlineHttpProtocol

HEAD = 0.3
BODY = 0.3
REQUEST = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5555)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope: dict, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def connect(head: float = HEAD, body: float = BODY) -> tuple[DeadlineHttpProtocol, FakeTransport]:
    cls = type("P", (DeadlineHttpProtocol,), {"head_timeout": head, "body_timeout": body})
    config = uvicorn.Config(app, http=cls, lifespan="off", log_config=None, timeout_keep_alive=60)
    config.load()
    protocol = cls(config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop())
    transport = FakeTransport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


async def answered(transport: FakeTransport, count: int) -> None:
    for _ in range(100):
        if transport.written.count(b"HTTP/1.1 200") >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(bytes(transport.written))


async def test_a_head_that_does_not_arrive_in_time_gets_408():
    protocol, transport = connect()
    protocol.data_received(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await asyncio.sleep(HEAD / 2)
    assert not transport.closed
    await asyncio.sleep(HEAD)
    assert transport.closed and transport.written.startswith(b"HTTP/1.1 408")


async def test_an_idle_kept_alive_connection_waits_and_a_later_head_is_timed_from_its_first_byte():
    protocol, transport = connect()
    protocol.data_received(REQUEST)
    await answered(transport, 1)
    await asyncio.sleep(HEAD * 2)  # idle between requests: not a slow head
    assert not transport.closed
    protocol.data_received(b"GET /x HTTP/1.1\r\n")
    await asyncio.sleep(HEAD / 2)
    assert not transport.closed
    await asyncio.sleep(HEAD)
    assert transport.closed and b"HTTP/1.1 408" in transport.written


async def test_requests_in_a_row_outlasting_the_deadlines_are_never_cut():
    protocol, transport = connect()
    for n in range(1, 13):  # about 1.2 s in all, four times each deadline
        protocol.data_received(REQUEST)
        await answered(transport, n)
        await asyncio.sleep(0.1)
    assert not transport.closed and b"408" not in transport.written


async def test_a_body_deadline_shorter_than_the_head_deadline_is_kept():
    protocol, transport = connect(head=5.0, body=BODY)
    protocol.data_received(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nab")
    await asyncio.sleep(BODY / 2)
    assert not transport.closed
    await asyncio.sleep(BODY)
    assert transport.closed  # the body came too slowly: closed, well before the head deadline
    assert protocol.cycle is not None and protocol.cycle.disconnected
    protocol.connection_lost(None)


async def test_a_body_that_arrives_in_time_is_served():
    protocol, transport = connect()
    protocol.data_received(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n\r\nab")
    await asyncio.sleep(BODY / 2)
    protocol.data_received(b"cd")
    await answered(transport, 1)
    await asyncio.sleep(BODY * 1.5)
    assert not transport.closed
