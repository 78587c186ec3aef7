"""Notification sinks (docs/notifications.md): chat webhooks that hear about dead letters, stuck
queues and a daily digest of the owner's queues.

A sink belongs to one human or to one team (migration 0033, D60). A human's sink covers every queue
of that human's endpoints, and the team queues of every team where that human is an owner or admin
at the time of the event (migration 0030; a plain member's sinks do not hear about the team's
queues). A team's sink covers that team's queues, whoever manages it; its owners and admins add,
remove, enable and test it, and every member lists it and reads its messages.

Messages wait in `sink_outbox` until the sender (`switchboard.web.sinks`) delivers them:
- a dead letter: written by the trigger of migrations 0011, 0030 and 0033 in the dead-lettering
  transaction;
- a stuck queue (a todo claimable for more than the sink's `stuck_minutes` with no claim): written by
  `tick` once per episode; the queue must recover (no todo waiting that long) before it is reported
  again;
- a digest: written by `tick` once per local day, during the sink's `digest_hour` in its
  `digest_timezone` (an IANA name, read with `zoneinfo`). A process down for that whole hour skips
  that day's digest.

`tick(core, now=...)` takes the time to judge by, so tests drive the clock without sleeping.
"""

from __future__ import annotations

import uuid
import zoneinfo
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

from psycopg.types.json import Jsonb

from . import shapes, teams
from .errors import Conflict, Invalid, NotFound
from .hooks import check_url, control_characters, redact
from .models import Core, HumanCaller
from .queries import Q, one
from .sink_messages import EVENTS, KINDS

MAX_PER_OWNER = 10
STUCK_MINUTES_MAX = 10080  # a week
LOCK_SINK_TICK = 0x5377_0010
DISABLE_AFTER = 10


# ------------------------------------------------------------------------------------ checks

def _kind(value: Any) -> str:
    if value not in KINDS:
        shown = str(value)[:32] if value is not None else "nothing"
        raise Invalid(f"kind must be one of {', '.join(KINDS)} (got {shown!r})", argument="kind")
    return cast(str, value)


def _name(value: Any, default: str) -> str:
    if value is None or value == "":
        return default
    if not isinstance(value, str) or not value.strip() or len(value) > 64 or control_characters(value):
        raise Invalid("name must be 1 to 64 characters without control characters", argument="name")
    return value.strip()


def _events(values: Any) -> list[str]:
    if values is None or values == []:
        return list(EVENTS)
    if isinstance(values, str):
        values = [v.strip() for v in values.split(",") if v.strip()]
    if not isinstance(values, (list, tuple)) or not values or not all(isinstance(v, str) for v in values):
        raise Invalid("events must be a list of event names", argument="events")
    unknown = [v for v in values if v not in EVENTS]
    if unknown:
        raise Invalid(f"unknown event {unknown[0]!s:.64}; known events: {', '.join(EVENTS)}", argument="events")
    return list(dict.fromkeys(values))


