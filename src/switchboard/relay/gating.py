"""Which failure stops a task (the seed's gating table).

| gate                   | when                                                                 |
| ---------------------- | -------------------------------------------------------------------- |
| `max_attempts_exceeded`| the attempt was the last of the todo's budget (the server dead-letters) |
| `repeated_failure`     | this failure has the same `error_category` as the previous one        |
| `quality_gate_blocked` | the gate command refused a success                                     |
| `user_blocked`         | `relay block TASK`                                                     |

A gate ends the attempt with `fail(retry=false)`, so the todo becomes a dead letter on the server and the
reason travels in the closing attempt's summary (`"gate": ...`). "In a row" counts reported attempts of the
current budget only: released and died attempts are not verdicts on the work and are skipped, and a manual
retry (`relay unblock`) starts a new row.
"""

from __future__ import annotations

from .receipts import Verdict, parse_summary

GATES = ("max_attempts_exceeded", "repeated_failure", "quality_gate_blocked", "user_blocked")
NOT_VERDICTS = ("released", "lease_expired", "reaped", "migrated")


def current_budget(prior_attempts: list[dict], attempt_number: int) -> list[dict]:
    """The prior attempts (newest first) made since the todo's attempt counter last started from zero.

    Within one budget every claim raises the counter, so going back in time the numbers fall; a number
    that does not fall marks an earlier budget (before a manual retry).
    """
    out = []
    last = attempt_number
    for a in prior_attempts:
        number = a.get("attempt")
        if not isinstance(number, int) or number >= last:
            break
        out.append(a)
        last = number
    return out


def previous_failure(prior_attempts: list[dict], attempt_number: int) -> dict | None:
    """The receipt of the latest failed attempt of this budget, skipping attempts that were not verdicts."""
    for a in current_budget(prior_attempts, attempt_number):
        if a.get("outcome") in NOT_VERDICTS or a.get("died"):
            continue
        if a.get("outcome") == "failed":
            return parse_summary(a.get("summary")) or {}
        return None
    return None


def decide_gate(verdict: Verdict, *, attempt_number: int, max_attempts: int, prior_attempts: list[dict],
                quality_gate_refused: bool = False) -> str | None:
    """The gate this attempt's verdict triggers, or None when the task may simply be retried (or is done)."""
    if verdict.ok:
        return None
    if quality_gate_refused:
        return "quality_gate_blocked"
    previous = previous_failure(prior_attempts, attempt_number)
    if previous is not None and verdict.category and previous.get("error_category") == verdict.category:
        return "repeated_failure"
    if attempt_number >= max_attempts:
        return "max_attempts_exceeded"
    return None


def gate_of_dead_letter(attempts_newest_first: list[dict]) -> tuple[str, str | None, str | None]:
    """(reason, gated_at, detail) of a dead-lettered todo, read back from its history."""
    for a in attempts_newest_first:
        if a.get("ended_at") is None:
            continue
        receipt = parse_summary(a.get("summary")) or {}
        reason = receipt.get("gate")
        if reason in GATES:
            detail = receipt.get("error_summary") or receipt.get("note")
            return reason, a.get("ended_at"), detail
        outcome = a.get("outcome")
        if outcome == "revoked":
            return "max_attempts_exceeded", a.get("ended_at"), "the endpoint was revoked"
        if a.get("died"):
            return "max_attempts_exceeded", a.get("ended_at"), "the last attempt died (no report)"
        return "max_attempts_exceeded", a.get("ended_at"), receipt.get("error_summary")
    return "max_attempts_exceeded", None, None
