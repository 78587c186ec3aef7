"""The relay's two identities on the server.

- `Producer`: the human API token (`sbh_…`) on the producer API (`/api/v1`): push todos, read the
  owner's view of a todo with every attempt, and the owner's actions (retry, cancel, fail).
- `Drain`: the endpoint credential (`sbk_…`) over MCP with the official SDK client (Streamable HTTP, an
  httpx2 client carrying the bearer header): claim_next, claim, heartbeat, complete, fail, release.

Both are checked before any work starts (`open_server`): a missing, malformed or refused URL, token or
credential is a `RelayError` naming the flag and the environment variable to fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

URL_ENV, TOKEN_ENV, CREDENTIAL_ENV = "SWITCHBOARD_URL", "SWITCHBOARD_API_TOKEN", "SWITCHBOARD_CREDENTIAL"
HTTP_TIMEOUT = 30.0
TRANSIENT_RETRIES = 4

# What the relay needs from the endpoint: each verb and the arguments it must declare (no unfenced mode).
REQUIRED_TOOLS = {
    "claim": ("id", "require_fence", "claimant", "lease_ttl_seconds"),
    "claim_next": ("queue", "require_fence", "claimant", "lease_ttl_seconds", "max_todos"),
    "heartbeat": ("id", "lease_token", "lease_ttl_seconds"),
    "complete": ("id", "lease_token", "summary", "artifact"),
    "fail": ("id", "lease_token", "summary", "artifact", "retry"),
    "release": ("id", "lease_token", "summary"),
}


class RelayError(Exception):
    """Something the operator must fix; the message says what. `exit_code` follows the CLI contract."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Refused(RelayError):
    """The server answered with an error body: `code` is not_found, conflict, forbidden, invalid, …"""

    def __init__(self, code: str, message: str, argument: str | None = None, *, verb: str = ""):
        self.code = code
        self.argument = argument
        self.verb = verb
        text = f"{verb}: {code}: {message}" if verb else f"{code}: {message}"
        super().__init__(text + (f" (argument {argument})" if argument else ""), exit_code=1)


class Unreachable(RelayError):
    """A transport problem (connection refused, timeout, 5xx); usually worth another try."""


@dataclass(frozen=True)
class Connection:
    mcp_url: str
    base_url: str
    slug: str
    api_token: str
    credential: str

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.api_token, self.credential)


def connection_from(url: str | None, api_token: str | None, credential: str | None) -> Connection:
    """Check the three settings' presence and shape; say which flag or variable is wrong."""
    problems = []
    if not url:
        problems.append(f"the endpoint's MCP URL is missing: pass --url or set {URL_ENV} "
                        "(the mcp_url that `switchboard endpoint vend` printed)")
    if not api_token:
        problems.append(f"the human API token is missing: pass --api-token or set {TOKEN_ENV} "
                        "(create one with `switchboard token create`)")
    elif not api_token.startswith("sbh_"):
        problems.append(f"the human API token ({TOKEN_ENV} / --api-token) must start with sbh_")
    if not credential:
        problems.append(f"the endpoint credential is missing: pass --credential or set {CREDENTIAL_ENV} "
                        "(the credential that `switchboard endpoint vend` printed)")
    elif not credential.startswith("sbk_"):
        problems.append(f"the endpoint credential ({CREDENTIAL_ENV} / --credential) must start with sbk_")
    base = slug = ""
    if url:
        parts = urlsplit(url.strip())
        path = parts.path.rstrip("/")
        head, sep, tail = path.rpartition("/mcp/")
        if parts.scheme not in ("http", "https") or not parts.netloc or not sep or not tail or "/" in tail:
            problems.append(f"{URL_ENV} / --url must be an endpoint's MCP URL such as "
                            f"http://127.0.0.1:8080/mcp/<slug>, got {url!r:.120}")
        else:
            base = urlunsplit((parts.scheme, parts.netloc, head, "", ""))
            slug = tail
            url = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    if problems:
        raise RelayError("; ".join(problems), exit_code=2)
    assert url and api_token and credential  # a missing one is among the problems above
    return Connection(mcp_url=url, base_url=base, slug=slug, api_token=api_token, credential=credential)


