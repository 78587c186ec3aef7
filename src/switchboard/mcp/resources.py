"""MCP resources: the queue resource every endpoint has, and pluggable providers for more.

The MCP server (`server.py`) is built with its list of providers (the composition root in
`web/app.py` passes A2UI's when the flag is on).

`resources/list`, `resources/templates/list` and `resources/read` ask every provider in order; a read
that no provider answers is the same not-found error for every unknown or foreign URI.
"""

from __future__ import annotations

from typing import Protocol

from ..core.models import EndpointCaller

QUEUE_URI = "switchboard://queues/{queue}"  # live counts of one queue; the doorbell's subscription key
_QUEUE_PREFIX = QUEUE_URI.split("{", 1)[0]


def queue_uri(queue: str) -> str:
    return QUEUE_URI.format(queue=queue)


def queue_of(uri: str) -> str | None:
    """The queue a queue-resource URI names, or None for any other URI."""
    return uri[len(_QUEUE_PREFIX):] if uri.startswith(_QUEUE_PREFIX) else None


class ResourceProvider(Protocol):
    async def list_resources(self, caller: EndpointCaller) -> list:  # list[mcp types.Resource]
        ...

    def list_templates(self, caller: EndpointCaller) -> list:  # list[mcp types.ResourceTemplate]
        ...

    async def read(self, caller: EndpointCaller, uri: str) -> tuple[str, str] | None:
        """(mime_type, text) when this provider owns `uri`; None when the URI is not its kind.

        Raise `switchboard.core.errors.NotFound` for a URI of its kind that names nothing the caller
        may see (unknown or foreign alike)."""
        ...

    def instructions(self) -> str | None:
        """A line for the session instructions, or None."""
        ...
