"""psycopg 3 async pool: autocommit connections, explicit transactions, UTC session clock."""

from __future__ import annotations

import select

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool


async def _configure(conn) -> None:  # noqa: ANN001
    await conn.execute("SET TIME ZONE 'UTC'")


def _server_spoke(conn: psycopg.AsyncConnection) -> bool:
    """True when the idle connection's socket is readable: the server sent something (a shutdown
    notice before it closed, an EOF, a notice) or the socket is gone."""
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, psycopg.Error, ValueError):
        return True


async def check_idle_connection(conn: psycopg.AsyncConnection) -> None:
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


async def open_pool(uri: str, *, min_size: int = 2, max_size: int = 10) -> AsyncConnectionPool:
    pool = AsyncConnectionPool(
        uri,
        min_size=min_size,
        max_size=max_size,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
        configure=_configure,
        check=check_idle_connection,
    )
    await pool.open(wait=True, timeout=30)
    return pool