def _int(value: Any, name: str, low: int, high: int, default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise Invalid(f"{name} must be a whole number from {low} to {high}", argument=name)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or not low <= value <= high:
        raise Invalid(f"{name} must be a whole number from {low} to {high}", argument=name)
    return value


def check_timezone(value: Any) -> str:
    """An IANA time zone name that `zoneinfo` knows (such as `Europe/Berlin` or `UTC`)."""
    if value is None or value == "":
        return "UTC"
    if not isinstance(value, str) or len(value) > 64 or control_characters(value):
        raise Invalid("timezone must be an IANA time zone name such as Europe/Berlin", argument="timezone")
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise Invalid(f"timezone {value[:64]!r} is not an IANA time zone name such as Europe/Berlin",
                      argument="timezone") from None
    return value


def public(row: dict[str, Any]) -> dict[str, Any]:
    """A sink as its owner sees it: the URL with its query (which may carry a token) redacted."""
    return {
        "sink_id": str(row["id"]),
        "name": row["name"],
        "kind": row["kind"],
        "url": redact(row["url"]),
        "events": list(row["events"]),
        "stuck_minutes": row["stuck_minutes"],
        "digest_hour": row["digest_hour"],
        "timezone": row["digest_timezone"],
        "owner": ({"team": row["team_slug"]} if row.get("owner_team_id") is not None
                  else {"human": str(row["owner_human_id"])}),
        "enabled": row["enabled"],
        "created_at": shapes.ts(row["created_at"]),
        "last_attempt_at": shapes.ts(row["last_attempt_at"]),
        "last_status": row["last_status"],
        "last_error": row["last_error"],
        "consecutive_failures": row["consecutive_failures"],
        "disabled_reason": row["disabled_reason"],
        "disabled_at": shapes.ts(row["disabled_at"]),
    }


def _sink_id(value: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound("sink not found", argument="sink_id") from None


# ------------------------------------------------------------------------------ the owner's API

def _checked(core: Core, *, kind: Any, url: Any, name: Any = None, events: Any = None, stuck_minutes: Any = None,
             digest_hour: Any = None, timezone: Any = None) -> dict[str, Any]:
    """A new sink's fields, every one checked before anything is stored."""
    k = _kind(kind)
    target = check_url(url, allow_private=core.settings.hooks_allow_private)
    return {
        "kind": k, "url": target, "name": _name(name, k), "events": _events(events),
        "stuck_minutes": _int(stuck_minutes, "stuck_minutes", 1, STUCK_MINUTES_MAX, 30),
        "digest_hour": _int(digest_hour, "digest_hour", 0, 23, 9),
        "timezone": check_timezone(timezone),
    }


def _added(row: dict[str, Any]) -> dict[str, Any]:
    out = public(row)
    out["url"] = row["url"]  # the owner just typed it
    return out


async def add(core: Core, human: HumanCaller, *, kind: Any, url: Any, name: Any = None, events: Any = None,
              stuck_minutes: Any = None, digest_hour: Any = None, timezone: Any = None) -> dict[str, Any]:
    """Add a sink owned by the human. Every field is checked before anything is stored."""
    values = _checked(core, kind=kind, url=url, name=name, events=events, stuck_minutes=stuck_minutes,
                      digest_hour=digest_hour, timezone=timezone)
    async with core.pool.connection() as conn, conn.transaction():
        # The owner's row lock serialises concurrent adds, so the ceiling holds under races.
        await conn.execute(Q.sinks.lock_owner, {"human_id": human.human_id})
        cur = await conn.execute(Q.sinks.count_for_owner, {"human_id": human.human_id})
        if (await one(cur))["n"] >= MAX_PER_OWNER:
            raise Conflict(f"a human has at most {MAX_PER_OWNER} notification sinks; remove one first",
                           argument="url")
        cur = await conn.execute(Q.sinks.insert, {**values, "owner_human_id": human.human_id, "owner_team_id": None})
        return _added(await one(cur))


async def add_for_team(core: Core, human: HumanCaller, team: Any, *, kind: Any, url: Any, name: Any = None,
                       events: Any = None, stuck_minutes: Any = None, digest_hour: Any = None,
                       timezone: Any = None) -> dict[str, Any]:
    """Add a sink owned by a team (a team owner or admin), with `add`'s fields: it hears about the
    team's queues, whoever manages the team."""
    owner = await teams.reach(core, human, team, manage="add notification sinks")
    values = _checked(core, kind=kind, url=url, name=name, events=events, stuck_minutes=stuck_minutes,
                      digest_hour=digest_hour, timezone=timezone)
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.sinks.lock_team, {"team_id": owner["id"], "human_id": human.human_id})
        if await cur.fetchone() is None:  # gone, or no longer the human's to manage
            raise NotFound("team not found", argument="team")
        cur = await conn.execute(Q.sinks.count_for_team, {"team_id": owner["id"]})
        if (await one(cur))["n"] >= MAX_PER_OWNER:
            raise Conflict(f"a team has at most {MAX_PER_OWNER} notification sinks; remove one first",
                           argument="url")
        cur = await conn.execute(Q.sinks.insert, {**values, "owner_human_id": None, "owner_team_id": owner["id"]})
        return _added(await one(cur))


async def list_for_owner(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.for_owner, {"human_id": human.human_id})
        return [public(r) for r in await cur.fetchall()]


async def get_row(core: Core, human: HumanCaller, sink_id: Any) -> dict[str, Any]:
    """The stored row of one of the human's sinks (URL unredacted: for sending a test message)."""
    sid = _sink_id(sink_id)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.get_for_owner, {"id": sid, "human_id": human.human_id})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("sink not found", argument="sink_id")
    return row


