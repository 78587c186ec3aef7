"""Producing todos on behalf of a human (CLI, human API, Board): the endpoint must be theirs and
active, and the queue one of its granted queues."""

from __future__ import annotations

from . import inputs, todos
from .endpoints import get_for_human
from .errors import Invalid
from .inputs import JsonValue
from .models import Core, HumanCaller


async def push(core: Core, human: HumanCaller, slug: str, *, title: str, queue: str | None = None,
               payload: JsonValue = None, kind: str | None = None, key: str | None = None,
               max_attempts: int | None = None, assignee: str | None = None,
               source: str = "operator") -> tuple[dict, bool]:
    endpoint = await get_for_human(core, human, slug)
    if endpoint["state"] != "active":
        raise Invalid("endpoint is revoked", argument="endpoint")
    queues = list(endpoint["scope_queues"])
    if queue is None or queue == "":
        if len(queues) != 1:
            raise Invalid(f"queue is required: this endpoint has queues {', '.join(queues)}", argument="queue")
        queue = queues[0]
    queue = inputs.queue(queue)
    if queue not in queues:
        raise Invalid(f"queue {queue} is not one of this endpoint's queues ({', '.join(queues)})",
                      argument="queue")
    return await todos.create(core, endpoint_id=endpoint["id"], queue=queue, title=title, payload=payload,
                              kind=kind, source=source, key=key, max_attempts=max_attempts, assignee=assignee)
