"""The agent side of the chaos soak (bench/soak.py): the two MCP clients (the official SDK and a light
httpx JSON-RPC client, each in both protocol eras), the agent kinds, and the agent-host process that runs
a few agents as asyncio tasks and takes its orders as JSON lines on stdin.

Every call is logged to a JSON-lines file before it is sent (`send`) and when it is answered (`call`),
with the credential generation it used; bench/soak.py reads those logs to check what the database
recorded against what each agent saw.

    .venv/bin/python bench/soak_agents.py CONFIG.json     # started by bench/soak.py, one per agent process
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx

SESSION_ERA = "2025-11-25"
STATELESS_ERA = "2026-07-28"
QUEUE = "soak"
TEAM = "soakteam"
TEAM_QUEUE = f"team:{TEAM}/{QUEUE}"  # the team queue's label: what an endpoint granted it names in claim_next
AGENT_KINDS = ("sdk-session", "light-stateless", "light-session", "sdk-stateless")
# Tool errors after which the call may still have taken effect (docs/mcp.md): the agent retries, and the
# checks treat the call like one whose answer was lost.
UNSURE_ERRORS = {"err:unavailable", "err:internal"}
AUTH_CODES = {"unauthorized", "forbidden", "revoked"}  # a tool error refusing the credential itself
CALL_TIMEOUT = 12.0  # seconds an agent waits for one call before it gives the connection up


class JsonLines:
    """Append-only JSON lines; each line is one write(2), so a SIGKILL loses nothing already logged."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def __call__(self, **record: object) -> None:
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


# ======================================================================================= agents

class Refused(Exception):
    """The server refused the credential (401/403): the lane was revoked."""


class Broken(Exception):
    """The connection failed; `kind` names how. `sent` is False when the request surely never left."""

    def __init__(self, kind: str, sent: bool = True) -> None:
        super().__init__(kind)
        self.kind, self.sent = kind, sent


def classify_exception(exc: BaseException) -> Broken:
    if isinstance(exc, Broken):
        return exc
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return Broken("timeout")
    name = type(exc).__name__
    if name in ("ConnectError", "ConnectTimeout"):
        return Broken("connect", sent=False)
    if name in ("ReadError", "RemoteProtocolError", "WriteError", "ReadTimeout"):
        return Broken("reset" if name != "ReadTimeout" else "timeout")
    if isinstance(exc, BaseExceptionGroup):
        return classify_exception(exc.exceptions[0])
    return Broken(f"error:{name}")


