"""psycopg 3 async pool: autocommit connections, explicit transactions, UTC session clock."""

from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool


async def _configure(conn) -> None:  # noqa: ANN001
    await conn.execute("SET TIME ZONE 'UTC'")


async def open_pool(uri: str, *, min_size: int = 2, max_size: int = 10) -> AsyncConnectionPool:
    pool = AsyncConnectionPool(
        uri,
        min_size=min_size,
        max_size=max_size,
        open=False,
        kwargs={"autocommit": True, "row_factory": dict_row},
        configure=_configure,
        check=AsyncConnectionPool.check_connection,
    )
    await pool.open(wait=True, timeout=30)
    return pool