def _error_body(body: Any) -> tuple[str, str, str | None]:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("code") or "error"), str(err.get("message") or ""), err.get("argument")
    if isinstance(err, str):
        return err, str(body.get("message") or ""), None
    return "error", json.dumps(body)[:200] if body is not None else "", None


# ---------------------------------------------------------------------------------------- producer

class Producer:
    """The producer API, as the owning human."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.http = httpx.AsyncClient(base_url=conn.base_url, timeout=HTTP_TIMEOUT,
                                      headers={"Authorization": f"Bearer {conn.api_token}",
                                               "Accept": "application/json"})

    async def close(self) -> None:
        await self.http.aclose()

    async def _request(self, method: str, path: str, *, verb: str, body: dict | None = None,
                       params: dict | None = None) -> Any:
        for attempt in range(TRANSIENT_RETRIES + 1):
            try:
                resp = await self.http.request(method, path, json=body, params=params)
            except httpx.HTTPError as exc:
                if attempt == TRANSIENT_RETRIES:
                    raise Unreachable(f"{verb}: cannot reach {self.conn.base_url}: {type(exc).__name__}") from None
                await asyncio.sleep(0.2 * 2 ** attempt)
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                if attempt == TRANSIENT_RETRIES:
                    raise Unreachable(f"{verb}: the server answered HTTP {resp.status_code}")
                await asyncio.sleep(_retry_after(resp, 0.2 * 2 ** attempt))
                continue
            try:
                data = resp.json()
            except ValueError:
                data = None
            if resp.status_code == 401:
                raise RelayError(f"the human API token was refused by {self.conn.base_url} (HTTP 401): check "
                                 f"{TOKEN_ENV} / --api-token", exit_code=2)
            if resp.status_code >= 400:
                code, message, argument = _error_body(data)
                if resp.status_code == 404 and data is None:
                    code, message = "not_found", f"{path} is not served here (HTTP 404)"
                raise Refused(code, message, argument, verb=verb)
            return data
        raise AssertionError("unreachable")

    async def endpoint(self) -> dict:
        """The endpoint named by the URL, as its owner sees it; refused when the token's human does not own it."""
        data = await self._request("GET", "/api/v1/endpoints", verb="list endpoints")
        for ep in data.get("endpoints", []):
            if ep.get("slug") == self.conn.slug:
                if ep.get("state", "active") != "active":
                    raise RelayError(f"endpoint {self.conn.slug} is {ep.get('state')}: vend a new one", exit_code=2)
                return ep
        raise RelayError(f"endpoint {self.conn.slug} does not belong to the API token's user: "
                         f"{TOKEN_ENV} / --api-token and {URL_ENV} / --url must belong to the same human",
                         exit_code=2)

    async def push(self, *, title: str, queue: str, payload: dict, kind: str, key: str,
                   max_attempts: int | None = None, assignee: str | None = None) -> tuple[dict, bool]:
        body: dict[str, Any] = {"title": title, "queue": queue, "payload": payload, "kind": kind, "key": key}
        if max_attempts is not None:
            body["max_attempts"] = max_attempts
        if assignee is not None:
            body["assignee"] = assignee
        try:
            data = await self._request("POST", f"/api/v1/endpoints/{quote(self.conn.slug, safe='')}/todos",
                                       verb="push", body=body)
        except Refused as exc:
            if exc.code == "not_found":
                raise RelayError(f"endpoint {self.conn.slug} was not found for this API token's user: the token "
                                 "and the endpoint must belong to the same human") from None
            raise
        return data["todo"], bool(data.get("created"))

    async def list_todos(self, *, queue: str, limit: int = 500, offset: int = 0) -> list[dict]:
        data = await self._request("GET", f"/api/v1/endpoints/{quote(self.conn.slug, safe='')}/todos",
                                   verb="list", params={"queue": queue, "limit": limit, "offset": offset})
        return data["todos"]

    async def get(self, todo_id: str) -> dict:
        data = await self._request("GET", f"/api/v1/todos/{quote(todo_id, safe='')}", verb="get")
        return data.get("todo", data) if isinstance(data, dict) and "attempts" not in data else data

    async def action(self, todo_id: str, name: str, body: dict | None = None) -> dict:
        data = await self._request("POST", f"/api/v1/todos/{quote(todo_id, safe='')}/{name}", verb=name,
                                   body=body or {})
        return data.get("todo", data) if isinstance(data, dict) else data