class LightConn:
    """JSON-RPC over httpx, either era: the light client."""

    def __init__(self, log: JsonLines, url: str, credential: str, gen: int, era: str) -> None:
        self.log, self.url, self.gen, self.era = log, url, gen, era
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(CALL_TIMEOUT, connect=3),
                                      headers={"Authorization": f"Bearer {credential}",
                                               "Accept": "application/json, text/event-stream",
                                               "Content-Type": "application/json"})
        self.session: str | None = None
        self._id = 0

    async def open(self) -> None:
        if self.era == SESSION_ERA:
            await self.rpc("initialize", {"protocolVersion": SESSION_ERA, "capabilities": {},
                                          "clientInfo": {"name": "soak-light", "version": "0"}})
            await self.rpc("notifications/initialized", None, notify=True)

    async def close(self) -> None:
        if self.session:
            with contextlib.suppress(Exception):
                await self.http.delete(self.url, headers={"Mcp-Session-Id": self.session}, timeout=2)
        await self.http.aclose()

    async def rpc(self, method: str, params: dict | None, notify: bool = False) -> dict:
        msg: dict = {"jsonrpc": "2.0", "method": method}
        headers = {}
        if self.era == STATELESS_ERA:
            params = dict(params or {})
            params["_meta"] = {"io.modelcontextprotocol/protocolVersion": STATELESS_ERA,
                               "io.modelcontextprotocol/clientCapabilities": {}}
            headers = {"MCP-Protocol-Version": STATELESS_ERA, "Mcp-Method": method}
            if method == "tools/call":
                headers["Mcp-Name"] = params["name"]
        elif self.session:
            headers = {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": SESSION_ERA}
        if params is not None:
            msg["params"] = params
        if not notify:
            self._id += 1
            msg["id"] = self._id
        t0 = time.time()
        try:
            r = await self.http.post(self.url, content=json.dumps(msg), headers=headers)
        except Exception as exc:
            raise classify_exception(exc) from None
        extra = {"body": r.text[:300]} if r.status_code >= 500 else {}  # for the diagnosis of a server error
        self.log(e="http", g=self.gen, m=method, t0=t0, t1=time.time(), s=r.status_code, **extra)
        if r.status_code in (401, 403):
            raise Refused(str(r.status_code))
        if r.status_code == 404 and self.session:
            raise Broken("session_gone", sent=False)
        if r.status_code == 429:
            raise Broken("http_429", sent=False)
        if r.status_code >= 500:
            raise Broken(f"http_{r.status_code}")
        if r.status_code >= 400:
            raise Broken(f"http_{r.status_code}", sent=False)
        if method == "initialize":
            self.session = r.headers.get("mcp-session-id")
        if notify:
            return {}
        body = r.content
        if body[:1] != b"{":  # an SSE answer: the data line that carries the response
            body = next((line[5:] for line in body.splitlines() if line.startswith(b"data:") and b'"id"' in line),
                        b"{}")
        got = json.loads(body)
        if "error" in got:
            raise Broken(f"rpc_{got['error'].get('code')}")
        return got["result"]

    async def call(self, tool: str, arguments: dict) -> dict:
        result = await self.rpc("tools/call", {"name": tool, "arguments": arguments})
        return result.get("structuredContent") or json.loads(result["content"][0]["text"])


class SdkConn:
    """The official MCP SDK client (mcp.Client over httpx2), either era."""

    def __init__(self, log: JsonLines, url: str, credential: str, gen: int, era: str) -> None:
        self.log, self.url, self.credential, self.gen, self.era = log, url, credential, gen, era
        self.stack = contextlib.AsyncExitStack()
        self.sent: dict[int, float] = {}
        self.last_status = 0

    async def _on_request(self, request) -> None:
        self.sent[id(request)] = time.time()

    async def _on_response(self, response) -> None:
        request = response.request
        t0 = self.sent.pop(id(request), time.time())
        self.last_status = response.status_code
        if request.method != "POST":
            return
        try:
            method = json.loads(request.content).get("method", "?")
        except Exception:
            method = "?"
        self.log(e="http", g=self.gen, m=method, t0=t0, t1=time.time(), s=response.status_code)

    async def open(self) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.credential}"},
                                  timeout=httpx2.Timeout(CALL_TIMEOUT, connect=3),
                                  event_hooks={"request": [self._on_request], "response": [self._on_response]})
        await self.stack.enter_async_context(http)
        mode = "legacy" if self.era == SESSION_ERA else STATELESS_ERA
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                self.client = await self.stack.enter_async_context(
                    Client(streamable_http_client(self.url, http_client=http), mode=mode))
        except Exception as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: BaseException) -> Exception:
        if self.last_status in (401, 403):
            return Refused(str(self.last_status))
        return classify_exception(exc)

    async def close(self) -> None:
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(5):
                await self.stack.aclose()

    async def call(self, tool: str, arguments: dict) -> dict:
        self.last_status = 0
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                result = await self.client.call_tool(tool, arguments)
        except Exception as exc:
            raise self._failure(exc) from None
        if self.last_status in (401, 403):
            raise Refused(str(self.last_status))
        return result.structured_content or json.loads(result.content[0].text)


@dataclass(eq=False)  # compared by identity: a todo held is one object
class Held:
    todo: str
    token: str
    claimant: str  # the label of the claim call that took it (one call may take several todos)
    seq: int
    work_left: float
    verb: str
    last_ok: float  # time.monotonic() of the last acknowledged claim/heartbeat


