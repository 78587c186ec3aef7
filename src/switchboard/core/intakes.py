"""Webhook intakes (docs/intake.md): an owner's signed inbound webhook that turns deliveries into todos.

An intake belongs to one human and feeds one queue of one of their endpoints. It has a URL token
(`sbi_…`, shown once, stored as SHA-256), a source kind (`github`, `standard`, `hmac`, `bearer`) with
its secret (shown once; kept because verifying an HMAC needs it), and routing rules
(`core/intake_rules.py`). The receiving route (`web/intake_hook.py`) verifies a delivery, builds the
delivery document and calls `deliver`; todos are made by `producer.push`, the producer API's own
function, so events, doorbells, hooks and metrics follow as for any push.

Deliveries no rule matches, or whose rule fails, are quarantined (at most QUARANTINE_MAX per intake,
the oldest dropped; none older than QUARANTINE_MAX_AGE_DAYS): the owner lists, inspects, replays
(after fixing the rules) or drops them. A delivery id already turned into a todo is remembered for
SEEN_MAX_AGE_DAYS, so a redelivery makes no second todo.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import secrets
from typing import Any, cast

from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from . import inputs, intake_rules, producer, shapes
from .endpoints import get_for_human
from .errors import Conflict, CoreError, Invalid, NotFound
from .models import Core, HumanCaller
from .queries import Q, one
from .secrets import display_prefix, sha256

log = logging.getLogger("switchboard.intake")

SOURCES = ("github", "standard", "hmac", "bearer")
TOKEN_PREFIX = "sbi_"
TOKEN_MAX_CHARS = 128
NAME_MAX_CHARS = 64
SECRET_MIN_BYTES, SECRET_MAX_BYTES = 16, 256
QUARANTINE_MAX = 50
QUARANTINE_MAX_AGE_DAYS = 14
SEEN_MAX_AGE_DAYS = 30
_SECRET_CHARS = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")


def source_label(source: str) -> str:
    """The todos' `source` column for an intake's todos: `intake-github`, … (a metrics-safe label)."""
    return f"intake-{source}"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_secret(source: str) -> str:
    """A fresh secret in the form the sender expects: `whsec_…` for Standard Webhooks, hex otherwise."""
    if source == "standard":
        return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    return secrets.token_hex(32)


def _source(value: Any) -> str:
    if not isinstance(value, str) or value not in SOURCES:
        raise Invalid(f"source must be one of {', '.join(SOURCES)}", argument="source")
    return value


def _secret(value: Any, source: str) -> str:
    """A secret the owner brings (a sender that makes its own), or a fresh one."""
    if value is None or value == "":
        return new_secret(source)
    if not isinstance(value, str) or not _SECRET_CHARS.fullmatch(value) \
            or not SECRET_MIN_BYTES <= len(value) <= SECRET_MAX_BYTES:
        raise Invalid(f"secret must be {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} printable ASCII characters "
                      "(no leading or trailing spaces)", argument="secret")
    if source == "standard":
        raw = value[len("whsec_"):] if value.startswith("whsec_") else ""
        try:
            key = base64.b64decode(raw + "==", validate=False) if raw else b""
        except (binascii.Error, ValueError):
            key = b""
        if len(key) < 16:
            raise Invalid("a Standard Webhooks secret is whsec_ followed by base64 of at least 16 bytes",
                          argument="secret")
    return value


def _name(value: Any) -> str:
    name = inputs.text(value, "name", max_chars=NAME_MAX_CHARS, required=True) or ""
    if name != name.strip() or any(c in name for c in "\r\n\t"):
        raise Invalid("name must be one line without leading or trailing spaces", argument="name")
    if any(c in name for c in "/?#%\\"):
        raise Invalid("name must not contain / ? # % or \\ (it is used in URLs)", argument="name")
    return name


def public(row: dict[str, Any]) -> dict[str, Any]:
    """An intake as its owner sees it: never the secret, never the token (only its prefix)."""
    return {
        "intake_id": str(row["id"]),
        "name": row["name"],
        "endpoint": row["endpoint_slug"],
        "endpoint_state": row["endpoint_state"],
        "queue": row["queue"],
        "source": row["source"],
        "token_prefix": row["token_prefix"],
        "enabled": row["enabled"],
        "rules": [{f: r[f] for f in intake_rules.RULE_FIELDS if f in r} for r in row["rules"]],  # jsonb drops the order
        "created_at": shapes.ts(row["created_at"]),
        "accepted": row["accepted"],
        "duplicates": row["duplicates"],
        "quarantined": row["quarantined"],
        "verify_failures": row["verify_failures"],
        "last_delivery_at": shapes.ts(row["last_delivery_at"]),
        "last_failure_at": shapes.ts(row["last_failure_at"]),
        "held": row["held"],
    }


def hook_path(token: str) -> str:
    return f"/webhooks/w/{token}"


# ------------------------------------------------------------------------------ the owner's side

async def create(core: Core, human: HumanCaller, *, name: Any, endpoint: Any, source: Any, queue: Any = None,
                 secret: Any = None, rules: Any = None) -> tuple[dict[str, Any], str, str]:
    """Make an intake for one of the human's endpoints. Returns (intake, URL token, secret); the
    token and the secret are shown this once."""
    clean_name = _name(name)
    kind = _source(source)
    clean_rules = intake_rules.validate(rules)
    key = _secret(secret, kind)
    try:
        row = await get_for_human(core, human, endpoint)
    except NotFound:  # named as the caller named it: the intake's `endpoint`
        raise NotFound("endpoint not found", argument="endpoint") from None
    if row["state"] != "active":
        raise Invalid("endpoint is revoked", argument="endpoint")
    queues = list(row["scope_queues"])
    if queue is None or queue == "":
        if len(queues) != 1:
            raise Invalid(f"queue is required: this endpoint has queues {', '.join(queues)}", argument="queue")
        queue = queues[0]
    queue = inputs.queue(queue)
    if queue not in queues:
        raise Invalid(f"queue {queue} is not one of this endpoint's queues ({', '.join(queues)})", argument="queue")
    token = new_token()
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.insert, {
            "human_id": human.human_id, "name": clean_name, "endpoint_id": row["id"], "queue": queue,
            "token_hash": sha256(token), "token_prefix": display_prefix(token), "source": kind,
            "secret": key, "rules": Jsonb(clean_rules)})
        made = await cur.fetchone()
    if made is None:
        raise Conflict(f"you already have an intake named {clean_name}", argument="name")
    return await get(core, human, str(made["id"])), token, key


async def list_for_human(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.list_for_human, {"human_id": human.human_id})
        return [public(r) for r in await cur.fetchall()]


async def get(core: Core, human: HumanCaller, ref: Any) -> dict[str, Any]:
    """One of the human's intakes by id or name; anything else is the same not_found."""
    if not isinstance(ref, str) or not 0 < len(ref) <= NAME_MAX_CHARS or any(ord(c) < 0x20 for c in ref):
        raise NotFound("intake not found", argument="intake")
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.one_for_human, {"human_id": human.human_id, "ref": ref})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("intake not found", argument="intake")
    return public(row)


