"""Soak finding 4 (docs/reliability.md): session-era calls in flight while their endpoint is revoked.

A revoked endpoint's open session is told why on its next request (the `unauthorized` tool error) and
ended shortly after; from then on a request naming it is refused like any other request with the
revoked credential (401). Calls that are in flight at that moment used to be answered by the MCP
SDK's transport with HTTP 500 ("Session terminated before the request completed", "Error handling
POST request"), because ending the session closed the streams their answers were to travel on.

Here eight session-era clients call `list_todos` in a loop on one endpoint while it is revoked, as
the soak's agents did, over several rounds: every answer must be a success (before the revocation),
the `unauthorized` tool error or 401, and every client must reach its 401.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import httpx
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import ACCEPT, vend
from switchboard.core import endpoints

SESSION_ERA = "2025-11-25"
CLIENTS = 8
ROUNDS = 4


@pytest.fixture(scope="module")
def server(pg_uri):
    # Credentials are not cached, so the revocation by the test's own core shows at once.
    srv = start_thread_server(make_settings(pg_uri, mcp_auth_cache_seconds=0, rate_limit_rps=100_000,
                                            rate_limit_burst=100_000))
    yield srv
    srv.stop()


class Client:
    """A light session-era client: initialize, notifications/initialized, then tool calls."""

    def __init__(self, http: httpx.AsyncClient, url: str, credential: str) -> None:
        self.http, self.url = http, url
        self.headers = {"Authorization": f"Bearer {credential}", "Accept": ACCEPT, "Content-Type": "application/json"}
        self._id = 0

    async def post(self, method: str, params: dict | None = None, *, notify: bool = False) -> httpx.Response:
        msg: dict = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self._id += 1
            msg["id"] = self._id
        return await self.http.post(self.url, content=json.dumps(msg), headers=self.headers)

    async def open(self) -> None:
        r = await self.post("initialize", {"protocolVersion": SESSION_ERA, "capabilities": {},
                                           "clientInfo": {"name": "in-flight", "version": "0"}})
        assert r.status_code == 200, r.text
        self.headers.update({"Mcp-Session-Id": r.headers["mcp-session-id"], "MCP-Protocol-Version": SESSION_ERA})
        assert (await self.post("notifications/initialized", notify=True)).status_code == 202


def kind_of(r: httpx.Response) -> str:
    """'ok', 'unauthorized' (the tool error), '401', or the unexpected answer itself."""
    if r.status_code == 401:
        return "401"
    if r.status_code == 200:
        result = r.json().get("result") or {}
        if not result.get("isError"):
            return "ok"
        error = json.loads(result["content"][0]["text"])["error"]
        if error["code"] == "unauthorized":
            return "unauthorized"
    return f"HTTP {r.status_code}: {r.text[:200]}"


async def test_calls_in_flight_while_a_revoked_session_ends_are_refused_not_500(core, server):
    seen: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        agent = await vend(core, agent=f"inflight{round_}", queues=["inbox"])
        url = f"{server.url}/mcp/{agent.slug}"
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=CLIENTS * 2)) as http:
            clients = [Client(http, url, agent.credential) for _ in range(CLIENTS)]
            await asyncio.gather(*(c.open() for c in clients))
            revoked = asyncio.Event()

            async def work(client: Client) -> list[str]:
                kinds = []
                while True:
                    kind = kind_of(await client.post("tools/call", {"name": "list_todos", "arguments": {}}))
                    kinds.append(kind)
                    if kind == "401" or (kind == "ok" and revoked.is_set() and len(kinds) > 10_000):
                        return kinds
                    if kind not in ("ok", "unauthorized"):
                        return kinds  # unexpected: stop and report

            tasks = [asyncio.create_task(work(c)) for c in clients]
            await asyncio.sleep(0.3)
            await endpoints.revoke(core, agent.human, agent.slug)
            revoked.set()
            results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        for kinds in results:
            seen.update(kinds)
            assert kinds[-1] == "401", kinds[-3:]
    unexpected = {k: n for k, n in seen.items() if k not in ("ok", "unauthorized", "401")}
    assert not unexpected, (unexpected, seen)
    assert seen["unauthorized"] > 0 and seen["401"] == CLIENTS * ROUNDS
