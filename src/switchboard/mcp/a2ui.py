"""A2UI views of the queue for MCP hosts that render them (SYSTEM.md section 10a, SPEC-0034 REQ-13).

With `SWITCHBOARD_A2UI=1` every endpoint's MCP server offers two read-only resources of type
`application/a2ui+json`:

- `switchboard://queue/{name}/a2ui`: the endpoint's pending todos in one granted queue, one card each
  (title, age, attempt counter, last outcome);
- `switchboard://todo/{id}/a2ui`: one todo's fields, result and attempt list (newest first; a died
  attempt says `died: no report` and shows its last heartbeat).

The documents themselves (A2UI v0.9 messages for the basic catalog, built with the official builder)
come from `a2ui_documents.py`, imported on first use so that a server with the flag off never loads the
A2UI packages.

Reads are scoped exactly as `get_todo` and `list_todos`, through the same core functions: a foreign, an
unknown and a malformed id are the same `NotFound`. Attempt entries come in the REQ-7 shape, which has
no `claimer_session` and no `lease_token_hash`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import unquote

from mcp import types

from ..core import inputs, todos
from ..core.errors import Invalid, NotFound
from ..core.models import EndpointCaller
from ..runtime import Runtime

MIME_TYPE = "application/a2ui+json"
QUEUE_TEMPLATE = "switchboard://queue/{name}/a2ui"
TODO_TEMPLATE = "switchboard://todo/{id}/a2ui"

QUEUE_CARDS_MAX = 50  # pending todos shown on one queue surface
TODO_RESOURCES_LISTED = 20  # most recent todos offered in resources/list
TODO_ATTEMPTS_SHOWN = inputs.ATTEMPTS_LIMIT_MAX

# `?w=N` is a width hint some hosts append; it is accepted and ignored.
_URI = re.compile(r"^switchboard://(queue|todo)/([^/?#]+)/a2ui(?:\?w=\d{1,5})?$")

INSTRUCTIONS = ("A2UI views (application/a2ui+json, read-only): read switchboard://queue/{name}/a2ui for a "
                "granted queue's pending todos and switchboard://todo/{id}/a2ui for one todo with its "
                "attempt history. Change state with the tools, never through these views.")


# ---------------------------------------------------------------------------------- reads (scoped)

async def read_todo(core, caller: EndpointCaller, todo_id: str) -> list[dict]:
    """The todo document, read through `todos.get` (get_todo's scope). Foreign or unknown: NotFound."""
    if "get_todo" not in caller.verbs:
        raise NotFound(op="a2ui_todo", todo_id=todo_id)
    try:
        detail = await todos.get(core, caller, todo_id, attempts_limit=TODO_ATTEMPTS_SHOWN)
    except Invalid:  # an id no todo can have reads as an unknown one
        raise NotFound(op="a2ui_todo", todo_id=todo_id) from None
    from .a2ui_documents import todo_document

    return todo_document(detail)


async def read_queue(core, caller: EndpointCaller, name: str, *, now: datetime | None = None) -> list[dict]:
    """The queue document: the caller's pending todos in `name`, oldest first, each with its newest attempt.

    A queue outside the caller's grant is NotFound, like an unknown one."""
    if "list_todos" not in caller.verbs or name not in caller.queues:
        raise NotFound("queue not found", op="a2ui_queue")
    rows = await todos.list_for_endpoint(core, caller, queue=name, state="pending", limit=inputs.LIST_LIMIT_MAX)
    rows.sort(key=lambda r: (r["created_at"], r["id"]))
    cards = []
    for row in rows[:QUEUE_CARDS_MAX]:
        try:
            cards.append(await todos.get(core, caller, row["id"], attempts_limit=1))
        except NotFound:  # deleted between the list and the read
            continue
    from .a2ui_documents import queue_document

    return queue_document(name, cards, now or datetime.now(UTC), more=len(rows) > QUEUE_CARDS_MAX)


# ---------------------------------------------------------------------------------------- provider

class A2uiResources:
    """The ResourceProvider (mcp/resources.py) for the two A2UI resource kinds."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @property
    def _enabled(self) -> bool:
        return bool(self._runtime.settings.a2ui)

    async def list_resources(self, caller: EndpointCaller) -> list:
        if not self._enabled:
            return []
        out = []
        if "list_todos" in caller.verbs:
            for name in caller.queues:
                out.append(types.Resource(
                    uri=QUEUE_TEMPLATE.format(name=name), name=f"queue {name} (A2UI)", mime_type=MIME_TYPE,
                    description=f"Pending todos in queue {name}, as cards: title, age, attempt counter, "
                                "last outcome."))
            recent = await todos.list_for_endpoint(self._runtime.core, caller, limit=TODO_RESOURCES_LISTED)
            for todo in recent:
                out.append(types.Resource(
                    uri=TODO_TEMPLATE.format(id=todo["id"]), name=f"todo {todo['id']} (A2UI)",
                    title=todo["title"], mime_type=MIME_TYPE,
                    description="The todo's fields, result and attempt history."))
        return out

    def list_templates(self, caller: EndpointCaller) -> list:
        if not self._enabled:
            return []
        out = []
        if "list_todos" in caller.verbs:
            out.append(types.ResourceTemplate(
                uri_template=QUEUE_TEMPLATE, name="queue (A2UI)", mime_type=MIME_TYPE,
                description="Pending todos in a granted queue, as cards."))
        if "get_todo" in caller.verbs:
            out.append(types.ResourceTemplate(
                uri_template=TODO_TEMPLATE, name="todo (A2UI)", mime_type=MIME_TYPE,
                description="One todo's fields, result and attempt history, newest attempt first."))
        return out

    async def read(self, caller: EndpointCaller, uri: str) -> tuple[str, str] | None:
        if not self._enabled:
            return None
        match = _URI.match(uri)
        if match is None:
            return None
        kind, key = match.group(1), unquote(match.group(2))
        if kind == "todo":
            messages = await read_todo(self._runtime.core, caller, key)
        else:
            messages = await read_queue(self._runtime.core, caller, key)
        from .a2ui_documents import dumps

        return MIME_TYPE, dumps(messages)

    def instructions(self) -> str | None:
        return INSTRUCTIONS if self._enabled else None


def provider(runtime: Runtime) -> A2uiResources | None:
    """The resource provider for the MCP surface when `SWITCHBOARD_A2UI` is on; None when off."""
    if not runtime.settings.a2ui:
        return None
    from . import a2ui_documents  # noqa: F401  (load the A2UI packages at start, not on the first read)

    return A2uiResources(runtime)
