"""Teams: members with roles, team queues and their grants to endpoints (issue 13, docs/teams.md).

A human's reach is their own todos plus those of every team they belong to. A team queue is addressed
`team:<team-slug>/<queue>`; its todos belong to the team. An owner or admin grants a team queue to a
member's endpoint; each claim is then made by that endpoint with its own credential. What an endpoint
reaches is checked by the statements on every call (core/sql/fragments.sql `team_reach`): removing a
member takes their endpoints off the team's queues at once, and hands back the leases they held in
the same transaction.

Roles: `member` sees and acts on the team's todos; `admin` also manages members and grants; `owner`
also manages owners and deletes the team. A team the human does not belong to is `not_found`, the
same answer as a team that does not exist.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import DictRow

from . import events, inputs, shapes
from .errors import Conflict, Forbidden, Invalid, NotFound
from .models import Core, HumanCaller
from .queries import Q
from .states import AttemptOutcome as Outcome

MANAGERS = ("owner", "admin")
NAME_MAX_CHARS = 128


def _not_found() -> NotFound:
    return NotFound("team not found", argument="team")


async def _lock_team(conn: AsyncConnection[DictRow], team_id: Any) -> None:
    """The team's row, locked first by every change of its members, roles and grants (and by its
    deletion), so they go one at a time. A team deleted meanwhile is not_found: the change's inserts
    would have waited for the deletion and failed their foreign keys (docs/decisions.md D66)."""
    cur = await conn.execute(Q.teams.lock_team, {"team_id": team_id})
    if await cur.fetchone() is None:
        raise _not_found()


def public(row: dict[str, Any]) -> dict[str, Any]:
    out = {"slug": row["slug"], "name": row["name"], "created_at": shapes.ts(row["created_at"])}
    if "role" in row:
        out["role"] = row["role"]
    if "members" in row:
        out["members"] = row["members"]
    return out


async def create(core: Core, human: HumanCaller, slug: Any, name: Any = None) -> dict[str, Any]:
    """Create a team; its creator is its first owner."""
    checked = inputs.team_slug(slug, "slug")
    title = inputs.text(name, "name", max_chars=NAME_MAX_CHARS) or checked
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.teams.create, {"slug": checked, "name": title, "human_id": human.human_id})
        row = await cur.fetchone()
    if row is None:
        raise Conflict(f"a team with slug {checked} exists", op="team create")
    return public(row)


async def list_for_human(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.teams.for_human, {"human_id": human.human_id})
        return [public(r) for r in await cur.fetchall()]


async def _membership(conn: AsyncConnection[DictRow], human: HumanCaller, slug: Any) -> DictRow:
    if not isinstance(slug, str) or not inputs.is_identifier(slug):
        raise _not_found()
    cur = await conn.execute(Q.teams.membership, {"slug": slug, "human_id": human.human_id})
    row = await cur.fetchone()
    if row is None:
        raise _not_found()
    return row


async def membership(core: Core, human: HumanCaller, slug: Any) -> dict[str, Any]:
    """The team by slug with the human's role, or not_found when they are not a member."""
    async with core.pool.connection() as conn:
        return dict(await _membership(conn, human, slug))


def _require_manager(team: dict[str, Any], action: str) -> None:
    if team["role"] not in MANAGERS:
        raise Forbidden(f"only a team owner or admin may {action}", argument="team")


async def reach(core: Core, human: HumanCaller, slug: Any, *, manage: str | None = None) -> dict[str, Any]:
    """A team the human belongs to, with their role; outside it, the team's not_found. With `manage`
    (what is being done), a plain member is forbidden: what a team owns (its hooks, its sinks) is
    changed by its owners and admins and read by every member."""
    team = await membership(core, human, slug)
    if manage is not None:
        _require_manager(team, manage)
    return team


