"""Logs of the real `switchboard serve` process: one structured line per request and per tool call,
and never a credential, API token, lease token, summary or artifact (REQ-6, REQ-19) — not even at
debug level, after a full fenced lifecycle with summaries and artifacts."""

from __future__ import annotations

import json
import threading
import uuid

import httpx

from conftest import start_process_server
from mcp_support import Raw, body, push, sdk, vend
from switchboard.core import api_tokens


async def test_a_fenced_lifecycle_leaves_no_secret_or_report_in_the_logs(core, pg_uri):
    srv = start_process_server(pg_uri, env={"SWITCHBOARD_LOG_LEVEL": "debug", "SWITCHBOARD_LOG_FORMAT": "json",
                                            "SWITCHBOARD_RETRY_BACKOFF_BASE_SECONDS": "0"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(ln.decode("utf-8", "replace")
                                                          for ln in srv.process.stdout), daemon=True)
    reader.start()
    secrets: list[str] = []
    try:
        a = await vend(core)
        api_token, _ = await api_tokens.create(core, a.human)
        secrets += [a.credential, api_token]
        t = await push(core, a, "lifecycle")

        def mark(kind: str) -> str:
            value = f"{kind}-{uuid.uuid4().hex}"
            secrets.append(value)
            return value

        async with sdk(srv.url, a) as c:
            got = body(await c.call_tool("claim_next", {"require_fence": True, "claimant": "logged-claimant"}))
            secrets.append(got["lease_token"])
            tok = got["lease_token"]
            body(await c.call_tool("heartbeat", {"id": t["id"], "lease_token": tok}))
            assert (await c.call_tool("heartbeat", {"id": t["id"], "lease_token": mark("wrongtoken")})).is_error
            body(await c.call_tool("release", {"id": t["id"], "lease_token": tok, "summary": mark("summary"),
                                               "artifact": "https://artifacts.example/" + mark("artifact")}))
            got = body(await c.call_tool("claim", {"id": t["id"], "require_fence": True}))
            secrets.append(got["lease_token"])
            body(await c.call_tool("fail", {"id": t["id"], "lease_token": got["lease_token"],
                                            "summary": mark("summary"), "result": {"e": mark("result")},
                                            "artifact": "mcp://cairn/" + mark("cairn").replace("-", "_")[:60]}))
            bad = await c.call_tool("complete", {"id": t["id"], "artifact": "file:///" + mark("badartifact")})
            assert bad.is_error
            got = body(await c.call_tool("claim_next", {"require_fence": True}))
            secrets.append(got["lease_token"])
            body(await c.call_tool("complete", {"id": t["id"], "lease_token": got["lease_token"],
                                                "summary": mark("summary"),
                                                "artifact": "https://artifacts.example/" + mark("artifact")}))
            body(await c.call_tool("get_todo", {"id": t["id"]}))
        bogus = "sbk_" + uuid.uuid4().hex
        secrets.append(bogus)
        assert Raw(srv.url, a.slug, bogus).initialize().status_code == 401
        r = httpx.get(f"{srv.url}/api/v1/todos/{t['id']}", headers={"Authorization": f"Bearer {api_token}"})
        assert r.status_code == 200 and len(r.json()["todo"]["attempts"]) == 3
    finally:
        srv.stop()
        reader.join(10)

    text = "".join(lines)
    leaked = [s for s in secrets if s in text]
    assert leaked == []
    records = [json.loads(ln) for ln in lines if ln.startswith("{")]
    calls = [r for r in records if r.get("msg") == "tool call"]
    assert {r["verb"] for r in calls} == {"claim_next", "heartbeat", "release", "claim", "fail", "complete",
                                          "get_todo"}
    for r in calls:
        assert r["endpoint"] == a.slug and r["todo_id"] == t["id"] and isinstance(r["latency_ms"], float)
    assert {r["outcome"] for r in calls} == {"ok", "conflict", "invalid"}
    requests = [r for r in records if r.get("msg") == "mcp request"]
    assert {r["status"] for r in requests} >= {200, 202, 401}
    assert all("latency_ms" in r and "method" in r for r in requests)
    assert any(r.get("msg") == "api request" and r["status"] == 200 for r in records)
