"""Where the database is: SWITCHBOARD_DATABASE_URL, else the embedded server under the data dir."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator

import psycopg

from ..config import Settings
from . import embedded, migrate
from .pool import open_pool

log = logging.getLogger("switchboard.db")


class Database:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.uri: str | None = None
        self._embedded: embedded.EmbeddedServer | None = None

    async def start(self) -> str:
        if self.settings.database_url:
            self.uri = self.settings.database_url
        else:
            self._embedded = await asyncio.to_thread(embedded.start, self.settings.data_dir)
            self.uri = self._embedded.uri
        return self.uri

    async def stop(self) -> None:
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.release)
            self._embedded = None

    async def migrate(self, *, target: int | None = None) -> list[str]:
        assert self.uri is not None
        async with await psycopg.AsyncConnection.connect(self.uri, autocommit=True) as conn:
            await conn.execute("SET client_min_messages = warning")
            return await migrate.migrate(conn, target=target)


@asynccontextmanager
async def open_core(settings: Settings, *, run_migrations: bool = True, min_size: int = 2,
                    max_size: int = 10) -> AsyncIterator["Core"]:  # noqa: F821
    """Start or attach to the database, migrate, open a pool, and yield the core context."""
    from ..core.models import Core

    db = Database(settings)
    await db.start()
    try:
        if run_migrations:
            await db.migrate()
        pool = await open_pool(db.uri, min_size=min_size, max_size=max_size)
        try:
            core = Core(pool=pool, settings=settings)
            core.database = db  # type: ignore[attr-defined]
            yield core
        finally:
            await pool.close()
    finally:
        await db.stop()
