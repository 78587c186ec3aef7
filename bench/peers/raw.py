"""Raw SQL on Switchboard's own tables: what the database can do with no application around it.

raw-per-job   the store bench's bare loop (bench/store_bench.py BARE_CLAIM / BARE_COMPLETE): one
              statement claims the oldest pending todo and opens its attempt row, one closes both
raw-batch-10  the same two statements for k todos at a time (k = 10): the claim opens k attempt
              rows, the complete closes k attempts and k todos from two arrays

One psycopg connection per worker (autocommit: one transaction per statement, synchronous commit
as the server has it). Enqueue: one COPY of all n rows.
"""

from __future__ import annotations

import time

import psycopg

import store_bench  # bench/store_bench.py: the bare statements
from switchboard.core.todos import new_todo_id

from .harness import QUEUE, Clock, Database, Run, gather_workers
from .switchboard import LEASE_TTL, Tenant

BATCH_CLAIM = """
WITH next AS (
    SELECT id FROM todos
     WHERE endpoint_id = %(ep)s AND queue = %(queue)s AND state = 'pending'
     ORDER BY created_at LIMIT %(k)s FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE todos t
       SET state = 'claimed', owner = %(owner)s, lease_expires_at = now() + make_interval(secs => %(ttl)s),
           attempt = t.attempt + 1, attempts_total = t.attempts_total + 1, claimed_at = now(),
           updated_at = now()
      FROM next WHERE t.id = next.id
    RETURNING t.id, t.attempt, t.attempts_total, t.lease_expires_at
), att AS (
    INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, claimer_endpoint_id, owner,
                               claimed_at, lease_expires_at)
    SELECT id, attempts_total, attempt, 'endpoint', %(ep)s, %(owner)s, now(), lease_expires_at FROM claimed
    RETURNING todo_id, seq
)
SELECT todo_id, seq FROM att
"""

BATCH_COMPLETE = """
WITH a AS (
    UPDATE todo_attempts ta SET ended_at = now(), outcome = 'completed', disposition = 'done'
      FROM unnest(%(ids)s::text[], %(seqs)s::int[]) AS c(todo_id, seq)
     WHERE ta.todo_id = c.todo_id AND ta.seq = c.seq AND ta.ended_at IS NULL
    RETURNING ta.todo_id
)
UPDATE todos t SET state = 'done', completed_at = now(), updated_at = now()
  FROM a WHERE t.id = a.todo_id AND t.state = 'claimed'
RETURNING t.id
"""


class RawPerJob:
    key = "raw-per-job"
    label = "raw SQL, per job, with attempt rows"
    enqueue_label = "raw SQL, one COPY"

    def __init__(self) -> None:
        self.tenant: Tenant | None = None
        self.conns: list[psycopg.AsyncConnection] = []

    def unavailable(self) -> str | None:
        return None

    async def setup(self, db: Database) -> None:
        self.tenant = await Tenant.open(db)

    async def enqueue(self, n: int) -> float:
        ep = self.tenant.caller.endpoint_id
        async with await psycopg.AsyncConnection.connect(self.tenant.uri, autocommit=True) as conn:
            t0 = time.perf_counter()
            async with conn.cursor() as cur:
                async with cur.copy("COPY todos (id, endpoint_id, queue, title) FROM STDIN") as copy:
                    for i in range(n):
                        await copy.write_row((new_todo_id(), ep, QUEUE, f"job {i}"))
            return time.perf_counter() - t0

    async def work(self, conn: psycopg.AsyncConnection, clock: Clock) -> int:
        ep, owner = self.tenant.caller.endpoint_id, self.tenant.caller.owner
        done = 0
        while True:
            clock.start()
            cur = await conn.execute(store_bench.BARE_CLAIM, (ep, QUEUE, owner, LEASE_TTL, ep, owner))
            row = await cur.fetchone()
            if row is None:
                return done
            cur = await conn.execute(store_bench.BARE_COMPLETE, row)
            if await cur.fetchone() is None:
                raise RuntimeError(f"raw complete found no claimed todo {row[0]}")
            done += 1

    async def run_workers(self, w: int) -> Run:
        for _ in range(w):
            self.conns.append(await psycopg.AsyncConnection.connect(self.tenant.uri, autocommit=True))
        clock = Clock()
        clock.start()
        counts = await gather_workers(self.work(c, clock) for c in self.conns)
        return Run(jobs=sum(counts), seconds=clock.since())

    async def verify(self, n: int) -> None:
        await self.tenant.verify(n)

    async def close(self) -> None:
        for c in self.conns:
            await c.close()
        self.conns = []
        if self.tenant is not None:
            await self.tenant.close()


class RawBatch(RawPerJob):
    """k todos per claim statement and per complete statement."""

    def __init__(self, k: int = 10) -> None:
        super().__init__()
        self.k = k
        self.key = f"raw-batch-{k}"
        self.label = f"raw SQL, {k} per statement, with attempt rows"

    async def work(self, conn: psycopg.AsyncConnection, clock: Clock) -> int:
        params = {"ep": self.tenant.caller.endpoint_id, "queue": QUEUE, "owner": self.tenant.caller.owner,
                  "ttl": LEASE_TTL, "k": self.k}
        done = 0
        while True:
            clock.start()
            cur = await conn.execute(BATCH_CLAIM, params)
            rows = await cur.fetchall()
            if not rows:
                return done
            cur = await conn.execute(BATCH_COMPLETE, {"ids": [r[0] for r in rows], "seqs": [r[1] for r in rows]})
            closed = len(await cur.fetchall())
            if closed != len(rows):
                raise RuntimeError(f"raw batch complete closed {closed} of {len(rows)} todos")
            done += closed
