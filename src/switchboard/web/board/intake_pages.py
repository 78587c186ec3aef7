"""Intake: the Board's screens for webhook intakes (docs/intake.md).

The list with a create form; the one-time reveal of a new intake's URL and secret (handed to the
browser once through a single-use ticket any serving process can take, never in a URL or a log, as
vending does); one intake's
page with its counters, the rules editor (a JSON textarea checked by the server, every expression
compiled) and the quarantine with replay and drop; removal behind a confirm page. Every POST goes
through `human_post` (sign-in, body cap, CSRF); nothing here runs script of its own.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import endpoints, intakes
from ...core.errors import Conflict, Invalid, NotFound
from .kit import NO_STORE, Board, human_page, human_post

DOCUMENT_SHOWN_CHARS = 16_000  # of a quarantined delivery's document; the CLI and API show all of it
SOURCE_HELP = {
    "github": "GitHub: X-Hub-Signature-256 over the body; event and delivery id from GitHub's headers.",
    "standard": "Standard Webhooks: webhook-id, webhook-timestamp and webhook-signature, five-minute tolerance.",
    "hmac": "Generic HMAC: X-Signature: sha256=<hex of HMAC-SHA256(secret, timestamp + '.' + body)> "
            "and X-Signature-Timestamp.",
    "bearer": "Bearer token: Authorization: Bearer <secret>.",
}
NOTICES = {
    "rules": "Rules saved.",
    "replayed": "The delivery became a todo and left the quarantine.",
    "dropped": "The delivery was dropped.",
    "removed": "The intake was removed; its URL no longer works.",
    "disabled": "The intake is paused: its URL answers 401 and nothing is stored.",
    "enabled": "The intake is enabled again.",
}
EXAMPLE_RULES = [{
    "name": "issues labelled agent",
    "filter": "event == 'issues' && body.action == 'labeled' && body.label.name == 'agent'",
    "title": "join('', ['#', to_string(body.issue.number), ' ', body.issue.title])",
    "payload": "{url: body.issue.html_url, text: body.issue.body}",
    "kind": "'issue'",
}]


def _field(argument: str | None) -> str:
    """Which form field an error belongs to (`rules[2].title` is the rules field)."""
    if not argument:
        return "form"
    if argument.startswith("rules"):
        return "rules"
    return argument if argument in ("name", "endpoint", "source", "queue", "secret") else "form"


def _sentence(message: str) -> str:
    """A core message as a sentence on the page; a field path (`rules[1].title …`) keeps its case."""
    return message if message.startswith("rules") else message[:1].upper() + message[1:]


def _values(form: Any) -> dict:
    get = form.get
    return {"name": str(get("name") or "")[:200], "endpoint": str(get("endpoint") or "")[:64],
            "source": str(get("source") or "github")[:16], "queue": str(get("queue") or "")[:64],
            "secret": str(get("secret") or "")[:300], "rules": str(get("rules") or "")[:200_000]}


def _parse_rules(text: str) -> Any:
    if not text.strip():
        return []
    try:
        return json.loads(text)
    except ValueError as exc:
        raise Invalid(f"rules are not valid JSON: {exc}", argument="rules") from None


async def _list_page(board: Board, request: Request, who, values: dict | None = None,
                     errors: dict | None = None, status: int = 200) -> Response:
    rows = await intakes.list_for_human(board.core, who[0])
    eps = [e for e in await endpoints.list_for_human(board.core, who[0]) if e["state"] == "active"]
    notice = NOTICES.get(request.query_params.get("notice", "")) if request.method == "GET" else None
    v = values or {"name": "", "endpoint": eps[0]["slug"] if eps else "", "source": "github", "queue": "",
                   "secret": "", "rules": json.dumps(EXAMPLE_RULES, indent=2)}
    return board.page(request, who, "intakes.html", status=status, title="Intake", active="intake",
                      intakes=rows, eps=eps, v=v, errors=errors or {}, sources=intakes.SOURCES,
                      source_help=SOURCE_HELP, notice=notice)


@human_page
async def intakes_screen(board: Board, request: Request, who) -> Response:
    return await _list_page(board, request, who)


@human_post
async def intake_create(board: Board, request: Request, who, form) -> Response:
    values = _values(form)
    try:
        rules = _parse_rules(values["rules"])
        intake, token, secret = await intakes.create(
            board.core, who[0], name=values["name"].strip(), endpoint=values["endpoint"], source=values["source"],
            queue=values["queue"].strip() or None, secret=values["secret"] or None, rules=rules)
    except (Invalid, Conflict, NotFound) as exc:
        field = "endpoint" if isinstance(exc, NotFound) else _field(exc.argument)
        return await _list_page(board, request, who, values, {field: _sentence(exc.message)}, status=422)
    url = board.settings.public_base_url + intakes.hook_path(token)
    shown = {k: intake[k] for k in ("intake_id", "name", "endpoint", "queue", "source")}
    key = await board.reveals.put(board.core, who[0].human_id, "intake",
                                  {"intake": shown, "url": url, "secret": secret})
    return RedirectResponse(f"/intakes/created/{key}", status_code=303, headers=NO_STORE)


@human_page
async def intake_created(board: Board, request: Request, who) -> Response:
    ticket = await board.reveals.take(board.core, who[0].human_id, "intake", request.path_params["key"])
    if ticket is None:
        return board.page(request, who, "intake_gone.html", status=410, title="URL and secret no longer shown",
                          active="intake")
    return board.page(request, who, "intake_created.html", title="Your new intake", active="intake",
                      intake=ticket["intake"], url=ticket["url"], secret=ticket["secret"],
                      source_help=SOURCE_HELP[ticket["intake"]["source"]])


async def _detail(board: Board, request: Request, who, *, rules_text: str | None = None,
                  errors: dict | None = None, status: int = 200, error: str | None = None) -> Response:
    try:
        intake = await intakes.get(board.core, who[0], request.path_params["ref"])
        held = await intakes.quarantine(board.core, who[0], intake["intake_id"], with_documents=True)
    except NotFound:
        return board.not_found(request, who, what="intake")
    for item in held:
        text = json.dumps(item.pop("document"), indent=2, ensure_ascii=False, sort_keys=True)
        item["document_text"], item["document_cut"] = text[:DOCUMENT_SHOWN_CHARS], len(text) > DOCUMENT_SHOWN_CHARS
    notice = NOTICES.get(request.query_params.get("notice", "")) if request.method == "GET" else None
    return board.page(request, who, "intake.html", status=status, title=f"Intake {intake['name']}",
                      active="intake", intake=intake, held=held, notice=notice, error=error,
                      errors=errors or {}, source_help=SOURCE_HELP[intake["source"]],
                      keep=(intakes.QUARANTINE_MAX, intakes.QUARANTINE_MAX_AGE_DAYS),
                      rules_text=rules_text if rules_text is not None else json.dumps(intake["rules"], indent=2),
                      todo_id=request.query_params.get("todo", "")[:64] if request.method == "GET" else "")


@human_page
async def intake_screen(board: Board, request: Request, who) -> Response:
    return await _detail(board, request, who)


def _back(ref: str, **query: str) -> Response:
    return RedirectResponse(f"/intakes/{ref}?" + urlencode(query), status_code=303, headers=NO_STORE)


@human_post
async def intake_rules(board: Board, request: Request, who, form) -> Response:
    text = str(form.get("rules") or "")[:200_000]
    try:
        intake = await intakes.set_rules(board.core, who[0], request.path_params["ref"], _parse_rules(text))
    except NotFound:
        return board.not_found(request, who, what="intake")
    except Invalid as exc:
        return await _detail(board, request, who, rules_text=text, status=422,
                             errors={"rules": _sentence(exc.message)})
    return _back(intake["intake_id"], notice="rules")


@human_post
async def quarantine_replay(board: Board, request: Request, who, form) -> Response:
    ref = request.path_params["ref"]
    try:
        todo, _ = await intakes.replay(board.core, who[0], ref, request.path_params["item"])
    except NotFound:
        return board.not_found(request, who, what="quarantined delivery")
    except Conflict as exc:
        return await _detail(board, request, who, status=409, error=_sentence(exc.message))
    return _back(ref, notice="replayed", todo=todo["id"])


@human_post
async def quarantine_drop(board: Board, request: Request, who, form) -> Response:
    ref = request.path_params["ref"]
    try:
        await intakes.drop(board.core, who[0], ref, request.path_params["item"])
    except NotFound:
        return board.not_found(request, who, what="quarantined delivery")
    return _back(ref, notice="dropped")


@human_post
async def intake_toggle(board: Board, request: Request, who, form) -> Response:
    enable = request.url.path.endswith("/enable")
    try:
        intake = await intakes.set_enabled(board.core, who[0], request.path_params["ref"], enable)
    except NotFound:
        return board.not_found(request, who, what="intake")
    return _back(intake["intake_id"], notice="enabled" if enable else "disabled")


@human_page
async def remove_confirm(board: Board, request: Request, who) -> Response:
    try:
        intake = await intakes.get(board.core, who[0], request.path_params["ref"])
    except NotFound:
        return board.not_found(request, who, what="intake")
    return board.page(request, who, "intake_remove.html", title=f"Remove intake {intake['name']}",
                      active="intake", intake=intake)


@human_post
async def remove_submit(board: Board, request: Request, who, form) -> Response:
    try:
        await intakes.remove(board.core, who[0], request.path_params["ref"])
    except NotFound:
        return board.not_found(request, who, what="intake")
    return RedirectResponse("/intakes?notice=removed", status_code=303, headers=NO_STORE)


def routes() -> list[Route]:
    return [
        Route("/intakes", intakes_screen, methods=["GET"]),
        Route("/intakes", intake_create, methods=["POST"]),
        Route("/intakes/created/{key}", intake_created, methods=["GET"]),
        Route("/intakes/{ref}", intake_screen, methods=["GET"]),
        Route("/intakes/{ref}/rules", intake_rules, methods=["POST"]),
        Route("/intakes/{ref}/enable", intake_toggle, methods=["POST"]),
        Route("/intakes/{ref}/disable", intake_toggle, methods=["POST"]),
        Route("/intakes/{ref}/remove", remove_confirm, methods=["GET"]),
        Route("/intakes/{ref}/remove", remove_submit, methods=["POST"]),
        Route("/intakes/{ref}/quarantine/{item}/replay", quarantine_replay, methods=["POST"]),
        Route("/intakes/{ref}/quarantine/{item}/drop", quarantine_drop, methods=["POST"]),
    ]
