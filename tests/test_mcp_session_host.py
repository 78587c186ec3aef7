"""Light session-era sessions (mcp/session_host.py): what the SDK's per-session server did, without it.

Raw HTTP against a real server: the GET stream's keep-alive comments and its end when the session is
deleted, one GET stream per session, a request still in flight when its session ends (answered, not
HTTP 500), a request the client cancels (answered `Request cancelled`), SSE answers when JSON answers
are off, and sessions that stay idle past the idle timeout ending. The SDK client's behaviour over
these sessions is covered by the MCP test files and tests/interop.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import psycopg
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import ACCEPT, vend

SESSION_ERA = "2025-11-25"


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


def manager_of(server):
    return server.app.state.surfaces.mcp.manager


class Session:
    def __init__(self, http: httpx.AsyncClient, url: str, credential: str) -> None:
        self.http, self.url = http, url
        self.headers = {"Authorization": f"Bearer {credential}", "Accept": ACCEPT, "Content-Type": "application/json"}
        self.session_id = ""
        self._id = 0

    async def post(self, method: str, params: dict | None = None, *, notify: bool = False,
                   request_id: int | None = None, **headers: str) -> httpx.Response:
        msg: dict = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self._id += 1
            msg["id"] = request_id if request_id is not None else self._id
        return await self.http.post(self.url, content=json.dumps(msg), headers={**self.headers, **headers})

    async def open(self) -> None:
        r = await self.post("initialize", {"protocolVersion": SESSION_ERA, "capabilities": {},
                                           "clientInfo": {"name": "host-test", "version": "0"}})
        assert r.status_code == 200, r.text
        self.session_id = r.headers["mcp-session-id"]
        self.headers.update({"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": SESSION_ERA})
        assert (await self.post("notifications/initialized", notify=True)).status_code == 202

    def get_headers(self) -> dict:
        return {"Authorization": self.headers["Authorization"], "Accept": "text/event-stream",
                "Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": SESSION_ERA}


async def locked_todos(pg_uri: str, seconds: float) -> None:
    """Hold an exclusive lock on `todos` for `seconds`: a tool call reading todos waits meanwhile."""
    async with await psycopg.AsyncConnection.connect(pg_uri) as conn, conn.transaction():
        await conn.execute("LOCK TABLE todos IN ACCESS EXCLUSIVE MODE")
        await asyncio.sleep(seconds)


async def test_the_get_stream_is_kept_alive_and_ends_with_its_session(core, server):
    a = await vend(core, agent="pinged")
    manager = manager_of(server)
    manager.ping_interval = 0.3
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            s = Session(http, a.url(server.url), a.credential)
            await s.open()
            seen = bytearray()
            async with http.stream("GET", s.url, headers=s.get_headers()) as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"] == "text/event-stream"
                assert stream.headers["mcp-session-id"] == s.session_id
                # A second stream for the same session is refused while this one is open.
                second = await http.get(s.url, headers=s.get_headers())
                assert second.status_code == 409
                chunks = stream.aiter_raw()
                while b": ping\r\n\r\n" not in seen:
                    seen += await asyncio.wait_for(chunks.__anext__(), 5)
                deleted = await http.delete(s.url, headers=s.headers)
                assert deleted.status_code == 200
                async with asyncio.timeout(5):  # the stream ends with the session
                    async for _ in chunks:
                        pass
            assert (await s.post("tools/list")).status_code == 404
    finally:
        manager.ping_interval = 15.0


async def test_a_request_in_flight_when_its_session_ends_is_answered(core, server, pg_uri):
    a = await vend(core, agent="inflight")
    async with httpx.AsyncClient(timeout=30) as http:
        s = Session(http, a.url(server.url), a.credential)
        await s.open()
        lock = asyncio.create_task(locked_todos(pg_uri, 1.0))
        await asyncio.sleep(0.2)
        call = asyncio.create_task(s.post("tools/call", {"name": "list_todos", "arguments": {}}))
        await asyncio.sleep(0.3)
        assert (await http.delete(s.url, headers=s.headers)).status_code == 200  # ends while the call waits
        r = await call
        await lock
        assert r.status_code == 200, r.text
        assert "result" in r.json() and not r.json()["result"].get("isError")
        assert (await s.post("tools/list")).status_code == 404


async def test_a_request_the_client_cancels_is_answered_request_cancelled(core, server, pg_uri):
    a = await vend(core, agent="cancels")
    async with httpx.AsyncClient(timeout=30) as http:
        s = Session(http, a.url(server.url), a.credential)
        await s.open()
        lock = asyncio.create_task(locked_todos(pg_uri, 1.0))
        await asyncio.sleep(0.2)
        call = asyncio.create_task(s.post("tools/call", {"name": "list_todos", "arguments": {}}, request_id=77))
        await asyncio.sleep(0.3)
        note = await s.post("notifications/cancelled", {"requestId": 77, "reason": "test"}, notify=True)
        assert note.status_code == 202
        r = await asyncio.wait_for(call, 5)
        await lock
        assert r.status_code == 200
        assert r.json() == {"jsonrpc": "2.0", "id": 77, "error": {"code": -32800, "message": "Request cancelled"}}
        assert (await s.post("tools/list")).status_code == 200  # the session goes on


async def test_answers_are_sse_when_json_answers_are_off(core, server):
    a = await vend(core, agent="sse")
    manager = manager_of(server)
    manager.json_response = False
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            s = Session(http, a.url(server.url), a.credential)
            await s.open()
            r = await s.post("tools/list")
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            events = [e for e in r.text.split("\r\n\r\n") if e]
            assert len(events) == 1 and events[0].startswith("event: message\r\ndata: ")
            answer = json.loads(events[0].split("data: ", 1)[1])
            assert answer["id"] == s._id and answer["result"]["tools"]
            only_json = await s.post("tools/list", Accept="application/json")
            assert only_json.status_code == 406
    finally:
        manager.json_response = True


async def test_sessions_idle_past_the_timeout_end_and_held_ones_do_not(core, server):
    a = await vend(core, agent="idle")
    manager = manager_of(server)
    before = manager.session_idle_timeout
    manager.session_idle_timeout = 0.6
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            idle, held = (Session(http, a.url(server.url), a.credential) for _ in range(2))
            await idle.open()
            await held.open()
            async with http.stream("GET", held.url, headers=held.get_headers()) as stream:
                assert stream.status_code == 200
                deadline = time.monotonic() + 10
                while idle.session_id in manager._server_instances:
                    assert time.monotonic() < deadline, "the idle session did not end"
                    await asyncio.sleep(0.1)
                assert (await idle.post("tools/list")).status_code == 404
                assert (await held.post("tools/list")).status_code == 200
    finally:
        manager.session_idle_timeout = before
