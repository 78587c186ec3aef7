"""Switchboard's paths, on Switchboard's own tables in a fresh database.

sb-core  `todos.claim_next` + `todos.complete` in process, with an EndpointCaller, as the store bench
         calls them; one asyncio worker per W on the core's pool (the served app's: min 2, max 20);
         concurrent calls of the W workers run together (core/combine.py)
sb-core-alone
         the same with combining off (`combine_calls`): each call its own statement
sb-mcp   the same two transitions as MCP tool calls to a `switchboard serve` process, one light
         client (keep-alive HTTP/1.1, session era) per worker, started as the MCP bench starts it
sb-core-batch-100, sb-mcp-batch-100
         the batched paths: up to 100 todos per claim (`max_todos`) and one close of the list

All enqueue the way producers do today: one `producer.push` per todo through the core, from 8
concurrent producers (the todos are in their queue before the workers start).

Extension points (marked EXTEND below): another claim path overrides `work` (one worker's loop;
return the number of jobs it completed), as the batched classes at the end do; a bulk push overrides
`enqueue`; then one line in registry.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import psycopg
from psycopg.rows import dict_row

from switchboard.config import load_settings
from switchboard.core import endpoints, humans, producer, todos
from switchboard.core.models import Core, EndpointCaller, HumanCaller
from switchboard.db import migrate
from switchboard.db.pool import open_pool

from .harness import QUEUE, Clock, Database, Run, VerifyError, gather_workers

LEASE_TTL = 1800
POOL_MAX = 20  # the served app's pool (web/app.py); W=16 fits


class Tenant:
    """Switchboard's schema in a fresh database, one human and one endpoint granted the bench queue."""

    uri: str
    core: Core
    human: HumanCaller
    caller: EndpointCaller
    slug: str
    credential: str

    @classmethod
    async def open(cls, db: Database) -> Tenant:
        self = cls()
        self.uri = db.uri
        async with await psycopg.AsyncConnection.connect(db.uri, autocommit=True, row_factory=dict_row) as conn:
            await conn.execute("SET client_min_messages = warning")
            await migrate.migrate(conn)
        pool = await open_pool(db.uri, min_size=2, max_size=POOL_MAX)
        self.core = Core(pool=pool, settings=load_settings(database_url=db.uri, log_format="text"))
        self.human = await humans.add(self.core, "bench")
        ep, self.credential = await endpoints.vend(self.core, self.human, agent="bench", queues=[QUEUE],
                                                   lease_ttl=LEASE_TTL)
        self.slug = ep["slug"]
        row = await endpoints.resolve_credential(self.core, self.credential)
        self.caller = endpoints.caller_from_row(row, "bench-session")
        return self

    async def close(self) -> None:
        await self.core.pool.close()

    async def warm(self, w: int) -> None:
        """Hold w of the pool's connections at once, so the pool has grown before the clock starts."""
        gate = asyncio.Event()
        held = 0

        async def hold() -> None:
            nonlocal held
            async with self.core.pool.connection():
                held += 1
                if held == w:
                    gate.set()
                await gate.wait()

        await asyncio.gather(*(hold() for _ in range(w)))

    async def verify(self, n: int) -> None:
        """Every todo done, each with exactly one attempt, every attempt closed as completed."""
        async with await psycopg.AsyncConnection.connect(self.uri, autocommit=True, row_factory=dict_row) as conn:
            cur = await conn.execute(
                "SELECT count(*) AS total, count(*) FILTER (WHERE state = 'done') AS done FROM todos"
                " WHERE queue = %s", (QUEUE,))
            t = await cur.fetchone()
            cur = await conn.execute(
                "SELECT count(*) AS attempts, count(DISTINCT todo_id) AS todos,"
                " count(*) FILTER (WHERE ended_at IS NULL) AS open,"
                " count(*) FILTER (WHERE outcome = 'completed') AS completed FROM todo_attempts")
            a = await cur.fetchone()
        if t["total"] != n or t["done"] != n:
            raise VerifyError(f"{t['done']} of {t['total']} todos done, {n} enqueued")
        if a["attempts"] != n or a["todos"] != n or a["open"] or a["completed"] != n:
            raise VerifyError(f"attempts: {a['attempts']} rows for {a['todos']} todos, {a['open']} open, "
                              f"{a['completed']} completed; {n} expected, each closed")


