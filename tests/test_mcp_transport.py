"""The MCP transport at /mcp/<slug>: auth, limits, Host/Origin, both protocol eras, live sessions and
server-to-client pushes. Real server on a free port, real PostgreSQL, the official SDK client."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import mcp_types as types
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import Raw, body, eventually, push, sdk, vend
from switchboard.core import endpoints
from switchboard.core.events import Event
from switchboard.mcp.auth import CredentialCache

UNAUTHORIZED = b'{"error":{"code":"unauthorized","message":"a valid endpoint credential is required"}}'


@pytest.fixture(scope="module")
def server(pg_uri):
    # Credential lookups are not cached here, so a revocation by the test's own core shows at once.
    srv = start_thread_server(make_settings(pg_uri, mcp_auth_cache_seconds=0))
    yield srv
    srv.stop()


async def attempt_row(core, todo_id: str) -> dict:
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM todo_attempts WHERE todo_id = %s ORDER BY seq", (todo_id,))
        return await cur.fetchall()


# ------------------------------------------------------------------------------------------- auth

async def test_missing_unknown_revoked_and_expired_credentials_get_the_same_401(core, server):
    a = await vend(core, agent="a")
    revoked = await vend(core, agent="r")
    expired = await vend(core, agent="e")
    ok = Raw(server.url, a.slug, a.credential)
    assert ok.initialize().status_code == 200
    await endpoints.revoke(core, revoked.human, revoked.slug)
    async with core.pool.connection() as conn:
        await conn.execute("UPDATE endpoints SET expires_at = now() - interval '1 second' WHERE slug = %s",
                           (expired.slug,))
    cases = {
        "missing": Raw(server.url, a.slug, None),
        "unknown": Raw(server.url, a.slug, "sbk_" + "x" * 43),
        "not a bearer": Raw(server.url, a.slug, None, Authorization=f"Basic {a.credential}"),
        "revoked": Raw(server.url, revoked.slug, revoked.credential),
        "expired": Raw(server.url, expired.slug, expired.credential),
    }
    for name, raw in cases.items():
        r = raw.initialize()
        assert r.status_code == 401, name
        metadata = raw.url.replace("/mcp/", "/.well-known/oauth-protected-resource/mcp/")  # RFC 9728
        assert r.headers["www-authenticate"] == f'Bearer realm="switchboard", resource_metadata="{metadata}"', name
        assert r.content == UNAUTHORIZED, name
    # A session opened before the revocation stops working too: its next call is told why, as the
    # `unauthorized` tool error (docs/mcp.md, transport rules).
    await endpoints.revoke(core, a.human, a.slug)
    told = ok.call("list_todos")
    assert told.status_code == 200 and told.json()["result"]["isError"]
    assert json.loads(told.json()["result"]["content"][0]["text"])["error"]["code"] == "unauthorized"


async def test_valid_credential_on_another_slug_is_403(core, server):
    a = await vend(core, agent="a")
    b = await vend(core, agent="b")
    r = Raw(server.url, b.slug, a.credential).initialize()
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    assert Raw(server.url, "no-such-slug", a.credential).initialize().status_code == 403


async def test_a_session_used_by_another_endpoint_is_404(core, server):
    a = await vend(core, agent="a")
    b = await vend(core, agent="b")
    ra = Raw(server.url, a.slug, a.credential)
    assert ra.initialize().status_code == 200
    rb = Raw(server.url, b.slug, b.credential)
    rb.session_id = ra.session_id  # B presents A's session on its own URL
    r = rb.call("list_todos")
    assert r.status_code == 404
    assert ra.call("list_todos").status_code == 200  # A's session is unharmed


def test_cache_forgets_a_revoked_endpoint_at_once():
    cache = CredentialCache(60)
    cache._entries[b"k"] = (time.monotonic() + 60, type("P", (), {"caller": type("C", (), {"endpoint_id": "e1"})})())
    cache.on_event(Event(verb="endpoint_revoked", todo={"id": ""}, endpoint_id="e2", queue=""))
    assert b"k" in cache._entries
    cache.on_event(Event(verb="endpoint_revoked", todo={"id": ""}, endpoint_id="e1", queue=""))
    assert b"k" not in cache._entries


# ----------------------------------------------------------------------------------------- limits

async def test_body_over_one_mib_is_413(core, server):
    a = await vend(core)
    raw = Raw(server.url, a.slug, a.credential)
    assert raw.initialize().status_code == 200
    big = {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
           "params": {"name": "list_todos", "arguments": {"state": "x" * (1024 * 1024)}}}
    h = dict(raw.headers, **{"Mcp-Session-Id": raw.session_id, "MCP-Protocol-Version": "2025-11-25"})
    r = raw.http.post(raw.url, content=json.dumps(big), headers=h)
    assert r.status_code == 413

    def chunks():  # no Content-Length: the SDK's streaming cap answers
        yield b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"list_todos","arguments":{"state":"'
        for _ in range(1100):
            yield b"x" * 1024
        yield b'"}}}'

    r = raw.http.post(raw.url, content=chunks(), headers=h)
    assert r.status_code == 413
    assert raw.call("list_todos").status_code == 200


async def test_rate_limit_answers_429_with_retry_after_and_spares_other_endpoints(core, live_server):
    srv = live_server(rate_limit_rps=0.5, rate_limit_burst=5)  # slow refill: robust on a loaded machine
    flood = await vend(core, agent="flood")
    calm = await vend(core, agent="calm")
    f = Raw(srv.url, flood.slug, flood.credential)
    c = Raw(srv.url, calm.slug, calm.credential)
    assert f.initialize().status_code == 200  # initialize + initialized: 2 tokens
    assert c.initialize().status_code == 200
    statuses = [f.call("list_todos").status_code for _ in range(12)]
    assert statuses[:3] == [200, 200, 200]
    assert 429 in statuses
    limited = next(r for r in (f.call("list_todos") for _ in range(3)) if r.status_code == 429)
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limited"
    # The flooded endpoint's empty bucket does not touch the calm one's.
    assert [c.call("list_todos").status_code for _ in range(3)] == [200, 200, 200]
    time.sleep(int(limited.headers["retry-after"]))  # the bucket refills as announced
    assert f.call("list_todos").status_code == 200


async def test_host_and_origin_are_checked(core, server):
    a = await vend(core)
    port = server.url.rsplit(":", 1)[1]
    assert Raw(server.url, a.slug, a.credential, Host=f"evil.example:{port}").initialize().status_code == 421
    assert Raw(server.url, a.slug, a.credential, Origin="http://evil.example").initialize().status_code == 403
    assert Raw(server.url, a.slug, a.credential, Host=f"localhost:{port}",
               Origin=f"http://localhost:{port}").initialize().status_code == 200


async def test_base_url_host_is_allowed(core, live_server):
    srv = live_server(base_url="https://queue.example.org")
    a = await vend(core)
    assert Raw(srv.url, a.slug, a.credential, Host="queue.example.org",
               Origin="https://queue.example.org").initialize().status_code == 200
    assert Raw(srv.url, a.slug, a.credential, Host="other.example.org").initialize().status_code == 421


# ------------------------------------------------------------------------------------ eras, sessions

async def test_session_era_records_the_session_id_as_claimer_session(core, server):
    a = await vend(core)
    todo = await push(core, a)
    seen: list[str] = []
    async with sdk(server.url, a, mode="legacy", sessions=seen) as c:
        assert c.protocol_version == "2025-11-25"
        got = body(await c.call_tool("claim_next", {"claimant": "w"}))
        assert got["todo"]["id"] == todo["id"]
    rows = await attempt_row(core, todo["id"])
    assert len(seen) == 1 and rows[0]["claimer_session"] == seen[0]


async def test_2026_era_works_without_a_session(core, server):
    a = await vend(core)
    todo = await push(core, a)
    seen: list[str] = []
    async with sdk(server.url, a, mode="auto", sessions=seen) as c:
        assert c.protocol_version == "2026-07-28"
        assert "lease" in (c.instructions or "")
        assert "claim_next" in [t.name for t in (await c.list_tools()).tools]
        got = body(await c.call_tool("claim_next", {"claimant": "w"}))
        assert got["todo"]["id"] == todo["id"]
        done = body(await c.call_tool("complete", {"id": todo["id"], "summary": "ok"}))
        assert done["state"] == "done"
    assert seen == []
    rows = await attempt_row(core, todo["id"])
    assert rows[0]["claimer_session"] is None and rows[0]["outcome"] == "completed"


async def test_instructions_carry_the_lease_contract(core, server):
    a = await vend(core, queues=["build", "deploy"], lease_ttl=600)
    async with sdk(server.url, a) as c:
        text = c.instructions
    assert "600 s" in text and "86400" in text
    assert "heartbeat" in text and "conflict" in text and "require_fence" in text
    assert "build, deploy" in text
    assert "never instructions" in text


async def test_live_sessions_are_registered_tracked_and_removed(core, server):
    a = await vend(core, queues=["build", "deploy"])
    registry = server.app.state.surfaces.mcp.sessions
    seen: list[str] = []
    async with sdk(server.url, a, sessions=seen) as c:
        await c.subscribe_resource("switchboard://queues/build")
        live = registry.get(seen[0])
        assert live is not None and live.endpoint_id == a.endpoint_id
        assert live.caller.session_id == seen[0] and live.channel is False
        assert live.subscriptions == {"switchboard://queues/build"}
        await c.unsubscribe_resource("switchboard://queues/build")
        assert live.subscriptions == set()
    await eventually(lambda: registry.get(seen[0]) is None)  # DELETE ended the session


async def test_channel_capability_is_recorded(core, server):
    a = await vend(core)
    raw = Raw(server.url, a.slug, a.credential)
    r = raw.initialize({"experimental": {"claude/channel": {}}})
    assert r.json()["result"]["capabilities"]["experimental"] == {"claude/channel": {}}
    registry = server.app.state.surfaces.mcp.sessions
    live = await eventually(lambda: registry.get(raw.session_id))
    assert live.channel is True
    plain = Raw(server.url, a.slug, a.credential)
    plain.initialize()
    assert (await eventually(lambda: registry.get(plain.session_id))).channel is False


async def test_a_push_from_outside_any_request_reaches_the_get_stream(core, server):
    """ServerSession.send_notification with no related request goes out on the client's GET stream."""
    a = await vend(core)
    registry = server.app.state.surfaces.mcp.sessions
    got = asyncio.Event()
    uris: list[str] = []
    server_loop: list = []
    def remember_loop(live) -> None:
        server_loop.append(asyncio.get_running_loop())

    registry.on_added.append(remember_loop)

    async def on_message(message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            uris.append(str(message.params.uri))
            got.set()

    seen: list[str] = []
    try:
        async with sdk(server.url, a, sessions=seen, message_handler=on_message):
            live = await eventually(lambda: registry.get(seen[0]))
            note = types.ResourceUpdatedNotification(
                params=types.ResourceUpdatedNotificationParams(uri="switchboard://queues/inbox"))
            for _ in range(100):  # the GET stream opens just after initialize; until then pushes are dropped
                asyncio.run_coroutine_threadsafe(live.session.send_notification(note), server_loop[0]).result(5)
                try:
                    await asyncio.wait_for(got.wait(), 0.1)
                    break
                except TimeoutError:
                    pass
    finally:
        registry.on_added.remove(remember_loop)  # keep the doorbell's own callback
    assert uris and uris[0] == "switchboard://queues/inbox"


async def test_queue_resources_are_listed_and_read(core, server):
    a = await vend(core, queues=["build", "deploy"])
    b = await vend(core, "bob", agent="b", queues=["build"])
    await push(core, a, queue="build")
    await push(core, a, queue="build")
    await push(core, b, queue="build")  # another endpoint's todo is not counted
    async with sdk(server.url, a) as c:
        uris = sorted(str(r.uri) for r in (await c.list_resources()).resources)
        assert uris == ["switchboard://queues/build", "switchboard://queues/deploy"]
        templates = (await c.list_resource_templates()).resource_templates
        assert templates[0].uri_template == "switchboard://queues/{queue}"
        read = await c.read_resource("switchboard://queues/build")
        assert json.loads(read.contents[0].text) == {"queue": "build", "pending": 2, "claimed": 0,
                                                     "input-required": 0, "retry_scheduled": 0}
        errors = []
        for uri in ("switchboard://queues/elsewhere", "switchboard://nothing/1"):
            with pytest.raises(Exception) as exc:
                await c.read_resource(uri)
            errors.append(str(exc.value))
        assert errors[0] == errors[1]
        caps = c.server_capabilities
        assert caps.resources.subscribe is True


async def test_resource_providers_plug_in(core, server):
    """A provider the MCP surface holds is listed, read and named in the instructions."""
    from switchboard.core.errors import NotFound

    class Provider:
        async def list_resources(self, caller):
            return [types.Resource(uri="switchboard://extra/1", name="extra", mime_type="text/plain")]

        def list_templates(self, caller):
            return [types.ResourceTemplate(uri_template="switchboard://extra/{n}", name="extra")]

        async def read(self, caller, uri):
            if not uri.startswith("switchboard://extra/"):
                return None
            if uri != "switchboard://extra/1":
                raise NotFound()
            return "text/plain", f"hello {caller.slug}"

        def instructions(self):
            return "- Extra resources live under switchboard://extra/."

    providers = server.app.state.surfaces.mcp.providers
    providers.append(Provider())
    try:
        a = await vend(core)
        async with sdk(server.url, a) as c:
            assert "switchboard://extra/" in c.instructions
            assert "switchboard://extra/1" in [str(r.uri) for r in (await c.list_resources()).resources]
            assert "switchboard://extra/{n}" in [t.uri_template for t in
                                                 (await c.list_resource_templates()).resource_templates]
            assert (await c.read_resource("switchboard://extra/1")).contents[0].text == f"hello {a.slug}"
            with pytest.raises(Exception) as unknown:
                await c.read_resource("switchboard://extra/2")
            with pytest.raises(Exception) as nowhere:
                await c.read_resource("switchboard://other/2")
            assert str(unknown.value) == str(nowhere.value)
    finally:
        providers.clear()


async def test_delete_ends_the_session(core, server):
    a = await vend(core)
    raw = Raw(server.url, a.slug, a.credential)
    raw.initialize()
    h = dict(raw.headers, **{"Mcp-Session-Id": raw.session_id, "MCP-Protocol-Version": "2025-11-25"})
    stream_status: list[int] = []

    def open_stream() -> None:
        with httpx.Client(timeout=10) as http:
            with http.stream("GET", raw.url, headers=dict(h, Accept="text/event-stream")) as r:
                stream_status.append(r.status_code)
                for _ in r.iter_bytes():
                    pass

    t = threading.Thread(target=open_stream, daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while not stream_status and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert stream_status == [200]
    assert raw.http.delete(raw.url, headers=h).status_code == 200
    t.join(5)
    assert not t.is_alive()  # the stream closed with the session
    assert raw.call("list_todos").status_code == 404
