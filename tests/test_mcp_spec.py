"""SPEC-0034 scenarios at the wire: the official SDK client against the real server and database.

Each test names the requirement and scenario it shows. Time is shortened through settings (no
retry backoff, one-second leases) and the reaper is run directly, never waited for.
"""

from __future__ import annotations

import asyncio

import pytest

from conftest import make_settings, start_thread_server
from mcp_support import body, error_body, push, sdk, vend
from switchboard.core import sweeps


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, retry_backoff_base_seconds=0, retry_backoff_max_seconds=0))
    yield srv
    srv.stop()


async def attempts(core, todo_id: str) -> list[dict]:
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM todo_attempts WHERE todo_id = %s ORDER BY seq", (todo_id,))
        return await cur.fetchall()


async def todo_row(core, todo_id: str) -> dict:
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM todos WHERE id = %s", (todo_id,))
        return await cur.fetchone()


def err(result) -> dict:
    return error_body(result)


async def test_req1_fields_after_a_claim(core, server):
    a = await vend(core)
    t = await push(core, a)
    seen: list[str] = []
    async with sdk(server.url, a, sessions=seen) as c:
        got = body(await c.call_tool("claim", {"id": t["id"], "claimant": "harness/box/fixer/run-7"}))
        assert got["attempt_seq"] == 1
    [row] = await attempts(core, t["id"])
    assert row["seq"] == 1 and row["claimer_kind"] == "endpoint"
    assert str(row["claimer_endpoint_id"]) == a.endpoint_id
    assert row["claimer_session"] == seen[0]
    assert row["claimant"] == "harness/box/fixer/run-7"
    assert row["outcome"] is None and row["ended_at"] is None


async def test_req5_a_file_url_as_artifact(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {}))
        e = err(await c.call_tool("complete", {"id": t["id"], "artifact": "file:///etc/passwd", "summary": "s"}))
        assert e["code"] == "invalid" and e["argument"] == "artifact"
        assert "/etc/passwd" not in e["message"]  # the value is not echoed
    assert (await todo_row(core, t["id"]))["state"] == "claimed"
    assert [r["ended_at"] for r in await attempts(core, t["id"])] == [None]


async def test_req5_no_summary_from_result_by_default(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {}))
        body(await c.call_tool("fail", {"id": t["id"], "result": {"error": "tests red"}}))
    [row] = await attempts(core, t["id"])
    assert row["summary"] is None
    assert (await todo_row(core, t["id"]))["result"] == {"error": "tests red"}


async def test_req5_summary_from_result_when_the_operator_opts_in(core, live_server):
    srv = live_server(attempt_summary_from_result=True)
    a = await vend(core)
    t = await push(core, a)
    async with sdk(srv.url, a) as c:
        body(await c.call_tool("claim_next", {}))
        body(await c.call_tool("fail", {"id": t["id"], "result": {"error": "tests red"}}))
    [row] = await attempts(core, t["id"])
    assert row["summary"] == '{"error":"tests red"}'