async def set_rules(core: Core, human: HumanCaller, ref: Any, rules: Any) -> dict[str, Any]:
    clean = intake_rules.validate(rules)
    intake = await get(core, human, ref)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.set_rules, {"id": intake["intake_id"], "human_id": human.human_id,
                                                       "rules": Jsonb(clean)})
        if await cur.fetchone() is None:
            raise NotFound("intake not found", argument="intake")
    return await get(core, human, intake["intake_id"])


async def set_enabled(core: Core, human: HumanCaller, ref: Any, enabled: bool) -> dict[str, Any]:
    """Pause an intake (its URL answers like an unknown one: 401, nothing stored) or resume it."""
    intake = await get(core, human, ref)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.set_enabled, {"id": intake["intake_id"], "human_id": human.human_id,
                                                         "enabled": bool(enabled)})
        if await cur.fetchone() is None:
            raise NotFound("intake not found", argument="intake")
    return await get(core, human, intake["intake_id"])


async def remove(core: Core, human: HumanCaller, ref: Any) -> dict[str, Any]:
    """Delete an intake with its quarantine; its URL stops working at once."""
    intake = await get(core, human, ref)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.remove_for_human, {"id": intake["intake_id"], "human_id": human.human_id})
        if await cur.fetchone() is None:
            raise NotFound("intake not found", argument="intake")
    return intake


