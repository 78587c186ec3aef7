"""Clients that leave mid-request, against a real `switchboard serve` process with JSON logs: every
disconnect is at most one structured line (`client disconnected`, or the MCP request's own line with
status 499), never a traceback, and every log line the server writes is JSON. (That a body cut short
by a deadline is not logged as a 500 is tested in test_hardening_slow_clients.py.)"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time

import httpx

from conftest import start_process_server
from mcp_support import ACCEPT, Raw, vend
from switchboard.core import api_tokens


def _abort(s: socket.socket) -> None:
    """Close with a reset, as a killed client does."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


async def test_clients_leaving_mid_request_leave_one_json_line_each(core, pg_uri):
    agent = await vend(core, "leaver")
    token, _ = await api_tokens.create(core, agent.human)
    srv = start_process_server(pg_uri, env={"SWITCHBOARD_RATE_LIMIT_BURST": "1000"})
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(srv.process.stdout.readline, b"")), daemon=True)
    reader.start()
    port = int(srv.url.rsplit(":", 1)[1])
    host = f"Host: 127.0.0.1:{port}\r\n"
    mcp_head = (f"POST /mcp/{agent.slug} HTTP/1.1\r\n{host}Authorization: Bearer {agent.credential}\r\n"
                f"Accept: {ACCEPT}\r\nContent-Type: application/json\r\n")
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "list_todos", "arguments": {}}})
    try:
        raw = Raw(srv.url, agent.slug, agent.credential)
        assert raw.initialize().status_code == 200
        session = f"Mcp-Session-Id: {raw.session_id}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        # The dropped notification streams use a session of their own: with the SDK pinned here, a tool
        # call on a session whose GET stream was just dropped can wait for its answer until the session
        # ends (noticed, not ours to fix in this test).
        streamer = Raw(srv.url, agent.slug, agent.credential)
        assert streamer.initialize().status_code == 200
        stream_session = f"Mcp-Session-Id: {streamer.session_id}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        for round_ in range(10):
            attempts = [
                # a body cut short, on MCP, the API and the Board
                (mcp_head + "Content-Length: 400\r\n\r\n{\"jsonrpc\":").encode(),
                (f"POST /api/v1/endpoints/{agent.slug}/todos HTTP/1.1\r\n{host}Authorization: Bearer {token}\r\n"
                 "Content-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"title\":").encode(),
                (f"POST /login HTTP/1.1\r\n{host}Content-Type: application/x-www-form-urlencoded\r\n"
                 "Content-Length: 400\r\n\r\nname=").encode(),
                # a whole tool call, then gone before the answer
                (mcp_head + session + f"Content-Length: {len(call)}\r\n\r\n{call}").encode(),
                # the notification stream, opened and dropped
                (f"GET /mcp/{agent.slug} HTTP/1.1\r\n{host}Authorization: Bearer {agent.credential}\r\n"
                 f"Accept: text/event-stream\r\n{stream_session}\r\n").encode(),
                # a Board page, dropped at once
                f"GET /login HTTP/1.1\r\n{host}\r\n".encode(),
            ]
            for n, request in enumerate(attempts):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(request)
                if n == 4:
                    time.sleep(0.05)
                (_abort if round_ % 2 else socket.socket.close)(s)
        time.sleep(1.0)
        # The server is fine afterwards.
        assert httpx.get(srv.url + "/healthz", timeout=5).status_code == 200
        assert raw.call("list_todos").status_code == 200
        raw.close()
        streamer.close()
    finally:
        srv.stop()
        reader.join(5)

    text = b"".join(lines).decode(errors="replace")
    assert "Traceback" not in text, text[text.find("Traceback") - 500:][:3000]
    # Besides the start-up banner (plain text on purpose), one JSON object per line: no bare
    # exception lines or traceback frames.
    logged = [line for line in text.splitlines() if line.startswith("{")]
    stray = [line for line in text.splitlines()
             if re.match(r"^(\s+File \"|\w+(\.\w+)*(Error|Exception|Group)\b|During handling|The above)", line)]
    assert stray == [], stray[:5]
    assert any(r.get("reason") == "client_disconnect" for r in map(json.loads, logged))
    records = [json.loads(line) for line in logged]
    assert not [r for r in records if r["level"] == "error"], json.dumps([
        r for r in records if r["level"] == "error" or r.get("latency_ms", 0) > 2000])
    mcp = [r for r in records if r.get("logger") == "switchboard.mcp"]
    assert [r for r in mcp if r.get("status") == 499 and r.get("reason") == "client_disconnect"]