async def remove(core: Core, human: HumanCaller, sink_id: Any) -> dict[str, Any]:
    """Delete one of the human's sinks with its queued messages. Another human's sink and an unknown
    id are the same not_found."""
    sid = _sink_id(sink_id)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.remove_for_owner, {"id": sid, "human_id": human.human_id})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("sink not found", argument="sink_id")
    return public(row)


async def enable(core: Core, human: HumanCaller, sink_id: Any) -> dict[str, Any]:
    """Turn a sink disabled after repeated failures back on; its failure count starts again at 0.
    Messages that failed while it was off stay failed."""
    sid = _sink_id(sink_id)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.enable_for_owner, {"id": sid, "human_id": human.human_id})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("sink not found", argument="sink_id")
    return public(row)


async def _team_params(core: Core, human: HumanCaller, team: Any, manage: str | None,
                       sink_id: Any = None) -> dict[str, Any]:
    owner = await teams.reach(core, human, team, manage=manage)
    params = {"team_id": owner["id"], "team_slug": owner["slug"], "human_id": human.human_id}
    if sink_id is not None:
        params["id"] = _sink_id(sink_id)
    return params


async def _one_team_sink(core: Core, query: str, params: dict[str, Any]) -> dict[str, Any]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    if row is None:  # another team's sink, an unknown id, or a team the human no longer manages
        raise NotFound("sink not found", argument="sink_id")
    return row


async def list_for_team(core: Core, human: HumanCaller, team: Any) -> list[dict[str, Any]]:
    """A team's sinks, for any member."""
    params = await _team_params(core, human, team, None)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.for_team, params)
        return [public(r) for r in await cur.fetchall()]


async def get_row_for_team(core: Core, human: HumanCaller, team: Any, sink_id: Any) -> dict[str, Any]:
    """The stored row of a team's sink, for a team owner or admin (to send a test message)."""
    params = await _team_params(core, human, team, "test notification sinks", sink_id)
    return await _one_team_sink(core, Q.sinks.get_for_team, params)


async def remove_for_team(core: Core, human: HumanCaller, team: Any, sink_id: Any) -> dict[str, Any]:
    """Delete a team's sink with its queued messages (a team owner or admin). Another team's sink and
    an unknown id are the same not_found."""
    params = await _team_params(core, human, team, "remove notification sinks", sink_id)
    return public(await _one_team_sink(core, Q.sinks.remove_for_team, params))


async def enable_for_team(core: Core, human: HumanCaller, team: Any, sink_id: Any) -> dict[str, Any]:
    """Turn a team's disabled sink back on (a team owner or admin), as `enable` does."""
    params = await _team_params(core, human, team, "enable notification sinks", sink_id)
    return public(await _one_team_sink(core, Q.sinks.enable_for_team, params))


async def deliveries_for_team(core: Core, human: HumanCaller, team: Any, *, sink_id: Any = None,
                              limit: int = 50) -> list[dict[str, Any]]:
    """The newest queued messages of a team's sinks, for any member."""
    params = await _team_params(core, human, team, None)
    return await _deliveries(core, Q.sinks.deliveries_for_team, params, sink_id, limit)


async def _visible(core: Core, human: HumanCaller, sink_id: uuid.UUID | None) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.visible_to_human, {"human_id": human.human_id, "id": sink_id})
        return [{**public(r), "manage": r["manage"]} for r in await cur.fetchall()]