def _item_id(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isdigit() and len(value) <= 18:
        number = int(value)
    else:
        raise NotFound("quarantined delivery not found", argument="item")
    if number < 1:
        raise NotFound("quarantined delivery not found", argument="item")
    return number


def _held(row: dict[str, Any], *, with_document: bool = False) -> dict[str, Any]:
    out = {"item_id": row["id"], "received_at": shapes.ts(row["received_at"]), "event": row["event"],
           "delivery": row["delivery"], "reason": row["reason"], "replays": row["replays"]}
    if with_document:
        out["document"] = row["document"]
    else:
        out["size"] = row["size"]
    return out


async def quarantine(core: Core, human: HumanCaller, ref: Any, *, limit: Any = None,
                     with_documents: bool = False) -> list[dict[str, Any]]:
    """The intake's quarantined deliveries, newest first (with their documents when asked)."""
    intake = await get(core, human, ref)
    n = inputs.count(limit, "limit", default=QUARANTINE_MAX, low=1, high=QUARANTINE_MAX)
    sql = Q.intakes.quarantine_list_documents if with_documents else Q.intakes.quarantine_list
    async with core.pool.connection() as conn:
        cur = await conn.execute(sql, {"intake_id": intake["intake_id"], "limit": n})
        return [_held(r, with_document=with_documents) for r in await cur.fetchall()]


async def quarantined(core: Core, human: HumanCaller, ref: Any, item: Any) -> dict[str, Any]:
    """One quarantined delivery with the document the rules saw."""
    intake = await get(core, human, ref)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.quarantine_get, {"intake_id": intake["intake_id"], "id": _item_id(item)})
        row = await cur.fetchone()
    if row is None:
        raise NotFound("quarantined delivery not found", argument="item")
    return _held(row, with_document=True)


async def drop(core: Core, human: HumanCaller, ref: Any, item: Any) -> dict[str, Any]:
    intake = await get(core, human, ref)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.quarantine_delete, {"intake_id": intake["intake_id"], "id": _item_id(item)})
        if await cur.fetchone() is None:
            raise NotFound("quarantined delivery not found", argument="item")
    return {"item_id": _item_id(item), "dropped": True}


async def replay(core: Core, human: HumanCaller, ref: Any, item: Any) -> tuple[dict[str, Any], bool]:
    """Route a quarantined delivery again with the intake's current rules. On success the todo is
    made (or the live one with its key found) and the delivery leaves the quarantine; otherwise it
    stays, with the new reason, and the answer is `conflict` naming it."""
    held = await quarantined(core, human, ref, item)
    intake = await _for_routing(core, human, ref)
    try:
        todo, created = await _make_todo(core, intake, held["document"])
    except intake_rules.RoutingFault as fault:
        async with core.pool.connection() as conn:
            await conn.execute(Q.intakes.quarantine_still_held, {
                "intake_id": intake["id"], "id": held["item_id"], "reason": fault.reason})
        raise Conflict(f"still quarantined: {fault.reason}", argument="rules") from None
    async with core.pool.connection() as conn, conn.transaction():
        if await _lock_live(conn, intake["id"]):  # else removed meanwhile, its quarantine with it
            await conn.execute(Q.intakes.quarantine_delete, {"intake_id": intake["id"], "id": held["item_id"]})
            if created:
                await conn.execute(Q.intakes.count_replayed, {"id": intake["id"]})
            if held["delivery"]:
                await conn.execute(Q.intakes.seen_put, {"intake_id": intake["id"], "delivery": held["delivery"],
                                                        "todo_id": todo["id"]})
    return todo, created


async def _lock_live(conn: AsyncConnection[DictRow], intake_id: Any) -> bool:
    """Lock the intake's row before writing what references it; False when it was removed."""
    cur = await conn.execute(Q.intakes.lock_live, {"id": intake_id})
    return await cur.fetchone() is not None


async def _for_routing(core: Core, human: HumanCaller, ref: Any) -> dict[str, Any]:
    intake = await get(core, human, ref)
    return {"id": intake["intake_id"], "human_id": human.human_id, "name": intake["name"],
            "queue": intake["queue"], "source": intake["source"], "rules": intake["rules"],
            "endpoint_slug": intake["endpoint"]}


# ------------------------------------------------------------------------------ the receiving side