class Agent:
    """The agent of one todo at a time (mode `single`): claim_next, work with heartbeats, then complete,
    fail or release. The batch and round agents below share its connection handling and its log."""

    def __init__(self, host: Host, spec: dict) -> None:
        self.host, self.name, self.kind, self.lane = host, spec["name"], spec["kind"], spec["lane"]
        self.server = spec["server"]
        self.held: list[Held] = []
        self.n = 0
        host.lives += 1
        self.life = f"{host.incarnation}.{host.lives}"  # claimant labels stay unique across restarts
        self.rng = random.Random(hash((self.name, self.life)))
        self.last_log = time.monotonic()

    def log(self, **record: object) -> None:
        self.last_log = time.monotonic()
        self.host.log(a=self.name, **record)

    def next_claimant(self) -> str:
        """A label unique to one claim call: each attempt row names the call (and agent) that opened it."""
        self.n += 1
        return f"{self.name}/{self.life}/{self.n}"

    def take(self, todo_id: str, token: str, claimant: str, seq: int) -> Held:
        """A todo just claimed, with what the agent will do with it: work 0.1 to 1.5 s (one in ten works
        one to two leases and needs its heartbeats), then complete (85 %), fail (10 %) or release (5 %)."""
        ttl = self.host.cfg["lease_ttl"]
        roll = self.rng.random()
        verb = "complete" if roll < 0.85 else "fail" if roll < 0.95 else "release"
        work = self.rng.uniform(0.1, 1.5) if self.rng.random() < 0.9 else self.rng.uniform(ttl, 2 * ttl)
        return Held(todo_id, token, claimant, seq, work, verb, time.monotonic())

    def abandon(self, why: str) -> None:
        for h in self.held:
            self.log(e="abandon", c=h.claimant, todo=h.todo, why=why)
        self.held = []

    async def run(self) -> None:
        cfg = self.host.cfg
        while True:
            if self.host.stopping.is_set() and not self.held:
                return
            lane = self.host.lanes[self.lane]
            url = f"{cfg['servers'][self.server % len(cfg['servers'])]}/mcp/{lane['slug']}"
            era = SESSION_ERA if self.kind.endswith("session") else STATELESS_ERA
            conn_cls = SdkConn if self.kind.startswith("sdk") else LightConn
            # One connection's life runs in a task of its own: the SDK client's task group cancels the
            # task it was entered in when its background stream fails, and that must not end the agent.
            inner = asyncio.create_task(self.connected(conn_cls(self.log, url, lane["credential"], lane["gen"], era),
                                                       lane))
            try:
                try:
                    await inner
                except asyncio.CancelledError:
                    if asyncio.current_task().cancelling():
                        raise  # this agent is being cancelled
                    self.log(e="call", g=lane["gen"], tool="session", t0=time.time(), t1=time.time(),
                             r="x:client_cancelled")
                    raise Broken("client_cancelled") from None
            except Refused:
                self.abandon("refused")
                await self.host.lane_changed(self.lane, lane["gen"], timeout=3.0)
            except Broken:
                self.server += 1  # try the next process
                await asyncio.sleep(self.rng.uniform(0.2, 0.6))
            except Exception as exc:
                self.log(e="call", g=lane["gen"], tool="session", t0=time.time(), t1=time.time(),
                         r=f"x:error:{type(exc).__name__}")
                self.server += 1
                await asyncio.sleep(self.rng.uniform(0.2, 0.6))

    async def connected(self, conn, lane: dict) -> None:
        try:
            try:
                await conn.open()
            except Refused as exc:
                self.log(e="call", g=lane["gen"], tool="open", t0=time.time(), t1=time.time(), r=f"refused:{exc}")
                raise
            except Broken as exc:
                self.log(e="call", g=lane["gen"], tool="open", t0=time.time(), t1=time.time(), r=f"x:{exc.kind}")
                raise
            await self.loop(conn, lane)
        finally:
            await conn.close()

    async def call(self, conn, lane: dict, tool: str, args: dict, claimant: str | None, *,
                   todo: str | None = None, items: list[Held] | None = None) -> dict:
        """One tool call, logged before it is sent and when it is answered. `claimant` labels a claim
        call, or the claim of the todo `todo` a single report is about; `items` are the held todos a
        batched close (or a round's `complete`) reports, each logged with its own answer."""
        t0 = time.time()
        ids = {"c": claimant}
        if todo is not None:
            ids["todo"] = todo
        if items:
            ids["items"] = [[h.claimant, h.todo] for h in items]
        self.log(e="send", g=lane["gen"], tool=tool, t0=t0, **ids)  # a kill mid-call leaves this behind
        try:
            try:
                got = await conn.call(tool, args)
            except (Refused, Broken):
                raise
            except Exception as exc:
                raise classify_exception(exc) from None
        except Refused as exc:
            self.log(e="call", g=lane["gen"], tool=tool, t0=t0, t1=time.time(), r=f"refused:{exc}",
                     **self._items_answered(ids, f"refused:{exc}", None))
            raise
        except Broken as exc:
            r = f"x:{exc.kind}" if exc.sent else f"n:{exc.kind}"  # n: surely never processed
            self.log(e="call", g=lane["gen"], tool=tool, t0=t0, t1=time.time(), r=r,
                     **self._items_answered(ids, r, None))
            raise
        t1 = time.time()
        if "error" in got:
            r = f"err:{got['error'].get('code')}"
        elif tool == "claim_next" and got.get("empty"):
            r = "empty"
        else:
            r = "ok"
        extra = {}
        if tool == "claim_next" and r == "empty" and got.get("deferred"):  # admission held the queue back
            extra = {"deferred": [d.get("reason") for d in got["deferred"]]}
        if tool == "claim_next" and r == "ok":
            if "todos" in got:  # max_todos: each todo under its own attempt
                extra = {"todos": [[t["todo"]["id"], t["attempt_seq"]] for t in got["todos"]]}
            else:
                extra = {"todo": got["todo"]["id"], "seq": got["attempt_seq"]}
        self.log(e="call", g=lane["gen"], tool=tool, t0=t0, t1=t1, r=r, **self._items_answered(ids, r, got), **extra)
        if r in UNSURE_ERRORS or r == "err:rate_limited":
            raise Broken(r)  # retried after a pause, on another process, with the lease still held
        if r.startswith("err:") and r[4:] in AUTH_CODES:
            raise Refused(r)  # an open session told its credential was revoked: fetch the new one
        return got

    @staticmethod
    def _items_answered(ids: dict, r: str, got: dict | None) -> dict:
        """The log's ids of an answered call: a batched close's items each with its own answer (`ok` or
        `err:<code>` from the per-item results), or the call's when it has none (lost, refused, an error)."""
        if "items" not in ids:
            return ids
        per = {}
        if got is not None and "error" not in got:
            per = {x["id"]: "ok" if x.get("ok") else f"err:{(x.get('error') or {}).get('code')}"
                   for x in got.get("results") or got.get("completed") or []}
        return dict(ids, items=[[c, t, per.get(t, r if not per else "missing")] for c, t in ids["items"]])

    async def loop(self, conn, lane: dict) -> None:
        while True:
            if self.held:
                await self.work(conn, lane)
                continue
            if self.host.stopping.is_set():
                return
            if self.host.lanes[self.lane]["gen"] != lane["gen"]:
                return  # a new credential: reconnect with it
            await self.claim(conn, lane)

    async def claim(self, conn, lane: dict) -> None:
        """One claim call; what it took is held, and an empty or refused answer pauses a little."""
        claimant = self.next_claimant()
        got = await self.call(conn, lane, "claim_next", {"queue": lane.get("queue", QUEUE), "require_fence": True,
                                                         "claimant": claimant,
                                                         "lease_ttl_seconds": self.host.cfg["lease_ttl"]},
                              claimant)
        if "error" in got or got.get("empty"):
            await self.idle(got)
            return
        self.held = [self.take(got["todo"]["id"], got["lease_token"], claimant, got["attempt_seq"])]

    async def idle(self, got: dict) -> None:
        """After a claim that took nothing: a pause. A queue held back by its admission policy
        (`deferred`, the in-flight cap full) is no error: a short pause, then the next claim."""
        await asyncio.sleep(self.rng.uniform(0.1, 0.4) if got.get("deferred") else self.rng.uniform(0.3, 1.0))

    async def heartbeat(self, conn, lane: dict, h: Held) -> bool:
        """Extend the lease of `h`; False (and `h` no longer held) when the lease is gone."""
        ttl = self.host.cfg["lease_ttl"]
        got = await self.call(conn, lane, "heartbeat", {"id": h.todo, "lease_token": h.token, "lease_ttl_seconds": ttl},
                              h.claimant, todo=h.todo)
        if "error" in got:
            self.held.remove(h)
            return False
        h.last_ok = time.monotonic()
        return True

    async def report(self, conn, lane: dict, h: Held, verb: str | None = None) -> None:
        """complete, fail or release one todo. Acknowledged, or a conflict: either way it is no longer held."""
        verb = verb or h.verb
        args = {"id": h.todo, "lease_token": h.token, "summary": f"soak {verb} by {self.name}"}
        if verb == "complete":
            args["result"] = {"by": self.name}
        await self.call(conn, lane, verb, args, h.claimant, todo=h.todo)
        self.held.remove(h)

    async def work(self, conn, lane: dict) -> None:
        """Work on the held todo with heartbeats, then report. A conflict means the lease is gone."""
        h = self.held[0]
        beat = self.host.cfg["lease_ttl"] / 3
        while h.work_left > 0:
            step = min(h.work_left, max(0.05, beat - (time.monotonic() - h.last_ok)))
            await asyncio.sleep(step)
            h.work_left -= step
            if time.monotonic() - h.last_ok >= beat and not await self.heartbeat(conn, lane, h):
                return
        await self.report(conn, lane, h)


