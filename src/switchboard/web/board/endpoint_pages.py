"""Endpoints: the list, the vend wizard (details, consent, credential shown once) and revocation.

The consent screen lists every verb of the drain family with a plain explanation and whether this
endpoint gets it: `get_todo` comes with `list_todos`, `admission_status` with `claim` or `claim_next`;
`release` comes with no other verb. The credential is handed to the browser once, through a single-use
ticket that any serving process can take (web/board/reveal.py), never in a URL or a log.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import endpoints, inputs, teams, todos
from ...core.errors import Invalid, NotFound
from ...core.models import DEFAULT_VERBS, VERBS, effective_verbs
from ...core.states import LIVE_STATES, TodoState
from .kit import NO_STORE, Board, human_page, human_post

VERB_HELP = {
    "list_todos": "See the todos in this endpoint's queues: titles, states and counters. "
                  "Also allows get_todo.",
    "get_todo": "Read one todo in full: its payload, its result and the history of earlier attempts, "
                "including what those attempts wrote.",
    "claim": "Take one particular todo, by its id, and hold it under a lease.",
    "claim_next": "Take the oldest waiting todo from its queues and hold it under a lease.",
    "heartbeat": "Extend the lease on a todo it holds, so the todo is not taken back while it works.",
    "complete": "Finish a todo it holds and store a result, a summary and an artifact link.",
    "fail": "Report that its attempt failed: the todo is retried after a backoff, or becomes a dead "
            "letter at its attempt limit.",
    "release": "Hand back a todo it holds without using up an attempt, so another worker can take it. "
               "No other verb implies this one: grant it on its own.",
    "request_input": "Pause a todo it holds and ask you a question, which you answer on the Board.",
    "admission_status": "Read the admission policies of its queues: how many claims the window has left, how "
                        "many todos are in flight, whether a queue is paused. Also comes with claim or claim_next.",
}
# The verbs that bring another one with them (core/models.effective_verbs), named on the consent screen.
IMPLIED_BY = {"get_todo": ("list_todos",), "admission_status": ("claim", "claim_next")}
LEASE_MIN, LEASE_MAX = 60, 86400


def _values(source: Any) -> dict:
    """Raw wizard values from a form or a query string."""
    verbs = [v for v in source.getlist("verbs") if isinstance(v, str)] if hasattr(source, "getlist") else []
    get = source.get
    return {"agent": str(get("agent") or "")[:200], "queues": str(get("queues") or "")[:2000],
            "verbs": verbs[:20], "lease_ttl": str(get("lease_ttl") or "")[:20]}


def _validate(values: dict) -> tuple[dict, dict[str, str]]:
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}
    try:
        clean["agent"] = inputs.text(values["agent"].strip(), "agent", max_chars=64, required=True)
    except Invalid:
        errors["agent"] = "Give the agent a name of 1 to 64 characters."
    names = [q for q in values["queues"].replace(",", " ").split() if q]
    if not names:
        errors["queues"] = "Name at least one queue, for example inbox."
    else:
        try:
            clean["queues"] = list(dict.fromkeys(inputs.queue(q) for q in names))
        except Invalid as exc:
            errors["queues"] = exc.message[:1].upper() + exc.message[1:] + "."
    verbs = list(dict.fromkeys(values["verbs"]))
    unknown = [v for v in verbs if v not in VERBS]
    if unknown:
        errors["verbs"] = f"Unknown verb {unknown[0][:40]}."
    elif not verbs:
        errors["verbs"] = "Grant at least one verb."
    else:
        clean["verbs"] = [v for v in VERBS if v in verbs]
    ttl = values["lease_ttl"].strip()
    if ttl:
        if not ttl.isdigit() or not LEASE_MIN <= int(ttl) <= LEASE_MAX:
            errors["lease_ttl"] = (f"The default lease must be a whole number of seconds from {LEASE_MIN} "
                                   f"to {LEASE_MAX}.")
        else:
            clean["lease_ttl"] = int(ttl)
    else:
        clean["lease_ttl"] = None
    return clean, errors


def _verb_rows(granted: list[str]) -> list[dict]:
    effective = effective_verbs(granted)
    rows = []
    for verb in VERBS:
        if verb in granted:
            status = "granted"
        elif verb in effective:
            status = "implied"
        else:
            status = "not granted"
        rows.append({"verb": verb, "help": VERB_HELP[verb], "status": status,
                     "implied_by": [v for v in IMPLIED_BY.get(verb, ()) if v in granted]})
    return rows


def _mcp_url(board: Board, slug: str) -> str:
    return f"{board.settings.public_base_url}/mcp/{slug}"


def _client_config(board: Board, endpoint: dict, credential: str) -> str:
    name = "switchboard-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in endpoint["agent"])[:48]
    config = {"mcpServers": {name: {"type": "http", "url": _mcp_url(board, endpoint["slug"]),
                                    "headers": {"Authorization": f"Bearer {credential}"}}}}
    return json.dumps(config, indent=2)


# ---------------------------------------------------------------------------------------- screens

@human_page
async def endpoints_screen(board: Board, request: Request, who) -> Response:
    eps = await endpoints.list_for_human(board.core, who[0])
    revoked = request.query_params.get("revoked", "")[:64]
    notice = f"Endpoint {revoked} was revoked." if revoked and any(e["slug"] == revoked for e in eps) else None
    return board.page(request, who, "endpoints.html", title="Endpoints", active="endpoints", eps=eps,
                      notice=notice, mcp_url=lambda slug: _mcp_url(board, slug))


@human_page
async def vend_form(board: Board, request: Request, who) -> Response:
    q = request.query_params
    values = _values(q) if q.get("agent") is not None else {
        "agent": "", "queues": "inbox", "verbs": list(DEFAULT_VERBS), "lease_ttl": ""}
    return _vend_page(board, request, who, values, {})


def _vend_page(board: Board, request: Request, who, values: dict, errors: dict, status: int = 200) -> Response:
    return board.page(request, who, "vend.html", status=status, title="Vend an endpoint", active="endpoints",
                      v=values, errors=errors, verb_help=VERB_HELP, verbs=VERBS)


async def _check_teams(board: Board, who, clean: dict, errors: dict[str, str]) -> None:
    """A team queue in the list names one of the human's teams (else it is refused like an unknown one)."""
    for label in clean.get("queues", []):
        if inputs.is_team_label(label):
            slug, _ = inputs.team_label(label)
            try:
                await teams.membership(board.core, who[0], slug)
            except NotFound:
                errors["queues"] = f"{label} is not a queue of one of your teams."
                return


