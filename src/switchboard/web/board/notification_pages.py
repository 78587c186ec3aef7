"""The Notifications page: the human's chat sinks (docs/notifications.md). List them, add one, remove
one, enable one that was disabled after repeated failures, and send a test message.

Every POST carries the CSRF token (`human_post`). Another human's sink id answers exactly like an
unknown one (the shared not-found body). Bad input re-renders the form with the field named and
nothing stored.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import sinks
from ...core.errors import Conflict, Invalid, NotFound
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


def _str(value) -> str:
    return value.strip() if isinstance(value, str) else ""


async def _page(board: Board, request: Request, who, *, status: int = 200, error: str | None = None,
                error_field: str | None = None, notice: str | None = None, values: dict | None = None) -> Response:
    rows = await sinks.list_for_owner(board.core, who[0])
    if notice is None and status == 200:
        notice = NOTICES.get(request.query_params.get("done", ""))
    form = {"name": "", "kind": "slack", "url": "", "events": list(EVENTS), "stuck_minutes": "30",
            "digest_hour": "9", "timezone": "UTC", **(values or {})}
    return board.page(request, who, "notifications.html", status=status, title="Notifications",
                      active="notifications", sinks=rows, error=error, error_field=error_field, notice=notice,
                      form=form, kinds=KINDS, kind_labels=KIND_LABELS, events=EVENTS, event_labels=EVENT_LABELS)


@human_page
async def notifications(board: Board, request: Request, who) -> Response:
    return await _page(board, request, who)


@human_post
async def add_sink(board: Board, request: Request, who, form) -> Response:
    values = {"name": _str(form.get("name")), "kind": _str(form.get("kind")), "url": _str(form.get("url")),
              "events": [e for e in form.getlist("events") if isinstance(e, str)],
              "stuck_minutes": _str(form.get("stuck_minutes")), "digest_hour": _str(form.get("digest_hour")),
              "timezone": _str(form.get("timezone"))}
    if not values["events"]:
        return await _page(board, request, who, status=422, error="Events: choose at least one event.",
                           error_field="events", values=values)
    try:
        await sinks.add(board.core, who[0], kind=values["kind"], url=values["url"], name=values["name"] or None,
                        events=values["events"], stuck_minutes=values["stuck_minutes"],
                        digest_hour=values["digest_hour"], timezone_name=values["timezone"])
    except (Invalid, Conflict) as exc:
        field = exc.argument or "url"
        return await _page(board, request, who, status=422 if isinstance(exc, Invalid) else 409,
                           error=f"{field.replace('_', ' ').capitalize()}: {exc.message}.", error_field=field,
                           values=values)
    log.info("sink added", extra={"human": who[0].name})
    return RedirectResponse("/notifications?done=added", status_code=303, headers=NO_STORE)


@human_post
async def remove_sink(board: Board, request: Request, who, form) -> Response:
    try:
        await sinks.remove(board.core, who[0], request.path_params["sink_id"])
    except NotFound:
        return board.not_found(request, who, "sink")
    return RedirectResponse("/notifications?done=removed", status_code=303, headers=NO_STORE)


@human_post
async def enable_sink(board: Board, request: Request, who, form) -> Response:
    try:
        await sinks.enable(board.core, who[0], request.path_params["sink_id"])
    except NotFound:
        return board.not_found(request, who, "sink")
    return RedirectResponse("/notifications?done=enabled", status_code=303, headers=NO_STORE)


@human_post
async def test_sink(board: Board, request: Request, who, form) -> Response:
    try:
        outcome = await send_test(board.core, who[0], request.path_params["sink_id"])
    except NotFound:
        return board.not_found(request, who, "sink")
    shown = f"HTTP {outcome['status_code']}" if outcome["status_code"] is not None else outcome["result"]
    if outcome["delivered"]:
        return await _page(board, request, who, notice=f"The test message was delivered ({shown}).")
    return await _page(board, request, who, status=200,
                       error=f"The test message was not delivered: {outcome['error'] or shown}.")


def routes() -> list[Route]:
    return [
        Route("/notifications", notifications, methods=["GET"]),
        Route("/notifications", add_sink, methods=["POST"]),
        Route("/notifications/{sink_id}/remove", remove_sink, methods=["POST"]),
        Route("/notifications/{sink_id}/enable", enable_sink, methods=["POST"]),
        Route("/notifications/{sink_id}/test", test_sink, methods=["POST"]),
    ]
