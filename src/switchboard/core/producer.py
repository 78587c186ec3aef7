"""Producing todos on behalf of a human (CLI, human API, Board): the endpoint must be theirs and
active, and the queue one of its granted queues."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from . import events, inputs, shapes, teams, todos
from .endpoints import get_for_human
from .errors import Conflict, Invalid, NotFound
from .inputs import JsonValue
from .models import Core, HumanCaller
from .queries import Q
from .states import TodoState

# The advisory lock class keyed batches of one endpoint (or team) take turns under; the object is
# the hash of the endpoint's (team's) id. Apart from the sweeps' single-key locks (sweeps.py).
LOCK_KEYED_PUSH = 0x5377_0020


async def push_team(core: Core, human: HumanCaller, queue: str, *, title: str, payload: JsonValue = None,
                    kind: str | None = None, key: str | None = None, max_attempts: int | None = None,
                    assignee: str | None = None, source: str = "operator") -> tuple[dict[str, Any], bool]:
    """Push on a team queue `team:<team-slug>/<queue>`: any member may; outside the team it is not_found."""
    label = inputs.queue(queue)
    if not inputs.is_team_label(label):
        raise Invalid("a team queue is team:<team-slug>/<queue>", argument="queue")
    async with core.pool.connection() as conn:
        team = await teams.team_for_label(conn, human, label)
    return await todos.create_team(core, human, team_id=team["id"], queue=label, title=title, payload=payload,
                                   kind=kind, source=source, key=key, max_attempts=max_attempts, assignee=assignee)


async def push(core: Core, human: HumanCaller, slug: str, *, title: str, queue: str | None = None,
               payload: JsonValue = None, kind: str | None = None, key: str | None = None,
               max_attempts: int | None = None, assignee: str | None = None,
               source: str = "operator") -> tuple[dict[str, Any], bool]:
    endpoint = await get_for_human(core, human, slug)
    if endpoint["state"] != "active":
        raise Invalid("endpoint is revoked", argument="endpoint")
    queue = _endpoint_queue(queue, list(endpoint["scope_queues"]))
    if inputs.is_team_label(queue):  # the team owns the todo, whichever endpoint named it
        return await push_team(core, human, queue, title=title, payload=payload, kind=kind, key=key,
                               max_attempts=max_attempts, assignee=assignee, source=source)
    return await todos.create(core, endpoint_id=endpoint["id"], queue=queue, title=title, payload=payload,
                              kind=kind, source=source, key=key, max_attempts=max_attempts, assignee=assignee)


# -------------------------------------------------------------------------------------- bulk push

PUSH_FIELDS = frozenset({"title", "queue", "payload", "kind", "key", "max_attempts", "assignee"})

# One encoder for every payload and column of a batch, with the options of `inputs.json_value` (json.dumps
# with keyword options builds a new encoder on every call).
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_OPTIONAL_TEXT = (("kind", inputs.KIND_MAX_CHARS), ("key", inputs.KEY_MAX_CHARS),
                  ("assignee", inputs.ASSIGNEE_MAX_CHARS))


def _endpoint_queue(queue: object, queues: list[str]) -> str:
    if queue is None or queue == "":
        if len(queues) != 1:
            raise Invalid(f"queue is required: this endpoint has queues {', '.join(queues)}", argument="queue")
        return queues[0]
    queue = inputs.queue(queue)
    if queue not in queues:
        raise Invalid(f"queue {queue} is not one of this endpoint's queues ({', '.join(queues)})",
                      argument="queue")
    return queue


def _item(raw: object, queues: list[str], default_max_attempts: int, team: bool = False) -> dict[str, Any]:
    """One item of a bulk push, checked by the rules of a single push (errors name the bare field);
    `team`: a push to a team, whose items name their queues by label."""
    if not isinstance(raw, dict):
        raise Invalid("must be an object", argument="")
    unknown = sorted(str(k) for k in raw if k not in PUSH_FIELDS)
    if unknown:
        name = "".join(ch if ch.isprintable() else "?" for ch in unknown[0][:64])
        raise Invalid(f'unknown field "{name}"', argument=name)
    payload = raw.get("payload")
    payload_text = inputs.json_value(payload, "payload", inputs.PAYLOAD_MAX_BYTES)
    queue = _endpoint_queue(raw.get("queue"), queues)
    if inputs.is_team_label(queue) and not team:
        raise Invalid("a bulk push to an endpoint goes to its own queues; push to a team queue through the team "
                      "(POST /api/v1/teams/{team}/todos:batch, or `todo push --team <slug> --from-file`)",
                      argument="queue")
    return {
        "queue": queue,
        "title": inputs.text(raw.get("title"), "title", max_chars=inputs.TITLE_MAX_CHARS, required=True),
        "payload": payload if payload_text is not None else None,
        "payload_json": payload_text,
        "payload_size": len(payload_text.encode("utf-8")) if payload_text is not None else 0,
        "kind": inputs.text(raw.get("kind"), "kind", max_chars=inputs.KIND_MAX_CHARS),
        "key": inputs.text(raw.get("key"), "key", max_chars=inputs.KEY_MAX_CHARS),
        "assignee": inputs.text(raw.get("assignee"), "assignee", max_chars=inputs.ASSIGNEE_MAX_CHARS),
        "max_attempts": inputs.max_attempts(raw.get("max_attempts"), default_max_attempts),
    }


def _plain_item(raw: object, own: frozenset[str], single: str | None,
                default_max_attempts: int) -> dict[str, Any] | None:
    """The common item, checked with less work per field: what `_item` returns for it, or None when
    anything is unusual, and `_item` decides (and words the refusal). It accepts only what `_item`
    accepts: an exact dict of known fields; texts of printable characters (so no NUL, control
    character or lone surrogate) within their lengths, a title not blank; a queue among `own` (the
    endpoint's own queues that pass `inputs.queue`), or none with `single` as the only one; an int
    max_attempts in range; a payload whose compact JSON is small enough and holds no NUL.
    tests/test_bulk_push.py holds the two paths to the same answers."""
    if type(raw) is not dict or not raw.keys() <= PUSH_FIELDS:
        return None
    title = raw.get("title")
    if (type(title) is not str or not 0 < len(title) <= inputs.TITLE_MAX_CHARS or not title.isprintable()
            or title.isspace()):
        return None
    queue = raw.get("queue")
    if queue is None or queue == "":
        if single is None:
            return None
        queue = single
    elif type(queue) is not str or queue not in own:
        return None
    item: dict[str, Any] = {"queue": queue, "title": title}
    payload = raw.get("payload")
    if payload is None:
        item["payload"] = item["payload_json"] = None
        item["payload_size"] = 0
    else:
        try:
            text = _encode(payload)
        except (RecursionError, TypeError, ValueError):
            return None
        if "\\u0000" in text:
            return None
        if text.isascii():
            size = len(text)
        else:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError:
                return None
        if size > inputs.PAYLOAD_MAX_BYTES:
            return None
        item["payload"], item["payload_json"], item["payload_size"] = payload, text, size
    for name, max_chars in _OPTIONAL_TEXT:
        value = raw.get(name)
        if value is not None:
            if type(value) is not str:
                return None
            if value == "":
                value = None
            elif len(value) > max_chars or not value.isprintable():
                return None
        item[name] = value
    max_attempts = raw.get("max_attempts")
    if max_attempts is None:
        item["max_attempts"] = default_max_attempts
    elif type(max_attempts) is int and inputs.MAX_ATTEMPTS_MIN <= max_attempts <= inputs.MAX_ATTEMPTS_MAX:
        item["max_attempts"] = max_attempts
    else:
        return None
    return item


def _own_queues(queues: list[str], team: bool = False) -> frozenset[str]:
    """The queues that a bulk push may name as they are (valid names; team labels only for a team)."""
    own = set()
    for q in queues:
        try:
            if team or not inputs.is_team_label(inputs.queue(q)):
                own.add(q)
        except Invalid:
            pass
    return frozenset(own)


def _team_items(items: list[Any] | tuple[Any, ...], team: str) -> list[Any]:
    """The items of a push to team `team` with each queue as its label: an item names its queue, by its
    bare name or its label (`todos[i].queue` otherwise). Items that are not objects are left to
    `check_items` to refuse."""
    out = []
    for i, raw in enumerate(items):
        if isinstance(raw, dict):
            raw = dict(raw, queue=inputs.team_queue_label(team, raw.get("queue"), f"todos[{i}].queue"))
        out.append(raw)
    return out


def check_items(items: list[Any] | tuple[Any, ...], queues: list[str], default_max_attempts: int, *,
                team: str | None = None) -> list[dict[str, Any]]:
    """Every item checked by the rules of a single push, in order, before anything is written; the
    first bad one is `invalid` naming `todos[i].field` (i from 0). The CLI checks a whole file with
    it before its first batch. With `team` (a team's slug) the items go to that team's queues, and
    `queues` is not used: each item names one of them."""
    if team is not None:
        items = _team_items(items, team)
        queues = sorted({raw["queue"] for raw in items if isinstance(raw, dict)})
    own = _own_queues(queues, team is not None)
    single = queues[0] if team is None and len(queues) == 1 and queues[0] in own else None
    out = []
    for i, raw in enumerate(items):
        item = _plain_item(raw, own, single, default_max_attempts)
        if item is None:
            try:
                item = _item(raw, queues, default_max_attempts, team is not None)
            except Invalid as exc:
                where = f"todos[{i}]" + (f".{exc.argument}" if exc.argument else "")
                bare = f"{exc.argument} " if exc.argument else ""
                message = (where + " " + exc.message[len(bare):] if bare and exc.message.startswith(bare)
                           else f"{where}: {exc.message}" if bare else f"{where} {exc.message}")
                raise Invalid(message, argument=where) from None
        out.append(item)
    return out


def check_batch(core: Core, items: object, queues: list[str], team: str | None = None) -> list[dict[str, Any]]:
    if not isinstance(items, (list, tuple)) or not 1 <= len(items) <= inputs.PUSH_BATCH_MAX:
        raise Invalid(f"todos must be a list of 1 to {inputs.PUSH_BATCH_MAX} objects", argument="todos")
    return check_items(items, queues, core.settings.default_max_attempts, team=team)


@dataclass(frozen=True)
class _Owner:
    """Whom a bulk push's todos belong to: an endpoint, or a team (pushed by one of its members)."""

    endpoint_id: Any = None
    team_id: Any = None
    human_id: Any = None

    def event(self, todo: dict[str, Any], source: str) -> events.Event:
        return events.Event(verb="create", todo=todo, endpoint_id=str(self.endpoint_id or ""),
                            queue=todo["queue"], ready="created", source=source, team_id=str(self.team_id or ""))


async def push_many(core: Core, human: HumanCaller, slug: str, items: object, *,
                    source: str = "operator") -> list[tuple[dict[str, Any], bool]]:
    """Push up to `inputs.PUSH_BATCH_MAX` todos on one endpoint in one INSERT statement.

    All or nothing for validation: a bad item is `invalid` naming `todos[i].field` and nothing is
    written. Each item's idempotency key is honoured as by `push`: a live todo holding it is answered
    with created=False. An item repeating the key of an earlier item of the same call is answered with
    that earlier item's todo, created=False. Answers come in input order: (compact todo, created).
    The events of the created todos are published after commit; in PostgreSQL the batch sends one
    wake-up per queue (migration 0014) and one hook outbox row per todo and subscribed event.
    """
    endpoint = await get_for_human(core, human, slug)
    if endpoint["state"] != "active":
        raise Invalid("endpoint is revoked", argument="endpoint")
    checked = check_batch(core, items, list(endpoint["scope_queues"]))
    return await _push_checked(core, _Owner(endpoint_id=endpoint["id"]), checked, source)


async def push_team_many(core: Core, human: HumanCaller, team: object, items: object, *,
                         source: str = "operator") -> list[tuple[dict[str, Any], bool]]:
    """`push_many` on the queues of a team (any member may): each item names its queue, by its bare
    name or its label `team:<team-slug>/<queue>`; a label of another team is `invalid`. The team's
    idempotency keys are honoured as by a single team push. Outside the team it is not_found, and
    a member removed while the batch runs either waits for it or finds nothing inserted (the INSERT
    share-locks the membership row, as `todos.create_team` does)."""
    membership = await teams.membership(core, human, team)
    checked = check_batch(core, items, [], team=membership["slug"])
    return await _push_checked(core, _Owner(team_id=membership["id"], human_id=human.human_id), checked, source)


async def _push_checked(core: Core, owner: _Owner, checked: list[dict[str, Any]],
                        source: str) -> list[tuple[dict[str, Any], bool]]:
    # A key repeated within the call: only its first item is inserted; the others answer with it.
    first_of_key: dict[str, int] = {}
    same_as: dict[int, int] = {}
    send: list[int] = []
    for i, item in enumerate(checked):
        key = item["key"]
        if key is not None:
            if key in first_of_key:
                same_as[i] = first_of_key[key]
                continue
            first_of_key[key] = i
        send.append(i)

    answers: dict[int, tuple[dict[str, Any], bool]] = {}
    created: list[events.Event] = []
    for _ in range(2):
        for i, todo, was_created in await _create_batch(core, owner, source, [(i, checked[i]) for i in send]):
            answers[i] = (todo, was_created)
            if was_created:
                created.append(owner.event(todo, source))
        send = [i for i in send if i not in answers]
        if not send:
            break
        if owner.endpoint_id is not None:
            await todos.require_live_endpoint(core, owner.endpoint_id)
    if created:
        await core.bus.publish(*created)
    if send:  # a duplicate kept finishing between our statements
        raise Conflict("a todo with one of these keys is changing state; try again", op="create")
    return [(answers[same_as.get(i, i)][0], False if i in same_as else answers[i][1])
            for i in range(len(checked))]


def batch_reply(results: list[tuple[dict[str, Any], bool]]) -> dict[str, Any]:
    """The answer of a bulk push, as the human API sends it and `todo push --from-file --json` prints it."""
    created = sum(1 for _, c in results if c)
    return {"results": [{"todo": t, "created": c} for t, c in results], "created": created,
            "existing": len(results) - created}


_PENDING = TodoState.PENDING.value
_UUID_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}


def new_todo_ids(n: int) -> list[str]:
    """n todo ids as `todos.new_todo_id` makes them (`td_` + a random UUID version 4, 122 random
    bits from os.urandom), formatted in one pass instead of one uuid.UUID object each."""
    h = os.urandom(16 * n).hex()
    return [f"td_{h[j:j + 8]}-{h[j + 8:j + 12]}-4{h[j + 13:j + 16]}-{_UUID_VARIANT[h[j + 16]]}{h[j + 17:j + 20]}-"
            f"{h[j + 20:j + 32]}" for j in range(0, 32 * n, 32)]


def _column(values: list[Any]) -> str | None:
    """One column of the batch as a JSON array; None when every value is null (ROWS FROM pads it)."""
    for v in values:
        if v is not None:
            return _encode(values)
    return None


def _created_todo(todo_id: str, item: dict[str, Any], source: str, created_at: str | None) -> dict[str, Any]:
    """`shapes.compact` of the row this item inserted, from what was sent: the table's defaults for
    the rest (pending, attempt 0, no owner, lease or retry). The payload size is that of the JSON sent."""
    todo: dict[str, Any] = {"id": todo_id, "queue": item["queue"]}
    if source:
        todo["source"] = source
    if item["kind"]:
        todo["kind"] = item["kind"]
    todo["title"] = item["title"]
    todo["state"] = _PENDING
    if item["assignee"]:
        todo["assignee"] = item["assignee"]
    todo["attempt"] = 0
    todo["max_attempts"] = item["max_attempts"]
    todo["next_retry_at"] = None
    todo["dead_letter"] = False
    todo["created_at"] = created_at
    todo["payload_size"] = item["payload_size"]
    return todo


async def _create_batch(core: Core, owner: _Owner, source: str,
                        items: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any], bool]]:
    """Run `producer.create_batch` (or `create_batch_keyless`, or their team forms) for `items` ((input
    index, checked item)); answers (index, compact todo, created) for the items inserted or found as
    live duplicates."""
    ids = new_todo_ids(len(items))
    payloads = []
    for _, it in items:
        text = it.get("payload_json")
        if text is None and it["payload"] is not None:
            text = _encode(it["payload"])
        payloads.append(text or "null")
    keys = [it["key"] for _, it in items]
    params = {"endpoint_id": owner.endpoint_id, "team_id": owner.team_id, "human_id": owner.human_id,
              "source": source, "ids": _encode(ids),
              "queues": _encode([it["queue"] for _, it in items]),
              "kinds": _column([it["kind"] for _, it in items]),
              "titles": _encode([it["title"] for _, it in items]),
              "payloads": "[" + ",".join(payloads) + "]" if any(p != "null" for p in payloads) else None,
              "assignees": _column([it["assignee"] for _, it in items]),
              "max_attempts": _encode([it["max_attempts"] for _, it in items])}
    keyed = any(k is not None for k in keys)
    if keyed:
        params["keys"] = _encode(keys)
        params["turn_class"] = LOCK_KEYED_PUSH
    conn = await core.pool.getconn()
    try:
        if owner.team_id is not None:
            sql = Q.producer.create_team_batch if keyed else Q.producer.create_team_batch_keyless
        else:
            sql = Q.producer.create_batch if keyed else Q.producer.create_batch_keyless
        cur = await conn.execute(sql, params)
        rows = await cur.fetchall()
    finally:
        await core.pool.putconn(conn)
    head, rest = rows[0], rows[1:]
    made = head["batch_made"]
    if made == 0 and not rest:  # the endpoint is not live, or the human left the team: nothing inserted
        if owner.team_id is not None:
            raise NotFound("team not found", argument="team", op="create")
        return []
    if made + len(rest) != len(items):
        raise RuntimeError(f"bulk push: {made} inserted and {len(rest)} not, of {len(items)} items")
    created_at = shapes.ts(head["created_at"])
    out = []
    not_made = {row["batch_ord"]: row for row in rest}
    for n, ((index, item), todo_id) in enumerate(zip(items, ids, strict=True), start=1):
        row = not_made.get(n)
        if row is None:
            out.append((index, _created_todo(todo_id, item, source, created_at), True))
        elif row["id"] is not None:  # a live todo holds its key
            out.append((index, shapes.compact(row), False))
    return out
