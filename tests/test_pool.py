"""The connection pool: the hottest idle connection first, and a checkout check without a round trip
that still replaces a connection whose backend was terminated."""

from __future__ import annotations

import psycopg

from switchboard.db.pool import open_pool


async def _state_change(admin: psycopg.AsyncConnection, pid: int):
    cur = await admin.execute("SELECT state_change FROM pg_stat_activity WHERE pid = %s", (pid,))
    return (await cur.fetchone())[0]


async def test_the_most_recently_returned_connection_is_handed_out_first(pg_uri):
    pool = await open_pool(pg_uri, min_size=3, max_size=3)
    try:
        conns = [await pool.getconn() for _ in range(3)]
        for conn in conns:
            await pool.putconn(conn)
        again = await pool.getconn()
        assert again is conns[-1]
        await pool.putconn(again)
    finally:
        await pool.close()


async def test_checkout_of_a_healthy_connection_sends_nothing_to_the_server(pg_uri):
    pool = await open_pool(pg_uri, min_size=1, max_size=1)
    try:
        async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True) as admin:
            async with pool.connection() as conn:
                pid = conn.info.backend_pid
                await conn.execute("SELECT 1")
            before = await _state_change(admin, pid)
            for _ in range(3):
                async with pool.connection() as conn:
                    assert conn.info.backend_pid == pid
            assert await _state_change(admin, pid) == before
    finally:
        await pool.close()


async def test_a_terminated_backend_is_replaced_at_checkout(pg_uri):
    pool = await open_pool(pg_uri, min_size=1, max_size=1)
    try:
        async with pool.connection() as conn:
            old_pid = conn.info.backend_pid
        async with await psycopg.AsyncConnection.connect(pg_uri, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (old_pid,))
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT pg_backend_pid() AS pid")
            assert (await cur.fetchone())["pid"] != old_pid
    finally:
        await pool.close()


async def test_the_private_pool_shape_hot_first_relies_on_is_still_there(pg_uri):
    """HotFirstPool overrides `_get_ready_connection(timeout)` and reorders the idle deque `_pool`;
    both are private to psycopg_pool (pinned in pyproject.toml). A release that renames or reshapes
    them fails here rather than silently falling back to first in, first out."""
    import inspect
    from collections import deque

    from psycopg_pool import AsyncConnectionPool

    base = AsyncConnectionPool._get_ready_connection
    assert inspect.iscoroutinefunction(base)
    assert list(inspect.signature(base).parameters) == ["self", "timeout"]
    pool = await open_pool(pg_uri, min_size=2, max_size=2)
    try:
        assert isinstance(pool._pool, deque) and len(pool._pool) == 2
    finally:
        await pool.close()