async def visible(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    """Every sink the human sees: their own, then their teams' (the Board's one list). `manage` says
    whether they may enable, test or remove it (a team's: an owner or admin)."""
    return await _visible(core, human, None)


async def one_visible(core: Core, human: HumanCaller, sink_id: Any) -> dict[str, Any]:
    """One sink the human sees, as in `visible`; anything else is not_found, an unknown id's."""
    rows = await _visible(core, human, _sink_id(sink_id))
    if not rows:
        raise NotFound("sink not found", argument="sink_id")
    return rows[0]


async def remove_visible(core: Core, human: HumanCaller, sink_id: Any) -> dict[str, Any]:
    """Remove a sink the human sees, whoever owns it: theirs (`remove`) or a team's they manage
    (`remove_for_team`; a plain member is forbidden)."""
    sink = await one_visible(core, human, sink_id)
    team = sink["owner"].get("team")
    if team is not None:
        return await remove_for_team(core, human, team, sink["sink_id"])
    return await remove(core, human, sink["sink_id"])


async def enable_visible(core: Core, human: HumanCaller, sink_id: Any) -> dict[str, Any]:
    """Enable a sink the human sees, as `remove_visible` removes one."""
    sink = await one_visible(core, human, sink_id)
    team = sink["owner"].get("team")
    if team is not None:
        return await enable_for_team(core, human, team, sink["sink_id"])
    return await enable(core, human, sink["sink_id"])


async def log_of(core: Core, human: HumanCaller, sink_id: Any, *,
                 limit: int = 50) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A sink the human sees and its newest messages with how their last attempt went."""
    sink = await one_visible(core, human, sink_id)
    team = sink["owner"].get("team")
    if team is not None:
        return sink, await deliveries_for_team(core, human, team, sink_id=sink["sink_id"], limit=limit)
    return sink, await deliveries(core, human, sink_id=sink["sink_id"], limit=limit)


async def record_test(core: Core, sink_id: uuid.UUID, *, status: str, error: str | None) -> None:
    """A test message's outcome, shown with the sink; it never counts towards disabling it."""
    async with core.pool.connection() as conn:
        await conn.execute(Q.sinks.record_test, {"id": sink_id, "status": status,
                                                 "error": error[:256] if error else None})


async def deliveries(core: Core, human: HumanCaller, *, sink_id: Any = None, limit: int = 50) -> list[dict[str, Any]]:
    """The newest queued messages of the human's sinks and how their last attempt went."""
    return await _deliveries(core, Q.sinks.deliveries_for_owner, {"human_id": human.human_id}, sink_id, limit)


async def _deliveries(core: Core, query: str, params: dict[str, Any], sink_id: Any,
                      limit: int) -> list[dict[str, Any]]:
    sid = _sink_id(sink_id) if sink_id is not None else None
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, {**params, "sink_id": sid, "limit": max(1, min(int(limit), 500))})
        rows = await cur.fetchall()
    return [{"delivery_id": r["id"], "sink_id": str(r["sink_id"]), "event": r["event"], "state": r["state"],
             "attempts": r["attempts"], "created_at": shapes.ts(r["created_at"]),
             "finished_at": shapes.ts(r["finished_at"]), "last_status_code": r["last_status_code"],
             "last_result": r["last_result"], "last_error": r["last_error"]} for r in rows]


# ---------------------------------------------------------------------------- the sweep tick

def digest_date(now: datetime, hour: int, tz_name: str) -> date | None:
    """The local date whose digest is due at `now`, or None outside the sink's hour."""
    try:
        local = now.astimezone(zoneinfo.ZoneInfo(tz_name))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return None
    return local.date() if local.hour == hour else None


