"""Notify hooks (SYSTEM.md section 10): outbound webhooks for todo events.

A hook belongs to one endpoint or to one team (migration 0032). An endpoint's hooks are managed by the
endpoint's owning human and get its todos' events; a team's are added, removed and enabled by the
team's owners and admins, listed (with their delivery log) by any member, and get the team's todos'
events. Outside the team everything is the team's not_found. The transition trigger writes one outbox
row per subscribed hook in the transition's own transaction; the sender (`switchboard.web.hooks`)
delivers them after commit with the functions at the end of this module. The signing secret
(`whsec_…`) is returned once, at creation.
"""

from __future__ import annotations

import base64
import ipaddress
import secrets
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from . import shapes, teams
from .endpoints import get_for_human
from .errors import Conflict, Invalid, NotFound
from .models import Core, HumanCaller
from .queries import Q, one

EVENTS = ("todo.created", "todo.ready", "todo.completed", "todo.dead_lettered")
MAX_PER_ENDPOINT = 5  # and per team
URL_MAX_BYTES = 2048
BODY_MAX_BYTES = 4096


def new_secret() -> str:
    """`whsec_` + padded standard base64 of 32 random bytes (the Standard Webhooks key format)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


# ------------------------------------------------------------------------------- target checks

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix: the last 32 bits are IPv4


def embedded_addresses(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[str, list[Any]]:
    """The IPv4 addresses an IPv6 address carries, with the form's name: IPv4-mapped, 6to4, Teredo
    (its server and its client) or NAT64. ("", []) for any other address."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return "", []
    if ip.ipv4_mapped is not None:
        return "IPv4-mapped", [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return "6to4", [ip.sixtofour]
    if ip.teredo is not None:
        return "Teredo", list(ip.teredo)
    if ip in NAT64:
        return "NAT64", [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    return "", []


def _class_refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why one address (taken as it is) is not a globally routable unicast address."""
    if ip.is_loopback:
        return "loopback address"
    if ip.is_link_local:
        return "link-local address"
    if ip.is_multicast or ip.is_unspecified:
        return "non-unicast address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local address"
    if ip.is_private:
        return "private address"
    if ip.is_reserved or not ip.is_global:
        return "non-global address"
    return None


def address_refusal(address: str) -> str | None:
    """Why an IP address may not receive hooks (None when it may): anything not globally routable.

    The test is the standard library's `is_global` (with loopback, link-local, site-local, multicast
    and reserved named in the reason), not a list of ranges kept here. An IPv6 address that carries an
    IPv4 address is unwrapped first: IPv4-mapped and NAT64 addresses are judged as the IPv4 address
    they translate to; 6to4 and Teredo addresses must carry global IPv4 addresses and be global
    themselves (a relay would deliver to the embedded address).
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    form, inner = embedded_addresses(ip)
    for embedded in inner:
        if why := address_refusal(str(embedded)):
            return f"{form} address embedding a {why}"
    if form in ("IPv4-mapped", "NAT64"):
        return None  # a translation of the IPv4 address just judged
    return _class_refusal(ip)


def control_characters(text: str) -> bool:
    """Whether `text` holds a C0 control (CR and LF included), DEL or a C1 control."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in text)


def numeric_host(host: str) -> str | None:
    """The IP address a URL's host names by itself, or None for a name to resolve. Besides the
    standard forms this reads the legacy IPv4 spellings the system resolver accepts (`127.1`,
    `2130706433`, `0x7f.0.0.1`, `0177.0.0.1`)."""
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    try:
        return socket.inet_ntoa(socket.inet_aton(host))  # parsing only, no lookup
    except OSError:
        return None


def check_url(url: Any, *, allow_private: bool) -> str:
    """Validate a hook target. https only, no control characters, no credentials in the URL, at most
    2048 bytes; an IP literal (in any spelling) must be globally routable (`address_refusal`). Host
    names are resolved and checked again before every attempt.

    `allow_private` (SWITCHBOARD_HOOKS_ALLOW_PRIVATE, tests only) also admits plain http.
    """
    if not isinstance(url, str) or not url.strip():
        raise Invalid("url is required", argument="url")
    if control_characters(url):
        raise Invalid("url must not contain control characters (such as CR or LF)", argument="url")
    url = url.strip()
    if len(url.encode("utf-8")) > URL_MAX_BYTES:
        raise Invalid(f"url must be at most {URL_MAX_BYTES} bytes", argument="url")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Invalid("url is not a valid URL", argument="url") from None
    schemes = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in schemes:
        raise Invalid("url must use https", argument="url")
    if not parts.hostname:
        raise Invalid("url must name a host", argument="url")
    if parts.username is not None or parts.password is not None:
        raise Invalid("url must not carry credentials", argument="url")
    if parts.fragment:
        raise Invalid("url must not have a fragment", argument="url")
    if port == 0:
        raise Invalid("url has an invalid port", argument="url")
    if not allow_private:
        literal = numeric_host(parts.hostname)
        if literal and (why := address_refusal(literal)):
            raise Invalid(f"url points at a {why}; webhooks go to public https targets only", argument="url")
        if parts.hostname.rstrip(".").lower() in ("localhost",) or parts.hostname.endswith(".localhost"):
            raise Invalid("url points at a loopback address; webhooks go to public https targets only",
                          argument="url")
    return cast(str, url)


def redact(url: str) -> str:
    """The URL as lists show it: a query string (which may carry a token) is replaced."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "redacted" if parts.query else "", ""))


def _events(values: Any) -> list[str]:
    if values is None or values == []:
        return list(EVENTS)
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise Invalid("events must be a list of event names", argument="events")
    unknown = [v for v in values if v not in EVENTS]
    if unknown:
        raise Invalid(f"unknown event {unknown[0]!s:.64}; known events: {', '.join(EVENTS)}", argument="events")
    return list(dict.fromkeys(values))


def _owner_fields(row: dict[str, Any]) -> dict[str, Any]:
    """Whose hook a row is: `endpoint` (null for a team's hook), and `team` for a team's hook only."""
    out = {"endpoint": row["endpoint_slug"]}
    if row.get("team_slug") is not None:
        out["team"] = row["team_slug"]
    return out


def public(row: dict[str, Any]) -> dict[str, Any]:
    """A hook as its owner sees it in lists: never the secret; the URL query redacted."""
    return {
        "hook_id": str(row["id"]),
        **_owner_fields(row),
        "url": redact(row["url"]),
        "events": list(row["events"]),
        "enabled": row["enabled"],
        "created_at": shapes.ts(row["created_at"]),
        "last_attempt_at": shapes.ts(row["last_attempt_at"]),
        "last_status": row["last_status"],
        "last_error": row["last_error"],
        "consecutive_failures": row["consecutive_failures"],
        "disabled_reason": row["disabled_reason"],
    }


# ------------------------------------------------------------------------------ the owner's API

@dataclass(frozen=True)
class Owner:
    """Whose hooks: one endpoint's (`kind` "endpoint") or one team's (`kind` "team")."""

    kind: str
    id: uuid.UUID
    slug: str

    @property
    def columns(self) -> dict[str, Any]:
        """The hook row's owner columns: this owner's id and slug, the other pair null."""
        endpoint = self.kind == "endpoint"
        return {"endpoint_id": self.id if endpoint else None, "endpoint_slug": self.slug if endpoint else None,
                "team_id": None if endpoint else self.id, "team_slug": None if endpoint else self.slug}


async def _endpoint(core: Core, human: HumanCaller, slug: Any) -> Owner:
    """One of the human's endpoints (anything else is the endpoint's not_found)."""
    endpoint = await get_for_human(core, human, slug)
    return Owner("endpoint", endpoint["id"], endpoint["slug"])


async def _team(core: Core, human: HumanCaller, slug: Any, *, manage: str | None) -> Owner:
    """A team the human belongs to: outside it, the team's not_found (the same as for a team that does
    not exist); with `manage` (what is being done), a plain member is forbidden."""
    team = await teams.reach(core, human, slug, manage=manage)
    return Owner("team", team["id"], team["slug"])


async def add(core: Core, human: HumanCaller, slug: Any, *, url: Any, events: Any = None) -> tuple[dict[str, Any], str]:
    """Subscribe a URL to an endpoint's todo events. Returns (hook, signing secret shown once)."""
    endpoint = await get_for_human(core, human, slug)
    if endpoint["state"] != "active":
        raise Invalid("endpoint is revoked", argument="endpoint")
    return await _add(core, human, Owner("endpoint", endpoint["id"], endpoint["slug"]), url, events)


async def add_for_team(core: Core, human: HumanCaller, team: Any, *, url: Any,
                       events: Any = None) -> tuple[dict[str, Any], str]:
    """Subscribe a URL to a team's todo events (a team owner or admin). Returns (hook, signing secret
    shown once)."""
    owner = await _team(core, human, team, manage="add notify hooks")
    return await _add(core, human, owner, url, events)


async def _add(core: Core, human: HumanCaller, owner: Owner, url: Any, events: Any) -> tuple[dict[str, Any], str]:
    target = check_url(url, allow_private=core.settings.hooks_allow_private)
    names = _events(events)
    secret = new_secret()
    endpoint = owner.kind == "endpoint"
    async with core.pool.connection() as conn, conn.transaction():
        # The owner's row lock (the endpoint's, or the team's) serialises concurrent adds, so the
        # ceiling holds under races.
        if endpoint:
            cur = await conn.execute(Q.hooks.lock_endpoint, {"endpoint_id": owner.id})
        else:
            cur = await conn.execute(Q.hooks.lock_team, {"team_id": owner.id, "human_id": human.human_id})
        if await cur.fetchone() is None:
            if endpoint:
                raise Invalid("endpoint is revoked", argument="endpoint")
            raise NotFound("team not found", argument="team")  # gone, or no longer the human's to manage
        count = Q.hooks.count_for_endpoint if endpoint else Q.hooks.count_for_team
        cur = await conn.execute(count, owner.columns)
        if (await one(cur))["n"] >= MAX_PER_ENDPOINT:
            raise Conflict(f"{'an endpoint' if endpoint else 'a team'} has at most {MAX_PER_ENDPOINT} notify "
                           "hooks; remove one first", argument="url")
        cur = await conn.execute(Q.hooks.insert, {
            **owner.columns, "url": target, "events": names, "secret": secret, "human_id": human.human_id})
        row = await one(cur)
    out = public(row)
    out["url"] = row["url"]
    return out, secret


async def _list(core: Core, owner: Owner) -> list[dict[str, Any]]:
    query = Q.hooks.for_endpoint if owner.kind == "endpoint" else Q.hooks.for_team
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, owner.columns)
        return [public(r) for r in await cur.fetchall()]


