"""The 2026-era doorbell: `subscriptions/listen` with the official SDK client (`Client.listen()`),
across two serving processes: the stream is held by one, the work is pushed through the other.

REQ-16's rules hold on listen streams as on session streams: a ring per ready todo, a released todo
rings again inside the gate window; a stream is rung at once for what is already pending; only the
caller's own queue resources are honored (another endpoint's queue of the same name never rings it);
a revoked endpoint's stream ends."""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest
from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost

from conftest import start_process_server
from mcp_support import body, push, sdk, vend
from switchboard.core import api_tokens, endpoints
from switchboard.mcp.resources import queue_uri

INBOX = queue_uri("inbox")


@pytest.fixture
def two_processes(core, pg_uri):
    servers = [start_process_server(pg_uri, {"SWITCHBOARD_LOG_LEVEL": "warning"}) for _ in range(2)]
    for server in servers:  # keep reading their output, so a full pipe never stalls a server
        threading.Thread(target=server.process.stdout.read, daemon=True).start()
    yield servers
    for server in servers:
        server.stop()


async def next_event(sub, timeout: float = 10.0):
    with anyio.fail_after(timeout):
        return await sub.__anext__()


async def no_event(sub, wait: float = 1.0) -> None:
    with anyio.move_on_after(wait):
        got = await sub.__anext__()
        raise AssertionError(f"unexpected event {got}")


async def test_listen_rings_across_processes_under_the_doorbell_rules(core, two_processes):
    a_srv, b_srv = two_processes
    a = await vend(core, queues=["inbox"])
    neighbour = await vend(core, "bob", agent="other", queues=["inbox"])  # same queue name, another endpoint
    token, _ = await api_tokens.create(core, a.human)
    waiting = await push(core, a, "already pending")

    async def push_through_b(title: str) -> dict:
        async with httpx.AsyncClient(timeout=30) as http:
            r = await http.post(f"{b_srv.url}/api/v1/endpoints/{a.slug}/todos",
                                headers={"Authorization": f"Bearer {token}"}, json={"title": title, "queue": "inbox"})
        assert r.status_code == 201, r.text
        return r.json()["todo"]

    async with sdk(a_srv.url, a, mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        async with client.listen(resource_subscriptions=[INBOX, queue_uri("elsewhere")]) as sub:
            # Only the endpoint's own queue is honored; the other URI is left out of the acknowledgement.
            assert sub.honored.resource_subscriptions == [INBOX]
            assert not sub.honored.tools_list_changed
            # Rung at once for the todo already pending.
            assert await next_event(sub) == ResourceUpdated(uri=INBOX)
            await no_event(sub, 0.5)

            # A todo pushed through the other process rings this stream.
            made = await push_through_b("made in B")
            assert await next_event(sub) == ResourceUpdated(uri=INBOX)

            # Another endpoint's todo on a queue of the same name rings nobody here.
            await push(core, neighbour, "not yours")
            await no_event(sub, 1.0)

            # Claim through the 2026 era, then release: the re-queue clears the gate and rings again.
            claimed = body(await client.call_tool("claim", {"id": made["id"]}))
            assert claimed["id"] == made["id"]
            await no_event(sub, 0.5)  # a claim makes nothing ready
            body(await client.call_tool("release", {"id": made["id"]}))
            assert await next_event(sub) == ResourceUpdated(uri=INBOX)
            claimed = body(await client.call_tool("claim_next", {}))
            assert claimed["empty"] is False and claimed["todo"]["id"] in (made["id"], waiting["id"])


async def test_a_revoked_endpoints_listen_stream_ends(core, two_processes):
    a_srv, b_srv = two_processes
    a = await vend(core, queues=["inbox"])
    async with sdk(a_srv.url, a, mode="auto") as client:
        async with client.listen(resource_subscriptions=[INBOX]) as sub:
            await no_event(sub, 0.3)
            await endpoints.revoke(core, a.human, a.slug)  # committed by this (third) process
            with anyio.fail_after(5):
                try:
                    async for event in sub:
                        raise AssertionError(f"event after revocation: {event}")
                except SubscriptionLost:
                    pass  # the stream is gone either way
    # A new listen with the revoked credential is refused outright.
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(a.url(a_srv.url), headers={
            "Authorization": f"Bearer {a.credential}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "subscriptions/listen"},
            json={"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                  "params": {"notifications": {"resourceSubscriptions": [INBOX]},
                             "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                       "io.modelcontextprotocol/clientCapabilities": {}}}})
    assert r.status_code == 401, r.text