async def by_token(core: Core, token: str) -> dict[str, Any] | None:
    """The enabled intake a URL token names, with its secret (for verifying), or None."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > TOKEN_MAX_CHARS:
        return None
    digest = sha256(token)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.intakes.by_token, {"token_hash": digest})
        row = await cur.fetchone()
    if row is None or not secrets.compare_digest(bytes(row["token_hash"]), digest):
        return None
    return row


async def count_verify_failure(core: Core, intake_id: Any) -> None:
    async with core.pool.connection() as conn:
        await conn.execute(Q.intakes.count_verify_failure, {"id": intake_id})


async def _make_todo(core: Core, intake: dict[str, Any], document: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Route and push; a rule that fails and a todo the producer refuses are both RoutingFault."""
    shaped = intake_rules.route(list(intake["rules"] or []), document,
                                default_max_attempts=core.settings.default_max_attempts)
    try:
        return await producer.push(
            core, HumanCaller(human_id=intake["human_id"]), intake["endpoint_slug"], title=shaped.title,
            queue=intake["queue"], payload=shaped.payload, kind=shaped.kind, key=shaped.key,
            max_attempts=shaped.max_attempts, source=source_label(intake["source"]))
    except (Invalid, NotFound) as exc:
        raise intake_rules.RoutingFault(f"rules[{shaped.rule}] made a todo the queue refused: {exc.message}") from None


def _short(value: Any) -> str | None:
    if value is None:
        return None
    text, _ = inputs.cut_utf8(str(value), 256)
    return text


async def deliver(core: Core, intake: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """A verified delivery: a todo (`accepted`), the todo an earlier delivery with this id made
    (`duplicate`), or a quarantined delivery (`quarantined`) with the reason. An intake removed
    while its delivery is quarantined is not_found, as its URL is from then on."""
    delivery = _short(document.get("delivery"))
    counters = {"id": intake["id"], "accepted": 0, "duplicates": 0, "quarantined": 0}
    if delivery:
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.intakes.seen_get, {"intake_id": intake["id"], "delivery": delivery})
            seen = await cur.fetchone()
            if seen is not None:
                await conn.execute(Q.intakes.count_delivery, {**counters, "duplicates": 1})
                return {"status": "duplicate", "todo_id": seen["todo_id"]}
    try:
        todo, created = await _make_todo(core, intake, document)
    except intake_rules.RoutingFault as fault:
        item = await _hold(core, intake, document, delivery, fault.reason)
        async with core.pool.connection() as conn:
            await conn.execute(Q.intakes.count_delivery, {**counters, "quarantined": 1})
        # Not the reason: it may quote a value of the body.
        log.info("intake delivery quarantined", extra={"event": "intake.quarantined", "target": str(intake["id"])})
        return {"status": "quarantined", "item_id": item, "reason": fault.reason}
    async with core.pool.connection() as conn, conn.transaction():
        if await _lock_live(conn, intake["id"]):  # else removed meanwhile: the todo stands, nothing to count
            if delivery:
                await conn.execute(Q.intakes.seen_put, {"intake_id": intake["id"], "delivery": delivery,
                                                        "todo_id": todo["id"]})
            await conn.execute(Q.intakes.count_delivery, {**counters, "accepted" if created else "duplicates": 1})
    return {"status": "accepted" if created else "duplicate", "todo_id": todo["id"]}


async def _hold(core: Core, intake: dict[str, Any], document: dict[str, Any], delivery: str | None, reason: str) -> int:
    async with core.pool.connection() as conn, conn.transaction():
        if not await _lock_live(conn, intake["id"]):
            raise NotFound("intake not found", argument="intake")
        cur = await conn.execute(Q.intakes.quarantine_insert, {
            "intake_id": intake["id"], "event": _short(document.get("event")), "delivery": delivery,
            "document": Jsonb(document), "reason": reason or "quarantined"})
        item = (await one(cur))["id"]
        await conn.execute(Q.intakes.quarantine_trim, {"intake_id": intake["id"], "keep": QUARANTINE_MAX})
    return cast(int, item)


async def prune(core: Core) -> tuple[int, int]:
    """Forget quarantined deliveries and seen delivery ids past their age (a sweep-tick hook)."""
    try:
        async with core.pool.connection() as conn:
            a = await conn.execute(Q.intakes.prune_quarantine, {"days": QUARANTINE_MAX_AGE_DAYS})
            b = await conn.execute(Q.intakes.prune_seen, {"days": SEEN_MAX_AGE_DAYS})
            return a.rowcount, b.rowcount
    except CoreError:
        return 0, 0