async def show(core: Core, human: HumanCaller, slug: Any) -> dict[str, Any]:
    """A team as its members see it: members and roles, queues with counts, grants."""
    async with core.pool.connection() as conn:
        team = await _membership(conn, human, slug)
        params = {"team_id": team["id"]}
        members = await (await conn.execute(Q.teams.members, params)).fetchall()
        queues = await (await conn.execute(Q.teams.queue_counts, params)).fetchall()
        grants = await (await conn.execute(Q.teams.grants, params)).fetchall()
    out = public(team)
    out["members"] = [{"name": m["name"], "role": m["role"], "added_at": shapes.ts(m["added_at"])}
                      for m in members]
    out["queues"] = [dict(q) for q in queues]
    out["grants"] = [{"queue": g["queue"], "endpoint": g["endpoint"], "agent": g["agent"], "human": g["human"],
                      "granted_at": shapes.ts(g["granted_at"]),
                      "reaches": bool(g["member"]) and g["state"] == "active"} for g in grants]
    return out


async def _human_id(conn: AsyncConnection[DictRow], name: Any) -> UUID:
    if not isinstance(name, str) or not inputs.is_identifier(name):
        raise NotFound("human not found", argument="human")
    cur = await conn.execute(Q.humans.by_name, {"name": name})
    row = await cur.fetchone()
    if row is None:
        raise NotFound("human not found", argument="human")
    return UUID(str(row["id"]))


async def add_member(core: Core, actor: HumanCaller, slug: Any, name: Any, role: Any = "member") -> dict[str, Any]:
    checked_role = inputs.team_role(role)
    async with core.pool.connection() as conn, conn.transaction():
        team = await _membership(conn, actor, slug)
        _require_manager(team, "add members")
        if checked_role == "owner" and team["role"] != "owner":
            raise Forbidden("only a team owner may add an owner", argument="role")
        human_id = await _human_id(conn, name)
        await _lock_team(conn, team["id"])
        cur = await conn.execute(Q.teams.add_member, {"team_id": team["id"], "human_id": human_id,
                                                      "role": checked_role})
        if await cur.fetchone() is None:
            raise Conflict(f"{name} is already a member of {team['slug']}", op="team add")
    return {"team": team["slug"], "human": name, "role": checked_role}


async def set_role(core: Core, actor: HumanCaller, slug: Any, name: Any, role: Any) -> dict[str, Any]:
    checked_role = inputs.team_role(role)
    async with core.pool.connection() as conn, conn.transaction():
        team = await _membership(conn, actor, slug)
        _require_manager(team, "change roles")
        await _lock_team(conn, team["id"])
        human_id = await _human_id(conn, name)
        current = await _role_of(conn, team["id"], human_id)
        if current is None:
            raise NotFound("not a member of this team", argument="human")
        if "owner" in (checked_role, current["role"]) and team["role"] != "owner":
            raise Forbidden("only a team owner may make or unmake an owner", argument="role")
        if current["role"] == "owner" and checked_role != "owner":
            await _keep_an_owner(conn, team["id"])
        await conn.execute(Q.teams.set_role, {"team_id": team["id"], "human_id": human_id, "role": checked_role})
    return {"team": team["slug"], "human": name, "role": checked_role}


async def _role_of(conn: AsyncConnection[DictRow], team_id: UUID, human_id: UUID) -> DictRow | None:
    cur = await conn.execute(Q.teams.member_role, {"team_id": team_id, "human_id": human_id})
    return await cur.fetchone()


async def _keep_an_owner(conn: AsyncConnection[DictRow], team_id: UUID) -> None:
    row = await (await conn.execute(Q.teams.owners, {"team_id": team_id})).fetchone()
    if row is None or row["n"] <= 1:
        raise Conflict("a team keeps at least one owner; make another member owner first, or delete the team",
                       op="team")