class BatchAgent(Agent):
    """Mode `batch`: claim_next with max_todos (2 to 10), fenced, each todo under its own attempt and
    token; works them side by side with a heartbeat per todo when due. Half its batches it reports
    together when all are done: the completes in one call with `items`, the fails in another (per-item
    answers); the other half one by one as each is done. Releases always go one by one."""

    together = False  # this batch is reported together (items) when all its todos are done

    async def claim(self, conn, lane: dict) -> None:
        await self.claim_batch(conn, lane)

    async def claim_batch(self, conn, lane: dict, complete: list[Held] | None = None) -> dict:
        claimant = self.next_claimant()
        args = {"queue": lane.get("queue", QUEUE), "require_fence": True, "claimant": claimant,
                "lease_ttl_seconds": self.host.cfg["lease_ttl"], "max_todos": self.rng.randint(2, 10)}
        if complete:
            args["complete"] = [self.close_item(h, "complete") for h in complete]
        got = await self.call(conn, lane, "claim_next", args, claimant, items=complete)
        if complete and "error" not in got:  # answered: each item ended, acknowledged or refused
            self.held = [h for h in self.held if h not in complete]
        if "error" in got or got.get("empty"):
            await self.idle(got)
            return got
        self.held += [self.take(t["todo"]["id"], t["lease_token"], claimant, t["attempt_seq"]) for t in got["todos"]]
        self.together = self.rng.random() < 0.5
        return got

    def close_item(self, h: Held, verb: str) -> dict:
        item = {"id": h.todo, "lease_token": h.token, "summary": f"soak {verb} by {self.name}"}
        if verb == "complete":
            item["result"] = {"by": self.name}
        return item

    async def close_many(self, conn, lane: dict, verb: str, group: list[Held]) -> None:
        """complete or fail `group` in one call with `items`; whatever each item's answer, none is held after."""
        await self.call(conn, lane, verb, {"items": [self.close_item(h, verb) for h in group]}, None, items=group)
        self.held = [h for h in self.held if h not in group]

    async def tend(self, conn, lane: dict, *, until_all: bool) -> None:
        """Work on the held todos side by side, heartbeating each when due, until one (or every one) is done."""
        beat = self.host.cfg["lease_ttl"] / 3
        while self.held:
            left = [h.work_left for h in self.held]
            if (max(left) if until_all else min(left)) <= 0:
                return
            now = time.monotonic()
            due = min(beat - (now - h.last_ok) for h in self.held)
            step = max(0.05, min(due, min(x for x in left if x > 0)))
            t = time.monotonic()
            await asyncio.sleep(step)
            elapsed = time.monotonic() - t
            for h in self.held:
                h.work_left -= elapsed
            for h in list(self.held):
                if time.monotonic() - h.last_ok >= beat:
                    await self.heartbeat(conn, lane, h)

    async def work(self, conn, lane: dict) -> None:
        await self.tend(conn, lane, until_all=self.together)
        ready = [h for h in self.held if h.work_left <= 0]
        for verb in self.rng.sample(("complete", "fail", "release"), 3):
            group = [h for h in ready if h.verb == verb and h in self.held]
            if group and verb != "release" and self.together:
                await self.close_many(conn, lane, verb, group)
                continue
            for h in group:
                await self.report(conn, lane, h)


