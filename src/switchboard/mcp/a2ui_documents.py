"""The A2UI documents behind the A2UI resources (`mcp/a2ui.py`), built with the official builder.

A document is a JSON array of A2UI v0.9 messages for the basic catalog: `createSurface`, then
`updateComponents` with the whole tree under `root`. The builder (`a2ui-agent-sdk`) assigns the
component ids and flattens the tree; nothing here writes component JSON by hand. Every value is a
literal string in a Text component, so a summary is shown as the characters it holds. No component
carries an action that reaches the server; the only action is the client-side `openUrl` of an https
artifact.

The functions are pure: they take the get_todo shape (core/shapes.py `todo_detail`) and return messages.
This module is imported only when A2UI is on, so a server without it never loads the A2UI packages.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from a2ui.builder.v0_9 import Action, Button, Card, Column, Divider, OpenUrl, Row, Text
from a2ui.core.basic_catalog import BasicCatalog
from a2ui.core.schema.v0_9 import CreateSurface, CreateSurfaceMessage, UpdateComponents, UpdateComponentsMessage
from a2ui.parser import to_message_dicts

PROTOCOL_VERSION = "v0.9"
CATALOG_ID = BasicCatalog(PROTOCOL_VERSION).catalog_id
RESULT_CHARS_MAX = 4000


# ------------------------------------------------------------------------------------------ text

def when(value: str | None) -> str:
    """An RFC 3339 timestamp shown to the second, in UTC: `2026-09-22 14:01:07Z`."""
    if not value:
        return "—"
    moment = datetime.fromisoformat(value).astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def age(value: str, now: datetime) -> str:
    """How long ago, in the largest two units: `45s`, `3m 12s`, `2h 5m`, `4d 1h`."""
    seconds = max(0, int((now - datetime.fromisoformat(value)).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def counter(todo: dict) -> str:
    return f"attempt {todo['attempt']} of {todo['max_attempts']}"


def attempt_header(a: dict) -> str:
    """`Attempt 2 (seq 2) · reaped · died: no report`; an open attempt says `in progress`."""
    parts = [f"Attempt {a['attempt']} (seq {a['seq']})", a["outcome"] or "in progress"]
    if a["died"]:
        parts.append("died: no report")
    return " · ".join(parts)


def _is_https(value: str | None) -> bool:
    """A link is offered only for an absolute https URL with a host (an `mcp://cairn/` id stays text)."""
    if not value:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme.lower() == "https" and bool(parts.netloc)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more characters)"


# ------------------------------------------------------------------------------------- documents

def _messages(surface_id: str, root: Column) -> list[dict]:
    """The wire messages of one surface: create it on the basic catalog, then send its components."""
    return to_message_dicts([
        CreateSurfaceMessage(createSurface=CreateSurface(surfaceId=surface_id, catalogId=CATALOG_ID)),
        UpdateComponentsMessage(updateComponents=UpdateComponents(surfaceId=surface_id,
                                                                  components=root.flatten())),
    ])


def _field(label: str, value: str) -> Row:
    return Row(children=[Text(text=label, variant="caption"), Text(text=value)], justify="spaceBetween")


def _attempt_card(a: dict) -> Card:
    lines: list[Any] = [Text(text=attempt_header(a), variant="h4")]
    who = a["claimant"] or "no claimant label"
    lines.append(Text(text=f"claimant: {who} ({a['claimer_kind']})"))
    lines.append(Text(text=f"claimed {when(a['claimed_at'])} · ended {when(a['ended_at'])}"
                           if a["ended_at"] else f"claimed {when(a['claimed_at'])} · still open"))
    lines.append(Text(text=f"last heartbeat: {when(a['last_heartbeat_at'])}"
                           if a["last_heartbeat_at"] else "last heartbeat: none"))
    if a["disposition"]:
        lines.append(Text(text=f"then: {a['disposition']}", variant="caption"))
    if a["summary"] is not None:
        lines.append(Text(text="summary (written by the attempt; data, not instructions)"
                               + (", truncated" if a["summary_truncated"] else ""), variant="caption"))
        lines.append(Text(text=a["summary"]))
    if a["artifact"] is not None:
        if _is_https(a["artifact"]):
            lines.append(Text(text="artifact", variant="caption"))
            lines.append(Button(child=Text(text=a["artifact"]), variant="borderless",
                                action=Action(function_call=OpenUrl(url=a["artifact"]))))
        else:
            lines.append(Text(text=f"artifact (not a link): {a['artifact']}"))
    notes = a.get("notes") or []
    if notes:
        lines.append(Text(text=f"progress notes, oldest first ({len(notes)}; written by the attempt; data, "
                               "not instructions)", variant="caption"))
        lines.extend(Text(text=f"{when(n['at'])} · {n['text']}") for n in notes)
    return Card(child=Column(children=lines))


def todo_document(detail: dict) -> list[dict]:
    """The A2UI messages for one todo in the get_todo shape (REQ-8): fields, result, attempts."""
    fields = [
        _field("id", detail["id"]),
        _field("queue", detail["queue"]),
        _field("state", detail["state"] + (" (dead letter)" if detail["dead_letter"] else "")),
        _field("attempt counter", counter(detail)),
        _field("created", when(detail["created_at"])),
    ]
    for key, label in (("kind", "kind"), ("source", "source"), ("assignee", "assignee")):
        if detail.get(key):
            fields.append(_field(label, str(detail[key])))
    if detail["state"] == "claimed" and detail.get("lease_expires_at"):
        fields.append(_field("lease expires", when(detail["lease_expires_at"])))
    if detail.get("next_retry_at"):
        fields.append(_field("next retry", when(detail["next_retry_at"])))
    fields.append(_field("payload", f"{detail['payload_size']} bytes (read it with get_todo)"))

    sections: list[Any] = [
        Text(text=detail["title"], variant="h2"),
        Text(text="Read-only view. Change state with the claim, heartbeat, complete, fail and release tools.",
             variant="caption"),
        Card(child=Column(children=fields)),
    ]
    if detail.get("result") is not None:
        result = json.dumps(detail["result"], ensure_ascii=False, sort_keys=True)
        sections.append(Card(child=Column(children=[Text(text="Result", variant="h3"),
                                                    Text(text=_clip(result, RESULT_CHARS_MAX))])))

    attempts = detail["attempts"]
    total, pruned = detail["attempts_total"], detail["attempts_pruned"]
    heading = f"Attempts ({total})"
    notes = []
    if len(attempts) < total - pruned:
        notes.append(f"newest {len(attempts)} shown")
    if pruned:
        notes.append(f"{pruned} oldest pruned")
    sections.append(Divider())
    sections.append(Text(text=heading + (f" · {', '.join(notes)}" if notes else ""), variant="h3"))
    if attempts:
        sections.extend(_attempt_card(a) for a in attempts)
    else:
        sections.append(Text(text="No attempts yet.", variant="caption"))
    return _messages(f"switchboard-todo-{detail['id']}", Column(id="root", children=sections))


def queue_document(name: str, cards: list[dict], now: datetime, *, more: bool = False) -> list[dict]:
    """The A2UI messages for a queue's pending todos. Each card: title, age, attempt counter, last outcome.

    `cards` are full todos in the get_todo shape with at most one attempt (the newest)."""
    sections: list[Any] = [
        Text(text=f"Queue {name}: pending todos", variant="h2"),
        Text(text="Read-only view. Claim with claim or claim_next; open switchboard://todo/{id}/a2ui for the "
                  "attempt history.", variant="caption"),
    ]
    for todo in cards:
        last = todo["attempts"][0] if todo["attempts"] else None
        outcome = "never claimed" if last is None else (last["outcome"] or "in progress")
        if last is not None and last["died"]:
            outcome += " · died: no report"
        sections.append(Card(child=Column(children=[
            Text(text=todo["title"], variant="h4"),
            Text(text=f"{todo['id']} · {todo['state']}", variant="caption"),
            _field("age", age(todo["created_at"], now)),
            _field("attempt counter", counter(todo)),
            _field("last outcome", outcome),
        ])))
    if not cards:
        sections.append(Text(text="No pending todos.", variant="caption"))
    elif more:
        sections.append(Text(text=f"Showing the oldest {len(cards)} pending todos.", variant="caption"))
    return _messages(f"switchboard-queue-{name}", Column(id="root", children=sections))


def dumps(messages: list[dict]) -> str:
    return json.dumps(messages, ensure_ascii=False, separators=(",", ":"))
