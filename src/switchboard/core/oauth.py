"""OAuth 2.1 grants for MCP hosts (docs/mcp.md, "Hosts that only speak OAuth"): registered clients,
authorization codes and the access and refresh tokens issued for them, each bound to one endpoint.

Every secret (client secret, code, token) is random, handed out once and stored as its SHA-256; a
lookup by digest is confirmed with a constant-time compare. A code is single use and short-lived; a
refresh token is single use (rotation): spending it issues a new pair in the same family, and
presenting a spent one again revokes the whole family. An access token resolves to the endpoint's row
only while the token is unrevoked and unexpired and the endpoint is active and unexpired, so revoking
the endpoint ends its tokens too. Revoking a token announces the endpoint on the credentials channel
(migration 0008) so that serving processes drop what they cached.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from .models import Core, HumanCaller
from .queries import Q
from .secrets import same, sha256

ACCESS_PREFIX = "sbo_"  # an OAuth access token
REFRESH_PREFIX = "sbr_"  # an OAuth refresh token
CODE_PREFIX = "sbc_"  # an authorization code
TOKEN_MAX_CHARS = 128


def new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def _shaped(value: Any, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix) and len(value) <= TOKEN_MAX_CHARS


@dataclass(frozen=True)
class Issued:
    """A token pair as handed to the client: the secrets appear here and nowhere else."""

    access_token: str
    refresh_token: str
    expires_in: int
    scopes: list[str]
    resource: str


# --------------------------------------------------------------------------------------- clients

async def register_client(core: Core, client_id: str, metadata: dict[str, Any], secret: str | None) -> None:
    async with core.pool.connection() as conn:
        await conn.execute(Q.oauth.insert_client, {
            "client_id": client_id, "metadata": Jsonb(metadata),
            "secret_hash": sha256(secret) if secret else None})


async def get_client(core: Core, client_id: Any) -> dict[str, Any] | None:
    """The client's row (metadata and secret digest), or None."""
    if not isinstance(client_id, str) or not client_id or len(client_id) > 200:
        return None
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.oauth.client, {"client_id": client_id})
        return await cur.fetchone()


def secret_matches(row: dict[str, Any], presented: str | None) -> bool:
    stored = row.get("secret_hash")
    if stored is None or not presented:
        return False
    return same(bytes(stored), sha256(presented))


# ----------------------------------------------------------------------------------------- codes

async def create_code(core: Core, human: HumanCaller, *, client_id: str, endpoint_id: UUID, redirect_uri: str,
                      redirect_uri_explicit: bool, code_challenge: str, scopes: list[str], resource: str,
                      seconds: int) -> str:
    """A single-use code for an endpoint the human owns (the caller checked ownership)."""
    code = new_secret(CODE_PREFIX)
    async with core.pool.connection() as conn:
        await conn.execute(Q.oauth.insert_code, {
            "hash": sha256(code), "client_id": client_id, "endpoint_id": endpoint_id,
            "human_id": human.human_id, "redirect_uri": redirect_uri, "explicit": redirect_uri_explicit,
            "challenge": code_challenge, "scopes": scopes, "resource": resource, "seconds": seconds})
    return code


async def load_code(core: Core, client_id: str, code: Any) -> dict[str, Any] | None:
    if not _shaped(code, CODE_PREFIX):
        return None
    digest = sha256(code)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.oauth.code, {"hash": digest, "client_id": client_id})
        row = await cur.fetchone()
        if row is None:
            # A code presented again after its exchange: revoke what it issued (RFC 6749 §4.1.2).
            cur = await conn.execute(Q.oauth.used_code_family, {"hash": digest})
            used = await cur.fetchone()
            if used is not None:
                await _revoke_family(conn, used["family"])
            return None
    if not same(bytes(row["code_hash"]), digest):
        return None
    return row


