"""Ordered, transactional migrations shipped in the package.

Each `migrations/NNNN_name.sql` runs in one transaction together with its `schema_migrations` row.
A session-level advisory lock keeps two processes starting at once from colliding. A failure names
the file and stops start-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import psycopg

MIGRATION_LOCK = 0x5377_4D31  # "SwM1": the advisory lock key for migrations
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class MigrationError(Exception):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    found = []
    for entry in resources.files("switchboard.db.migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda mig: mig.version)
    return found


async def migrate(conn: psycopg.AsyncConnection, *, target: int | None = None) -> list[str]:
    """Apply every pending migration up to `target` (all when None). Returns the names applied.

    `conn` must be an autocommit connection.
    """
    applied_now: list[str] = []
    await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT version FROM schema_migrations")
        done = {row["version"] if isinstance(row, dict) else row[0] for row in await cur.fetchall()}
        for mig in available():
            if mig.version in done or (target is not None and mig.version > target):
                continue
            try:
                async with conn.transaction():
                    await conn.execute(mig.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                        (mig.version, mig.name),
                    )
            except psycopg.Error as exc:
                raise MigrationError(f"migration {mig.name} failed: {exc}") from exc
            applied_now.append(mig.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    return applied_now