@human_post
async def vend_review(board: Board, request: Request, who, form) -> Response:
    values = _values(form)
    clean, errors = _validate(values)
    await _check_teams(board, who, clean, errors)
    if errors:
        return _vend_page(board, request, who, values, errors, status=422)
    back = "/endpoints/vend?" + urlencode({"agent": values["agent"], "queues": values["queues"],
                                           "lease_ttl": values["lease_ttl"]}) + "".join(
        "&" + urlencode({"verbs": v}) for v in clean["verbs"])
    return board.page(request, who, "vend_consent.html", title="Review what this endpoint may do",
                      active="endpoints", c=clean, v=values, verb_rows=_verb_rows(clean["verbs"]), back_url=back)


@human_post
async def vend_submit(board: Board, request: Request, who, form) -> Response:
    values = _values(form)
    clean, errors = _validate(values)
    await _check_teams(board, who, clean, errors)
    if errors:
        return _vend_page(board, request, who, values, errors, status=422)
    try:
        endpoint, credential = await endpoints.vend(board.core, who[0], agent=clean["agent"], queues=clean["queues"],
                                                    verbs=clean["verbs"], lease_ttl=clean["lease_ttl"])
    except NotFound:  # left the team between the check and the vend
        errors["queues"] = "A team queue in the list is not a queue of one of your teams."
        return _vend_page(board, request, who, values, errors, status=422)
    shown = {k: endpoint[k] for k in ("slug", "agent", "queues", "verbs", "awaiting_grant") if k in endpoint}
    key = await board.reveals.put(board.core, who[0].human_id, "endpoint", {"ep": shown, "credential": credential})
    return RedirectResponse(f"/endpoints/vended/{key}", status_code=303, headers=NO_STORE)


@human_page
async def vended(board: Board, request: Request, who) -> Response:
    ticket = await board.reveals.take(board.core, who[0].human_id, "endpoint", request.path_params["key"])
    if ticket is None:
        return board.page(request, who, "vended_gone.html", status=410, title="Credential no longer shown",
                          active="endpoints")
    ep, credential = ticket["ep"], ticket["credential"]
    return board.page(request, who, "vended.html", title="Your new endpoint", active="endpoints", ep=ep,
                      credential=credential, mcp_url=_mcp_url(board, ep["slug"]),
                      client_config=_client_config(board, ep, credential))


async def _live_count(board: Board, who, slug: str) -> int:
    counts = await todos.counts_for_human(board.core, who[0], endpoint=slug)
    parked = counts[TodoState.FAILED] - counts["dead_letter"]
    return sum(counts[s] for s in LIVE_STATES) + parked


@human_page
async def revoke_confirm(board: Board, request: Request, who) -> Response:
    slug = request.path_params["slug"]
    try:
        row = await endpoints.get_for_human(board.core, who[0], slug)
    except NotFound:
        return board.not_found(request, who, what="endpoint")
    ep = endpoints.public(row)
    return board.page(request, who, "revoke.html", title=f"Revoke endpoint {ep['slug']}", active="endpoints",
                      ep=ep, live=await _live_count(board, who, ep["slug"]))


@human_post
async def revoke_submit(board: Board, request: Request, who, form) -> Response:
    try:
        await endpoints.revoke(board.core, who[0], request.path_params["slug"])
    except NotFound:
        return board.not_found(request, who, what="endpoint")
    return RedirectResponse("/endpoints?" + urlencode({"revoked": request.path_params["slug"]}),
                            status_code=303, headers=NO_STORE)


def routes() -> list[Route]:
    return [
        Route("/endpoints", endpoints_screen, methods=["GET"]),
        Route("/endpoints/vend", vend_form, methods=["GET"]),
        Route("/endpoints/vend/review", vend_review, methods=["POST"]),
        Route("/endpoints/vend", vend_submit, methods=["POST"]),
        Route("/endpoints/vended/{key}", vended, methods=["GET"]),
        Route("/endpoints/{slug}/revoke", revoke_confirm, methods=["GET"]),
        Route("/endpoints/{slug}/revoke", revoke_submit, methods=["POST"]),
    ]
