"""Agents and their vended endpoints: credentials (`sbk_…`, SHA-256 + prefix stored, shown once),
scopes, revocation and expiry with the cascade onto their todos."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from . import events, inputs, shapes, teams
from .errors import Invalid, NotFound
from .models import DEFAULT_VERBS, VERBS, Core, EndpointCaller, HumanCaller, effective_verbs
from .queries import Q, one
from .secrets import display_prefix, new_credential, new_slug, same, sha256
from .states import HELD_STATES, AttemptOutcome

# How far ahead an endpoint's expiry may be set, and how long its default lease may be, at its vend or
# later (endpoint_terms.change).
EXPIRES_MIN_SECONDS = 60
EXPIRES_MAX_SECONDS = 10 * 366 * 86400  # ten years
LEASE_MIN_SECONDS, LEASE_MAX_SECONDS = 60, 86400


def public(row: dict[str, Any]) -> dict[str, Any]:
    """An endpoint as its owner sees it; never the credential or its hash."""
    return {
        "endpoint_id": str(row["id"]), "slug": row["slug"], "agent": row["agent_name"],
        "queues": list(row["scope_queues"]), "verbs": list(row["scope_verbs"]),
        "state": row["state"], "credential_prefix": row["credential_prefix"],
        "default_lease_ttl_seconds": row["default_lease_ttl_seconds"],
        "created_at": shapes.ts(row["created_at"]), "revoked_at": shapes.ts(row["revoked_at"]),
        "expires_at": shapes.ts(row["expires_at"]), "last_used_at": shapes.ts(row["last_used_at"]),
    }


def caller_from_row(row: dict[str, Any], session_id: str | None = None) -> EndpointCaller:
    return EndpointCaller(endpoint_id=row["id"], agent_id=row["agent_id"], queues=tuple(row["scope_queues"]),
                          verbs=effective_verbs(row["scope_verbs"]), session_id=session_id,
                          default_lease_ttl=row["default_lease_ttl_seconds"], slug=row["slug"])


async def vend(core: Core, human: HumanCaller, *, agent: Any, queues: list[str] | None = None,
               verbs: list[str] | None = None, lease_ttl: Any = None,
               expires_in_seconds: Any = None) -> tuple[dict[str, Any], str]:
    """Vend an endpoint for one of the human's agents, expiring `expires_in_seconds` from now (never
    when None). Returns (endpoint, credential shown once)."""
    agent_name = inputs.text(agent, "agent", max_chars=64, required=True)
    queue_list = list(dict.fromkeys(inputs.queue(q) for q in inputs.string_list(queues or ["inbox"], "queue")))
    verb_list = list(dict.fromkeys(inputs.string_list(verbs or DEFAULT_VERBS, "verb")))
    unknown = [v for v in verb_list if v not in VERBS]
    if unknown:
        raise Invalid(f"unknown verb {unknown[0]}; known verbs: {', '.join(VERBS)}", argument="verb")
    lease_ttl = inputs.seconds_or_none(lease_ttl, "lease_ttl", LEASE_MIN_SECONDS, LEASE_MAX_SECONDS)
    seconds = inputs.seconds_or_none(expires_in_seconds, "expires_in_seconds", EXPIRES_MIN_SECONDS,
                                     EXPIRES_MAX_SECONDS)
    expires_at = None if seconds is None else datetime.now(UTC) + timedelta(seconds=seconds)
    credential = new_credential()
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.endpoints.upsert_agent, {"human_id": human.human_id, "name": agent_name})
        agent_row = await one(cur)
        cur = await conn.execute(Q.endpoints.insert_endpoint, {
            "agent_id": agent_row["id"], "slug": new_slug(), "credential_hash": sha256(credential),
            "prefix": display_prefix(credential), "verbs": verb_list, "queues": queue_list,
            "lease_ttl": lease_ttl, "expires_at": expires_at})
        row = await one(cur)
        team_labels = [q for q in queue_list if inputs.is_team_label(q)]
        granted = await teams.grant_on_vend(conn, human, row["id"], team_labels) if team_labels else []
    row["agent_name"] = agent_row["name"]
    out = public(row)
    if team_labels:  # a member's vend waits for an owner or admin to grant (`team grant`)
        out["awaiting_grant"] = [q for q in team_labels if q not in granted]
    return out, credential


async def resolve_credential(core: Core, credential: str | None) -> dict[str, Any] | None:
    """The active, unexpired endpoint row for a bearer credential, or None."""
    if not credential or not credential.startswith("sbk_") or len(credential) > 128:
        return None
    digest = sha256(credential)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.endpoints.by_credential, {"hash": digest})
        row = await cur.fetchone()
        if row is None or not same(bytes(row["credential_hash"]), digest):
            return None
        await conn.execute(Q.endpoints.touch, {"id": row["id"]})
    return row


async def credential_owner(core: Core, credential: str) -> dict[str, Any] | None:
    """The endpoint row a credential belongs to, in any state (revoked included), or None. Not an
    authentication: the MCP surface uses it only to tell an open session of a revoked endpoint that
    it was refused."""
    if not credential or not credential.startswith("sbk_") or len(credential) > 128:
        return None
    digest = sha256(credential)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.endpoints.by_credential_any_state, {"hash": digest})
        row = await cur.fetchone()
    if row is None or not same(bytes(row["credential_hash"]), digest):
        return None
    return row


async def not_live(core: Core, endpoint_ids: list[str]) -> set[str]:
    """The endpoints among `endpoint_ids` that are revoked, expired or deleted."""
    if not endpoint_ids:
        return set()
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.endpoints.not_live, {"ids": [UUID(str(i)) for i in endpoint_ids]})
        return {str(r["id"]) for r in await cur.fetchall()}


async def list_for_human(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.endpoints.for_human, {"human_id": human.human_id})
        return [public(r) for r in await cur.fetchall()]


async def get_for_human(core: Core, human: HumanCaller, slug: Any) -> dict[str, Any]:
    """The raw endpoint row when the human owns it; another human's slug is not_found."""
    if not inputs.is_identifier(slug):
        raise NotFound("endpoint not found", argument="slug")
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.endpoints.by_slug_for_human, {"slug": slug, "human_id": human.human_id})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("endpoint not found", argument="slug")
    return row