async def list_for_endpoint(core: Core, human: HumanCaller, slug: Any) -> list[dict[str, Any]]:
    return await _list(core, await _endpoint(core, human, slug))


async def list_for_team(core: Core, human: HumanCaller, team: Any) -> list[dict[str, Any]]:
    """A team's hooks, for any member (never a secret)."""
    return await _list(core, await _team(core, human, team, manage=None))


def _hook_id(value: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound("notify hook not found", argument="hook_id") from None


async def _one_hook(core: Core, query: str, params: dict[str, Any]) -> dict[str, Any]:
    """Run a statement that changes at most one hook the caller may change; none is not_found."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    if row is None:
        raise NotFound("notify hook not found", argument="hook_id")
    return public(row)


async def remove(core: Core, human: HumanCaller, hook_id: Any, *, slug: Any = None) -> dict[str, Any]:
    """Delete a hook of one of the human's endpoints (with its pending notifications and log).

    Another human's hook and an unknown id are the same not_found. With `slug`, the hook must also
    belong to that endpoint."""
    hid = _hook_id(hook_id)
    if slug is not None:
        await get_for_human(core, human, slug)  # a foreign or unknown slug is the endpoint's not_found
    return await _one_hook(core, Q.hooks.remove_for_human, {"id": hid, "human_id": human.human_id, "slug": slug})


async def remove_for_team(core: Core, human: HumanCaller, team: Any, hook_id: Any) -> dict[str, Any]:
    """Delete a team's hook (a team owner or admin), with its pending notifications and log. Another
    team's hook and an unknown id are the same not_found."""
    owner = await _team(core, human, team, manage="remove notify hooks")
    return await _one_hook(core, Q.hooks.remove_for_team,
                           {"id": _hook_id(hook_id), "team_id": owner.id, "human_id": human.human_id})


async def enable(core: Core, human: HumanCaller, hook_id: Any, *, slug: Any = None) -> dict[str, Any]:
    """Turn a disabled hook of one of the human's endpoints back on: the failure count and the
    disabled reason are cleared, and notifications are queued for it again from now on (the ones
    failed while it was off stay failed). Enabling an enabled hook changes nothing. Another human's
    hook and an unknown id are the same not_found."""
    hid = _hook_id(hook_id)
    if slug is not None:
        await get_for_human(core, human, slug)
    return await _one_hook(core, Q.hooks.enable_for_human, {"id": hid, "human_id": human.human_id, "slug": slug})


async def enable_for_team(core: Core, human: HumanCaller, team: Any, hook_id: Any) -> dict[str, Any]:
    """Turn a disabled hook of a team back on (a team owner or admin), as `enable` does."""
    owner = await _team(core, human, team, manage="enable notify hooks")
    return await _one_hook(core, Q.hooks.enable_for_team,
                           {"id": _hook_id(hook_id), "team_id": owner.id, "human_id": human.human_id})


async def deliveries(core: Core, human: HumanCaller, *, slug: Any = None, hook_id: Any = None,
                     limit: int = 50, with_attempts: bool = False) -> list[dict[str, Any]]:
    """The delivery log of the human's endpoints' hooks, newest first (for the Board, the CLI and the API)."""
    if slug is not None:
        await get_for_human(core, human, slug)
    return await _deliveries(core, Q.hooks.deliveries_for_human, {"human_id": human.human_id, "slug": slug},
                             hook_id=hook_id, limit=limit, with_attempts=with_attempts)


async def deliveries_for_team(core: Core, human: HumanCaller, team: Any, *, hook_id: Any = None, limit: int = 50,
                              with_attempts: bool = False) -> list[dict[str, Any]]:
    """The delivery log of a team's hooks, newest first, for any member."""
    owner = await _team(core, human, team, manage=None)
    return await _deliveries(core, Q.hooks.deliveries_for_team, {"team_id": owner.id},
                             hook_id=hook_id, limit=limit, with_attempts=with_attempts)


async def _deliveries(core: Core, query: str, params: dict[str, Any], *, hook_id: Any, limit: int,
                      with_attempts: bool) -> list[dict[str, Any]]:
    hid = _hook_id(hook_id) if hook_id is not None else None
    n = max(1, min(int(limit), 500))
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, {**params, "hook_id": hid, "limit": n})
        rows = await cur.fetchall()
        out = []
        for r in rows:
            item = {
                "delivery_id": r["id"], "message_id": r["message_id"], "hook_id": str(r["hook_id"]),
                **_owner_fields(r), "url": redact(r["url"]), "event": r["event"],
                "todo_id": r["todo_id"], "state": r["state"], "attempts": r["attempts"],
                "created_at": shapes.ts(r["created_at"]),
                "next_attempt_at": shapes.ts(r["next_attempt_at"]) if r["state"] == "pending" else None,
                "finished_at": shapes.ts(r["finished_at"]),
                "last_attempt_at": shapes.ts(r["last_attempt_at"]), "last_status_code": r["last_status_code"],
                "last_result": r["last_result"], "last_error": r["last_error"],
                "last_duration_ms": r["last_duration_ms"],
            }
            if with_attempts:
                c2 = await conn.execute(Q.hooks.attempts_for_outbox, {"outbox_id": r["id"]})
                item["attempt_log"] = [
                    {"attempt": a["attempt"], "started_at": shapes.ts(a["started_at"]),
                     "duration_ms": a["duration_ms"], "status_code": a["status_code"], "result": a["result"],
                     "error": a["error"]} for a in await c2.fetchall()]
            out.append(item)
    return out


