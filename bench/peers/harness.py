"""What every system in the peer benchmark implements, and the rounds that measure them.

A system is measured on a database created for that one measurement (one server for the run, a
fresh database per system, worker count and round), in four steps:

    await system.setup(db)            # its own schema install and connections (not timed)
    seconds = await system.enqueue(n) # n no-op jobs through its bulk path (timed: the bulk figure)
    run = await system.run_workers(w) # w workers drain the queue; start-up excluded
    await system.verify(n)            # every job done exactly once (and every attempt closed)
    await system.close()

`run_workers` times only the draining: from the moment the workers start taking jobs (connections,
sessions, listeners and schema checks happen before, or for peers that start up inside their own
run call, the clock starts at the first job handed to the job function) to the moment the last
job is recorded done in the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import psycopg

QUEUE = "bench"
RETRIES = 3  # tries of a measurement that errors (not one that fails verification)
RETRY_PAUSE_S = 20.0


class VerifyError(AssertionError):
    """A measurement whose jobs were not all done exactly once: its figure is not reported."""


@dataclass
class Database:
    """One fresh, empty database on the run's server."""

    uri: str
    name: str
    server_uri: str


@dataclass
class Run:
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


class System(Protocol):
    """One way of running no-op jobs on PostgreSQL.

    key            the name on the command line (`--systems`)
    label          the row in the table
    enqueue_label  the row in the bulk-enqueue table; systems with the same one are reported once
    """

    key: str
    label: str
    enqueue_label: str

    def unavailable(self) -> str | None:
        """Why this system cannot run here (a missing package, a Python too old), or None."""

    async def setup(self, db: Database) -> None: ...

    async def enqueue(self, n: int) -> float:
        """Put n no-op jobs on the queue through the system's bulk path; the seconds it took."""

    async def run_workers(self, w: int) -> Run:
        """Drain the queue with w concurrent workers."""

    async def verify(self, n: int) -> None:
        """Raise VerifyError unless all n jobs are done, each exactly once."""

    async def close(self) -> None: ...


class Clock:
    """Start-up excluded: the first `start()` sets the start, later calls do nothing."""

    def __init__(self) -> None:
        self.t0: float | None = None

    def start(self) -> None:
        if self.t0 is None:
            self.t0 = time.perf_counter()

    def since(self) -> float:
        if self.t0 is None:
            raise VerifyError("no job ran")
        return time.perf_counter() - self.t0


# ------------------------------------------------------------------------------------ databases

