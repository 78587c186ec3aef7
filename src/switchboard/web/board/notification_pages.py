"""The Notifications page: the chat sinks a human sees (docs/notifications.md), their own and their
teams' (D60). List them, add one (for themselves, or for a team they own or administer), remove one,
enable one that was disabled after repeated failures, send a test message, and read one sink's
newest messages.

Every POST carries the CSRF token (`human_post`). A sink the human does not see answers exactly like
an unknown id (the shared not-found body); a team's sink that a plain member sees is theirs to read,
not to change (403, nothing changed). Bad input re-renders the form with the field named and nothing
stored.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import sinks, teams
from ...core.errors import Conflict, Forbidden, Invalid, NotFound
from ...core.sink_messages import EVENTS, KINDS
from ..sinks import send_test
from .kit import NO_STORE, Board, human_page, human_post

log = logging.getLogger("switchboard.board")

NOTICES = {
    "added": "The sink is added.",
    "removed": "The sink is removed.",
    "enabled": "The sink is enabled again; its failure count starts from zero.",
}
KIND_LABELS = {"slack": "Slack (incoming webhook)", "discord": "Discord (webhook)",
               "teams": "Microsoft Teams (workflow)", "generic": "Generic JSON"}
EVENT_LABELS = {"dead_letter": "Dead letters", "queue_stuck": "Stuck queues", "digest": "Daily digest"}
MESSAGE_LABELS = {"dead_letter": "Dead letter", "queue_stuck": "Queue stuck", "digest": "Digest"}


def _str(value) -> str:
    return value.strip() if isinstance(value, str) else ""


async def _page(board: Board, request: Request, who, *, status: int = 200, error: str | None = None,
                error_field: str | None = None, notice: str | None = None, values: dict | None = None) -> Response:
    rows = await sinks.visible(board.core, who[0])
    managed = [t["slug"] for t in await teams.list_for_human(board.core, who[0]) if t["role"] in teams.MANAGERS]
    if notice is None and status == 200:
        notice = NOTICES.get(request.query_params.get("done", ""))
    form = {"owner": "me", "name": "", "kind": "slack", "url": "", "events": list(EVENTS), "stuck_minutes": "30",
            "digest_hour": "9", "timezone": "UTC", **(values or {})}
    return board.page(request, who, "notifications.html", status=status, title="Notifications",
                      active="notifications", sinks=rows, error=error, error_field=error_field, notice=notice,
                      form=form, kinds=KINDS, kind_labels=KIND_LABELS, events=EVENTS, event_labels=EVENT_LABELS,
                      teams=managed)


@human_page
async def notifications(board: Board, request: Request, who) -> Response:
    return await _page(board, request, who)


@human_post
async def add_sink(board: Board, request: Request, who, form) -> Response:
    owner = _str(form.get("owner")) or "me"
    values = {"owner": owner, "name": _str(form.get("name")), "kind": _str(form.get("kind")),
              "url": _str(form.get("url")),
              "events": [e for e in form.getlist("events") if isinstance(e, str)],
              "stuck_minutes": _str(form.get("stuck_minutes")), "digest_hour": _str(form.get("digest_hour")),
              "timezone": _str(form.get("timezone"))}
    if not values["events"]:
        return await _page(board, request, who, status=422, error="Events: choose at least one event.",
                           error_field="events", values=values)
    fields = {"kind": values["kind"], "url": values["url"], "name": values["name"] or None,
              "events": values["events"], "stuck_minutes": values["stuck_minutes"],
              "digest_hour": values["digest_hour"], "timezone": values["timezone"]}
    try:
        if owner == "me":
            await sinks.add(board.core, who[0], **fields)
        elif owner.startswith("team:"):
            await sinks.add_for_team(board.core, who[0], owner.removeprefix("team:"), **fields)
        else:
            raise NotFound("owner not found")
    except (NotFound, Forbidden) as exc:
        message = (exc.message if isinstance(exc, Forbidden)
                   else "choose yourself or a team you own or administer")
        return await _page(board, request, who, status=403 if isinstance(exc, Forbidden) else 422,
                           error=f"For: {message}.", error_field="owner", values=values)
    except (Invalid, Conflict) as exc:
        field = exc.argument or "url"
        return await _page(board, request, who, status=422 if isinstance(exc, Invalid) else 409,
                           error=f"{field.replace('_', ' ').capitalize()}: {exc.message}.", error_field=field,
                           values=values)
    log.info("sink added", extra={"human": who[0].name})
    return RedirectResponse("/notifications?done=added", status_code=303, headers=NO_STORE)


@human_page
async def sink_screen(board: Board, request: Request, who) -> Response:
    try:
        sink, messages = await sinks.log_of(board.core, who[0], request.path_params["sink_id"])
    except NotFound:
        return board.not_found(request, who, "sink")
    return board.page(request, who, "sink.html", title="Sink messages", active="notifications", sink=sink,
                      messages=messages, kind_labels=KIND_LABELS, event_labels=EVENT_LABELS,
                      message_labels=MESSAGE_LABELS)


def _refused(board: Board, request: Request, who, exc: Forbidden) -> Response:
    return board.page(request, who, "refused.html", status=403, title="Not allowed", message=exc.message,
                      back="/notifications")


@human_post
async def remove_sink(board: Board, request: Request, who, form) -> Response:
    try:
        await sinks.remove_visible(board.core, who[0], request.path_params["sink_id"])
    except NotFound:
        return board.not_found(request, who, "sink")
    except Forbidden as exc:
        return _refused(board, request, who, exc)
    return RedirectResponse("/notifications?done=removed", status_code=303, headers=NO_STORE)


@human_post
async def enable_sink(board: Board, request: Request, who, form) -> Response:
    try:
        await sinks.enable_visible(board.core, who[0], request.path_params["sink_id"])
    except NotFound:
        return board.not_found(request, who, "sink")
    except Forbidden as exc:
        return _refused(board, request, who, exc)
    return RedirectResponse("/notifications?done=enabled", status_code=303, headers=NO_STORE)


@human_post
async def test_sink(board: Board, request: Request, who, form) -> Response:
    try:
        sink = await sinks.one_visible(board.core, who[0], request.path_params["sink_id"])
        outcome = await send_test(board.core, who[0], sink["sink_id"], team=sink["owner"].get("team"))
    except NotFound:
        return board.not_found(request, who, "sink")
    except Forbidden as exc:
        return _refused(board, request, who, exc)
    shown = f"HTTP {outcome['status_code']}" if outcome["status_code"] is not None else outcome["result"]
    if outcome["delivered"]:
        return await _page(board, request, who, notice=f"The test message was delivered ({shown}).")
    return await _page(board, request, who, status=200,
                       error=f"The test message was not delivered: {outcome['error'] or shown}.")


def routes() -> list[Route]:
    return [
        Route("/notifications", notifications, methods=["GET"]),
        Route("/notifications", add_sink, methods=["POST"]),
        Route("/notifications/{sink_id}", sink_screen, methods=["GET"]),
        Route("/notifications/{sink_id}/remove", remove_sink, methods=["POST"]),
        Route("/notifications/{sink_id}/enable", enable_sink, methods=["POST"]),
        Route("/notifications/{sink_id}/test", test_sink, methods=["POST"]),
    ]
