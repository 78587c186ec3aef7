"""Where an epic lives on the server, and reading it back.

- **The epic record**: one todo per epic (kind `relay_epic`, key `relay:<epic id>`) whose payload is the
  epic's plan. It is assigned to `relay:epic-record`, an owner no endpoint ever has, so no agent can claim
  it: it stays pending as the durable copy of the plan, and its creation time is the epic's start.
- **One todo per task run** (kind `relay_task`, key `relay:<epic id>:<task id>`, title
  `<epic id>/<task id>: <title>`, payload = the task plus `epic_id` and `task_id`), pushed only when every
  task it depends on is done, with `max_attempts` = the epic's `max_attempts_per_task`.
- **Gates** are dead letters (`fail` with `retry: false`), their reason in the closing attempt's summary.

Todos are found with the owner's list of the endpoint's todos on the epic's queue
(`GET /api/v1/endpoints/{slug}/todos?queue=…`, paged) and read in full with the owner's view
(`GET /api/v1/todos/{id}`: every attempt). Nothing is kept locally.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .client import RelayError, Server
from .epic import Epic, plan_difference, plan_digest

RECORD_KIND = "relay_epic"
TASK_KIND = "relay_task"
RECORD_ASSIGNEE = "relay:epic-record"
PAGE = 500
TITLE_MAX_CHARS = 512


def record_key(epic_id: str) -> str:
    return f"relay:{epic_id}"


def task_key(epic_id: str, task_id: str) -> str:
    return f"relay:{epic_id}:{task_id}"


def task_title(epic: Epic, task_id: str) -> str:
    return f"{epic.id}/{task_id}: {epic.tasks[task_id].title}"[:TITLE_MAX_CHARS]


def record_title(epic: Epic) -> str:
    return f"relay epic {epic.id}: {epic.title}"[:TITLE_MAX_CHARS]


def task_payload(epic: Epic, task_id: str) -> dict:
    return {"epic_id": epic.id, "task_id": task_id, **epic.tasks[task_id].spec()}


def record_payload(epic: Epic) -> dict:
    plan = epic.plan()
    return {"relay_epic": 1, "digest": plan_digest(plan), "plan": plan}


@dataclass
class EpicState:
    record: dict | None
    todos: dict[str, list[dict]] = field(default_factory=dict)  # task id -> owner views, oldest first


def _check_record(epic: Epic, record: dict) -> dict:
    payload = record.get("payload") or {}
    recorded = payload.get("plan") or {}
    if payload.get("digest") != epic.digest():
        raise RelayError(f"{epic.path or 'the epic file'} differs from epic {epic.id} as recorded on the server at "
                         f"`relay init` ({plan_difference(recorded, epic.plan())} changed). A recorded plan is "
                         "fixed: give a changed plan a new epic id.")
    return record


async def ensure_record(server: Server, epic: Epic) -> tuple[dict, bool]:
    """Record the epic's plan on the server (idempotent). A different plan under the same id is refused."""
    server.require_queue(epic.queue)
    todo, created = await server.producer.push(
        title=record_title(epic), queue=epic.queue, payload=record_payload(epic), kind=RECORD_KIND,
        key=record_key(epic.id), max_attempts=1, assignee=RECORD_ASSIGNEE)
    if not created and "payload" not in todo:
        todo = await server.producer.get(todo["id"])
    return _check_record(epic, todo), created


async def _listing(server: Server, epic: Epic) -> list[dict]:
    """Every todo on the epic's queue, through the owner's paged list (newest first)."""
    rows: dict[str, dict] = {}
    offset = 0
    while True:
        page = await server.producer.list_todos(queue=epic.queue, limit=PAGE, offset=offset)
        for row in page:
            rows.setdefault(row["id"], row)
        if len(page) < PAGE:
            return list(rows.values())
        offset += PAGE


async def _view(server: Server, row: dict, cache: dict[str, dict] | None) -> dict:
    """The owner's view of a listed todo; a cached one is reused while the todo is finished (done,
    canceled) or is the epic record, which nothing changes."""
    view = cache.get(row["id"]) if cache is not None else None
    steady = row.get("state") in ("done", "canceled") or row.get("kind") == RECORD_KIND
    if view is None or not steady or view.get("state") != row.get("state"):
        view = await server.producer.get(row["id"])
        if cache is not None:
            cache[row["id"]] = view
    return view


async def load_state(server: Server, epic: Epic, *, cache: dict[str, dict] | None = None,
                     require_record: bool = True) -> EpicState:
    """The record and every todo of the epic, with full attempt histories.

    `cache` maps todo ids to owner views already read (see `_view`).
    """
    server.require_queue(epic.queue)
    rows = await _listing(server, epic)
    prefix = f"{epic.id}/"
    records, mine = [], []
    for row in rows:
        title = str(row.get("title", ""))
        if row.get("kind") == RECORD_KIND and title.startswith(f"relay epic {epic.id}: "):
            records.append(row)
        elif row.get("kind") == TASK_KIND and title.startswith(prefix):
            mine.append(row)
    record = None
    if records:  # the live record; a human may have canceled an older one
        row = sorted(records, key=lambda r: (r.get("state") == "pending", r.get("created_at") or ""))[-1]
        record = _check_record(epic, await _view(server, row, cache))
    elif require_record:
        raise RelayError(f"epic {epic.id} is not recorded on the server (queue {epic.queue}): run "
                         "`switchboard relay init` first")
    state = EpicState(record=record)
    for row in sorted(mine, key=lambda r: (r.get("created_at") or "", r["id"])):
        view = await _view(server, row, cache)
        payload = view.get("payload") or {}
        if payload.get("epic_id") != epic.id or payload.get("task_id") not in epic.tasks:
            continue
        state.todos.setdefault(payload["task_id"], []).append(view)
    return state
