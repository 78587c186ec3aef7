"""`relay block TASK` and `relay unblock TASK`: gates set and lifted by hand, on the server.

Blocking makes the task's todo a dead letter whose closing attempt carries the receipt
`{"result": "failure", "gate": "user_blocked", ...}`:
- a claimed todo is failed by its owner (the producer API's fail, fence-exempt, `retry: false`); the
  relay holding it loses its lease at the next heartbeat, stops its worker and reports nothing;
- a pending todo, or one waiting for a retry (put back to pending with the owner's retry first), is
  claimed by id with the endpoint credential and failed with `retry: false`;
- a task not pushed yet is pushed first, then blocked like a pending todo;
- a todo waiting for its owner's input is canceled (a canceled task todo also counts as user_blocked).

Unblocking is the owner's manual retry: the dead letter goes back to pending with a fresh attempt budget
and its history kept. A task blocked before its dependencies completed is instead withdrawn (retried, then
canceled) so that it runs only once they have; a canceled task is pushed again.
"""

from __future__ import annotations

from ..core.states import TodoState
from .client import Refused, RelayError, Server
from .epic import Epic
from .ledger import TaskView, task_views
from .loop import claimant_label
from .receipts import encode_summary
from .state import TASK_KIND, ensure_record, load_state, task_key, task_payload, task_title


def _task(epic: Epic, task_id: str) -> None:
    if task_id not in epic.tasks:
        raise RelayError(f"{task_id} is not a task of epic {epic.id} (tasks: {', '.join(epic.order)})")


async def _views(server: Server, epic: Epic) -> dict[str, TaskView]:
    return task_views(epic, await load_state(server, epic))


async def block(server: Server, epic: Epic, task_id: str, reason: str | None = None) -> dict:
    _task(epic, task_id)
    await ensure_record(server, epic)
    view = (await _views(server, epic))[task_id]
    if view.status == "completed":
        raise RelayError(f"{task_id} is completed: there is nothing to block")
    if view.status == "gated":
        assert view.gate is not None  # a gated view carries its gate
        raise RelayError(f"{task_id} is already gated ({view.gate['reason']}); `relay unblock {task_id}` lifts it")
    summary = encode_summary({"result": "failure", "gate": "user_blocked", "error_category": "user_blocked",
                              "error_summary": reason or "blocked by hand with `switchboard relay block`"},
                             secrets=server.conn.secrets)
    todo = view.todo
    if todo is None:
        todo, _ = await server.producer.push(
            title=task_title(epic, task_id), queue=epic.queue, payload=task_payload(epic, task_id), kind=TASK_KIND,
            key=task_key(epic.id, task_id), max_attempts=epic.max_attempts_per_task)
    state = todo["state"]
    if state == TodoState.INPUT_REQUIRED:
        await server.producer.action(todo["id"], "cancel")
        return {"task": task_id, "todo": todo["id"], "gate": "user_blocked", "how": "canceled"}
    if state == "claimed":
        await server.producer.action(todo["id"], "fail", {"summary": summary, "retry": False})
        return {"task": task_id, "todo": todo["id"], "gate": "user_blocked", "how": "failed by the owner"}
    if state == "failed":  # a retry is scheduled: make it claimable now
        await server.producer.action(todo["id"], "retry")
    try:
        got = await server.drain.claim(todo["id"], lease_ttl_seconds=60, claimant=claimant_label(epic.id))
    except Refused as exc:
        if exc.code != "conflict":
            raise
        # Someone claimed it in the meantime: the owner's fail ends their attempt (their heartbeat then fails).
        await server.producer.action(todo["id"], "fail", {"summary": summary, "retry": False})
        return {"task": task_id, "todo": todo["id"], "gate": "user_blocked", "how": "failed by the owner"}
    await server.drain.fail(todo["id"], lease_token=got.get("lease_token"), summary=summary, artifact=None,
                            result={"relay": {"gate": "user_blocked"}}, retry=False)
    return {"task": task_id, "todo": todo["id"], "gate": "user_blocked", "how": "claimed and failed"}


async def unblock(server: Server, epic: Epic, task_id: str) -> dict:
    _task(epic, task_id)
    await ensure_record(server, epic)
    views = await _views(server, epic)
    view = views[task_id]
    if view.status != "gated":
        raise RelayError(f"{task_id} is not gated (it is {view.status}): there is nothing to unblock")
    assert view.gate is not None and view.todo is not None  # a gated view carries its gate and todo
    todo = view.todo
    unfinished = [d for d in epic.tasks[task_id].depends_on if views[d].status != "completed"]
    if todo["state"] == "canceled":
        if unfinished:
            raise RelayError(f"{task_id} was canceled before {', '.join(unfinished)} completed; unblock it once "
                             "they have")
        new, _ = await server.producer.push(
            title=task_title(epic, task_id), queue=epic.queue, payload=task_payload(epic, task_id), kind=TASK_KIND,
            key=task_key(epic.id, task_id), max_attempts=epic.max_attempts_per_task)
        return {"task": task_id, "todo": new["id"], "was": view.gate["reason"], "how": "pushed again"}
    await server.producer.action(todo["id"], "retry")
    if unfinished:
        await server.producer.action(todo["id"], "cancel")
        return {"task": task_id, "todo": todo["id"], "was": view.gate["reason"],
                "how": f"withdrawn until {', '.join(unfinished)} complete"}
    return {"task": task_id, "todo": todo["id"], "was": view.gate["reason"], "how": "retried (fresh attempt budget)"}