async def _remove(core: Core, conn: AsyncConnection[DictRow], team: dict[str, Any], human_id: UUID) -> list[Any]:
    """Take a human off a team in the caller's transaction: their grants go, and the team leases their
    endpoints hold, and those they hold themselves (a Board claim), are handed back (`released`,
    `requeued`). Returns the rows handed back."""
    await _lock_team(conn, team["id"])
    current = await _role_of(conn, team["id"], human_id)
    if current is None:
        raise NotFound("not a member of this team", argument="human")
    if current["role"] == "owner":
        await _keep_an_owner(conn, team["id"])
    # Deleting the membership row waits for the member's own claims from the Board (which share-lock it)
    # and deleting the grants for their endpoints' claims (which share-lock the grant: team_targets_locked
    # and the claim by id); both stop new ones, so the hand-back below, a later statement, sees every
    # lease they committed.
    await conn.execute(Q.teams.remove_member, {"team_id": team["id"], "human_id": human_id})
    await conn.execute(Q.teams.lock_member_grants, {"team_id": team["id"], "human_id": human_id})
    await conn.execute(Q.teams.drop_member_grants, {"team_id": team["id"], "human_id": human_id})
    endpoint_ids = [r["id"] for r in await (await conn.execute(Q.teams.human_endpoints,
                                                               {"human_id": human_id})).fetchall()]
    cur = await conn.execute(Q.teams.hand_back, {"endpoint_ids": endpoint_ids, "team_id": team["id"],
                                                 "owner": HumanCaller(human_id).owner, "queue": None,
                                                 "outcome": Outcome.RELEASED})
    return list(await cur.fetchall())


async def publish_hand_back(core: Core, rows: list[Any]) -> None:
    await core.bus.publish(*[events.build("hand_back", r, r["closed_attempt"], ready="requeued") for r in rows])


async def remove_member(core: Core, actor: HumanCaller, slug: Any, name: Any) -> dict[str, Any]:
    async with core.pool.connection() as conn, conn.transaction():
        team = dict(await _membership(conn, actor, slug))
        _require_manager(team, "remove members")
        human_id = await _human_id(conn, name)
        role = await _role_of(conn, team["id"], human_id)
        if role is not None and role["role"] == "owner" and team["role"] != "owner":
            raise Forbidden("only a team owner may remove an owner", argument="human")
        rows = await _remove(core, conn, team, human_id)
    await publish_hand_back(core, rows)
    return {"team": team["slug"], "human": name, "removed": True, "leases_handed_back": len(rows)}


async def leave(core: Core, human: HumanCaller, slug: Any) -> dict[str, Any]:
    async with core.pool.connection() as conn, conn.transaction():
        team = dict(await _membership(conn, human, slug))
        rows = await _remove(core, conn, team, human.human_id)
    await publish_hand_back(core, rows)
    return {"team": team["slug"], "left": True, "leases_handed_back": len(rows)}


async def delete(core: Core, actor: HumanCaller, slug: Any) -> dict[str, Any]:
    """Delete a team (owner only): its todos, their attempts, grants and policies go with it."""
    async with core.pool.connection() as conn, conn.transaction():
        team = await _membership(conn, actor, slug)
        if team["role"] != "owner":
            raise Forbidden("only a team owner may delete the team", argument="team")
        await _lock_team(conn, team["id"])
        for lock in (Q.teams.lock_members_to_delete, Q.teams.lock_grants_to_delete, Q.teams.lock_todos_to_delete):
            await conn.execute(lock, {"team_id": team["id"]})
        await conn.execute(Q.teams.delete, {"team_id": team["id"]})
    return {"team": team["slug"], "deleted": True}


async def _endpoint_of_member(conn: AsyncConnection[DictRow], team: dict[str, Any], slug: Any) -> DictRow:
    if not isinstance(slug, str) or not inputs.is_identifier(slug):
        raise NotFound("endpoint not found", argument="endpoint")
    cur = await conn.execute(Q.teams.endpoint_of_member, {"slug": slug, "team_id": team["id"]})
    row = await cur.fetchone()
    if row is None:
        raise NotFound("endpoint not found", argument="endpoint")
    return row


def _label_of(team: dict[str, Any], queue: Any) -> str:
    """A team queue given as its bare name or its full label, as the label of this team."""
    if isinstance(queue, str) and inputs.is_team_label(queue):
        slug, _ = inputs.team_label(queue)
        if slug != team["slug"]:
            raise Invalid(f"queue {queue} is not a queue of team {team['slug']}", argument="queue")
        return queue
    name = inputs.queue(queue)
    return f"{inputs.TEAM_PREFIX}{team['slug']}/{name}"


