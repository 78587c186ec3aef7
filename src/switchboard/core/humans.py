"""Humans (Board accounts, argon2id passwords) and their API tokens (`sbh_…`, stored as SHA-256)."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from .errors import Conflict, Invalid, NotFound
from .models import Core, HumanCaller
from .queries import Q
from .secrets import display_prefix, new_human_token, same, sha256

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_hasher = PasswordHasher()
# Verifying against this keeps the time of an unknown name close to a wrong password.
_DUMMY_HASH = _hasher.hash("switchboard-not-a-password")


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
    pw_hash = _hasher.hash(password) if password else None
    try:
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.humans.insert, {"name": name, "password_hash": pw_hash})
            row = await cur.fetchone()
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


async def verify_password(core: Core, name: str, password: str) -> HumanCaller | None:
    row = None
    if isinstance(name, str) and _NAME.match(name):
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.humans.by_name, {"name": name})
            row = await cur.fetchone()
    if not isinstance(password, str):
        return None
    password = password.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    stored = row["password_hash"] if row and row["password_hash"] else _DUMMY_HASH
    try:
        _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return None
    if row is None or not row["password_hash"]:
        return None
    return HumanCaller(human_id=row["id"], name=row["name"])


async def set_password(core: Core, human: HumanCaller, password: str) -> None:
    password = _password(password)
    async with core.pool.connection() as conn:
        await conn.execute(Q.humans.set_password, {"id": human.human_id, "password_hash": _hasher.hash(password)})


async def create_token(core: Core, human: HumanCaller) -> tuple[str, dict]:
    """A human API token, shown once; only its SHA-256 and a display prefix are kept."""
    token = new_human_token()
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.humans.insert_token, {
            "human_id": human.human_id, "hash": sha256(token), "prefix": display_prefix(token)})
        row = await cur.fetchone()
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
