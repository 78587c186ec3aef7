"""PgQueuer (PyPI `pgqueuer`), started its own way: `Queries.install()` (what `pgq install` runs), jobs
enqueued with the batch form of `Queries.enqueue` (lists of entrypoints and payloads: one statement),
and one `QueueManager` per worker, each on its own connection, running `qm.run(batch_size=...)` with
one no-op entrypoint.

A queue manager checks the schema and starts listening inside `run`, so the clock starts when the
first job reaches the entrypoint; it stops when every manager has returned, which is after each has
flushed its buffered status log (a job leaves the `pgqueuer` table and gets its `successful` log row
in that flush). The managers are told to shut down when the n-th job has been handed out.
"""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg

from .harness import Clock, Database, Run, VerifyError, gather_workers

ENTRYPOINT = "noop"
DEFAULT_BATCH = 10  # QueueManager.run's default batch_size


def _missing(*modules: str) -> str | None:
    import importlib.util

    for m in modules:
        if importlib.util.find_spec(m) is None:
            return f"{m} is not installed (pip install -e '.[bench]', or `make bench-peers`)"
    return None


class PgQueuer:
    enqueue_label: str

    def __init__(self, driver: str, batch: int | None) -> None:
        self.driver_name, self.batch = driver, batch
        self.key = f"pgqueuer-{driver}-{'default' if batch is None else batch}"
        self.label = (f"PgQueuer, {driver}, " + (f"default batch ({DEFAULT_BATCH})" if batch is None
                                                   else f"batch {batch}"))
        self.enqueue_label = f"PgQueuer, {driver}, batch `enqueue`"
        self.db: Database | None = None
        self.conns: list = []

    def unavailable(self) -> str | None:
        return _missing("pgqueuer", "asyncpg" if self.driver_name == "asyncpg" else "psycopg")

    async def _connect(self):
        if self.driver_name == "asyncpg":
            import asyncpg
            from pgqueuer.db import AsyncpgDriver

            # asyncpg takes no key=value conninfo: pass the parts.
            d = psycopg.conninfo.conninfo_to_dict(self.db.uri)
            conn = await asyncpg.connect(host=d.get("host"), port=int(d.get("port") or 5432), user=d.get("user"),
                                         password=d.get("password"), database=d.get("dbname"))
            self.conns.append(conn)
            return AsyncpgDriver(conn)
        from pgqueuer.db import PsycopgDriver

        conn = await psycopg.AsyncConnection.connect(self.db.uri, autocommit=True)  # the driver requires it
        self.conns.append(conn)
        return PsycopgDriver(conn)

    async def setup(self, db: Database) -> None:
        from pgqueuer.queries import Queries

        self.db = db
        self.queries = Queries(await self._connect())
        await self.queries.install()

    async def enqueue(self, n: int) -> float:
        t0 = time.perf_counter()
        await self.queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
        return time.perf_counter() - t0

    async def run_workers(self, w: int) -> Run:
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        managers = [QueueManager(Queries(await self._connect())) for _ in range(w)]
        target = await self._queued()
        clock = Clock()
        handed = 0

        def make(qm):
            @qm.entrypoint(ENTRYPOINT)
            async def noop(job) -> None:
                nonlocal handed
                clock.start()
                handed += 1
                if handed >= target:
                    for m in managers:
                        m.shutdown.set()

        for qm in managers:
            make(qm)
        batch = DEFAULT_BATCH if self.batch is None else self.batch
        await gather_workers(qm.run(batch_size=batch, dequeue_timeout=timedelta(seconds=5)) for qm in managers)
        return Run(jobs=handed, seconds=clock.since())

    async def _queued(self) -> int:
        async with await psycopg.AsyncConnection.connect(self.db.uri, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*) FROM pgqueuer WHERE status = 'queued'")
            return (await cur.fetchone())[0]

    async def verify(self, n: int) -> None:
        async with await psycopg.AsyncConnection.connect(self.db.uri, autocommit=True) as conn:
            left = (await (await conn.execute("SELECT count(*) FROM pgqueuer")).fetchone())[0]
            cur = await conn.execute("SELECT count(*), count(DISTINCT job_id) FROM pgqueuer_log"
                                     " WHERE status = 'successful'")
            ok, distinct = await cur.fetchone()
        if left or ok != n or distinct != n:
            raise VerifyError(f"{left} jobs left in the queue, {ok} successful log rows for {distinct} jobs;"
                              f" {n} expected")

    async def close(self) -> None:
        for c in self.conns:
            try:
                await c.close()
            except Exception:
                pass
        self.conns = []