async def grant(core: Core, actor: HumanCaller, slug: Any, queue: Any, endpoint: Any) -> dict[str, Any]:
    """Grant a team queue to a member's endpoint (owner or admin); the label joins its scope."""
    async with core.pool.connection() as conn, conn.transaction():
        team = dict(await _membership(conn, actor, slug))
        _require_manager(team, "grant team queues")
        label = _label_of(team, queue)
        ep = await _endpoint_of_member(conn, team, endpoint)
        if ep["state"] != "active":
            raise Invalid("endpoint is revoked", argument="endpoint")
        await _lock_team(conn, team["id"])
        await conn.execute(Q.teams.grant, {"endpoint_id": ep["id"], "queue": label, "team_id": team["id"],
                                           "endpoint_human_id": ep["human_id"], "granted_by": actor.human_id})
        await conn.execute(Q.teams.add_scope_queue, {"endpoint_id": ep["id"], "queue": label})
    return {"team": team["slug"], "queue": label, "endpoint": ep["slug"], "granted": True}


async def ungrant(core: Core, actor: HumanCaller, slug: Any, queue: Any, endpoint: Any) -> dict[str, Any]:
    """Take a team queue back from an endpoint; the leases it holds there are handed back."""
    async with core.pool.connection() as conn, conn.transaction():
        team = dict(await _membership(conn, actor, slug))
        _require_manager(team, "take back team queues")
        label = _label_of(team, queue)
        if not isinstance(endpoint, str) or not inputs.is_identifier(endpoint):
            raise NotFound("endpoint not found", argument="endpoint")
        cur = await conn.execute(Q.endpoints.by_slug_any, {"slug": endpoint})
        ep = await cur.fetchone()
        if ep is None:
            raise NotFound("endpoint not found", argument="endpoint")
        await conn.execute(Q.teams.lock_endpoint_grants, {"endpoint_id": ep["id"]})
        gone = await (await conn.execute(Q.teams.ungrant, {"endpoint_id": ep["id"], "queue": label})).fetchone()
        if gone is None:
            raise NotFound("no such grant", argument="endpoint")
        await conn.execute(Q.teams.drop_scope_queue, {"endpoint_id": ep["id"], "queue": label})
        cur = await conn.execute(Q.teams.hand_back, {"endpoint_ids": [ep["id"]], "team_id": team["id"],
                                                     "owner": None, "queue": label, "outcome": Outcome.RELEASED})
        rows = list(await cur.fetchall())
    await publish_hand_back(core, rows)
    return {"team": team["slug"], "queue": label, "endpoint": endpoint, "granted": False,
            "leases_handed_back": len(rows)}


async def team_for_label(conn: AsyncConnection[DictRow], human: HumanCaller, label: str) -> DictRow:
    """The team a queue label names, with the human's role; not_found outside their teams."""
    slug, _ = inputs.team_label(label)
    cur = await conn.execute(Q.teams.team_of_label, {"slug": slug, "human_id": human.human_id})
    row = await cur.fetchone()
    if row is None:
        raise _not_found()
    return row


async def grant_on_vend(conn: AsyncConnection[DictRow], human: HumanCaller, endpoint_id: UUID,
                        labels: list[str]) -> list[str]:
    """The team queues named by a vend: the vendor must be a member of each team (else not_found);
    an owner's or admin's vend grants them at once, a member's waits for an owner or admin to grant
    (`team grant`). Returns the labels granted."""
    granted = []
    for label in labels:
        team = await team_for_label(conn, human, label)
        if team["role"] in MANAGERS:
            await _lock_team(conn, team["id"])
            await conn.execute(Q.teams.grant, {"endpoint_id": endpoint_id, "queue": label, "team_id": team["id"],
                                               "endpoint_human_id": human.human_id, "granted_by": human.human_id})
            granted.append(label)
    return granted


async def member_ids(core: Core, team_id: Any) -> list[UUID]:
    """The humans of a team, by the team's id (the Board tells each member's open pages that a team
    todo moved)."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.teams.members, {"team_id": team_id})
        return [UUID(str(r["human_id"])) for r in await cur.fetchall()]


async def ring_candidates(core: Core, team_id: Any, queue: str) -> list[str]:
    """The live endpoints that reach a team queue now (for the doorbell)."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.teams.ring_candidates, {"team_id": team_id, "queue": queue})
        return [str(r["endpoint_id"]) for r in await cur.fetchall()]
