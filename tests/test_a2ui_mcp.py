"""A2UI resources over MCP: the real app under uvicorn, the official SDK client, and raw JSON-RPC for bytes.

With SWITCHBOARD_A2UI=1 the resources are listed, offered as templates, named in the instructions and
readable by the owning endpoint only; a foreign todo reads exactly like an unknown one. With the flag
off they do not exist.
"""

from __future__ import annotations

import json

import pytest
from mcp.shared.exceptions import MCPError

from core_world import World
from mcp_support import Raw, sdk, vend
from switchboard.core import endpoints
from switchboard.mcp import a2ui_documents as documents
from test_a2ui import attempt_cards, card_texts, history_todo, validate

MIME = "application/a2ui+json"


async def _world(core):
    """Two humans' endpoints (alice's e1, bob's e2) as the core sees them, plus their credentials."""
    alice = await vend(core, "alice", agent="fixer", queues=["inbox"])
    bob = await vend(core, "bob", agent="fixer", queues=["inbox"])
    callers = []
    for agent in (alice, bob):
        callers.append(endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential)))
    w = World(core, alice.human, bob.human, callers[0], callers[1], alice.slug, bob.slug)
    return w, alice, bob


async def _read_error(client, uri: str) -> tuple:
    with pytest.raises(MCPError) as caught:
        await client.read_resource(uri, cache_mode="bypass")
    return caught.value.code, caught.value.message, caught.value.data


def _raw_read(base: str, agent, uri: str) -> bytes:
    """A fresh session whose second request is the read: the reply's bytes, request id included."""
    raw = Raw(base, agent.slug, agent.credential)
    try:
        assert raw.initialize().status_code == 200
        reply = raw.post("resources/read", {"uri": uri})
        assert reply.status_code == 200
        return reply.content
    finally:
        raw.close()


async def test_a2ui_resources_over_mcp(core, live_server):
    w, alice, bob = await _world(core)
    t, beat = await history_todo(core, w)
    theirs = await w.todo("bob's todo", caller=w.e2)
    srv = live_server(a2ui=True)

    async with sdk(srv.url, alice) as client:
        assert "switchboard://todo/{id}/a2ui" in client.instructions
        assert "switchboard://queue/{name}/a2ui" in client.instructions
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        assert listed["switchboard://queue/inbox/a2ui"].mime_type == MIME
        assert listed[f"switchboard://todo/{t['id']}/a2ui"].mime_type == MIME
        assert not any(theirs["id"] in uri for uri in listed)
        templates = {x.uri_template: x for x in (await client.list_resource_templates()).resource_templates}
        assert templates["switchboard://todo/{id}/a2ui"].mime_type == MIME
        assert templates["switchboard://queue/{name}/a2ui"].mime_type == MIME

        # The REQ-13 death, read over the wire.
        read = await client.read_resource(f"switchboard://todo/{t['id']}/a2ui")
        (content,) = read.contents
        assert content.mime_type == MIME and str(content.uri) == f"switchboard://todo/{t['id']}/a2ui"
        doc = json.loads(content.text)
        validate(doc)
        second, first = (card_texts(c) for c in attempt_cards(doc))
        assert second[0] == "Attempt 2 (seq 2) · reaped · died: no report"
        assert f"last heartbeat: {documents.when(beat)}" in second
        assert "<script>alert(1)</script>" in first

        queue = await client.read_resource("switchboard://queue/inbox/a2ui?w=480")
        (content,) = queue.contents
        assert content.mime_type == MIME and "fix the flaky build" in content.text
        assert "bob's todo" not in content.text
        validate(json.loads(content.text))

        # Foreign reads exactly like unknown; an ungranted queue like an unknown URI.
        foreign = await _read_error(client, f"switchboard://todo/{theirs['id']}/a2ui")
        unknown = await _read_error(client, "switchboard://todo/td_00000000-0000-0000-0000-000000000000/a2ui")
        assert foreign == unknown
        assert foreign[0] == -32002
        assert await _read_error(client, "switchboard://queue/ops/a2ui") == unknown
        assert await _read_error(client, "switchboard://nothing/here") == unknown

    # Byte for byte, over raw JSON-RPC (same request id in two fresh sessions).
    foreign_bytes = _raw_read(srv.url, alice, f"switchboard://todo/{theirs['id']}/a2ui")
    unknown_bytes = _raw_read(srv.url, alice, "switchboard://todo/td_00000000-0000-0000-0000-000000000000/a2ui")
    assert foreign_bytes == unknown_bytes
    assert theirs["id"].encode() not in foreign_bytes

    # The per-request (2026-07-28) era reads the same document; bob still cannot see alice's todo.
    async with sdk(srv.url, alice, mode="auto") as client:
        read = await client.read_resource(f"switchboard://todo/{t['id']}/a2ui")
        assert "died: no report" in read.contents[0].text
    async with sdk(srv.url, bob) as client:
        assert await _read_error(client, f"switchboard://todo/{t['id']}/a2ui") == unknown
        mine = await client.read_resource(f"switchboard://todo/{theirs['id']}/a2ui")
        assert "bob's todo" in mine.contents[0].text


async def test_flag_off_the_resources_do_not_exist(core, live_server):
    w, alice, _ = await _world(core)
    t, _ = await history_todo(core, w)
    srv = live_server()  # SWITCHBOARD_A2UI defaults to off
    async with sdk(srv.url, alice) as client:
        assert "a2ui" not in (client.instructions or "")
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
        assert uris and not any("a2ui" in u for u in uris)
        templates = [x.uri_template for x in (await client.list_resource_templates()).resource_templates]
        assert not any("a2ui" in x for x in templates)
        own = await _read_error(client, f"switchboard://todo/{t['id']}/a2ui")
        assert own == await _read_error(client, "switchboard://nothing/here")
        assert own[0] == -32002
