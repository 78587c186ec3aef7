"""The owning human's actions on a todo, in one table every surface reads.

Each action names the core function it runs, the fields it takes (typed), and the todos it applies
to. The producer API (`POST /api/v1/todos/{id}/<action>`), the Board's drawer (its buttons and its
POST handler) and the CLI (`switchboard todo <action>`) offer exactly these actions, with these
fields, through `perform`; each surface maps the core's errors to its wire form in one place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from . import todos
from .inputs import JsonValue
from .models import Core, HumanCaller
from .states import TodoState

FieldKind = Literal["text", "json", "integer", "boolean"]


@dataclass(frozen=True)
class ActionField:
    """One argument of an action: `text` (str), `json` (any JSON value), `integer` or `boolean`."""

    name: str
    kind: FieldKind
    help: str
    required: bool = False


def _parse_ts(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _claimable(todo: dict[str, Any], now: datetime) -> bool:
    """The claim statement's three arms (core/sql/todos.sql `claim`): pending, a lapsed lease below
    the cap (a takeover), or a due retry below the cap."""
    state = todo["state"]
    below_cap = todo["attempt"] < todo["max_attempts"]
    if state == TodoState.PENDING:
        return True
    if state == TodoState.CLAIMED:
        expiry = _parse_ts(todo.get("lease_expires_at"))
        return below_cap and expiry is not None and expiry < now
    if state == TodoState.FAILED:
        due = _parse_ts(todo.get("next_retry_at"))
        return below_cap and due is not None and due <= now
    return False


Run = Callable[[Core, HumanCaller, str, dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class OwnerAction:
    name: str
    label: str       # the Board's button
    done: str        # what happened, said after it applied
    help: str        # the CLI's help and the API's documentation
    states: tuple[TodoState, ...]
    fields: tuple[ActionField, ...]
    run: Run
    when: Callable[[dict[str, Any], datetime], bool] | None = None  # a finer rule than the state, when there is one

    def applies(self, todo: dict[str, Any], now: datetime | None = None) -> bool:
        if self.when is not None:
            return self.when(todo, now or datetime.now(UTC))
        return todo["state"] in self.states

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


SUMMARY = ActionField("summary", "text", "Recorded on the closing attempt (at most 2048 bytes; longer is cut).")
ARTIFACT = ActionField("artifact", "text", "An https URL or mcp://cairn/<id> reference the attempt produced.")
RESULT = ActionField("result", "json", "The todo's result, any JSON value.")
LEASE_TTL = ActionField("lease_ttl_seconds", "integer", "Lease length in seconds (default: the server's).")
RETRY = ActionField("retry", "boolean", "false makes it a dead letter now instead of scheduling a retry.")
PAYLOAD = ActionField("payload", "json", "The answer, any JSON value.", required=True)


def _claimant(via: str, human: HumanCaller) -> str:
    return f"{via}:{human.name}"


async def _claim(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    got = await todos.claim(core, human, todo_id, lease_ttl_seconds=f.get("lease_ttl_seconds"),
                            claimant=f.get("claimant"))
    return got.todo


async def _complete(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.complete(core, human, todo_id, result=f.get("result"), summary=f.get("summary"),
                                artifact=f.get("artifact"))


async def _fail(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.fail(core, human, todo_id, result=f.get("result"), summary=f.get("summary"),
                            artifact=f.get("artifact"), retry=f.get("retry"))


async def _release(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.release(core, human, todo_id, summary=f.get("summary"), artifact=f.get("artifact"))


async def _extend(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.heartbeat(core, human, todo_id, lease_ttl_seconds=f.get("lease_ttl_seconds"))


async def _retry(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.retry(core, human, todo_id)


async def _cancel(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.cancel(core, human, todo_id)


async def _input(core: Core, human: HumanCaller, todo_id: str, f: dict[str, Any]) -> dict[str, Any]:
    return await todos.provide_input(core, human, todo_id, payload=f.get("payload"),
                                     lease_ttl_seconds=f.get("lease_ttl_seconds"))


S = TodoState
_ACTIONS = (
    OwnerAction("claim", "Claim", "Claimed under a lease held by you.",
                "Claim a pending todo, a due retry or a lapsed lease yourself (the attempt is the owner's).",
                (S.PENDING, S.CLAIMED, S.FAILED), (LEASE_TTL,), _claim, when=_claimable),
    OwnerAction("complete", "Complete", "Completed.",
                "Complete a claimed todo (any holder; fence-exempt).",
                (S.CLAIMED,), (RESULT, SUMMARY, ARTIFACT), _complete),
    OwnerAction("fail", "Fail", "Failed.",
                "Fail the open attempt of a claimed todo (any holder; fence-exempt).",
                (S.CLAIMED,), (RESULT, SUMMARY, ARTIFACT, RETRY), _fail),
    OwnerAction("release", "Release", "Released: the todo is pending again and the attempt counter is unchanged.",
                "Release the lease on a claimed todo (any holder; fence-exempt).",
                (S.CLAIMED,), (SUMMARY, ARTIFACT), _release),
    OwnerAction("extend", "Extend lease", "Lease extended.",
                "Extend the lease of a claimed todo; an agent's attempt records it apart from its heartbeats.",
                (S.CLAIMED,), (LEASE_TTL,), _extend),
    OwnerAction("retry", "Retry now", "Re-queued with a fresh attempt budget; its history is kept.",
                "Re-queue a dead letter or parked retry now, with a fresh attempt budget (history kept).",
                (S.FAILED,), (), _retry),
    OwnerAction("cancel", "Cancel", "Canceled.",
                "Cancel a pending, claimed or input-required todo.",
                (S.PENDING, S.CLAIMED, S.INPUT_REQUIRED), (), _cancel),
    OwnerAction("input", "Provide input", "Input sent: the todo is claimed again under the same attempt.",
                "Answer an input-required todo; it resumes under a fresh lease with the same attempt.",
                (S.INPUT_REQUIRED,), (PAYLOAD, LEASE_TTL), _input),
)
del S

ACTIONS: dict[str, OwnerAction] = {a.name: a for a in _ACTIONS}


def available(todo: dict[str, Any], now: datetime | None = None) -> list[OwnerAction]:
    """The actions that apply to this todo as it stands, in the table's order."""
    return [a for a in _ACTIONS if a.applies(todo, now)]


async def perform(core: Core, human: HumanCaller, name: str, todo_id: str, *, via: str,
                  **fields: JsonValue) -> dict[str, Any]:
    """Run action `name` with `fields` (already decoded from the surface's wire format; the core
    checks them). `via` names the surface, for the claimant label of an owner's claim.

    Raises KeyError for an unknown action or field: surfaces offer only the table's names.
    """
    action = ACTIONS[name]
    unknown = set(fields) - set(action.field_names)
    if unknown:
        raise KeyError(sorted(unknown)[0])
    values = dict(fields)
    if name == "claim":
        values["claimant"] = _claimant(via, human)
    return await action.run(core, human, todo_id, values)
