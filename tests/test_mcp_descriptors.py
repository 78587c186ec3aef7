"""Near its open-file limit a serving process refuses new MCP connections with a clear 503 instead of
failing to accept them: a `switchboard serve` with a hard limit of 320 descriptors, filled with idle
sessions holding their GET streams until it refuses; the sessions already open keep working and the
process keeps answering /healthz."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys
import threading
import time

import httpx

from conftest import ROOT, free_port
from mcp_support import vend

LIMIT = 320


def start_limited_server(pg_uri: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, SWITCHBOARD_DATABASE_URL=pg_uri, SWITCHBOARD_PORT=str(port), SWITCHBOARD_HOST="127.0.0.1",
               SWITCHBOARD_LOG_LEVEL="warning", SWITCHBOARD_LOG_FORMAT="json", SWITCHBOARD_RATE_LIMIT_RPS="1000",
               SWITCHBOARD_RATE_LIMIT_BURST="1000", SWITCHBOARD_MCP_MAX_SESSIONS_PER_ENDPOINT="1000",
               SWITCHBOARD_SECRET_KEY="test-secret-key-" + "k" * 32)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

    proc = subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=env, cwd=ROOT, preexec_fn=limit,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 40
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)


async def open_idle_session(port: int, slug: str, credential: str) -> tuple[int, bytes, asyncio.StreamWriter]:
    """initialize + initialized + GET stream on one connection; returns (status, body, writer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /mcp/{slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {credential}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")

    async def exchange(extra: str, body: bytes) -> tuple[int, dict, bytes]:
        writer.write((head + extra + f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
        status = int((await reader.readline()).split(b" ", 2)[1])
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", 0))
        return status, headers, (await reader.readexactly(n)) if n else b""

    status, headers, body = await exchange("", b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{'
                                               b'"protocolVersion":"2025-11-25","capabilities":{},'
                                               b'"clientInfo":{"name":"fd","version":"0"}}}')
    if status != 200:
        return status, body, writer
    sid = headers["mcp-session-id"]
    session = f"Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
    status, _, body = await exchange(session, b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert status == 202, (status, body)
    writer.write((f"GET /mcp/{slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {credential}\r\n"
                  f"Accept: text/event-stream\r\n{session}\r\n").encode())
    status = int((await reader.readline()).split(b" ", 2)[1])
    body = b""
    if status != 200:
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = await reader.readexactly(length)
    return status, body, writer


async def test_near_the_descriptor_limit_new_connections_get_a_clear_503(core, pg_uri):
    agents = [await vend(core, agent=f"fd{i}") for i in range(4)]
    proc, url = start_limited_server(pg_uri)
    port = int(url.rsplit(":", 1)[1])
    writers: list[asyncio.StreamWriter] = []
    refusal = None
    try:
        for i in range(LIMIT):
            a = agents[i % len(agents)]
            status, body, writer = await open_idle_session(port, a.slug, a.credential)
            writers.append(writer)
            if status != 200:
                refusal = (status, body)
                break
        assert refusal is not None, "no refusal before the limit"
        status, body = refusal
        assert status == 503 and b'"too_many_connections"' in body and b"open files" in body, refusal
        assert len(writers) > 150  # most of the limit was usable
        assert proc.poll() is None
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await http.get(url + "/healthz")).status_code == 200
        # Closing some sessions makes room again.
        for w in writers[:40]:
            w.close()
        await asyncio.sleep(0.6)
        status, _, writer = await open_idle_session(port, agents[0].slug, agents[0].credential)
        writers.append(writer)
        assert status == 200
    finally:
        for w in writers:
            w.close()
        proc.terminate()
        proc.wait(15)