class RoundAgent(BatchAgent):
    """Mode `round`: a worker's round in one call. claim_next with max_todos (2 to 10) and `complete`
    listing the todos of the previous round it finished; the ones it fails or releases go first, one by
    one (fails of two or more at once half the time with `items`). When it stops, what it still holds is
    completed with `complete` and `items`."""

    async def loop(self, conn, lane: dict) -> None:
        while True:
            if self.held:
                await self.tend(conn, lane, until_all=True)
                for h in [h for h in self.held if h.verb == "release"]:
                    await self.report(conn, lane, h)
                fails = [h for h in self.held if h.verb == "fail"]
                if len(fails) >= 2 and self.rng.random() < 0.5:
                    await self.close_many(conn, lane, "fail", fails)
                else:
                    for h in fails:
                        await self.report(conn, lane, h)
            done = list(self.held)  # all of them done and to be completed
            if self.host.stopping.is_set() or self.host.lanes[self.lane]["gen"] != lane["gen"]:
                if done:
                    await self.close_many(conn, lane, "complete", done)
                return
            got = await self.claim_batch(conn, lane, complete=done)
            if "error" in got and self.held:  # refused whole (nothing changed): complete them alone
                await self.close_many(conn, lane, "complete", [h for h in self.held if h in done])


AGENT_MODES = {"single": Agent, "batch": BatchAgent, "round": RoundAgent}