class SwitchboardCore:
    key = "sb-core"
    label = "Switchboard core in process (`claim_next` + `complete`)"
    enqueue_label = "Switchboard bulk push (`producer.push_many`, 1,000 todos per statement)"

    def __init__(self) -> None:
        self.tenant: Tenant | None = None

    def unavailable(self) -> str | None:
        return None

    async def setup(self, db: Database) -> None:
        self.tenant = await Tenant.open(db)

    async def enqueue(self, n: int) -> float:
        t = self.tenant
        t0 = time.perf_counter()
        for first in range(0, n, 1000):
            await producer.push_many(t.core, t.human, t.slug, [{"title": f"job {i}", "queue": QUEUE}
                                                               for i in range(first, min(n, first + 1000))])
        return time.perf_counter() - t0

    async def prepare(self, w: int) -> list:
        """Per-worker state opened before the clock starts."""
        await self.tenant.warm(w)
        return [None] * w

    # EXTEND (another claim path): override with its loop; return how many jobs this worker completed.
    async def work(self, state, clock: Clock) -> int:
        core, caller = self.tenant.core, self.tenant.caller
        done = 0
        while True:
            clock.start()
            got = await todos.claim_next(core, caller, queue=QUEUE, lease_ttl_seconds=LEASE_TTL)
            if got is None:
                return done
            await todos.complete(core, caller, got.todo["id"])
            done += 1

    async def run_workers(self, w: int) -> Run:
        states = await self.prepare(w)
        clock = Clock()
        clock.start()
        counts = await gather_workers(self.work(s, clock) for s in states)
        return Run(jobs=sum(counts), seconds=clock.since())

    async def verify(self, n: int) -> None:
        await self.tenant.verify(n)

    async def close(self) -> None:
        await self.finish()
        if self.tenant is not None:
            await self.tenant.close()

    async def finish(self) -> None:
        """Per-worker state closed after the run."""


class SwitchboardCoreAlone(SwitchboardCore):
    """`sb-core` with every call run alone (the setting `combine_calls` false): one statement and one commit per
    claim and per complete, however many workers call at once."""

    key = "sb-core-alone"
    label = "Switchboard core in process, each call alone (`SWITCHBOARD_COMBINE_CALLS=false`)"

    async def setup(self, db: Database) -> None:
        await super().setup(db)
        core = self.tenant.core
        core.settings = core.settings.model_copy(update={"combine_calls": False})


class SwitchboardMcp(SwitchboardCore):
    key = "sb-mcp"
    label = "Switchboard over MCP per claim (light client, session era)"

    def __init__(self) -> None:
        super().__init__()
        self.served = None
        self.clients: list = []

    async def prepare(self, w: int) -> list:
        import mcp_bench  # bench/mcp_bench.py: the light client and the server start

        # The server starts after the enqueue, as in the MCP bench: todos pushed before it runs send
        # no wake-ups to its doorbell during the run.
        self.served = await asyncio.to_thread(mcp_bench.serve, self.tenant.uri, "warning")
        for _ in range(w):
            self.clients.append(await mcp_bench.LightClient(self.served.port, self.tenant.slug,
                                                            self.tenant.credential).open())
        return list(self.clients)

    async def work(self, client, clock: Clock) -> int:
        done = 0
        while True:
            clock.start()
            got = await client.tool("claim_next", {"queue": QUEUE})
            if got.get("empty"):
                return done
            await client.tool("complete", {"id": got["todo"]["id"]})
            done += 1

    async def finish(self) -> None:
        for c in self.clients:
            with contextlib.suppress(Exception):
                await c.close()
        self.clients = []
        if self.served is not None:
            await asyncio.to_thread(self.served.stop)
            self.served = None


