"""The Board's one-time reveals: a secret shown once (a vended credential, an intake's URL and signing
secret) handed from the POST that made it to the page its redirect opens, in whichever serving
process that lands (docs/decisions.md D62).

The core keeps opaque sealed bytes under the SHA-256 of a random key; the caller seals and opens them
(web/board/reveal.py). A ticket is taken once, by its human, for its kind, before it expires.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from .models import Core
from .queries import Q
from .secrets import same, sha256

Kind = Literal["endpoint", "intake"]
MAX_KEY_LENGTH = 64


async def put(core: Core, human_id: Any, kind: Kind, sealed: bytes, *, key: str, seconds: int) -> None:
    """Keep `sealed` for `seconds` under `key` (made by `new_key`)."""
    async with core.pool.connection() as conn:
        await conn.execute(Q.reveals.put, {"hash": sha256(key), "human_id": human_id, "kind": kind,
                                           "sealed": sealed, "seconds": seconds})


def new_key() -> str:
    return secrets.token_urlsafe(32)


async def take(core: Core, human_id: Any, kind: Kind, key: str) -> bytes | None:
    """The sealed bytes, once; None for an unknown, taken, expired or another human's ticket."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        return None
    digest = sha256(key)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.reveals.take, {"hash": digest, "human_id": human_id, "kind": kind})
        row = await cur.fetchone()
    if row is None or not same(bytes(row["id_hash"]), digest):
        return None
    return bytes(row["sealed"])