class Host:
    """An agent-host process: a few agents as asyncio tasks; commands arrive as JSON lines on stdin."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.incarnation = cfg["incarnation"]
        self.log = JsonLines(Path(cfg["log"]))
        self.lanes = {int(k): v for k, v in cfg["lanes"].items()}
        self.lane_events: dict[int, asyncio.Event] = defaultdict(asyncio.Event)
        self.background: set[asyncio.Task] = set()  # tasks started and not awaited, kept referenced
        self.stopping = asyncio.Event()
        self.agents: dict[str, tuple[Agent, asyncio.Task]] = {}
        self.lives = 0

    async def lane_changed(self, lane: int, gen: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.lanes[lane]["gen"] == gen and time.monotonic() < deadline and not self.stopping.is_set():
            ev = self.lane_events[lane]
            ev.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await ev.wait()

    def start_agent(self, spec: dict) -> None:
        agent = AGENT_MODES[spec.get("mode", "single")](self, spec)
        task = asyncio.create_task(agent.run())
        self.agents[spec["name"]] = (agent, task)

        def ended(t: asyncio.Task) -> None:  # an agent that ends while not told to is restarted
            if self.stopping.is_set() or t.cancelled() or self.agents.get(spec["name"], (None, None))[1] is not t:
                return
            print(f"{spec['name']} ended unexpectedly: {t.exception()!r}", file=sys.stderr, flush=True)
            agent.abandon("agent crashed")
            self.start_agent(dict(spec, server=agent.server + 1))

        task.add_done_callback(ended)

    async def cancel_one(self) -> None:
        """Cancel an agent holding a lease (any, if none holds one) without reporting; restart it."""
        holding = [n for n, (a, _) in self.agents.items() if a.held] or list(self.agents)
        name = random.choice(holding)
        agent, task = self.agents[name]
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        self.log(e="cancelled", a=name, held=[[h.claimant, h.todo] for h in agent.held], t=time.time())
        await asyncio.sleep(random.uniform(0.5, 2.0))
        spec = next(s for s in self.cfg["agents"] if s["name"] == name)
        self.start_agent(dict(spec, server=agent.server + 1))

    async def commands(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            cmd = json.loads(line)
            if cmd["op"] == "lane":
                self.lanes[cmd["lane"]] = cmd
                self.lane_events[cmd["lane"]].set()
            elif cmd["op"] == "cancel":
                self.background.add(task := asyncio.create_task(self.cancel_one()))
                task.add_done_callback(self.background.discard)
            elif cmd["op"] == "stop":
                self.stopping.set()
        self.stopping.set()  # stdin closed: the orchestrator is gone

    async def watchdog(self) -> None:
        """An agent silent for 30 s is stuck somewhere: print where, once."""
        told = set()
        while True:
            await asyncio.sleep(5)
            for name, (agent, task) in list(self.agents.items()):
                if time.monotonic() - agent.last_log > 30 and task not in told:
                    told.add(task)
                    print(f"{name} silent for 30 s:", file=sys.stderr, flush=True)
                    task.print_stack(file=sys.stderr)

    async def main(self) -> None:
        for spec in self.cfg["agents"]:
            self.start_agent(spec)
        commands = asyncio.create_task(self.commands())
        self.background.add(asyncio.create_task(self.watchdog()))
        await self.stopping.wait()
        while self.agents:
            name, (_, task) = next(iter(self.agents.items()))
            with contextlib.suppress(BaseException):
                await task
            if self.agents.get(name, (None, task))[1] is task:
                del self.agents[name]
        commands.cancel()


def agent_host_main(config_path: str) -> int:
    warnings.filterwarnings("ignore")
    cfg = json.loads(Path(config_path).read_text())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(Host(cfg).main())
    return 0


if __name__ == "__main__":
    sys.exit(agent_host_main(sys.argv[1]))