async def _issue(conn: Any, *, client_id: str, endpoint_id: UUID, scopes: list[str], resource: str,
                 family: UUID, access_seconds: int, refresh_seconds: int,
                 refresh: str | None = None) -> Issued:
    access = new_secret(ACCESS_PREFIX)
    refresh = refresh or new_secret(REFRESH_PREFIX)
    common = {"client_id": client_id, "endpoint_id": endpoint_id, "scopes": scopes, "resource": resource,
              "family": family}
    await conn.execute(Q.oauth.insert_token, {**common, "hash": sha256(access), "kind": "access",
                                              "seconds": access_seconds})
    await conn.execute(Q.oauth.insert_token, {**common, "hash": sha256(refresh), "kind": "refresh",
                                              "seconds": refresh_seconds})
    return Issued(access, refresh, access_seconds, list(scopes), resource)


async def exchange_code(core: Core, client_id: str, code: str, *, access_seconds: int,
                        refresh_seconds: int) -> Issued | None:
    """Spend the code (once) and issue a token pair; None when it was spent or expired meanwhile."""
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.oauth.use_code, {"hash": sha256(code), "client_id": client_id})
        row = await cur.fetchone()
        if row is None:
            return None
        return await _issue(conn, client_id=client_id, endpoint_id=row["endpoint_id"], scopes=list(row["scopes"]),
                            resource=row["resource"], family=row["family"], access_seconds=access_seconds,
                            refresh_seconds=refresh_seconds)


# ---------------------------------------------------------------------------------------- tokens

async def load_refresh(core: Core, client_id: str, token: Any) -> dict[str, Any] | None:
    """A live refresh token of this client. A spent one presented again revokes its family."""
    if not _shaped(token, REFRESH_PREFIX):
        return None
    digest = sha256(token)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.oauth.refresh_token, {"hash": digest, "client_id": client_id})
        row = await cur.fetchone()
        if row is None:
            cur = await conn.execute(Q.oauth.spent_refresh_family, {"hash": digest, "client_id": client_id})
            spent = await cur.fetchone()
            if spent is not None:
                await _revoke_family(conn, spent["family"])
            return None
    if not same(bytes(row["token_hash"]), digest):
        return None
    return row


async def rotate_refresh(core: Core, client_id: str, token: str, scopes: list[str], *, access_seconds: int,
                         refresh_seconds: int) -> Issued | None:
    """Spend a refresh token and issue a new pair in its family; None when it was spent meanwhile."""
    successor = new_secret(REFRESH_PREFIX)
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.oauth.rotate_refresh, {"hash": sha256(token), "client_id": client_id,
                                                          "successor": sha256(successor)})
        row = await cur.fetchone()
        if row is None:
            return None
        granted = [s for s in scopes if s in row["scopes"]] or list(row["scopes"])
        return await _issue(conn, client_id=client_id, endpoint_id=row["endpoint_id"], scopes=granted,
                            resource=row["resource"], family=row["family"], access_seconds=access_seconds,
                            refresh_seconds=refresh_seconds, refresh=successor)


async def resolve_access(core: Core, token: Any) -> dict[str, Any] | None:
    """The live endpoint row (with the agent's name and `oauth_*` columns) an access token acts as."""
    if not _shaped(token, ACCESS_PREFIX):
        return None
    digest = sha256(token)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.oauth.access_token, {"hash": digest})
        row = await cur.fetchone()
    if row is None or not same(bytes(row["oauth_hash"]), digest):
        return None
    return row


async def find_token(core: Core, token: Any) -> dict[str, Any] | None:
    """A token of either kind in any state (for revocation), or None."""
    if not (_shaped(token, ACCESS_PREFIX) or _shaped(token, REFRESH_PREFIX)):
        return None
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.oauth.any_token, {"hash": sha256(token)})
        return await cur.fetchone()


async def revoke_family(core: Core, family: UUID) -> None:
    """Revoke every token issued from one consent (the access token, its refresh chain)."""
    async with core.pool.connection() as conn, conn.transaction():
        await _revoke_family(conn, family)


async def _revoke_family(conn: Any, family: UUID) -> None:
    cur = await conn.execute(Q.oauth.revoke_family, {"family": family})
    for endpoint_id in {row["endpoint_id"] for row in await cur.fetchall()}:
        await conn.execute(Q.oauth.notify_endpoint, {"endpoint_id": endpoint_id})


async def purge(core: Core) -> dict[str, Any]:
    """Drop expired codes and tokens and abandoned clients (a sweep-tick hook): how many of each."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.oauth.purge)
        row = await cur.fetchone()
    return dict(row) if row else {}
