"""Producing todos on behalf of a human (CLI, human API, Board): the endpoint must be theirs and
active, and the queue one of its granted queues."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from . import events, inputs, shapes, teams, todos
from .endpoints import get_for_human
from .errors import Conflict, Invalid, NotFound
from .inputs import JsonValue
from .models import Core, HumanCaller
from .queries import Q


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


def _item(raw: object, queues: list[str], default_max_attempts: int) -> dict[str, Any]:
    """One item of a bulk push, checked by the rules of a single push (errors name the bare field)."""
    if not isinstance(raw, dict):
        raise Invalid("must be an object", argument="")
    unknown = sorted(str(k) for k in raw if k not in PUSH_FIELDS)
    if unknown:
        name = "".join(ch if ch.isprintable() else "?" for ch in unknown[0][:64])
        raise Invalid(f"unknown field {name}", argument=name)
    payload = raw.get("payload")
    payload_text = inputs.json_value(payload, "payload", inputs.PAYLOAD_MAX_BYTES)
    queue = _endpoint_queue(raw.get("queue"), queues)
    if inputs.is_team_label(queue):
        raise Invalid("a bulk push goes to one endpoint's own queues; push team queue todos one by one",
                      argument="queue")
    return {
        "queue": queue,
        "title": inputs.text(raw.get("title"), "title", max_chars=inputs.TITLE_MAX_CHARS, required=True),
        "payload": payload if payload_text is not None else None,
        "payload_size": len(payload_text.encode("utf-8")) if payload_text is not None else 0,
        "kind": inputs.text(raw.get("kind"), "kind", max_chars=inputs.KIND_MAX_CHARS),
        "key": inputs.text(raw.get("key"), "key", max_chars=inputs.KEY_MAX_CHARS),
        "assignee": inputs.text(raw.get("assignee"), "assignee", max_chars=inputs.ASSIGNEE_MAX_CHARS),
        "max_attempts": inputs.max_attempts(raw.get("max_attempts"), default_max_attempts),
    }


def check_items(items: list[Any] | tuple[Any, ...], queues: list[str],
                default_max_attempts: int) -> list[dict[str, Any]]:
    """Every item checked by the rules of a single push, in order, before anything is written; the
    first bad one is `invalid` naming `todos[i].field` (i from 0). The CLI checks a whole file with
    it before its first batch."""
    out = []
    for i, raw in enumerate(items):
        try:
            out.append(_item(raw, queues, default_max_attempts))
        except Invalid as exc:
            where = f"todos[{i}]" + (f".{exc.argument}" if exc.argument else "")
            bare = f"{exc.argument} " if exc.argument else ""
            message = (where + " " + exc.message[len(bare):] if bare and exc.message.startswith(bare)
                       else f"{where}: {exc.message}" if bare else f"{where} {exc.message}")
            raise Invalid(message, argument=where) from None
    return out


def check_batch(core: Core, items: object, queues: list[str]) -> list[dict[str, Any]]:
    if not isinstance(items, (list, tuple)) or not 1 <= len(items) <= inputs.PUSH_BATCH_MAX:
        raise Invalid(f"todos must be a list of 1 to {inputs.PUSH_BATCH_MAX} objects", argument="todos")
    return check_items(items, queues, core.settings.default_max_attempts)


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

    # A key repeated within the call: only its first item is inserted; the others answer with it.
    first_of_key: dict[str, int] = {}
    same_as: dict[int, int] = {}
    send: list[int] = []
    for i, item in enumerate(checked):
        key = item["key"]
        if key is not None and key in first_of_key:
            same_as[i] = first_of_key[key]
            continue
        if key is not None:
            first_of_key[key] = i
        send.append(i)

    answers: dict[int, tuple[dict[str, Any], bool]] = {}
    created: list[events.Event] = []
    for _ in range(2):
        for i, row, todo in await _create_batch(core, endpoint["id"], source, [(i, checked[i]) for i in send]):
            answers[i] = (todo, row["batch_created"])
            if row["batch_created"]:
                created.append(events.Event(verb="create", todo=todo, endpoint_id=str(row["endpoint_id"]),
                                            queue=row["queue"], ready="created", source=source))
        send = [i for i in send if i not in answers]
        if not send:
            break
        await todos.require_live_endpoint(core, endpoint["id"])
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


async def _create_batch(core: Core, endpoint_id: Any, source: str,
                        items: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    """Run `producer.create_batch` for `items` ((input index, checked item)); answers (index, row,
    compact todo) for the items inserted or found as live duplicates."""
    sent = [{"ord": n, "id": todos.new_todo_id(), "queue": it["queue"], "kind": it["kind"], "title": it["title"],
             "payload": it["payload"], "key": it["key"], "assignee": it["assignee"],
             "max_attempts": it["max_attempts"]} for n, (_, it) in enumerate(items, start=1)]
    params = {"endpoint_id": endpoint_id, "source": source,
              "items": json.dumps(sent, separators=(",", ":"), ensure_ascii=False)}
    conn = await core.pool.getconn()
    try:
        try:
            cur = await conn.execute(Q.producer.create_batch, params)
        except psycopg.errors.ForeignKeyViolation:
            raise NotFound("endpoint not found", argument="endpoint_id", op="create") from None
        rows = await cur.fetchall()
    finally:
        await core.pool.putconn(conn)
    out = []
    for row in rows:
        index, item = items[row["batch_ord"] - 1]
        todo = shapes.compact(row)
        if row["batch_created"]:
            todo["payload_size"] = item["payload_size"]  # what was sent, without reading it back
        out.append((index, row, todo))
    return out