# ------------------------------------------------------------------------------ every hook a human sees

async def _visible(core: Core, human: HumanCaller, hook_id: uuid.UUID | None) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.hooks.visible_to_human, {"human_id": human.human_id, "id": hook_id})
        return [{**public(r), "manage": r["manage"]} for r in await cur.fetchall()]


async def visible(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    """Every hook the human sees, oldest first: their endpoints' and their teams' (for the Board's
    one list). `manage` says whether they may enable or remove it (a team's: an owner or admin)."""
    return await _visible(core, human, None)


async def one_visible(core: Core, human: HumanCaller, hook_id: Any) -> dict[str, Any]:
    """One hook the human sees, as in `visible`; anything else is not_found, an unknown id's."""
    rows = await _visible(core, human, _hook_id(hook_id))
    if not rows:
        raise NotFound("notify hook not found", argument="hook_id")
    return rows[0]


async def remove_visible(core: Core, human: HumanCaller, hook_id: Any) -> dict[str, Any]:
    """Remove a hook the human sees, whoever owns it: theirs (`remove`) or a team's they manage
    (`remove_for_team`; a plain member is forbidden)."""
    hook = await one_visible(core, human, hook_id)
    if "team" in hook:
        return await remove_for_team(core, human, hook["team"], hook["hook_id"])
    return await remove(core, human, hook["hook_id"])


async def enable_visible(core: Core, human: HumanCaller, hook_id: Any) -> dict[str, Any]:
    """Enable a hook the human sees, as `remove_visible` removes one."""
    hook = await one_visible(core, human, hook_id)
    if "team" in hook:
        return await enable_for_team(core, human, hook["team"], hook["hook_id"])
    return await enable(core, human, hook["hook_id"])


async def log_of(core: Core, human: HumanCaller, hook_id: Any, *,
                 limit: int = 50) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A hook the human sees and its delivery log, newest first, each delivery with its attempts."""
    hook = await one_visible(core, human, hook_id)
    if "team" in hook:
        log = await deliveries_for_team(core, human, hook["team"], hook_id=hook["hook_id"], limit=limit,
                                        with_attempts=True)
    else:
        log = await deliveries(core, human, hook_id=hook["hook_id"], limit=limit, with_attempts=True)
    return hook, log


# ------------------------------------------------------------------------------ the sender's side

async def claim_due(core: Core, *, limit: int, per_hook: int, lease_seconds: float,
                    busy: list[uuid.UUID] | None = None) -> list[dict[str, Any]]:
    """Take due notifications under a lease; each comes with its hook's URL and secret."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.hooks.claim_due, {
            "limit": limit, "per_hook": per_hook, "lease": lease_seconds, "busy": list(busy or [])})
        return await cur.fetchall()