async def _revoke_id(core: Core, endpoint_id: UUID) -> tuple[bool, int]:
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.endpoints.lock_for_revoke, {"endpoint_id": endpoint_id})
        cur = await conn.execute(Q.endpoints.revoke, {"endpoint_id": endpoint_id})
        rows = await cur.fetchall()
        unseen = [r["id"] for r in rows if r.get("id") is not None and r["closed_attempt"] is None
                  and r["prior_state"] in HELD_STATES]
        if unseen:  # held by claims that committed while the cascade waited for their todos
            cur = await conn.execute(Q.endpoints.revoke_unseen_attempts, {"ids": unseen})
            closed = {r["todo_id"]: r["closed_attempt"] for r in await cur.fetchall()}
            for r in rows:
                r["closed_attempt"] = r["closed_attempt"] or closed.get(r["id"])
        # Team todos this endpoint holds go back to the team's queue (docs/decisions.md D32).
        cur = await conn.execute(Q.teams.hand_back, {"endpoint_ids": [endpoint_id], "team_id": None, "owner": None,
                                                     "queue": None, "outcome": AttemptOutcome.REVOKED})
        handed_back = list(await cur.fetchall())
    revoked = bool(rows and rows[0]["revoked"])
    evs = [events.build("revoke", r, r["closed_attempt"]) for r in rows if r.get("id") is not None]
    # A revoked todo with no open attempt still dead-letters: say so with its last attempt unknown.
    for ev in evs:
        if ev.final_attempt is None:
            ev.dead_lettered_without_attempt = True
    await core.bus.publish(*evs)
    await teams.publish_hand_back(core, handed_back)
    if revoked:
        await core.bus.publish(events.Event(verb="endpoint_revoked", todo={"id": ""},
                                            endpoint_id=str(endpoint_id), queue=""))
    return revoked, len(evs)


async def revoke(core: Core, human: HumanCaller, slug: Any) -> dict[str, Any]:
    """Revoke an endpoint: its credential stops working and every live todo becomes a dead letter."""
    row = await get_for_human(core, human, slug)
    _, affected = await _revoke_id(core, row["id"])
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.endpoints.by_id, {"id": row["id"]})
        fresh = await one(cur)
    out = public(fresh)
    out["dead_lettered"] = affected
    return out


async def expire_due(core: Core) -> int:
    """Sweep: endpoints past expires_at are revoked, with the cascade."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sweeps.expired_endpoints, {})
        ids = [r["id"] for r in await cur.fetchall()]
    n = 0
    for endpoint_id in ids:
        revoked, _ = await _revoke_id(core, endpoint_id)
        n += int(revoked)
    return n