def _digest_row(r: dict[str, Any]) -> dict[str, Any]:
    """One queue of a digest. A team queue's row has no endpoint, names its team, and its queue is the
    label `team:<team-slug>/<queue>`; an endpoint queue's row has no `team` key (as before teams)."""
    row = {"endpoint": r["endpoint"], "queue": r["queue"], "pushed": r["pushed"], "done": r["done"],
           "failed": r["failed"], "dead_lettered": r["dead_lettered"],
           "oldest_pending_minutes": r["oldest_pending_minutes"]}
    if r["team"] is not None:
        row["team"] = r["team"]
    return row


async def tick(core: Core, *, now: datetime | None = None) -> dict[str, Any]:
    """Queue what is due: stuck-queue messages (and forget queues that recovered), then digests.
    One process at a time (a transaction-level advisory lock); returns what was queued."""
    now = now or datetime.now(UTC)
    queued = {"queue_stuck": 0, "digest": 0}
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.sweeps.try_lock, {"key": LOCK_SINK_TICK})
        if not (await one(cur))["locked"]:
            return queued
        await conn.execute(Q.sinks.lock_ticked_teams, {})  # teams, then sinks: a team's deletion's order
        await conn.execute(Q.sinks.lock_ticked_sinks, {})
        cur = await conn.execute(Q.sinks.mark_stuck, {"now": now})
        queued["queue_stuck"] = len(await cur.fetchall())
        cur = await conn.execute(Q.sinks.digest_subscribers, {})
        for sink in await cur.fetchall():
            on = digest_date(now, sink["digest_hour"], sink["digest_timezone"])
            if on is None or sink["digest_last_on"] == on:
                continue
            c2 = await conn.execute(Q.sinks.claim_digest_day, {"id": sink["id"], "on": on})
            if await c2.fetchone() is None:
                continue
            c2 = await conn.execute(Q.sinks.digest_stats, {
                "human_id": sink["owner_human_id"], "team_id": sink["owner_team_id"],
                "since": now - timedelta(days=1), "until": now})
            queues = [_digest_row(r) for r in await c2.fetchall()]
            facts = {"on": on.isoformat(), "timezone": sink["digest_timezone"],
                     "until": now.astimezone(zoneinfo.ZoneInfo(sink["digest_timezone"])).strftime("%Y-%m-%d %H:%M %Z"),
                     "queues": queues}
            c2 = await conn.execute(Q.sinks.queue_message, {
                "sink_id": sink["id"], "event": "digest", "dedup_key": f"digest:{on.isoformat()}",
                "body": Jsonb(facts)})
            queued["digest"] += len(await c2.fetchall())
    return queued


# ------------------------------------------------------------------------------ the sender's side

async def claim_due(core: Core, *, limit: int, lease_seconds: float,
                    busy: list[uuid.UUID] | None = None) -> list[dict[str, Any]]:
    """Take due messages under a lease (one per sink at a time); each with its sink's kind, URL, name."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.claim_due, {"limit": limit, "lease": lease_seconds,
                                                      "busy": list(busy or [])})
        return await cur.fetchall()


async def record_attempt(core: Core, *, outbox_id: int, status_code: int | None, result: str, error: str | None,
                         state: str, retry_in: float = 0.0, disable_after: int = DISABLE_AFTER) -> bool | None:
    """Settle one attempt: `delivered`, `failed`, or `pending` again after `retry_in` seconds; the
    sink's health follows (disabled after `disable_after` failed messages in a row). Returns whether
    the sink is still enabled (None when it was removed)."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.record_attempt, {
            "outbox_id": outbox_id, "status_code": status_code, "result": result,
            "error": error[:256] if error else None, "state": state, "retry_in": retry_in,
            "disable_after": disable_after})
        row = await cur.fetchone()
        if row is not None and not row["enabled"]:
            await conn.execute(Q.sinks.fail_pending_of_disabled, {})
    return None if row is None else row["enabled"]


async def next_due_in(core: Core) -> float | None:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.next_due_in, {})
        row = await cur.fetchone()
    return None if row is None or row["seconds"] is None else float(row["seconds"])


async def prune(core: Core, *, days: int = 30) -> int:
    """Forget settled messages older than `days`."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.sinks.prune_finished, {"days": days})
        return cur.rowcount