async def test_req6_the_agent_cannot_close_its_supervisors_attempt(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as harness, sdk(server.url, a) as agent:  # one credential, two sessions
        got = body(await harness.call_tool("claim", {"id": t["id"], "require_fence": True}))
        assert len(got["lease_token"]) >= 22  # 128 random bits, base64url
        assert err(await agent.call_tool("complete", {"id": t["id"]}))["code"] == "conflict"
    assert (await todo_row(core, t["id"]))["state"] == "claimed"
    [row] = await attempts(core, t["id"])
    assert row["ended_at"] is None and row["lease_token_hash"] is not None


async def test_req6_a_stale_workers_token(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as old, sdk(server.url, a) as new:
        first = body(await old.call_tool("claim_next", {"require_fence": True, "lease_ttl_seconds": 1}))
        await asyncio.sleep(1.2)  # attempt 1's lease lapses
        second = body(await new.call_tool("claim_next", {"require_fence": True}))
        assert second["todo"]["id"] == t["id"] and second["attempt_seq"] == 2
        assert second["lease_token"] != first["lease_token"]
        e = err(await old.call_tool("complete", {"id": t["id"], "lease_token": first["lease_token"]}))
        assert e["code"] == "conflict"
    rows = await attempts(core, t["id"])
    assert [(r["seq"], r["outcome"]) for r in rows] == [(1, "lease_expired"), (2, None)]
    assert (await todo_row(core, t["id"]))["state"] == "claimed"


async def test_req6_unfenced_client_unchanged(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        got = body(await c.call_tool("claim", {"id": t["id"]}))
        assert "lease_token" not in got
        assert body(await c.call_tool("heartbeat", {"id": t["id"]}))["state"] == "claimed"
        assert body(await c.call_tool("complete", {"id": t["id"], "result": {"ok": True}}))["state"] == "done"
    [row] = await attempts(core, t["id"])
    assert row["lease_token_hash"] is None and row["outcome"] == "completed"


async def test_req7_second_attempt_sees_the_first(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {"claimant": "w1"}))
        body(await c.call_tool("fail", {"id": t["id"], "summary": "tests still red",
                                        "artifact": "https://ci.example/run/1"}))
        got = body(await c.call_tool("claim_next", {"claimant": "w2"}))
    assert got["attempt_seq"] == 2 and got["attempts_total"] == 2
    prior = got["prior_attempts"][0]
    assert prior["summary"] == "tests still red" and prior["artifact"] == "https://ci.example/run/1"
    assert (prior["seq"], prior["claimant"], prior["outcome"], prior["died"]) == (1, "w1", "failed", False)
    assert not {"lease_token_hash", "claimer_session", "claimer_endpoint_id"} & set(prior)


async def test_req4_a_reaped_attempt_shows_as_died_to_the_next_claimer(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {"lease_ttl_seconds": 1}))
        body(await c.call_tool("heartbeat", {"id": t["id"], "lease_ttl_seconds": 1}))
        await asyncio.sleep(1.2)
        await sweeps.sweep_once(core)  # the reaper closes the lapsed attempt
        got = body(await c.call_tool("claim_next", {}))
    prior = got["prior_attempts"][0]
    assert (prior["outcome"], prior["died"], prior["summary"]) == ("reaped", True, None)
    assert prior["last_heartbeat_at"] is not None


async def test_req8_reading_a_dead_letter(core, server):
    a = await vend(core)
    t = await push(core, a, max_attempts=5)
    async with sdk(server.url, a) as c:
        for i in range(5):
            body(await c.call_tool("claim", {"id": t["id"]}))
            body(await c.call_tool("fail", {"id": t["id"], "summary": f"failure {i + 1}"}))
        got = body(await c.call_tool("get_todo", {"id": t["id"]}))
    assert got["dead_letter"] is True and got["next_retry_at"] is None and got["state"] == "failed"
    assert [x["seq"] for x in got["attempts"]] == [5, 4, 3, 2, 1]
    assert got["attempts"][0]["disposition"] == "dead_lettered"
    assert got["attempts"][1]["disposition"] == "retry_scheduled"
    assert (got["attempts_total"], got["attempts_pruned"]) == (5, 0)


async def test_req8_an_existing_endpoint_gets_the_verb(core, server):
    a = await vend(core, verbs=["list_todos", "claim_next", "complete"])  # vended without get_todo
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        assert "get_todo" in [tool.name for tool in (await c.list_tools()).tools]
        got = body(await c.call_tool("get_todo", {"id": t["id"]}))
    assert got["id"] == t["id"] and got["attempts"] == [] and got["attempts_total"] == 0


async def test_req9_release_on_shutdown(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {}))
        got = body(await c.call_tool("release", {"id": t["id"], "summary": "daemon stopping"}))
    assert got["state"] == "pending" and got["attempt"] == 1
    row = await todo_row(core, t["id"])
    assert row["state"] == "pending" and row["attempt"] == 1 and row["owner"] is None
    [att] = await attempts(core, t["id"])
    assert (att["outcome"], att["disposition"], att["summary"]) == ("released", "requeued", "daemon stopping")


async def test_req9_release_without_the_grant(core, server):
    a = await vend(core, verbs=["claim_next", "complete"])
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        assert "release" not in [tool.name for tool in (await c.list_tools()).tools]
        body(await c.call_tool("claim_next", {}))
        before = await todo_row(core, t["id"])
        assert err(await c.call_tool("release", {"id": t["id"], "summary": "x"}))["code"] == "forbidden"
    assert await todo_row(core, t["id"]) == before
    assert [r["ended_at"] for r in await attempts(core, t["id"])] == [None]


async def test_req10_foreign_todo_is_byte_identical_to_a_random_id(core, server):
    a = await vend(core, agent="a")
    b = await vend(core, "bob", agent="b")
    t = await push(core, a)
    async with sdk(server.url, a) as ca:
        body(await ca.call_tool("claim_next", {}))
        body(await ca.call_tool("heartbeat", {"id": t["id"]}))
    async with sdk(server.url, b) as cb:
        for verb in ("get_todo", "claim", "heartbeat", "complete", "fail", "release", "request_input"):
            foreign = await cb.call_tool(verb, {"id": t["id"]})
            random = await cb.call_tool(verb, {"id": "td_00000000-0000-0000-0000-000000000000"})
            assert foreign.is_error and random.is_error, verb
            assert foreign.content[0].text == random.content[0].text, verb
            assert error_body(foreign) == error_body(random) == {"code": "not_found", "message": "todo not found"}, verb
    assert (await todo_row(core, t["id"]))["state"] == "claimed"


async def test_req19_fence_mismatch_is_conflict(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        got = body(await c.call_tool("claim_next", {"require_fence": True}))
        assert err(await c.call_tool("heartbeat", {"id": t["id"], "lease_token": "wrong"}))["code"] == "conflict"
        assert err(await c.call_tool("heartbeat", {"id": t["id"]}))["code"] == "conflict"
        ok = body(await c.call_tool("heartbeat", {"id": t["id"], "lease_token": got["lease_token"]}))
    assert ok["state"] == "claimed"


async def test_req19_a_token_on_an_unfenced_attempt_is_conflict(core, server):
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {}))
        e = err(await c.call_tool("complete", {"id": t["id"], "lease_token": "made-up"}))
    assert e["code"] == "conflict"
