"""The wire shapes of a todo and an attempt, shared by every surface (reference: core §8.2, §8.3).

Attempt entries never carry `lease_token_hash`, `claimer_session` or `claimer_endpoint_id`.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from typing import Any

from .states import DIED_OUTCOMES, TodoState

ATTEMPT_FIELDS = ("seq", "attempt", "claimer_kind", "claimant", "claimed_at", "last_heartbeat_at",
                  "ended_at", "outcome", "disposition", "died", "summary", "summary_truncated", "artifact",
                  "last_note")
# get_todo's attempts add every kept note; a claim's prior_attempts carry only the last one.
DETAIL_ATTEMPT_FIELDS = ATTEMPT_FIELDS + ("notes",)
# The columns of an attempt row that `attempt` reads (`died` and `last_note` it derives).
ATTEMPT_ROW_FIELDS = tuple(f for f in ATTEMPT_FIELDS if f not in ("died", "last_note")) + ("notes",)


def ts(value: Any) -> str | None:
    """RFC 3339 in UTC with microseconds, `Z` suffix. Values read inside jsonb arrive as strings."""
    if value is None:
        return None
    return _rfc3339(value)


@functools.lru_cache(maxsize=4096)
def _rfc3339(value: datetime | str) -> str:
    # Cached: the rows of one statement share their now() (a batch's claims, leases and closes, a
    # bulk push's creations), and each row is shaped more than once; about a tenth of the batch
    # path's Python went to formatting the same instants again. Equal datetimes are the same
    # instant whatever their zone, and the text is in UTC, so the key is sound.
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def is_dead_letter(row: dict[str, Any]) -> bool:
    return row["state"] == TodoState.FAILED and row.get("next_retry_at") is None


def payload_size(row: dict[str, Any]) -> int:
    if row.get("payload") is None:
        return 0
    return len(json.dumps(row["payload"], separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def compact(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": row["id"], "queue": row["queue"]}
    if row.get("source"):
        out["source"] = row["source"]
    if row.get("kind"):
        out["kind"] = row["kind"]
    out["title"] = row["title"]
    out["state"] = row["state"]
    if row.get("owner"):
        out["owner"] = row["owner"]
    if row.get("assignee"):
        out["assignee"] = row["assignee"]
    out["attempt"] = row["attempt"]
    out["max_attempts"] = row["max_attempts"]
    if row.get("lease_expires_at") is not None:
        out["lease_expires_at"] = ts(row["lease_expires_at"])
    out["next_retry_at"] = ts(row.get("next_retry_at"))
    out["dead_letter"] = is_dead_letter(row)
    out["created_at"] = ts(row["created_at"])
    out["payload_size"] = payload_size(row)
    return out


FULL_ONLY = ("payload", "input_request", "input")  # what `full` adds to `compact`


def full(row: dict[str, Any]) -> dict[str, Any]:
    out = compact(row)
    if row.get("payload") is not None:
        out["payload"] = row["payload"]
    if row.get("input_request") is not None:
        out["input_request"] = row["input_request"]
    if row.get("input") is not None:
        out["input"] = row["input"]
    return out


def compact_of(full_shape: dict[str, Any]) -> dict[str, Any]:
    """The compact shape inside a full one (a copy)."""
    out = dict(full_shape)  # copied in C, then the few full-only keys dropped
    for k in FULL_ONLY:
        out.pop(k, None)
    return out


def attempt(a: dict[str, Any]) -> dict[str, Any]:
    """The REQ-7 attempt entry: absent values are null, never omitted."""
    return {
        "seq": a["seq"],
        "attempt": a["attempt"],
        "claimer_kind": a["claimer_kind"],
        "claimant": a.get("claimant"),
        "claimed_at": ts(a.get("claimed_at")),
        "last_heartbeat_at": ts(a.get("last_heartbeat_at")),
        "ended_at": ts(a.get("ended_at")),
        "outcome": a.get("outcome"),
        "disposition": a.get("disposition"),
        "died": a.get("outcome") in DIED_OUTCOMES,
        "summary": a.get("summary"),
        "summary_truncated": bool(a.get("summary_truncated")),
        "artifact": a.get("artifact"),
        "last_note": last_note(a),
    }


def notes(a: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempt's progress notes, oldest first: `{"at", "text"}` each."""
    return [{"at": ts(n.get("at")), "text": n.get("text")} for n in a.get("notes") or []]


def last_note(a: dict[str, Any]) -> dict[str, Any] | None:
    """The newest note of the attempt, or null: what the next claimer learns of a died attempt."""
    kept = a.get("notes") or []
    return {"at": ts(kept[-1].get("at")), "text": kept[-1].get("text")} if kept else None


def detail_attempt(a: dict[str, Any]) -> dict[str, Any]:
    """An attempt of get_todo: the REQ-7 entry with every kept note."""
    out = attempt(a)
    out["notes"] = notes(a)
    return out


def owner_attempt(a: dict[str, Any]) -> dict[str, Any]:
    """The owning human's view adds the lease expiry of the attempt and when the owner last extended
    it (apart from the holder's heartbeats); still no secrets or sessions."""
    out = detail_attempt(a)
    out["lease_expires_at"] = ts(a.get("lease_expires_at"))
    out["owner_extended_at"] = ts(a.get("owner_extended_at"))
    return out


def todo_detail(row: dict[str, Any], attempts: list[dict[str, Any]], *, owner_view: bool = False) -> dict[str, Any]:
    """The get_todo shape (REQ-8): full todo, result, dead_letter, attempts newest first, counters."""
    out = full(row)
    out["result"] = row.get("result")
    out["next_retry_at"] = ts(row.get("next_retry_at"))
    out["dead_letter"] = is_dead_letter(row)
    shape = owner_attempt if owner_view else detail_attempt
    out["attempts"] = [shape(a) for a in attempts]
    out["attempts_total"] = row["attempts_total"]
    out["attempts_pruned"] = row["attempts_pruned"]
    if owner_view:
        out["endpoint"] = row.get("endpoint_slug")
        out["team"] = row.get("team_slug")  # a team todo's team (its endpoint is null), as the lists say
        out["updated_at"] = ts(row.get("updated_at"))
        out["claimed_at"] = ts(row.get("claimed_at"))
        out["completed_at"] = ts(row.get("completed_at"))
    return out
