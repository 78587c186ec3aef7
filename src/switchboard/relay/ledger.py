"""Task status and the `attempt-ledger.yml` view, derived from the server's todos and attempts alone.

| todo (newest of the task)                | task status   |
| ---------------------------------------- | ------------- |
| none, every dependency completed         | `pending`     |
| none, some dependency not completed      | `blocked`     |
| pending, or failed with a retry scheduled| `pending`     |
| claimed, input-required                  | `in_progress` |
| done                                     | `completed`   |
| failed, dead letter                      | `gated` (reason from the closing attempt's receipt) |
| canceled by a human                      | `gated` (`user_blocked`) |

A todo canceled by `relay unblock` while its dependencies were unfinished is *withdrawn*: it no longer
counts, and the task is pushed again when its turn comes. Its attempts stay in the ledger.

The file holds nothing the server does not: writing it twice from the same server state gives the same
bytes, and deleting it loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from ..core.states import HELD_STATES, TodoState
from .epic import Epic
from .gating import gate_of_dead_letter
from .receipts import parse_summary
from .state import EpicState

STATUSES = ("completed", "in_progress", "pending", "blocked", "gated")
ICONS = {"completed": "✅", "in_progress": "🔄", "pending": "⏳", "blocked": "⏸️", "gated": "🚫"}
RESULT_OF_OUTCOME = {"completed": "success", "failed": "failure", "lease_expired": "died", "reaped": "died",
                     "released": "released", "canceled": "canceled", "revoked": "revoked", "migrated": "migrated"}
HEADER = ("# attempt-ledger.yml: a view of the server's attempt history for this epic, rebuilt by\n"
          "# `switchboard relay ledger` (and after every attempt of `relay work`). Deleting it loses nothing.\n")


@dataclass
class TaskView:
    id: str
    title: str
    status: str
    todo: dict | None = None  # the task's current todo (owner view)
    todos: list[dict] = field(default_factory=list)  # every todo of the task, oldest first
    gate: dict | None = None  # {reason, gated_at, detail}
    waiting_on: list[str] = field(default_factory=list)
    retry_at: str | None = None

    @property
    def enqueued(self) -> bool:
        return self.todo is not None

    def attempts(self) -> list[tuple[dict, dict]]:
        """(todo, attempt) pairs, oldest first, across every todo of the task."""
        out = []
        for todo in self.todos:
            for a in reversed(todo.get("attempts") or []):
                out.append((todo, a))
        return out

    @property
    def attempt_number(self) -> int:
        return int(self.todo.get("attempt") or 0) if self.todo else 0

    @property
    def max_attempts(self) -> int | None:
        return self.todo.get("max_attempts") if self.todo else None

    @property
    def died(self) -> int:
        return sum(1 for _, a in self.attempts() if a.get("died"))


def withdrawn(todo: dict) -> bool:
    """Canceled by `relay unblock` (a user_blocked dead letter retried, then canceled), not by a human."""
    if todo.get("state") != "canceled":
        return False
    attempts = todo.get("attempts") or []
    if not attempts:
        return False
    receipt = parse_summary(attempts[0].get("summary")) or {}
    return attempts[0].get("outcome") == "failed" and receipt.get("gate") == "user_blocked"


def task_views(epic: Epic, state: EpicState) -> dict[str, TaskView]:
    views: dict[str, TaskView] = {}
    for tid in epic.order:
        task = epic.tasks[tid]
        todos = state.todos.get(tid, [])
        live = [t for t in todos if not withdrawn(t)]
        current = live[-1] if live else None
        unfinished = [d for d in task.depends_on if views[d].status != "completed"]
        view = TaskView(id=tid, title=task.title, status="pending", todo=current, todos=list(todos))
        if current is None:
            view.status = "blocked" if unfinished else "pending"
            view.waiting_on = unfinished
        else:
            st = current.get("state")
            if st == TodoState.DONE:
                view.status = "completed"
            elif st in HELD_STATES:
                view.status = "in_progress"
            elif st == TodoState.PENDING:
                view.status = "pending"
            elif st == TodoState.FAILED and current.get("next_retry_at"):
                view.status = "pending"
                view.retry_at = current.get("next_retry_at")
            elif st == TodoState.FAILED:
                reason, at, detail = gate_of_dead_letter(current.get("attempts") or [])
                view.status = "gated"
                view.gate = {"reason": reason, "gated_at": at or current.get("updated_at"), "detail": detail}
            else:  # canceled by a human
                view.status = "gated"
                view.gate = {"reason": "user_blocked", "gated_at": current.get("completed_at")
                             or current.get("updated_at"), "detail": "todo canceled on the server"}
        views[tid] = view
    return views


def counts(views: dict[str, TaskView]) -> dict[str, int]:
    out = {s: 0 for s in STATUSES}
    for v in views.values():
        out[v.status] += 1
    return out


def _attempt_entry(index: int, todo: dict, a: dict) -> dict:
    receipt = parse_summary(a.get("summary"))
    outcome = a.get("outcome")
    entry = {
        "id": index,
        "todo": todo["id"],
        "seq": a.get("seq"),
        "number": a.get("attempt"),
        "claimant": a.get("claimant"),
        "started_at": a.get("claimed_at"),
        "ended_at": a.get("ended_at"),
        "last_heartbeat_at": a.get("last_heartbeat_at"),
        "result": RESULT_OF_OUTCOME.get(outcome, outcome) if outcome else "in_progress",
        "outcome": outcome,
        "disposition": a.get("disposition"),
        "died": bool(a.get("died")),
        "receipt": receipt,
    }
    if receipt is None and a.get("summary") is not None:
        entry["summary"] = a.get("summary")
    if a.get("summary_truncated"):
        entry["summary_truncated"] = True
    entry["artifact"] = a.get("artifact")
    if a.get("notes"):  # the holder's progress notes, oldest first (data, never instructions)
        entry["notes"] = [{"at": n.get("at"), "text": n.get("text")} for n in a["notes"]]
    return entry


def _parse_ts(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def document(epic: Epic, state: EpicState, views: dict[str, TaskView]) -> dict:
    """The ledger as a mapping (the seed's ledger schema, with the server's fields added)."""
    started = (state.record or {}).get("created_at")
    ended = None
    if views and all(v.status == "completed" for v in views.values()):
        ends = [v.todo.get("completed_at") or v.todo.get("updated_at") for v in views.values() if v.todo]
        ended = max((e for e in ends if e), default=None)
    duration = None
    start_at, end_at = _parse_ts(started), _parse_ts(ended)
    if start_at and end_at:
        duration = int(round((end_at - start_at).total_seconds() / 60))
    attempts: dict[str, list[dict]] = {}
    for tid, v in views.items():
        entries = [_attempt_entry(i, todo, a) for i, (todo, a) in enumerate(v.attempts(), start=1)]
        if entries:
            attempts[tid] = entries
    gated = {tid: {k: val for k, val in v.gate.items() if val is not None}
             for tid, v in views.items() if v.gate}
    waiting = {tid: {"waiting_on": v.waiting_on} for tid, v in views.items() if v.status == "blocked"}
    return {
        "version": 1,
        "epic_id": epic.id,
        "title": epic.title,
        "source": "switchboard",
        "started_at": started,
        "ended_at": ended,
        "duration_minutes": duration,
        "settings": {"max_attempts_per_task": epic.max_attempts_per_task, "timeout_minutes": epic.timeout_minutes,
                     "queue": epic.queue},
        "todos": {tid: [t["id"] for t in v.todos] for tid, v in views.items() if v.todos},
        "task_status": {tid: v.status for tid, v in views.items()},
        "attempts": attempts,
        "gated_tasks": gated,
        "blocked_tasks": waiting,
    }


def render(doc: dict) -> str:
    return HEADER + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)


def write(path: Path, doc: dict) -> None:
    """Replace the file in one rename, so a reader never sees half a ledger."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".attempt-ledger-", suffix=".yml", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render(doc))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def empty_document(epic: Epic) -> dict:
    """The ledger of an epic nothing has happened to yet (what `relay init` writes for a new epic)."""
    views = task_views(epic, EpicState(record=None))
    return document(epic, EpicState(record=None), views)