class SwitchboardCoreBatch(SwitchboardCore):
    """`todos.claim_next_batch(max_todos=k)` + `todos.complete_batch` of the todos it got: two statements
    per k todos, each todo under its own lease with its own attempt opened and closed."""

    def __init__(self, k: int = 100) -> None:
        super().__init__()
        self.k = k
        self.key = f"sb-core-batch-{k}"
        self.label = f"Switchboard core in process, batches of {k} (`claim_next_batch` + `complete_batch`)"

    async def work(self, state, clock: Clock) -> int:
        core, caller = self.tenant.core, self.tenant.caller
        done = 0
        while True:
            clock.start()
            got = await todos.claim_next_batch(core, caller, max_todos=self.k, queue=QUEUE,
                                               lease_ttl_seconds=LEASE_TTL)
            if not got:
                return done
            results = await todos.complete_batch(core, caller, [{"id": g.todo["id"]} for g in got])
            refused = [r for r in results if not r["ok"]]
            if refused:
                raise VerifyError(f"complete_batch refused {len(refused)} of {len(got)}: {refused[0]['error']}")
            done += len(results)


class SwitchboardMcpBatch(SwitchboardMcp):
    """`claim_next` with `max_todos` = k and one `complete` with `items`, over MCP."""

    def __init__(self, k: int = 100) -> None:
        super().__init__()
        self.k = k
        self.key = f"sb-mcp-batch-{k}"
        self.label = f"Switchboard over MCP, batches of {k} (`max_todos`, `complete` with `items`)"

    async def work(self, client, clock: Clock) -> int:
        done = 0
        while True:
            clock.start()
            got = await client.tool("claim_next", {"queue": QUEUE, "max_todos": self.k})
            if got.get("empty"):
                return done
            answer = await client.tool("complete", {"items": [{"id": t["todo"]["id"]} for t in got["todos"]]})
            refused = [r for r in answer["results"] if not r["ok"]]
            if refused:
                raise VerifyError(f"complete refused {len(refused)} of {len(got['todos'])}: {refused[0]['error']}")
            done += len(answer["results"])


class SwitchboardCoreRound(SwitchboardCoreBatch):
    """A worker's round in one call: `todos.complete_and_take_next` completes the k todos of the round
    before and claims the next k in ONE transaction (docs/decisions.md D52), so a batch costs one
    commit instead of two; the last batch is completed alone."""

    def __init__(self, k: int = 100) -> None:
        super().__init__(k)
        self.key = f"sb-core-round-{k}"
        self.label = (f"Switchboard core in process, batches of {k}, each round one transaction "
                      "(`complete_and_take_next`)")

    async def work(self, state, clock: Clock) -> int:
        core, caller = self.tenant.core, self.tenant.caller
        done = 0
        clock.start()
        got = await todos.claim_next_batch(core, caller, max_todos=self.k, queue=QUEUE, lease_ttl_seconds=LEASE_TTL)
        while got:
            results, got, _ = await todos.complete_and_take_next(
                core, caller, [{"id": g.todo["id"]} for g in got], max_todos=self.k, queue=QUEUE,
                lease_ttl_seconds=LEASE_TTL)
            refused = [r for r in results if not r["ok"]]
            if refused:
                raise VerifyError(f"the round refused {len(refused)} of {len(results)}: {refused[0]['error']}")
            done += len(results)
        return done


class SwitchboardMcpRound(SwitchboardMcpBatch):
    """`claim_next` with `max_todos` = k and `complete` listing the round before's todos, over MCP: one
    call and one commit per batch."""

    def __init__(self, k: int = 100) -> None:
        super().__init__(k)
        self.key = f"sb-mcp-round-{k}"
        self.label = f"Switchboard over MCP, batches of {k}, each round one call (`claim_next` with `complete`)"

    async def work(self, client, clock: Clock) -> int:
        done = 0
        clock.start()
        got = await client.tool("claim_next", {"queue": QUEUE, "max_todos": self.k})
        while not got.get("empty"):
            got = await client.tool("claim_next", {"queue": QUEUE, "max_todos": self.k,
                                                   "complete": [{"id": t["todo"]["id"]} for t in got["todos"]]})
            refused = [r for r in got["completed"] if not r["ok"]]
            if refused:
                raise VerifyError(f"the round refused {len(refused)}: {refused[0]['error']}")
            done += len(got["completed"])
        return done
