"""The todo-detail view as an MCP App (the `ui://` resources of the MCP Apps extension).

With `SWITCHBOARD_MCP_APPS=1`, an endpoint granted `get_todo` offers one resource,
`ui://switchboard/todo-detail.html` (`text/html;profile=mcp-app`), and `get_todo`'s `tools/list` entry
links it (`_meta.ui.resourceUri`). A host that renders MCP Apps shows a get_todo result in that view:
the todo's fields, its result and the attempt history, newest first, with died attempts marked;
summaries and claimants as text, artifacts as links only when they are https URLs (opened through the
host). The HTML is built once from `apps_view/` with the official MCP Apps SDK and shipped with the
package. Its own CSP allows its one script and style by hash and no network source, and the resource
declares no CSP domains, so a host grants it no network access either.

The view holds no data: it draws the get_todo result the host hands it, so it shows exactly what
get_todo's scope lets the caller read.
"""

from __future__ import annotations

from functools import cache
from importlib import resources as package_files

from mcp import types

from ..core.models import EndpointCaller
from ..runtime import Runtime

MIME_TYPE = "text/html;profile=mcp-app"  # the MCP Apps extension's resource type
TODO_VIEW_URI = "ui://switchboard/todo-detail.html"
VIEWED_TOOL = "get_todo"
# No connectDomains or resourceDomains: the host's CSP for the view then allows no network source.
RESOURCE_META = {"ui": {"csp": {}, "prefersBorder": True}}
TOOL_META = {"ui": {"resourceUri": TODO_VIEW_URI}}

INSTRUCTIONS = (f"MCP Apps: get_todo results can be shown in the view {TODO_VIEW_URI} (read-only; change "
                "state with the tools).")


@cache
def todo_view_html() -> str:
    return package_files.files(__package__).joinpath("apps_todo_detail.html").read_text("utf-8")


class AppResources:
    """The ResourceProvider (mcp/resources.py) for the MCP App view, and the link on get_todo."""

    async def list_resources(self, caller: EndpointCaller) -> list:
        if VIEWED_TOOL not in caller.verbs:
            return []
        return [types.Resource(uri=TODO_VIEW_URI, name="todo detail (MCP App)", title="Todo detail",
                               mime_type=MIME_TYPE, _meta=RESOURCE_META,
                               description="The view get_todo results are shown in: the todo and its "
                                           "attempt history.")]

    def list_templates(self, caller: EndpointCaller) -> list:
        return []

    async def read(self, caller: EndpointCaller, uri: str) -> tuple[str, str] | None:
        if uri != TODO_VIEW_URI or VIEWED_TOOL not in caller.verbs:
            return None
        return MIME_TYPE, todo_view_html()

    def instructions(self) -> str | None:
        return INSTRUCTIONS

    def decorate_tools(self, listing: list[dict]) -> list[dict]:
        """get_todo's tools/list entry with the link to its view; the shared entries stay untouched."""
        return [{**tool, "_meta": {**tool.get("_meta", {}), **TOOL_META}} if tool["name"] == VIEWED_TOOL else tool
                for tool in listing]


def provider(runtime: Runtime) -> AppResources | None:
    """The provider when `SWITCHBOARD_MCP_APPS` is on; None when off."""
    if not runtime.settings.mcp_apps:
        return None
    todo_view_html()  # read at start: a missing file stops the app instead of failing the first read
    return AppResources()