async def record_attempt(core: Core, *, outbox_id: int, attempt: int, started_at: datetime, duration_ms: int,
                         status_code: int | None, result: str, error: str | None, state: str,
                         retry_in: float = 0.0, disable_after: int = 10) -> bool | None:
    """Log one attempt and settle the outbox row: `delivered`, `failed`, or `pending` again after
    `retry_in` seconds. Returns whether the hook is still enabled (None when it was removed)."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.hooks.record_attempt, {
            "outbox_id": outbox_id, "attempt": attempt, "started_at": started_at, "duration_ms": duration_ms,
            "status_code": status_code, "result": result, "error": error[:256] if error else None,
            "state": state, "retry_in": retry_in, "disable_after": disable_after})
        row = await cur.fetchone()
        if row is not None and not row["enabled"]:
            await conn.execute(Q.hooks.fail_pending_of_disabled, {})
    return None if row is None else row["enabled"]


async def next_due_in(core: Core) -> float | None:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.hooks.next_due_in, {})
        row = await cur.fetchone()
    return None if row is None or row["seconds"] is None else float(row["seconds"])


async def prune(core: Core, *, days: int = 7) -> int:
    """Forget settled notifications (and their attempt log) older than `days`."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.hooks.prune_finished, {"days": days})
        return cur.rowcount
