"""Interop with MCP clients nobody here wrote, against a real `switchboard serve` process.

- The official TypeScript SDK client (`@modelcontextprotocol/sdk`, Node): `sdk_client.mjs` drains,
  meets every error code a verb answers as a tool result, fails into a retry and a dead letter,
  releases, asks for input, subscribes to a queue and gets the doorbell's push, and is refused with a
  401 on a wrong credential. `examples/ts-agent/agent.mjs`, the agent the README shows, drains too.
- The MCP Inspector's command-line mode (`@modelcontextprotocol/inspector --cli`): tools/list,
  tools/call, resources/list, resources/read.

The clients are pinned in package.json / package-lock.json here and installed by `make test`
(`npm ci`). Node is required: without it, or without the installed packages, these tests fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, start_process_server
from mcp_support import push, vend
from switchboard.core import endpoints, todos
from switchboard.core.models import DEFAULT_VERBS, VERBS

HERE = Path(__file__).resolve().parent
MODULES = HERE / "node_modules"
AGENT = ROOT / "examples" / "ts-agent" / "agent.mjs"
INSPECTOR = MODULES / ".bin" / "mcp-inspector"
UNKNOWN_ID = "td_00000000-0000-0000-0000-000000000000"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not installed: the interop tests need Node (Debian's nodejs)")
    if not (MODULES / "@modelcontextprotocol" / "sdk").is_dir() or not INSPECTOR.exists():
        pytest.fail("tests/interop/node_modules is missing: run `make test` (or `npm ci` in tests/interop)")
    return found


@pytest.fixture(scope="module")
def server(pg_uri):
    # No retry backoff; a rate limit above the ~70 calls the TypeScript run makes in under a second.
    srv = start_process_server(pg_uri, env={"SWITCHBOARD_RETRY_BACKOFF_BASE_SECONDS": "0",
                                            "SWITCHBOARD_RETRY_BACKOFF_MAX_SECONDS": "0",
                                            "SWITCHBOARD_RATE_LIMIT_RPS": "500",
                                            "SWITCHBOARD_RATE_LIMIT_BURST": "500"})
    yield srv
    srv.stop()


async def run_node(script: Path, env: dict, *, on_line=None, timeout: float = 30) -> list[dict]:
    """Run a Node script; every stdout line is JSON. `on_line` may answer a line on stdin."""
    proc = await asyncio.create_subprocess_exec(
        node(), str(script), cwd=HERE, env={**os.environ, **env}, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    lines: list[dict] = []

    async def read() -> None:
        while raw := await proc.stdout.readline():
            line = json.loads(raw)
            lines.append(line)
            if on_line is not None and await on_line(line):
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()

    try:
        await asyncio.wait_for(asyncio.gather(read(), proc.wait()), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    err = (await proc.stderr.read()).decode()
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}:\n{err[-3000:]}"
    return lines


# ------------------------------------------------------------------------------ TypeScript SDK

async def test_typescript_sdk_client(core, server):
    a = await vend(core, agent="ts", queues=["work", "side", "inbox"], verbs=list(VERBS))
    c = await vend(core, agent="narrow", queues=["work"], verbs=["list_todos"])
    b = await vend(core, "bob", agent="other", queues=["work"])
    drain = [await push(core, a, f"drain {i}", queue="work", payload={"n": i}) for i in range(3)]
    foreign = await push(core, b, "not yours", queue="work")
    ids = {name: (await push(core, a, name, queue="side", max_attempts=2))["id"]
           for name in ("fenced", "retry", "release", "ask")}
    plan = {"a": {"url": a.url(server.url), "credential": a.credential},
            "c": {"url": c.url(server.url), "credential": c.credential},
            "foreign_id": foreign["id"], "unknown_id": UNKNOWN_ID, "ids": ids}
    pushed: list[dict] = []

    async def on_line(line: dict) -> bool:
        if line.get("waiting") == "push":
            pushed.append(await push(core, a, "rings the doorbell", queue="inbox"))
            return True
        return False

    lines = await run_node(HERE / "sdk_client.mjs", {"INTEROP_PLAN": json.dumps(plan)}, on_line=on_line)
    out = lines[-1]["result"]

    assert out["server"]["name"] == "switchboard" and out["instructions"]
    assert [t["name"] for t in out["tools"]] == list(VERBS) and all(t["outputSchema"] for t in out["tools"])
    assert out["resources"] == [f"switchboard://queues/{q}" for q in ("work", "side", "inbox")]

    # Drained in order with claim_next + complete; then {"empty": true}.
    assert [(d["id"], d["state"]) for d in out["drained"]] == [(t["id"], "done") for t in drain]
    assert out["drain_end"] == {"isError": False, "empty": True}

    # Every refusal reached the caller as a tool result: JSON text, no structured content.
    refusals = [out[k] for k in ("invalid_ttl", "invalid_unknown", "invalid_missing", "conflict_token",
                                 "conflict_missing_token", "conflict_held", "invalid_artifact",
                                 "forbidden_verb", "forbidden_queue")]
    refusals += [r for pair in out["not_found"].values() for r in pair.values()]
    for r in refusals:
        assert r.get("thrown") is not True, r
        assert r["isError"] is True and r["structured"] is False and json.loads(r["text"]) == {"error": r["error"]}
    assert out["invalid_ttl"]["error"]["code"] == "invalid"
    assert out["invalid_ttl"]["error"]["argument"] == "lease_ttl_seconds"
    assert out["invalid_unknown"]["error"]["argument"] == "nonsense"
    assert out["invalid_missing"]["error"]["argument"] == "id"
    assert out["invalid_artifact"]["error"]["argument"] == "artifact"
    for verb, pair in out["not_found"].items():  # byte-identical for a foreign and an unknown id
        assert pair["foreign"]["text"] == pair["unknown"]["text"], verb
        assert pair["foreign"]["error"] == {"code": "not_found", "message": "todo not found"}, verb
    assert out["fenced_claim"] == {"attempt_seq": 1, "has_token": True}
    for key in ("conflict_token", "conflict_missing_token", "conflict_held"):
        assert out[key]["error"]["code"] == "conflict", key
    assert out["fenced_complete"]["state"] == "done"
    assert out["scoped_tools"] == ["list_todos", "get_todo"]
    assert out["forbidden_verb"]["error"]["code"] == "forbidden"
    assert out["forbidden_queue"]["error"]["code"] == "forbidden"

    # fail: a retry below the cap, a dead letter at it, both attempts in the history.
    assert out["fail_retry"]["state"] == "failed" and out["fail_retry"]["dead_letter"] is False
    assert out["fail_retry"]["next_retry_at"]
    assert out["reclaim"]["attempt_seq"] == 2 and out["reclaim"]["prior_attempts"][0]["summary"] == "first try broke"
    assert out["fail_dead"]["dead_letter"] is True and out["fail_dead"]["next_retry_at"] is None
    assert [x["outcome"] for x in out["fail_history"]["attempts"]] == ["failed", "failed"]
    assert out["release"]["state"] == "pending"
    assert out["request_input"]["state"] == "input-required"

    # The doorbell rang for the push made while subscribed.
    assert len(pushed) == 1 and out["updated"] == "switchboard://queues/inbox"
    assert out["inbox"]["queue"] == "inbox" and out["inbox"]["pending"] == 1

    # A wrong credential: the client raises the transport's HTTP error carrying 401.
    assert out["unauthorized"]["thrown"] is True and out["unauthorized"]["code"] == 401

    # What the database holds agrees with what the client was told.
    for tid, state in ((ids["retry"], "failed"), (ids["release"], "pending"), (ids["ask"], "input-required")):
        async with core.pool.connection() as conn:
            row = await (await conn.execute("SELECT state FROM todos WHERE id = %s", (tid,))).fetchone()
        assert row["state"] == state, tid


async def test_typescript_agent_example_drains(core, server):
    """examples/ts-agent/agent.mjs, byte for byte, run where the pinned SDK is installed."""
    a = await vend(core, agent="example", queues=["inbox"])
    pushed = [await push(core, a, f"job {i}", payload={"n": i}) for i in range(3)]
    with tempfile.TemporaryDirectory(dir=HERE, prefix=".run-") as tmp:
        script = Path(tmp) / AGENT.name
        script.write_bytes(AGENT.read_bytes())
        lines = await run_node(script, {"SWITCHBOARD_MCP_URL": a.url(server.url),
                                        "SWITCHBOARD_CREDENTIAL": a.credential})
    assert [(line["id"], line["state"], line["attempt_seq"]) for line in lines] == [
        (t["id"], "done", 1) for t in pushed]
    for t in pushed:
        got = await todos.get(core, await _caller_of(core, a), t["id"])
        assert got["state"] == "done" and got["result"] == {"echo": t["payload"]}
        assert got["attempts"][0]["claimant"].startswith("ts-agent/")


@pytest.mark.parametrize("doc", ["README.md", "docs/mcp.md"])
def test_documented_typescript_agent_is_the_tested_file(doc):
    """The TypeScript snippet in the docs is the example file the test above runs, after its header."""
    text = (ROOT / doc).read_text()
    blocks = re.findall(r"```js\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1, f"{doc}: expected one js block"
    source = AGENT.read_text()
    assert source.endswith(blocks[0]) and blocks[0].startswith("import { Client }"), doc


async def _caller_of(core, agent):
    return endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))


# ---------------------------------------------------------------------------- MCP Inspector CLI

def inspector(server_url: str, agent, *args: str, exit_code: int = 0) -> dict:
    """One Inspector CLI run; its stdout is the JSON result. It exits 5 when a tool answers isError.
    Its own HOME keeps the Inspector's state files out of the user's home and apart between runs."""
    with tempfile.TemporaryDirectory(prefix="inspector-home-") as home:
        proc = subprocess.run(
            [node(), str(INSPECTOR), "--cli", agent.url(server_url), "--transport", "http",
             "--header", f"Authorization: Bearer {agent.credential}", *args],
            cwd=HERE, env={**os.environ, "HOME": home}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == exit_code, f"inspector {args} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


async def test_inspector_cli(core, server):
    a = await vend(core, agent="inspector", queues=["inbox"])
    t = await push(core, a, "seen by the inspector", payload={"k": "v"})

    def run(*args: str, exit_code: int = 0):
        return asyncio.to_thread(inspector, server.url, a, *args, exit_code=exit_code)

    # Read-only calls, run side by side. --strict: the Inspector's tool-schema portability check must
    # find no error-severity problem.
    listed, got, refused, resources, read = await asyncio.gather(
        run("--method", "tools/list", "--strict"),
        run("--method", "tools/call", "--tool-name", "get_todo", "--tool-arg", f"id={t['id']}"),
        run("--method", "tools/call", "--tool-name", "get_todo", "--tool-arg", f"id={UNKNOWN_ID}", exit_code=5),
        run("--method", "resources/list"),
        run("--method", "resources/read", "--uri", "switchboard://queues/inbox"))

    implied = {"get_todo", "admission_status"}
    assert [tool["name"] for tool in listed["tools"]] == [v for v in VERBS if v in {*DEFAULT_VERBS, *implied}]
    assert all("outputSchema" in tool for tool in listed["tools"])
    assert got.get("isError") is not True and got["structuredContent"]["id"] == t["id"]
    assert json.loads(got["content"][0]["text"]) == got["structuredContent"]
    assert refused["isError"] is True and "structuredContent" not in refused
    assert json.loads(refused["content"][0]["text"]) == {"error": {"code": "not_found", "message": "todo not found"}}
    assert [r["uri"] for r in resources["resources"]] == ["switchboard://queues/inbox"]
    assert json.loads(read["contents"][0]["text"])["pending"] == 1
