"""psycopg 3 async pool: autocommit connections, explicit transactions, UTC session clock, and
deadlines on every statement.

A stalled database (frozen, overloaded, a lock held forever) must not hang the server. Each pooled
connection carries PostgreSQL's `statement_timeout` and `lock_timeout` (SWITCHBOARD_DB_STATEMENT_TIMEOUT_SECONDS,
SWITCHBOARD_DB_LOCK_TIMEOUT_SECONDS); a server that does not answer at all (stopped, or cut off
without a reset) cannot enforce its own timeout, so the client also gives up on any one statement
`CLIENT_MARGIN_SECONDS` after the statement timeout and closes that connection (the pool replaces it),
and a checkout waits no longer than that either. All three raise the pool's timeout error: by default
`DatabaseTimeout` (a psycopg `OperationalError`); the runtime passes the core's `DatabaseUnavailable`,
which is also the core error `unavailable` ("database did not answer in time; retry"). The error class
is passed in because `db` sits below the core and imports nothing from it.
"""

from __future__ import annotations

import select
from collections import deque
from typing import Any

import psycopg
from psycopg import errors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

STATEMENT_TIMEOUT_SECONDS = 10.0
LOCK_TIMEOUT_SECONDS = 5.0
CLIENT_MARGIN_SECONDS = 2.0


class DatabaseTimeout(psycopg.OperationalError):
    """The database did not answer in time: a statement or lock timeout, no answer at all, or no
    free connection. `code` is the core's name for it (`core.errors.DatabaseUnavailable` is both)."""

    code = "unavailable"
    default_message = "database did not answer in time; retry"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.default_message)


_TIMED_OUT = (errors.QueryCanceled, errors.LockNotAvailable)


class _Reports(psycopg.AsyncCursor[Any]):
    """Reports PostgreSQL's statement and lock timeouts as `DatabaseTimeout` (or the connection's
    `timeout_error`), and a refused endpoint (SQLSTATE 28000) as the connection's `refused_error`."""

    async def execute(self, *args, **kwargs):
        try:
            return await super().execute(*args, **kwargs)
        except _TIMED_OUT as exc:
            raise getattr(self.connection, "timeout_error", DatabaseTimeout)() from exc
        except errors.InvalidAuthorizationSpecification as exc:
            # SQLSTATE 28000 from a statement: the calling endpoint is no longer live (migration 0008).
            refused = getattr(self.connection, "refused_error", None)
            if refused is None:
                raise
            raise refused() from exc


class DeadlineCursor(_Reports):
    """The pool's cursor."""


class DeadlineRawCursor(_Reports, psycopg.AsyncRawCursor[Any]):
    """The same reports for a statement run in PostgreSQL's own `$n` form (core/queries.py,
    NativeStatement): without them a revoked endpoint's claim raised psycopg's error, not `unauthorized`."""


class DeadlineConnection(psycopg.AsyncConnection):
    """Gives up on a statement the server does not answer within `deadline` seconds."""

    deadline: float | None = None
    timeout_error: type[Exception] = DatabaseTimeout
    refused_error: type[Exception] | None = None  # raised for SQLSTATE 28000 (see DeadlineCursor)

    async def wait(self, gen, interval=0.1, timeout=None):
        if timeout is None:
            timeout = self.deadline
        try:
            return await super().wait(gen, interval, timeout)
        except errors._WaitTimeout as exc:  # psycopg's own signal for a wait timeout
            # The connection is mid-statement with a server that does not answer: unusable.
            self.pgconn.finish()
            raise self.timeout_error() from exc


async def _configure(conn) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")


def _options(uri: str, statement_timeout: float, lock_timeout: float) -> str:
    """libpq `options` carrying the timeouts (no extra round trip), after any the URI sets."""
    given = psycopg.conninfo.conninfo_to_dict(uri).get("options") or ""
    ours = f"-c statement_timeout={int(statement_timeout * 1000)} -c lock_timeout={int(lock_timeout * 1000)}"
    return f"{given} {ours}".strip()


def _server_spoke(conn: psycopg.AsyncConnection[Any]) -> bool:
    """True when the idle connection's socket is readable: the server sent something (a shutdown
    notice before it closed, an EOF, a notice) or the socket is gone."""
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, psycopg.Error, ValueError):
        return True


async def check_idle_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """The liveness check on every checkout, without a round trip in the common case.

    An idle autocommit connection has nothing to read. A terminated backend (restart, failover,
    pg_terminate_backend) sends its FATAL error and closes the socket, which makes it readable; only
    then is the full round-trip check run, which raises for a dead connection so the pool replaces
    it. Checking every checkout with a round trip cost two of the four round trips of a
    claim + complete cycle (docs/benchmarks.md).
    """
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if _server_spoke(conn):
        await AsyncConnectionPool.check_connection(conn)


class HotFirstPool(AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]):
    """Hands out the most recently returned idle connection (LIFO) instead of the least recent.

    psycopg_pool queues idle connections first in, first out, so a handful of callers rotate
    through every connection the pool ever opened: after a burst of 16, a single caller wakes a
    different backend each time, with cold caches. Measured on 2 cores at 4 callers with 20
    allowed connections: about 30 % less PostgreSQL CPU per claim + complete cycle and 40 % more
    cycles/s (docs/benchmarks.md). Idle connections at the cold end are the ones the pool closes
    when it shrinks after `max_idle`.
    """

    timeout_error: type[Exception] = DatabaseTimeout

    async def getconn(self, timeout: float | None = None):
        try:
            return await super().getconn(timeout)
        except PoolTimeout as exc:
            raise self.timeout_error() from exc

    async def _get_ready_connection(self, timeout: float | None):
        conn = await super()._get_ready_connection(timeout)
        idle = getattr(self, "_pool", None)
        if conn is not None and isinstance(idle, deque) and idle:
            # The base class took the coldest (left) one: put it back, take the hottest (right).
            # Runs without an await in between, under the same event loop step as the base call.
            idle.appendleft(conn)
            conn = idle.pop()
        return conn


async def open_pool(uri: str, *, min_size: int = 2, max_size: int = 10,
                    statement_timeout: float = STATEMENT_TIMEOUT_SECONDS,
                    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
                    timeout_error: type[Exception] = DatabaseTimeout,
                    refused_error: type[Exception] | None = None,
                    ) -> AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]:
    """`statement_timeout`, `lock_timeout`: seconds (settings `db_statement_timeout_seconds`,
    `db_lock_timeout_seconds`); `timeout_error`: what a timed-out statement or checkout raises
    (called without arguments); `refused_error`: what a statement refused with SQLSTATE 28000
    raises instead of psycopg's error (the core's `Unauthorized`)."""
    deadline = statement_timeout + CLIENT_MARGIN_SECONDS
    connection_class = type("PoolConnection", (DeadlineConnection,),
                            {"deadline": deadline, "timeout_error": timeout_error,
                             "refused_error": refused_error})
    pool = HotFirstPool(
        uri,
        min_size=min_size,
        max_size=max_size,
        open=False,
        connection_class=connection_class,
        kwargs={"autocommit": True, "row_factory": dict_row, "cursor_factory": DeadlineCursor,
                "options": _options(uri, statement_timeout, lock_timeout)},
        configure=_configure,
        check=check_idle_connection,
        timeout=deadline,
    )
    pool.timeout_error = timeout_error
    await pool.open(wait=True, timeout=30)
    return pool
