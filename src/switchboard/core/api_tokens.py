"""The human API's tokens (`sbh_…`) with a scope and an expiry, and who is an admin (migration 0009).

A token is `read` (reads only) or `write` (everything its human may do), and may expire. Like every
human token it is kept as SHA-256 plus a display prefix, shown once at creation, and checked against
the database on every request, so a revocation or an expiry takes effect at once in every process.
The admin flag (`humans.is_admin`, the first human of an installation) gates the operator settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import Conflict, Invalid, NotFound
from .models import Core, HumanCaller
from .queries import Q, one
from .secrets import HUMAN_TOKEN_PREFIX, display_prefix, new_human_token, same, sha256
from .shapes import ts

SCOPES = ("read", "write")
EXPIRES_MIN_SECONDS = 60
EXPIRES_MAX_SECONDS = 10 * 366 * 86400  # ten years
TOKEN_MAX_CHARS = 128


@dataclass(frozen=True)
class TokenCaller:
    """A human calling with one of their API tokens: who, which token, and what it may do."""

    human: HumanCaller
    token_id: str
    scope: str
    is_admin: bool

    @property
    def can_write(self) -> bool:
        return self.scope == "write"


def public(row: dict[str, Any]) -> dict[str, Any]:
    """A token as its human sees it: never the token or its hash."""
    return {"id": str(row["id"]), "prefix": row["prefix"], "scope": row["scope"],
            "created_at": ts(row["created_at"]), "expires_at": ts(row["expires_at"]),
            "revoked_at": ts(row["revoked_at"])}


def scope(value: Any) -> str:
    if value is None:
        return "write"
    if not isinstance(value, str) or value not in SCOPES:
        raise Invalid(f"scope must be one of {', '.join(SCOPES)}", argument="scope")
    return value


def expires_in(value: Any) -> int | None:
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int)
            or not EXPIRES_MIN_SECONDS <= value <= EXPIRES_MAX_SECONDS):
        raise Invalid(f"expires_in_seconds must be an integer from {EXPIRES_MIN_SECONDS} to "
                      f"{EXPIRES_MAX_SECONDS}", argument="expires_in_seconds")
    return value


async def create(core: Core, human: HumanCaller, *, scope_name: Any = None,
                 expires_in_seconds: Any = None) -> tuple[str, dict[str, Any]]:
    """A new token (shown once) and its public row. Scope `write` unless told; no expiry unless told."""
    chosen = scope(scope_name)
    seconds = expires_in(expires_in_seconds)
    token = new_human_token()
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.api_tokens.insert, {
            "human_id": human.human_id, "hash": sha256(token), "prefix": display_prefix(token),
            "scope": chosen, "expires_in": seconds})
        row = await one(cur)
    return token, public(row)


async def resolve(core: Core, token: str | None) -> TokenCaller | None:
    """The caller behind a live token (unrevoked, unexpired, its human enabled), else None."""
    if not token or not token.startswith(HUMAN_TOKEN_PREFIX) or len(token) > TOKEN_MAX_CHARS:
        return None
    digest = sha256(token)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.api_tokens.resolve, {"hash": digest})
        row = await cur.fetchone()
    if row is None or not same(bytes(row["token_hash"]), digest):
        return None
    return TokenCaller(human=HumanCaller(human_id=row["id"], name=row["name"]), token_id=str(row["token_id"]),
                       scope=row["scope"], is_admin=bool(row["is_admin"]))


async def list_for(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    """The human's tokens, newest first, revoked and expired ones included."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.api_tokens.of_human, {"human_id": human.human_id})
        return [public(r) for r in await cur.fetchall()]


async def revoke(core: Core, human: HumanCaller, ref: Any) -> tuple[dict[str, Any], bool]:
    """Revoke one of the human's tokens, named by id or display prefix. Returns the token and whether
    this call revoked it. Another human's token is not_found, exactly like an unknown one."""
    if not isinstance(ref, str) or not ref.strip() or len(ref) > 64:
        raise NotFound("no token by that id or prefix", argument="token")
    ref = ref.strip()
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.api_tokens.matching, {"human_id": human.human_id, "ref": ref})
        rows = await cur.fetchall()
        if not rows:
            raise NotFound("no token by that id or prefix", argument="token")
        if len(rows) > 1:
            raise Conflict("several tokens have that prefix; name the token by its id", argument="token")
        was_revoked = rows[0]["revoked_at"] is not None
        cur = await conn.execute(Q.api_tokens.revoke, {"id": rows[0]["id"], "human_id": human.human_id})
        row = await one(cur)
    return public(row), not was_revoked


async def is_admin(core: Core, human: HumanCaller) -> bool:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.api_tokens.is_admin, {"id": human.human_id})
        row = await cur.fetchone()
    return bool(row and row["is_admin"])


async def set_admin(core: Core, human: HumanCaller, admin: bool) -> bool:
    """Make a human an admin of the API (or not); returns the flag as stored."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.api_tokens.set_admin, {"id": human.human_id, "is_admin": bool(admin)})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("no such user", argument="user")
    return bool(row["is_admin"])
