"""Humans (Board accounts, argon2id passwords) and their API tokens (`sbh_…`, stored as SHA-256).

argon2 hashing and verification run in a small pool of worker threads at the lowest CPU priority (the
C library releases the GIL, and the threads it starts for its lanes inherit the priority), so a burst
of sign-ins neither holds the event loop nor takes the CPU from requests; how many sign-ins wait for
the pool is the Board's sign-in gate's business.
A password change or disabling a human ends every Board session of that human in the same
transaction; API tokens are listed and revoked here, and every request checks the database.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import psycopg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from . import human_sessions
from .errors import Conflict, Invalid, NotFound
from .models import Core, HumanCaller
from .queries import Q, one
from .secrets import display_prefix, new_human_token, same, sha256

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_hasher = PasswordHasher()
# Verifying against this keeps the time of an unknown name close to a wrong password.
_DUMMY_HASH = _hasher.hash("switchboard-not-a-password")
HASH_THREADS = 2
HASH_NICE = 19


def _lowest_priority() -> None:
    """Run this worker thread (and the argon2 lane threads it starts) at the lowest CPU priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), HASH_NICE)
    except (AttributeError, OSError):  # pragma: no cover - not Linux: the thread runs at normal priority
        pass


_hash_pool = ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="argon2",
                                initializer=_lowest_priority)


async def _in_hash_pool(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_hash_pool, fn, *args)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise Invalid("name must be 1-64 letters, digits or _.@- starting with a letter or digit",
                      argument="name")
    return value


def _password(value: Any) -> str:
    if not isinstance(value, str) or "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise Invalid("password must be text", argument="password")
    if len(value) < 8:
        raise Invalid("password must be at least 8 characters", argument="password")
    if len(value) > 1024:
        raise Invalid("password must be at most 1024 characters", argument="password")
    return value


async def add(core: Core, name: Any, password: str | None = None) -> HumanCaller:
    name = _name(name)
    if password is not None:
        password = _password(password)
    pw_hash = await _hash(password) if password else None
    try:
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.humans.insert, {"name": name, "password_hash": pw_hash})
            row = await one(cur)
    except psycopg.errors.UniqueViolation:
        raise Conflict(f"user {name} already exists", argument="name") from None
    return HumanCaller(human_id=row["id"], name=row["name"])


async def by_name(core: Core, name: str) -> HumanCaller:
    if not isinstance(name, str) or not _NAME.match(name):
        raise NotFound("no user by that name", argument="user")
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.humans.by_name, {"name": name})
        row = await cur.fetchone()
    if row is None:
        raise NotFound(f"no user named {name}", argument="user")
    return HumanCaller(human_id=row["id"], name=row["name"])


async def by_id(core: Core, human_id: Any) -> HumanCaller | None:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.humans.by_id, {"id": human_id})
        row = await cur.fetchone()
    return HumanCaller(human_id=row["id"], name=row["name"]) if row else None


async def _hash(password: str) -> str:
    return cast(str, await _in_hash_pool(_hasher.hash, password))


def _matches(stored: str, password: str) -> bool:
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


async def verify_password(core: Core, name: str, password: str) -> HumanCaller | None:
    """The human when the password is theirs and the account is enabled; else None. An unknown name,
    a password-less or disabled account cost one verification too, so timing does not tell them apart.
    The verification runs in a worker thread."""
    row = None
    if isinstance(name, str) and _NAME.match(name):
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.humans.by_name, {"name": name})
            row = await cur.fetchone()
    if not isinstance(password, str):
        return None
    password = password.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    stored = row["password_hash"] if row and row["password_hash"] else _DUMMY_HASH
    if not await _in_hash_pool(_matches, stored, password):
        return None
    if row is None or not row["password_hash"] or row["disabled_at"] is not None:
        return None
    return HumanCaller(human_id=row["id"], name=row["name"])


async def set_password(core: Core, human: HumanCaller, password: str) -> int:
    """Set a new password and end every Board session of the human (one transaction).
    Returns how many live sessions were ended."""
    password = _password(password)
    pw_hash = await _hash(password)
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.humans.set_password, {"id": human.human_id, "password_hash": pw_hash})
        return await human_sessions.end_all(core, human.human_id, conn)


async def set_disabled(core: Core, human: HumanCaller, disabled: bool) -> int:
    """Disable (or enable again) a human. Disabling refuses sign-in and API tokens and ends every
    Board session (one transaction); returns how many live sessions were ended."""
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.humans.set_disabled, {"id": human.human_id, "disabled": bool(disabled)})
        if disabled:
            return await human_sessions.end_all(core, human.human_id, conn)
    return 0


def _token_row(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(row["id"]), "prefix": row["prefix"],
            "created_at": row["created_at"].isoformat(),
            "revoked_at": row["revoked_at"].isoformat() if row["revoked_at"] else None}


async def list_tokens(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    """The human's API tokens, newest first: id, display prefix, created_at, revoked_at."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.humans.tokens_of, {"human_id": human.human_id})
        return [_token_row(r) for r in await cur.fetchall()]


async def revoke_token(core: Core, human: HumanCaller, ref: Any) -> tuple[dict[str, Any], bool]:
    """Revoke one of the human's tokens, named by its id or its display prefix. Returns the token and
    whether this call revoked it (False: it was revoked already). Another human's token is not found,
    exactly like an unknown one."""
    if not isinstance(ref, str) or not ref or len(ref) > 64:
        raise NotFound("no token by that id or prefix", argument="token")
    ref = ref.strip()
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.humans.tokens_matching, {"human_id": human.human_id, "ref": ref})
        rows = await cur.fetchall()
        if not rows:
            raise NotFound("no token by that id or prefix", argument="token")
        if len(rows) > 1:
            raise Conflict("several tokens have that prefix; name the token by its id", argument="token")
        was_revoked = rows[0]["revoked_at"] is not None
        cur = await conn.execute(Q.humans.revoke_token, {"id": rows[0]["id"], "human_id": human.human_id})
        row = await one(cur)
    return _token_row(row), not was_revoked


async def create_token(core: Core, human: HumanCaller) -> tuple[str, dict[str, Any]]:
    """A human API token, shown once; only its SHA-256 and a display prefix are kept."""
    token = new_human_token()
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.humans.insert_token, {
            "human_id": human.human_id, "hash": sha256(token), "prefix": display_prefix(token)})
        row = await one(cur)
    return token, row


async def resolve_token(core: Core, token: str | None) -> HumanCaller | None:
    if not token or not token.startswith("sbh_") or len(token) > 128:
        return None
    digest = sha256(token)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.humans.by_token, {"hash": digest})
        row = await cur.fetchone()
    if row is None or not same(bytes(row["token_hash"]), digest):
        return None
    return HumanCaller(human_id=row["id"], name=row["name"])
