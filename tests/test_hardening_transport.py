"""Attacks on the transport, performed against a real running server: DNS rebinding through a foreign
Host on every surface, a redirect built from a foreign Host, and two credentials in one request."""

from __future__ import annotations

import json
import re
import socket

import httpx
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import ACCEPT, Raw, vend
from switchboard.config import ConfigError, load_settings
from switchboard.core import api_tokens

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, dev_login=True, mcp_auth_cache_seconds=0))
    yield srv
    srv.stop()


def _port(srv) -> str:
    return srv.url.rsplit(":", 1)[1]


def _raw(srv, request: bytes) -> bytes:
    """One HTTP/1.1 request as written, the whole answer as read (the server closes the connection)."""
    with socket.create_connection(("127.0.0.1", int(_port(srv))), timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


async def test_a_rebound_host_reaches_no_page_no_dev_login_no_vend_and_no_api(core, server):
    agent = await vend(core, "rebound")
    token, _ = await api_tokens.create(core, agent.human)
    evil = {"Host": f"attacker.example:{_port(server)}"}
    with httpx.Client(base_url=server.url, timeout=10) as http:
        refused = [
            http.get("/login", headers=evil),
            http.get("/", headers=evil),
            http.post("/auth/dev-login", headers=evil, data={"login_token": "x", "next": "/endpoints/vend"}),
            http.get("/endpoints/vend", headers=evil),
            http.post("/endpoints/vend", headers=evil, data={"agent": "x"}),
            http.get("/api/v1/endpoints", headers={**evil, "Authorization": f"Bearer {token}"}),
            http.get("/healthz", headers=evil),
            http.get("/metrics", headers={**evil, "Authorization": "Bearer " + "m" * 40}),
        ]
        for r in refused:
            assert r.status_code == 421, (r.request.url, r.status_code)
            assert r.json() == {"error": {"code": "bad_host", "message": "Host header not allowed"}}
            assert "set-cookie" not in r.headers and "location" not in r.headers
        assert _raw(server, b"GET /login HTTP/1.1\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 421")
        assert _raw(server, b"GET /login HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: attacker.example\r\n"
                            b"Connection: close\r\n\r\n").startswith(b"HTTP/1.1 421")

        # The same requests with a loopback Host work: the sign-in page, the dev login, the API.
        for host in (f"127.0.0.1:{_port(server)}", f"localhost:{_port(server)}", "localhost"):
            page = http.get("/login", headers={"Host": host})
            assert page.status_code == 200, host
        page = http.get("/login")
        login_token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
        signed = http.post("/auth/dev-login", data={"login_token": login_token, "next": "/endpoints/vend"})
        assert signed.status_code == 303 and signed.headers["location"] == "/endpoints/vend"
        assert http.get("/endpoints/vend").status_code == 200
        assert http.get("/api/v1/endpoints", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_dev_login_needs_a_loopback_listener():
    for host in ("0.0.0.0", "::", "192.0.2.10", "board.example"):
        with pytest.raises(ConfigError, match="SWITCHBOARD_DEV_LOGIN"):
            load_settings(dev_login=True, host=host)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert load_settings(dev_login=True, host=host).dev_login


async def test_base_url_host_is_served_and_others_are_not(core, live_server):
    srv = live_server(base_url="https://queue.example.org")
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        assert http.get("/login", headers={"Host": "queue.example.org"}).status_code == 200
        assert http.get("/login", headers={"Host": "queue.example.org:443"}).status_code == 200
        assert http.get("/login", headers={"Host": "other.example.org"}).status_code == 421
        assert http.get("/login", headers={"Host": "queue.example.org.attacker.example"}).status_code == 421


async def test_no_redirect_carries_a_refused_host(core, server):
    agent = await vend(core, "redirect")
    body = json.dumps(INIT)
    headers = {"Host": "evil.com", "Accept": ACCEPT, "Content-Type": "application/json",
               "Authorization": f"Bearer {agent.credential}"}
    with httpx.Client(base_url=server.url, timeout=10, follow_redirects=False) as http:
        for path in (f"/mcp/{agent.slug}/", f"/mcp/{agent.slug}", "/todos/", "/api/v1/endpoints/"):
            r = http.post(path, content=body, headers=headers)
            assert r.status_code == 421, (path, r.status_code, r.headers.get("location"))
            assert "location" not in r.headers
        # With an allowed Host the trailing-slash redirect still happens, to that Host.
        ok = http.post(f"/mcp/{agent.slug}/", content=body, headers={**headers, "Host": f"localhost:{_port(server)}"})
        assert ok.status_code == 307 and ok.headers["location"] == f"http://localhost:{_port(server)}/mcp/{agent.slug}"


async def test_two_authorization_headers_are_refused_on_mcp_api_and_metrics(core, server):
    agent = await vend(core, "twice")
    token, _ = await api_tokens.create(core, agent.human)
    port = _port(server)
    body = json.dumps(INIT).encode()
    cases = [
        (f"POST /mcp/{agent.slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: {ACCEPT}\r\n"
         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n", body,
         f"Bearer {agent.credential}"),
        (f"GET /api/v1/endpoints HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n", b"", f"Bearer {token}"),
        (f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n", b"", "Bearer " + "m" * 40),
    ]
    for head, payload, credential in cases:
        once = _raw(server, (head + f"Authorization: {credential}\r\nConnection: close\r\n\r\n").encode() + payload)
        assert once.startswith(b"HTTP/1.1 200"), once[:200]
        for second in (credential, "Bearer sbk_" + "x" * 40, "Basic eDp5"):
            twice = _raw(server, (head + f"Authorization: {credential}\r\nAuthorization: {second}\r\n"
                                         "Connection: close\r\n\r\n").encode() + payload)
            assert twice.startswith(b"HTTP/1.1 400"), twice[:200]
            assert twice.endswith(b'{"error":{"code":"invalid","message":"more than one Authorization header"}}')


async def test_the_mcp_gateway_still_checks_origin(core, server):
    agent = await vend(core, "origin")
    raw = Raw(server.url, agent.slug, agent.credential, Origin="http://attacker.example")
    assert raw.initialize().status_code == 403


def _sample(srv, name: str) -> float:
    text = httpx.get(srv.url + "/metrics", headers={"Authorization": "Bearer " + "m" * 40}, timeout=10).text
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


async def test_one_credential_cannot_open_sessions_past_the_cap(core, live_server):
    srv = live_server(mcp_max_sessions_per_endpoint=3, rate_limit_burst=200)
    agent = await vend(core, "sessions")
    other = await vend(core, "sessions-other")
    kept = Raw(srv.url, other.slug, other.credential)
    assert kept.initialize().status_code == 200
    opened = []
    for _ in range(12):
        raw = Raw(srv.url, agent.slug, agent.credential)
        assert raw.initialize().status_code == 200
        opened.append(raw)
    assert _sample(srv, "switchboard_mcp_sessions") == 4  # three of this endpoint, one of the other
    assert _sample(srv, "switchboard_mcp_sessions_evicted_total") == 9
    # The least recently used sessions ended; the three newest and the other endpoint's still work.
    statuses = [raw.post("tools/list").status_code for raw in opened]
    assert statuses == [404] * 9 + [200] * 3
    assert kept.post("tools/list").status_code == 200
    # A session in use is never the one ended: the oldest, used just now, outlives newer idle ones.
    opened[9].post("tools/list")
    fresh = Raw(srv.url, agent.slug, agent.credential)
    assert fresh.initialize().status_code == 200
    assert [raw.post("tools/list").status_code for raw in opened[9:]] == [200, 404, 200]
    for raw in [*opened, kept, fresh]:
        raw.close()


async def test_a_new_session_is_refused_when_every_session_is_busy(core, live_server):
    srv = live_server(mcp_max_sessions_per_endpoint=2)
    agent = await vend(core, "busy")
    streams = []
    with httpx.Client(timeout=30) as http:
        try:
            for _ in range(2):
                raw = Raw(srv.url, agent.slug, agent.credential)
                assert raw.initialize().status_code == 200
                headers = {**raw.headers, "Accept": "text/event-stream", "Mcp-Session-Id": raw.session_id,
                           "MCP-Protocol-Version": "2025-11-25"}
                stream = http.stream("GET", raw.url, headers=headers)
                response = stream.__enter__()
                assert response.status_code == 200
                streams.append(stream)
            refused = Raw(srv.url, agent.slug, agent.credential).initialize()
            assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
            assert refused.json()["error"]["code"] == "too_many_sessions"
            assert _sample(srv, "switchboard_mcp_sessions_refused_total") == 1
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
