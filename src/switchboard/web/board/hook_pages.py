"""Webhooks: the Board's screens for notify hooks (docs/events.md, SYSTEM.md section 10).

One list of every hook the human sees (their endpoints' and their teams'), a form that adds one to an
endpoint or to a team they manage and shows its signing secret once, Enable and Remove where they may,
and one hook's delivery log with every attempt.

Every POST carries the CSRF token (`human_post`). A hook the human does not see answers exactly like an
unknown id (the shared not-found body); a team's hook that a plain member sees is theirs to read, not
to change (403, nothing changed). Bad input re-renders the form with the field named and nothing stored.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import endpoints, hooks, teams
from ...core.errors import Conflict, Forbidden, Invalid, NotFound
from .kit import NO_STORE, Board, human_page, human_post

log = logging.getLogger("switchboard.board")

NOTICES = {
    "removed": "The hook is removed, with its queued notifications and its delivery log.",
    "enabled": "The hook is enabled again; its failure count starts from zero.",
}


async def _owners(board: Board, who) -> list[dict[str, str]]:
    """Where the human may add a hook: each active endpoint of theirs, each team they manage."""
    eps = [e for e in await endpoints.list_for_human(board.core, who[0]) if e["state"] == "active"]
    mine = [t for t in await teams.list_for_human(board.core, who[0]) if t["role"] in teams.MANAGERS]
    return ([{"value": f"endpoint:{e['slug']}", "label": f"endpoint {e['slug']}"} for e in eps]
            + [{"value": f"team:{t['slug']}", "label": f"team {t['slug']}"} for t in mine])


async def _page(board: Board, request: Request, who, *, status: int = 200, error: str | None = None,
                error_field: str | None = None, values: dict | None = None) -> Response:
    owners = await _owners(board, who)
    form = {"owner": owners[0]["value"] if owners else "", "url": "", "events": list(hooks.EVENTS),
            **(values or {})}
    notice = NOTICES.get(request.query_params.get("done", "")) if status == 200 else None
    return board.page(request, who, "hooks.html", status=status, title="Webhooks", active="hooks",
                      hooks=await hooks.visible(board.core, who[0]), owners=owners, events=hooks.EVENTS,
                      form=form, error=error, error_field=error_field, notice=notice)


@human_page
async def hooks_screen(board: Board, request: Request, who) -> Response:
    return await _page(board, request, who)


def _str(value) -> str:
    return value.strip() if isinstance(value, str) else ""


@human_post
async def add_hook(board: Board, request: Request, who, form) -> Response:
    owner = _str(form.get("owner"))
    values = {"owner": owner, "url": _str(form.get("url")),
              "events": [e for e in form.getlist("events") if isinstance(e, str)]}
    kind, _, slug = owner.partition(":")
    if not values["events"]:
        return await _page(board, request, who, status=422, error="Events: choose at least one event.",
                           error_field="events", values=values)
    try:
        if kind == "endpoint":
            hook, secret = await hooks.add(board.core, who[0], slug, url=values["url"], events=values["events"])
        elif kind == "team":
            hook, secret = await hooks.add_for_team(board.core, who[0], slug, url=values["url"],
                                                    events=values["events"])
        else:
            raise NotFound("owner not found")
    except (Invalid, Conflict) as exc:
        field = "events" if exc.argument == "events" else "owner" if isinstance(exc, Conflict) or \
            exc.argument not in (None, "url") else "url"
        return await _page(board, request, who, status=422 if isinstance(exc, Invalid) else 409,
                           error=f"{field.capitalize()}: {exc.message}.", error_field=field, values=values)
    except NotFound:
        return await _page(board, request, who, status=422, error_field="owner", values=values,
                           error="Owner: choose one of your active endpoints or a team you manage.")
    except Forbidden as exc:
        return await _page(board, request, who, status=403, error=f"Owner: {exc.message}.", error_field="owner",
                           values=values)
    log.info("notify hook added", extra={"human": who[0].name, "hook": hook["hook_id"]})
    # The secret is in this response only (no redirect that would have to keep it): never stored in clear
    # for a later page, never cached.
    return board.page(request, who, "hook_created.html", status=201, title="Your new webhook", active="hooks",
                      hook=hook, secret=secret)


@human_page
async def hook_screen(board: Board, request: Request, who) -> Response:
    try:
        hook, deliveries = await hooks.log_of(board.core, who[0], request.path_params["hook_id"])
    except NotFound:
        return board.not_found(request, who, "notify hook")
    return board.page(request, who, "hook.html", title="Webhook deliveries", active="hooks", hook=hook,
                      deliveries=deliveries)


async def _change(board: Board, request: Request, who, change, done: str) -> Response:
    try:
        await change(board.core, who[0], request.path_params["hook_id"])
    except NotFound:
        return board.not_found(request, who, "notify hook")
    except Forbidden as exc:
        return board.page(request, who, "refused.html", status=403, title="Not allowed", message=exc.message,
                          back="/hooks")
    return RedirectResponse(f"/hooks?done={done}", status_code=303, headers=NO_STORE)


@human_post
async def remove_hook(board: Board, request: Request, who, form) -> Response:
    return await _change(board, request, who, hooks.remove_visible, "removed")


@human_post
async def enable_hook(board: Board, request: Request, who, form) -> Response:
    return await _change(board, request, who, hooks.enable_visible, "enabled")


def routes() -> list[Route]:
    return [
        Route("/hooks", hooks_screen, methods=["GET"]),
        Route("/hooks", add_hook, methods=["POST"]),
        Route("/hooks/{hook_id}", hook_screen, methods=["GET"]),
        Route("/hooks/{hook_id}/remove", remove_hook, methods=["POST"]),
        Route("/hooks/{hook_id}/enable", enable_hook, methods=["POST"]),
    ]
