"""The core's errors. Surfaces map `code` to their own wire form (MCP tool error, HTTP status, exit 1).

Messages never carry a token, summary or artifact. `op` and `todo_id` wrap the error for logs (REQ-19).
"""

from __future__ import annotations

from typing import Any

from ..db.pool import DatabaseTimeout


class CoreError(Exception):
    code = "internal"
    default_message = "internal error"

    def __init__(self, message: str | None = None, *, argument: str | None = None,
                 op: str | None = None, todo_id: str | None = None) -> None:
        self.message = message or self.default_message
        self.argument = argument
        self.op = op
        self.todo_id = todo_id
        super().__init__(self.message)

    def __str__(self) -> str:
        where = " ".join(p for p in (self.op, self.todo_id) if p)
        return f"{where}: {self.code}: {self.message}" if where else f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.argument is not None:
            body["argument"] = self.argument
        return body


class NotFound(CoreError):
    code = "not_found"
    default_message = "todo not found"


class Conflict(CoreError):
    code = "conflict"
    default_message = "todo not in the expected state or lease not held"


class Forbidden(CoreError):
    code = "forbidden"
    default_message = "not in this endpoint's scope"


class Invalid(CoreError):
    code = "invalid"
    default_message = "invalid argument"


class Unavailable(CoreError):
    """The database did not answer in time. The call may still take effect once the database runs
    again; retry it (a retried `complete` may then answer `conflict`, a lost claim lapses with its lease)."""

    code = "unavailable"
    default_message = "database did not answer in time; retry"


class DatabaseUnavailable(Unavailable, DatabaseTimeout):
    """What the pool raises when the database did not answer in time (the runtime hands it to
    `db.pool.open_pool`): the core error `unavailable` and a psycopg `OperationalError` at once."""


class Unauthorized(CoreError):
    """The calling endpoint was revoked or has expired: refused by the statement itself (the
    `endpoint_live` fragment, migration 0008), whatever a process's credential cache still held."""

    code = "unauthorized"
    default_message = "this endpoint's credential was revoked or has expired"


class Deferred(CoreError):
    """Admission control refused a claim on this queue for now (SPEC-0030, core/admission.py): the
    body says which queue, why (`window_exhausted`, `in_flight_full`, `paused`,
    `admission_unavailable`), how many of its todos wait (`pending`, null when unknown) and when it may
    admit again (null when no moment is known): the facts of a deferral entry of claim_next."""

    code = "deferred"
    default_message = "admission control defers claims on this queue"

    def __init__(self, message: str | None = None, *, queue: str, reason: str,
                 next_eligible_at: str | None = None, pending: int | None = None, op: str | None = None,
                 todo_id: str | None = None) -> None:
        super().__init__(message or f"queue {queue} is deferred: {reason}", op=op, todo_id=todo_id)
        self.queue = queue
        self.reason = reason
        self.next_eligible_at = next_eligible_at
        self.pending = pending

    def to_dict(self) -> dict[str, Any]:
        body = super().to_dict()
        body.update(queue=self.queue, reason=self.reason, pending=self.pending,
                    next_eligible_at=self.next_eligible_at)
        return body
