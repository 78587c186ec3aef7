"""Pluggable MCP resources. The MCP server component publishes a list as
`ctx.shared["resource_providers"]`; other components (A2UI) append a provider at construction time.

`resources/list`, `resources/templates/list` and `resources/read` ask every provider in order; a read
that no provider answers is the same not-found error for every unknown or foreign URI.
"""

from __future__ import annotations

from typing import Protocol

from ..core.models import EndpointCaller


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
