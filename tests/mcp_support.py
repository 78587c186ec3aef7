"""Helpers for the MCP and producer-API tests: vending through the core, the official SDK client over
HTTP (the SDK's transport takes an httpx2 client, which carries the bearer header), and a raw
JSON-RPC client for status codes.

Every tool result the SDK client returns here is checked with a JSON Schema validator: a success
against the tool's declared output schema, an error (`isError`) as text matching the error body
with no structured content. A shape drift then fails in these tests before it fails at an agent."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import httpx2
import jsonschema
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from switchboard.core import endpoints, humans, todos
from switchboard.mcp import schemas
from switchboard.mcp.tools import TOOLS

ACCEPT = "application/json, text/event-stream"


@dataclass
class Agent:
    """A vended endpoint as a test sees it."""

    slug: str
    credential: str
    endpoint_id: str
    human: object
    queues: list[str] = field(default_factory=list)

    def url(self, base: str) -> str:
        return f"{base}/mcp/{self.slug}"


async def vend(core, human_name: str = "alice", *, agent: str = "bot", queues=None, verbs=None,
               lease_ttl=None) -> Agent:
    try:
        human = await humans.by_name(core, human_name)
    except Exception:
        human = await humans.add(core, human_name, "password123")
    ep, credential = await endpoints.vend(core, human, agent=agent, queues=queues, verbs=verbs, lease_ttl=lease_ttl)
    return Agent(slug=ep["slug"], credential=credential, endpoint_id=ep["endpoint_id"], human=human,
                 queues=ep["queues"])


async def push(core, agent: Agent, title: str = "t", *, queue: str | None = None, **kw) -> dict:
    todo, _ = await todos.create(core, endpoint_id=agent.endpoint_id, queue=queue or agent.queues[0], title=title,
                                 source="operator", **kw)
    return todo


@asynccontextmanager
async def sdk(base: str, agent: Agent, *, mode: str = "legacy", credential: str | None = None, sessions=None,
              **client_kw):
    """The official SDK client on `agent`'s endpoint. `sessions` (a list) collects Mcp-Session-Id values."""

    async def remember(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sessions is not None and sid not in sessions:
            sessions.append(sid)

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential or agent.credential}"},
                              timeout=httpx2.Timeout(30, read=60), event_hooks={"response": [remember]})
    async with http:
        async with Client(streamable_http_client(agent.url(base), http_client=http), mode=mode, **client_kw) as c:
            yield Checked(c)


def _validator(schema: dict) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


_VALIDATORS = {name: _validator(tool.output_schema) for name, tool in TOOLS.items()}
_ERROR_VALIDATOR = _validator(schemas.ERROR_BODY)


def check_result(name: str, result, output_schema: dict | None = None) -> None:
    """A tool result as any client sees it: a success is structured content valid against the tool's
    output schema (the declared one, or `output_schema` as listed on the wire) with the same JSON as
    text; an error has no structured content and its text is the error body."""
    validator = _validator(output_schema) if output_schema is not None else _VALIDATORS.get(name)
    if result.is_error:
        assert result.structured_content is None, f"{name}: an error result carries structured content"
        assert len(result.content) == 1 and result.content[0].type == "text"
        _ERROR_VALIDATOR.validate(json.loads(result.content[0].text))
        return
    assert validator is not None, f"{name}: no output schema"
    assert result.structured_content == json.loads(result.content[0].text)
    validator.validate(result.structured_content)


class Checked:
    """The SDK client, with every `call_tool` result passed through `check_result`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    async def call_tool(self, name: str, arguments: dict | None = None, *args, **kw):
        result = await self._client.call_tool(name, arguments, *args, **kw)
        check_result(name, result)
        return result


def body(result) -> dict:
    """A successful tool result's structured content, checked to equal its text block."""
    assert not result.is_error, result.content[0].text
    assert result.structured_content == json.loads(result.content[0].text)
    return result.structured_content


def error_body(result) -> dict:
    """An error result's `error` object, read from its text: errors carry no structured content."""
    assert result.is_error is True
    assert result.structured_content is None
    got = json.loads(result.content[0].text)
    _ERROR_VALIDATOR.validate(got)
    return got["error"]


class Raw:
    """Plain JSON-RPC over HTTP for what the SDK client hides: status codes, headers, raw bodies."""

    def __init__(self, base: str, slug: str, credential: str | None, **headers: str) -> None:
        self.url = f"{base}/mcp/{slug}"
        self.headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if credential is not None:
            self.headers["Authorization"] = f"Bearer {credential}"
        self.headers.update(headers)
        self.session_id: str | None = None
        self.http = httpx.Client(timeout=30)
        self._id = 0

    def post(self, method: str, params: dict | None = None, *, notify: bool = False, **headers: str) -> httpx.Response:
        msg: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        if not notify:
            self._id += 1
            msg["id"] = self._id
        h = dict(self.headers)
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
            h["MCP-Protocol-Version"] = "2025-11-25"
        h.update(headers)
        return self.http.post(self.url, content=json.dumps(msg), headers=h)

    def initialize(self, capabilities: dict | None = None) -> httpx.Response:
        r = self.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities or {},
                                     "clientInfo": {"name": "raw", "version": "0"}})
        if r.status_code == 200:
            self.session_id = r.headers.get("mcp-session-id")
            assert self.post("notifications/initialized", notify=True).status_code == 202
        return r

    def call(self, name: str, arguments: dict | None = None) -> httpx.Response:
        return self.post("tools/call", {"name": name, "arguments": arguments or {}})

    def close(self) -> None:
        self.http.close()


async def eventually(probe, timeout: float = 5.0, interval: float = 0.02):
    """Poll `probe()` until it returns something truthy (then return it) or fail after `timeout`."""
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)
