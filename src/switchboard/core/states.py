"""The names of a todo's states and of how its attempts end, written out once.

Each member says who moves a todo (or an attempt) into it and out of it. The migrations' CHECK
constraints hold the same values; tests/test_states.py compares them with `pg_constraint`.
Everything else (the MCP schemas, the gauges, the Board's filters, the CLI's help, the invariant
checker) reads these classes.
"""

from __future__ import annotations

from enum import StrEnum


class TodoState(StrEnum):
    """`todos.state`."""

    # In: create (producer: API, CLI, Board), release, a manual retry, the reaper requeuing an
    # expired lease below the cap. Out: claim / claim_next (an agent or the owner) -> claimed;
    # cancel (the owner) -> canceled; endpoint revocation -> failed.
    PENDING = "pending"
    # In: claim / claim_next, answering an input request. Out: complete -> done; fail -> failed;
    # release -> pending; request_input -> input-required; cancel -> canceled; the lease lapsing
    # (a takeover claim, or the reaper) -> pending / failed.
    CLAIMED = "claimed"
    # In: request_input by the holder (the lease clock stops). Out: the owner's answer -> claimed;
    # cancel -> canceled; endpoint revocation -> failed.
    INPUT_REQUIRED = "input-required"
    # In: complete by the holder. Out: none (terminal; retention deletes it eventually).
    DONE = "done"
    # In: fail by the holder, the reaper at the attempt cap, endpoint revocation. A parked retry
    # (next_retry_at set) leaves by claim / claim_next once due, or a manual retry -> pending;
    # a dead letter (no next_retry_at) leaves only by a manual retry.
    FAILED = "failed"
    # In: cancel by the owner. Out: none (terminal).
    CANCELED = "canceled"


class AttemptOutcome(StrEnum):
    """`todo_attempts.outcome`: how the lease of an attempt ended (null while it is open)."""

    COMPLETED = "completed"          # the holder (or the owner) completed it
    FAILED = "failed"                # the holder (or the owner) failed it
    RELEASED = "released"            # the holder (or the owner) gave the lease back
    LEASE_EXPIRED = "lease_expired"  # another claim took over a lapsed lease
    REAPED = "reaped"                # the sweep's reaper found the lease lapsed
    CANCELED = "canceled"            # the owner canceled the todo
    REVOKED = "revoked"              # the owner revoked the endpoint


class Disposition(StrEnum):
    """`todo_attempts.disposition`: what became of the todo when the attempt ended."""

    DONE = "done"                        # todo -> done
    RETRY_SCHEDULED = "retry_scheduled"  # todo -> failed with next_retry_at (a parked retry)
    DEAD_LETTERED = "dead_lettered"      # todo -> failed without next_retry_at
    REQUEUED = "requeued"                # todo -> pending
    CANCELED = "canceled"                # todo -> canceled


# Views the surfaces share, derived from the members above.
TODO_STATES: tuple[str, ...] = tuple(s.value for s in TodoState)
LIVE_STATES: tuple[TodoState, ...] = (TodoState.PENDING, TodoState.CLAIMED, TodoState.INPUT_REQUIRED)
HELD_STATES: tuple[TodoState, ...] = (TodoState.CLAIMED, TodoState.INPUT_REQUIRED)  # an attempt is open
TERMINAL_STATES: tuple[TodoState, ...] = (TodoState.DONE, TodoState.CANCELED)
DIED_OUTCOMES: tuple[AttemptOutcome, ...] = (AttemptOutcome.LEASE_EXPIRED, AttemptOutcome.REAPED)
# The counters a gauge or a queue summary reports: the live states plus the two kinds of failed.
RETRY_SCHEDULED = "retry_scheduled"
DEAD_LETTER = "dead_letter"
GAUGE_STATES: tuple[str, ...] = (*(s.value for s in LIVE_STATES), RETRY_SCHEDULED, DEAD_LETTER)
STATE_LABELS: dict[str, str] = {s.value: s.value.replace("-", " ") for s in TodoState}


def sql_list(values: tuple[str, ...] | list[str]) -> str:
    """`'a', 'b'` for an IN (...) list in a static statement (the values are the members above)."""
    return ", ".join(f"'{v}'" for v in values)
