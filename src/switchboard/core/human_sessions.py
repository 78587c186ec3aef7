"""Board sessions kept in the database: started at sign-in, checked on every Board request, ended by
signing out, a password change or disabling the human, in every process at once.

The browser holds a random id (256 bits); only its SHA-256 is stored. A session lasts a fixed
lifetime from sign-in; `last_seen_at` is refreshed at most once a minute.
"""

from __future__ import annotations

import secrets
from typing import Any, cast

from .models import Core, HumanCaller
from .queries import Q
from .secrets import same, sha256

MAX_ID_LENGTH = 128


def _hash(session_id: str) -> bytes | None:
    if not isinstance(session_id, str) or not session_id or len(session_id) > MAX_ID_LENGTH:
        return None
    return sha256(session_id)


async def start(core: Core, human_id: Any, seconds: int) -> str:
    """A new session for the human; returns the id for the browser (shown to nothing else)."""
    session_id = secrets.token_urlsafe(32)
    async with core.pool.connection() as conn:
        await conn.execute(Q.human_sessions.insert,
                           {"hash": sha256(session_id), "human_id": human_id, "seconds": seconds})
        if secrets.randbelow(64) == 0:  # now and then, forget rows long past their end
            await conn.execute(Q.human_sessions.prune)
    return session_id


async def resolve(core: Core, session_id: str) -> HumanCaller | None:
    """The human of a live session, or None (unknown, ended, expired, or the human is disabled)."""
    digest = _hash(session_id)
    if digest is None:
        return None
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.human_sessions.live, {"hash": digest})
        row = await cur.fetchone()
        if row is None or not same(bytes(row["id_hash"]), digest):
            return None
        if row["stale"]:
            await conn.execute(Q.human_sessions.touch, {"hash": digest})
    return HumanCaller(human_id=row["id"], name=row["name"])


async def end(core: Core, session_id: str) -> bool:
    """End one session for good; True when it was live."""
    digest = _hash(session_id)
    if digest is None:
        return False
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.human_sessions.end_one, {"hash": digest})
        return cur.rowcount > 0


async def end_all(core: Core, human_id: Any, conn: Any = None) -> int:
    """End every live session of a human (inside the caller's transaction when `conn` is given)."""
    if conn is not None:
        cur = await conn.execute(Q.human_sessions.end_all, {"human_id": human_id})
        return cast(int, cur.rowcount)
    async with core.pool.connection() as own:
        cur = await own.execute(Q.human_sessions.end_all, {"human_id": human_id})
        return cur.rowcount

