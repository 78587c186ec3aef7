"""Failed Board sign-ins, counted per throttle key in the database so that every serving process and
every restart sees the same counts (docs/decisions.md D64; the policy is web/board/throttle.py's).

A key is a text (an account and an address, or an address) with its number of free failures; only
its SHA-256 is stored. Every call is one transaction, and any that writes several keys' rows locks
them in key order first.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from .models import Core
from .queries import Q
from .secrets import sha256

Key = tuple[str, int]  # (key text, free failures)


def _hashes(keys: Sequence[Key]) -> list[bytes]:
    return [sha256(text) for text, _ in keys]


async def attempt(core: Core, keys: Sequence[Key], *, max_wait: int, forget: int) -> int:
    """Judge and count an attempt in one transaction: 0 when it may go ahead (its failure is counted,
    to be confirmed or taken back), else the seconds to wait (nothing counted). The keys' rows are
    locked while judged, so concurrent attempts with one key are judged one after the other, each
    seeing the others' counts."""
    hashes = _hashes(keys)
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.signin_failures.ensure, {"hashes": hashes})
        cur = await conn.execute(Q.signin_failures.judge, {
            "hashes": hashes, "frees": [free for _, free in keys], "max_wait": max_wait, "forget": forget})
        row = await cur.fetchone()
        wait = max(0, int(row["seconds"])) if row else 0
        if wait == 0:
            await conn.execute(Q.signin_failures.count, {"hashes": hashes, "forget": forget})
    if wait == 0 and secrets.randbelow(64) == 0:  # now and then, forget the keys long quiet
        async with core.pool.connection() as conn:
            await conn.execute(Q.signin_failures.prune, {"forget": forget})
    return wait


async def confirm(core: Core, keys: Sequence[Key]) -> None:
    """The counted attempt failed: its wait runs from now."""
    await _locked(core, Q.signin_failures.confirm, _hashes(keys), {})


async def forgive(core: Core, keys: Sequence[Key]) -> None:
    """Take one counted failure back from each key."""
    await _locked(core, Q.signin_failures.forgive, _hashes(keys), {})


async def succeed(core: Core, pair: Key, address: Key) -> None:
    """The password was right: forget the pair's failures and take the address's count back."""
    hashes = [sha256(pair[0]), sha256(address[0])]
    await _locked(core, Q.signin_failures.succeed, hashes, {"pair": hashes[0], "address": hashes[1]})


async def _locked(core: Core, statement: str, hashes: list[bytes], params: dict[str, object]) -> None:
    """Run `statement` on the keys' rows after locking them in key order, in one transaction."""
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.signin_failures.lock_keys, {"hashes": hashes})
        await conn.execute(statement, {"hashes": hashes, **params})
