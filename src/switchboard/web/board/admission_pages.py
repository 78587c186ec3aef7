"""The routes that change a queue's admission policy from the Board (SPEC-0030, docs/admission.md):
the pause switch and the small policy form shown on the team page (team queues, changed by a team's
owners and admins) and on the Queues screen (the queues of one's own endpoints). The form names the
queue: a team queue's label `team:<slug>/<queue>`, or an endpoint's queue with the endpoint's slug.

- `POST /admission/pause`   queue, endpoint, paused (1 pauses, 0 resumes)
- `POST /admission/policy`  queue, endpoint, max_in_flight, max_claims_per_window, period, tz, start, weekday
- `POST /admission/clear`   queue, endpoint

The core checks every value and the caller's role. After a change the browser goes back to the screen
the queue lives on, with a notice; a refusal renders that screen again with the message: a bad value
422 naming the field (the form kept open with what was typed), a member's attempt 403, a queue, team
or endpoint outside the human's reach the shared 404.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import admission, inputs
from ...core.errors import CoreError, Forbidden, Invalid, NotFound
from . import queue_pages, team_pages
from .admission_view import FIELD_LABELS, blank_form, where
from .kit import NO_STORE, Board, human_post

FIELDS = ("max_in_flight", "max_claims_per_window", "period", "tz", "start", "weekday")
# The core names window fields `window.<part>`; the form's fields are the bare parts.
FIELD_OF_ARGUMENT = {"window.period": "period", "window.tz": "tz", "window.start": "start",
                     "window.weekday": "weekday"}
_WHOLE = re.compile(r"[0-9]{1,9}")


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _number(raw: str) -> object:
    """A limit as typed: empty is none, a whole number is itself, anything else goes to the core as
    text, which refuses it naming the field."""
    if not raw:
        return None
    return int(raw) if _WHOLE.fullmatch(raw) else raw


async def _refused(board: Board, request: Request, who, queue: str, endpoint: str, exc: CoreError,
                   values: dict[str, str] | None = None) -> Response:
    if isinstance(exc, NotFound) and exc.argument in ("team", "slug", "endpoint"):
        return board.not_found(request, who, "team" if exc.argument == "team" else "endpoint")
    if isinstance(exc, Forbidden):
        return board.page(request, who, "refused.html", status=403, title="Not allowed", message=exc.message,
                          back=where(queue))
    if not isinstance(exc, (Invalid, NotFound)):
        raise exc
    field = FIELD_OF_ARGUMENT.get(exc.argument or "", exc.argument or "")
    failed = {"queue": queue, "endpoint": endpoint, "field": field, "values": values or blank_form()}
    error = f"{FIELD_LABELS.get(field, 'Queue')}: {exc.message}."
    status = 404 if isinstance(exc, NotFound) else 422
    if inputs.is_team_label(queue):
        slug, _ = inputs.team_label(queue)
        return await team_pages.render_team(board, request, who, slug, status=status, error=error,
                                            policy_failed=failed)
    return await queue_pages.render_queues(board, request, who, status=status, error=error, policy_failed=failed)


def _back(queue: str, done: str) -> Response:
    return RedirectResponse(f"{where(queue)}?{urlencode({'done': done})}#sb-queues", status_code=303,
                            headers=NO_STORE)


async def _change(board: Board, request: Request, who, form, done: str, change, values=None) -> Response:
    """Check the queue name, run `change(queue, endpoint)`, and answer (back to the queue's screen, or
    the refusal)."""
    try:
        queue = inputs.queue(_str(form.get("queue")))
    except Invalid:  # not a queue name at all: nothing of the human's is named
        return board.not_found(request, who, "queue")
    endpoint = _str(form.get("endpoint"))
    try:
        await change(queue, endpoint or None)
    except CoreError as exc:
        return await _refused(board, request, who, queue, endpoint, exc, values)
    return _back(queue, done)


@human_post
async def pause(board: Board, request: Request, who, form) -> Response:
    paused = _str(form.get("paused"))

    async def change(queue: str, endpoint: str | None) -> None:
        if paused not in ("0", "1"):
            raise Invalid("must be 1 (pause) or 0 (resume)", argument="paused")
        await admission.set_paused(board.core, who[0], queue, paused == "1", endpoint=endpoint)

    return await _change(board, request, who, form, "paused" if paused == "1" else "resumed", change)


@human_post
async def set_policy(board: Board, request: Request, who, form) -> Response:
    values = {k: _str(form.get(k)) for k in FIELDS}

    async def change(queue: str, endpoint: str | None) -> None:
        window = admission.window(values["period"] or "hour", values["tz"] or "UTC", values["start"] or "00:00",
                                  values["weekday"] or None)
        await admission.set_policy(board.core, who[0], queue, endpoint=endpoint,
                                   max_in_flight=_number(values["max_in_flight"]),
                                   max_claims_per_window=_number(values["max_claims_per_window"]),
                                   window_spec=window)

    return await _change(board, request, who, form, "policy", change, values)


@human_post
async def clear_policy(board: Board, request: Request, who, form) -> Response:
    async def change(queue: str, endpoint: str | None) -> None:
        await admission.clear(board.core, who[0], queue, endpoint=endpoint)

    return await _change(board, request, who, form, "cleared", change)


def routes() -> list[Route]:
    return [
        Route("/admission/pause", pause, methods=["POST"]),
        Route("/admission/policy", set_policy, methods=["POST"]),
        Route("/admission/clear", clear_policy, methods=["POST"]),
    ]
