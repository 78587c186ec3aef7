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

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
# One lane: argon2 then never holds more than one core, so a crowd of sign-ins leaves the event loop its
# CPU (p99 under attack 1.3-2.0x idle against 1.2-3.1x with four lanes, docs/benchmarks.md); hashes
# made with other parameters still verify (argon2 reads them from the hash).
_hasher = PasswordHasher(parallelism=1)
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


