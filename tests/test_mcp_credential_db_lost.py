"""A request whose credential lookup loses its database connection (a restarted or terminated
PostgreSQL, as the chaos soak injects) is answered 503 `unavailable` with Retry-After, as a database
that does not answer in time is, never a bare HTTP 500 (docs/reliability.md, soak finding 5).

After a database restart every process's LISTEN connection reconnects and drops its whole credential
cache, so the next requests of every agent look their credential up in the database; in the 10-minute
soak five of them met the restart and were answered "Internal Server Error" by the ASGI server."""

from __future__ import annotations

import asyncio
import json

import httpx
import psycopg
import pytest

from conftest import make_settings, start_thread_server, terminate_lock_waiter
from mcp_support import ACCEPT, vend


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, mcp_auth_cache_seconds=0))
    yield srv
    srv.stop()


async def test_a_credential_lookup_whose_connection_is_cut_answers_503_unavailable(core, server, pg_uri):
    a = await vend(core, agent="cut")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Authorization": f"Bearer {a.credential}", "Accept": ACCEPT, "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as http:
        with psycopg.connect(pg_uri, autocommit=True) as admin, psycopg.connect(pg_uri) as locker:
            # Hold the endpoint's row: the lookup's `last_used_at` touch waits on it; then cut that backend.
            locker.execute("SELECT id FROM endpoints WHERE slug = %s FOR UPDATE", (a.slug,))
            request = asyncio.create_task(http.post(a.url(server.url), content=json.dumps(init), headers=headers))
            await terminate_lock_waiter(admin, "the credential lookup (on the endpoint's row)")
            r = await asyncio.wait_for(request, 15)
            locker.rollback()
        assert r.status_code == 503, (r.status_code, r.text[:200])
        assert r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "unavailable"
        # The pool replaced the broken connection: the same request now opens a session.
        again = await http.post(a.url(server.url), content=json.dumps(init), headers=headers)
        assert again.status_code == 200 and again.headers.get("mcp-session-id")