def _retry_after(resp: httpx.Response, default: float) -> float:
    try:
        return min(10.0, max(0.05, float(resp.headers.get("retry-after", default))))
    except ValueError:
        return default


# ------------------------------------------------------------------------------------------- drain

class Drain:
    """The endpoint's MCP tools through the official SDK client."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Any = None
        self.tools: dict[str, dict] = {}

    async def preflight(self) -> None:
        """Answer credential problems with HTTP status precision before the SDK handshake."""
        headers = {"Authorization": f"Bearer {self.conn.credential}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
                resp = await http.post(self.conn.mcp_url, headers=headers,
                                       content=b'{"jsonrpc":"2.0","id":0,"method":"ping"}')
        except httpx.HTTPError as exc:
            raise RelayError(f"cannot reach the server at {self.conn.mcp_url} ({type(exc).__name__}): is "
                             f"`switchboard serve` running, and is {URL_ENV} / --url right?", exit_code=2) from None
        if resp.status_code == 401:
            raise RelayError(f"the endpoint credential was refused by {self.conn.mcp_url} (HTTP 401: unknown, "
                             f"revoked or expired): check {CREDENTIAL_ENV} / --credential", exit_code=2)
        if resp.status_code == 403:
            raise RelayError(f"the endpoint credential does not belong to endpoint {self.conn.slug} (HTTP 403): "
                             f"{URL_ENV} / --url and {CREDENTIAL_ENV} / --credential must come from the same "
                             "`switchboard endpoint vend`", exit_code=2)
        if resp.status_code == 404 and not resp.headers.get("content-type", "").startswith("application/json"):
            raise RelayError(f"no MCP endpoint is served at {self.conn.mcp_url} (HTTP 404): check {URL_ENV} / --url",
                             exit_code=2)

    async def open(self) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        await self.preflight()
        stack = contextlib.AsyncExitStack()
        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {self.conn.credential}"},
            timeout=httpx2.Timeout(HTTP_TIMEOUT, read=120)))
        try:
            client = Client(streamable_http_client(self.conn.mcp_url, http_client=http), cache=None)
            self._client = await stack.enter_async_context(client)
            listing = await self._client.list_tools()
        except BaseException as exc:
            await stack.aclose()
            if isinstance(exc, Exception):
                raise RelayError(f"the MCP handshake with {self.conn.mcp_url} failed: {_describe(exc)}",
                                 exit_code=2) from None
            raise
        self._stack = stack
        self.tools = {t.name: (t.input_schema or {}) for t in listing.tools}
        self._check_tools()

    def _check_tools(self) -> None:
        missing: list[str] = []
        lacking: list[str] = []
        for name, args in REQUIRED_TOOLS.items():
            schema = self.tools.get(name)
            if schema is None:
                missing.append(name)
                continue
            props = schema.get("properties") or {}
            lacking.extend(f"{name}.{a}" for a in args if a not in props)
        if missing:
            raise RelayError(f"endpoint {self.conn.slug} lacks the verbs {', '.join(missing)}: vend one with the "
                             "default verbs (claim claim_next heartbeat complete fail release among them)",
                             exit_code=2)
        if lacking:
            raise RelayError(f"the server's tools do not declare {', '.join(lacking)}: the relay needs fenced "
                             "claims and reports (a newer switchboard)", exit_code=2)

    async def close(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def call(self, name: str, args: dict) -> dict:
        args = {k: v for k, v in args.items() if v is not None}
        try:
            result = await self._client.call_tool(name, args)
        except Exception as exc:  # the SDK raises many kinds for transport trouble
            raise Unreachable(f"{name}: {_describe(exc)}") from None
        body = result.structured_content
        if body is None:
            text = "".join(getattr(c, "text", "") for c in (result.content or []))
            try:
                body = json.loads(text) if text else {}
            except json.JSONDecodeError:
                body = {"error": {"code": "internal", "message": text[:200]}} if result.is_error else {}
        if result.is_error:
            code, message, argument = _error_body(body)
            raise Refused(code, message, argument, verb=name)
        return body

    # The verbs, named as on the wire.

    async def claim_next(self, *, queue: str, lease_ttl_seconds: int, claimant: str, max_todos: int) -> list[dict]:
        """Up to `max_todos` todos in one call (claim_next with max_todos), oldest first, each under its
        own lease and fence token, each as claim_next's one-todo answer would give it."""
        body = await self.call("claim_next", {"queue": queue, "lease_ttl_seconds": lease_ttl_seconds,
                                              "require_fence": True, "claimant": claimant, "max_todos": max_todos})
        return [got for item in body.get("todos") or [] if (got := _claimed(item)) is not None]

    async def claim(self, todo_id: str, *, lease_ttl_seconds: int, claimant: str) -> dict:
        body = await self.call("claim", {"id": todo_id, "lease_ttl_seconds": lease_ttl_seconds,
                                         "require_fence": True, "claimant": claimant})
        got = _claimed(body)
        if got is None:
            raise Refused("conflict", "nothing was claimed", verb="claim")
        return got

    async def heartbeat(self, todo_id: str, *, lease_ttl_seconds: int, lease_token: str | None) -> dict:
        return await self.call("heartbeat", {"id": todo_id, "lease_ttl_seconds": lease_ttl_seconds,
                                             "lease_token": lease_token})

    async def complete(self, todo_id: str, *, lease_token: str | None, summary: str, artifact: str | None,
                       result: dict | None) -> dict:
        return await self.call("complete", {"id": todo_id, "lease_token": lease_token, "summary": summary,
                                            "artifact": artifact, "result": result})

    async def fail(self, todo_id: str, *, lease_token: str | None, summary: str, artifact: str | None,
                   result: dict | None, retry: bool) -> dict:
        return await self.call("fail", {"id": todo_id, "lease_token": lease_token, "summary": summary,
                                        "artifact": artifact, "result": result, "retry": retry})

    async def release(self, todo_id: str, *, lease_token: str | None, summary: str) -> dict:
        return await self.call("release", {"id": todo_id, "lease_token": lease_token, "summary": summary})