class Databases:
    """Fresh databases on one server, dropped as soon as their measurement is over."""

    def __init__(self, server_uri: str) -> None:
        self.server_uri = server_uri
        self.live: list[str] = []

    async def create(self, label: str) -> Database:
        name = f"sb_peers_{label.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        async with await psycopg.AsyncConnection.connect(self.server_uri, autocommit=True) as conn:
            await conn.execute(f'CREATE DATABASE "{name}"')
        self.live.append(name)
        return Database(uri=psycopg.conninfo.make_conninfo(self.server_uri, dbname=name), name=name,
                        server_uri=self.server_uri)

    async def drop(self, db: Database) -> None:
        async with await psycopg.AsyncConnection.connect(self.server_uri, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
        with contextlib.suppress(ValueError):
            self.live.remove(db.name)

    async def drop_all(self) -> None:
        for name in list(self.live):
            await self.drop(Database(uri="", name=name, server_uri=self.server_uri))


# ------------------------------------------------------------------------------------- rounds

@dataclass
class Sample:
    rate: float
    enqueue_rate: float
    pg_us: float | None  # PostgreSQL CPU per job (embedded server only)
    py_us: float  # this process's CPU per job


@dataclass
class Results:
    samples: dict[str, dict[int, list[Sample]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)

    def median(self, key: str, w: int) -> float | None:
        xs = self.samples.get(key, {}).get(w) or []
        return statistics.median(s.rate for s in xs) if xs else None

    def median_of(self, key: str, w: int, attr: str) -> float | None:
        xs = [getattr(s, attr) for s in self.samples.get(key, {}).get(w) or [] if getattr(s, attr) is not None]
        return statistics.median(xs) if xs else None

    def enqueue_median(self, key: str) -> float | None:
        xs = [s.enqueue_rate for by_w in self.samples.get(key, {}).values() for s in by_w]
        return statistics.median(xs) if xs else None


async def measure_once(make: Callable[[], System], dbs: Databases, *, n: int, w: int,
                       server_cpu: Callable[[], float | None]) -> Sample:
    system = make()
    db = await dbs.create(system.key)
    try:
        await system.setup(db)
        enqueue_s = await system.enqueue(n)
        await asyncio.sleep(0.3)  # let the server reap the backends of setup and enqueue first (CPU per job)
        pg0, py0 = server_cpu(), time.process_time()
        run = await system.run_workers(w)
        py1, pg1 = time.process_time(), server_cpu()
        if run.jobs != n:
            raise VerifyError(f"{system.key}: the workers ran {run.jobs} jobs, {n} were enqueued")
        await system.verify(n)
    finally:
        with contextlib.suppress(Exception):
            await system.close()
        await dbs.drop(db)
    return Sample(rate=run.rate, enqueue_rate=n / enqueue_s if enqueue_s > 0 else 0.0,
                  pg_us=(pg1 - pg0) / n * 1e6 if pg0 is not None and pg1 is not None else None,
                  py_us=(py1 - py0) / n * 1e6)


async def measure_with_retries(make: Callable[[], System], dbs: Databases, *, n: int, w: int,
                               server_cpu: Callable[[], float | None], log: Callable[[str], None],
                               tries: int = RETRIES) -> Sample:
    """A measurement that errors (a server that did not start, a lost connection) is tried again on a
    fresh database after a pause; a failed verification is never retried."""
    for attempt in range(1, tries + 1):
        try:
            return await measure_once(make, dbs, n=n, w=w, server_cpu=server_cpu)
        except VerifyError:
            raise
        except Exception as e:
            if attempt == tries:
                raise
            log(f"  {make().key}: {type(e).__name__}: {e}; trying again in {RETRY_PAUSE_S:g} s")
            await asyncio.sleep(RETRY_PAUSE_S)
    raise AssertionError("unreachable")


async def measure_all(makers: list[Callable[[], System]], dbs: Databases, *, n: int, workers: list[int],
                      rounds: int, server_cpu: Callable[[], float | None], loadavg: Callable[[], float],
                      log: Callable[[str], None]) -> Results:
    """Every system at every worker count, `rounds` times; the order rotates each round and worker
    count, so drift on a shared machine falls on all systems alike."""
    results = Results()
    runnable = []
    for make in makers:
        probe = make()
        reason = probe.unavailable()
        if reason:
            results.skipped[probe.key] = reason
            log(f"  {probe.key}: skipped: {reason}")
        else:
            runnable.append((probe.key, make))
            results.samples[probe.key] = {w: [] for w in workers}
    for r in range(rounds):
        for wi, w in enumerate(workers):
            k = (r * len(workers) + wi) % max(len(runnable), 1)
            for key, make in runnable[k:] + runnable[:k]:
                if key in results.failed:
                    continue
                try:
                    got = await measure_with_retries(make, dbs, n=n, w=w, server_cpu=server_cpu, log=log)
                except VerifyError as e:
                    results.failed[key] = str(e)
                    log(f"  {key}: FAILED verification: {e}")
                    continue
                except Exception as e:  # one broken system must not cost the run: it is reported as failed
                    results.failed[key] = f"{type(e).__name__}: {e}"
                    log(f"  {key}: FAILED: {type(e).__name__}: {e}")
                    continue
                results.samples[key][w].append(got)
                results.loads.append(loadavg())
                log(f"  round {r + 1}/{rounds}  W={w:<2}  {key:<24} {got.rate:9,.0f} jobs/s"
                    f"   enqueue {got.enqueue_rate:9,.0f}/s")
    return results


async def gather_workers(coros) -> list:
    """Run worker coroutines together; the first failure cancels the others and is raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
