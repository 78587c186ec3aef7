"""procrastinate (PyPI `procrastinate`), started its own way: an `App` on a `PsycopgConnector`, the
schema from `app.schema_manager.apply_schema_async()`, one async no-op task, jobs put on the queue
with `task.batch_defer_async` (one statement for the batch), and one worker from
`app.run_worker_async(concurrency=W, wait=False)`, which returns once it has caught up with the
queue. The worker's pool holds W + 1 connections (one per concurrent job, one for LISTEN), opened
before the worker starts; the clock starts when the first job reaches the task.
"""

from __future__ import annotations

import time

import psycopg

from .harness import QUEUE, Clock, Database, Run, VerifyError
from .pgqueuer_peer import _missing


class Procrastinate:
    key = "procrastinate"
    label = "procrastinate (worker, concurrency W)"
    enqueue_label = "procrastinate, `batch_defer_async`"

    def __init__(self) -> None:
        self.db: Database | None = None
        self.app = None
        self.clock = Clock()
        self.ran = 0

    def unavailable(self) -> str | None:
        return _missing("procrastinate")

    async def setup(self, db: Database) -> None:
        import procrastinate

        self.db = db
        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=db.uri, min_size=1,
                                                                              max_size=2))

        @self.app.task(name="noop", queue=QUEUE)
        async def noop() -> None:
            self.clock.start()
            self.ran += 1

        self.task = noop
        await self.app.open_async()
        await self.app.schema_manager.apply_schema_async()

    async def enqueue(self, n: int) -> float:
        t0 = time.perf_counter()
        await self.task.batch_defer_async(*({} for _ in range(n)))
        return time.perf_counter() - t0

    async def run_workers(self, w: int) -> Run:
        import procrastinate

        await self.app.close_async()
        connector = procrastinate.PsycopgConnector(conninfo=self.db.uri, min_size=w + 1, max_size=w + 1)
        with self.app.replace_connector(connector):
            await self.app.open_async()  # opens the pool and waits for its connections
            try:
                await self.app.run_worker_async(queues=[QUEUE], concurrency=w, wait=False,
                                                install_signal_handlers=False)
                seconds = self.clock.since()
            finally:
                await self.app.close_async()
        return Run(jobs=self.ran, seconds=seconds)

    async def verify(self, n: int) -> None:
        async with await psycopg.AsyncConnection.connect(self.db.uri, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*), count(*) FILTER (WHERE status = 'succeeded')"
                                     " FROM procrastinate_jobs")
            total, ok = await cur.fetchone()
        if total != n or ok != n:
            raise VerifyError(f"{ok} of {total} procrastinate jobs succeeded, {n} deferred")

    async def close(self) -> None:
        if self.app is not None:
            try:
                await self.app.close_async()
            except Exception:
                pass