def _claimed(body: dict) -> dict | None:
    """A claim response as one dict: the todo's fields plus attempt_seq, prior_attempts and lease_token."""
    if body.get("empty"):
        return None
    if isinstance(body.get("todo"), dict):
        out = dict(body["todo"])
        for key in ("attempt_seq", "attempts_total", "prior_attempts", "lease_token"):
            if key in body:
                out[key] = body[key]
        return out
    return dict(body)


def _describe(exc: BaseException) -> str:
    """A short account of an exception, looking inside exception groups (the SDK uses task groups)."""
    seen = exc
    while isinstance(seen, BaseExceptionGroup) and seen.exceptions:
        seen = seen.exceptions[0]
    text = str(seen).strip().splitlines()[0] if str(seen).strip() else ""
    return f"{type(seen).__name__}: {text[:200]}" if text else type(seen).__name__


class Server:
    """Both identities, opened and checked together."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.producer = Producer(conn)
        self.drain = Drain(conn)
        self.queues: tuple[str, ...] = ()

    def require_queue(self, queue: str) -> None:
        if queue not in self.queues:
            raise RelayError(f"endpoint {self.conn.slug} is not vended with queue {queue} (its queues: "
                             f"{', '.join(self.queues)}): vend one with `--queue {queue}`, or set the epic's "
                             "settings.queue", exit_code=2)

    async def __aenter__(self) -> Server:
        try:
            await self.drain.open()
            self.queues = tuple((await self.producer.endpoint()).get("queues") or ())
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.drain.close()
        await self.producer.close()
