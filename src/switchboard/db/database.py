"""Where the database is: SWITCHBOARD_DATABASE_URL, else the embedded server under the data dir.

The pool and the core on top of it are opened by `switchboard.runtime.open_runtime`."""

from __future__ import annotations

import asyncio
import logging

import psycopg

from ..config import Settings
from . import embedded, migrate

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
