"""The todos screen, the todo drawer (SPEC-0034 REQ-13), the owner's actions, and the new-todo form.

Every read goes through the core with a `HumanCaller`, so a todo of another human's endpoint is the
same not-found as an id never minted (REQ-10). Actions are fence-exempt core calls by the owning
human (REQ-6); a todo that moved meanwhile answers with the drawer and a plain conflict message.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import endpoints, producer, todos
from ...core.errors import Conflict, CoreError, Forbidden, Invalid, NotFound
from ...core.models import HumanCaller
from ...core.states import STATE_LABELS, TODO_STATES as STATES
from .kit import NO_STORE, Board, human_page, human_post, is_hx

PAGE_SIZE = 25

# action: (button label, what happened, states it applies to)
ACTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "claim": ("Claim", "Claimed under a lease held by you.", ("pending",)),
    "complete": ("Complete", "Completed.", ("claimed",)),
    "fail": ("Fail", "Failed.", ("claimed",)),
    "release": ("Release", "Released: the todo is pending again and the attempt counter is unchanged.",
                ("claimed",)),
    "extend": ("Extend lease", "Lease extended.", ("claimed",)),
    "retry": ("Retry now", "Re-queued with a fresh attempt budget; its history is kept.", ("failed",)),
    "cancel": ("Cancel", "Canceled.", ("pending", "claimed", "input-required")),
    "input": ("Provide input", "Input sent: the todo is claimed again under the same attempt.",
              ("input-required",)),
}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _owner_label(todo: dict, human: HumanCaller, agent: str | None) -> str:
    owner = todo.get("owner") or ""
    if owner == human.owner:
        return "you, on the Board"
    if owner.startswith("op:"):
        return "a human on the Board"
    if owner.startswith("agent:"):
        return f"agent {agent}" if agent else "an agent"
    return ""


async def _endpoint_rows(board: Board, human: HumanCaller) -> list[dict]:
    return await endpoints.list_for_human(board.core, human)


def _drawer_context(todo: dict, human: HumanCaller, agents: dict[str, str]) -> dict:
    state = todo["state"]
    available = [(name, label) for name, (label, _, states) in ACTIONS.items() if state in states]
    return {
        "t": todo,
        "state_label": STATE_LABELS.get(state, state),
        "held_by": _owner_label(todo, human, agents.get(todo.get("endpoint") or "")),
        "actions": [a for a in available if a[0] != "input"],
        "wants_input": state == "input-required",
        "takes_note": state == "claimed",
    }


async def _load_drawer(board: Board, human: HumanCaller, todo_id: str) -> dict:
    todo = await todos.get(board.core, human, todo_id)
    agents = {e["slug"]: e["agent"] for e in await _endpoint_rows(board, human)}
    return _drawer_context(todo, human, agents)


# ------------------------------------------------------------------------------------- todos list

def _filters(request: Request) -> tuple[dict, str | None]:
    q = request.query_params
    f = {"endpoint": q.get("endpoint", "").strip(), "queue": q.get("queue", "").strip(),
         "state": q.get("state", "").strip(), "dead": q.get("dead") == "1", "page": 1}
    error = None
    if f["state"] and f["state"] not in STATES:
        error = f"state must be one of: {', '.join(STATES)}"
        f["state"] = ""
    page = q.get("page", "1")
    if not page.isdigit() or not 1 <= int(page) <= 100000:
        error = error or "page must be a whole number from 1"
    else:
        f["page"] = int(page)
    for key in ("endpoint", "queue"):
        if len(f[key]) > 64:
            error = error or f"{key} is too long"
            f[key] = ""
    return f, error


def _query(f: dict, **change: Any) -> str:
    merged = {**f, **change}
    params = {k: v for k, v in (("endpoint", merged["endpoint"]), ("queue", merged["queue"]),
                                ("state", merged["state"])) if v}
    if merged["dead"]:
        params["dead"] = "1"
    if merged["page"] and merged["page"] != 1:
        params["page"] = str(merged["page"])
    return "/todos" + ("?" + urlencode(params) if params else "")


@human_page
async def todos_screen(board: Board, request: Request, who) -> Response:  # noqa: ANN001
    human = who[0]
    f, error = _filters(request)
    rows = await todos.list_for_human(board.core, human, endpoint=f["endpoint"] or None, queue=f["queue"] or None,
                                      state=f["state"] or None, dead_letter=f["dead"], limit=PAGE_SIZE + 1,
                                      offset=(f["page"] - 1) * PAGE_SIZE)
    more = len(rows) > PAGE_SIZE
    counts = await todos.counts_for_human(board.core, human, endpoint=f["endpoint"] or None,
                                          queue=f["queue"] or None)
    eps = await _endpoint_rows(board, human)
    queues = sorted({q for e in eps for q in e["queues"]})
    context = dict(
        title="Todos", active="todos", rows=rows[:PAGE_SIZE], counts=counts, f=f, eps=eps, queues=queues,
        error=error, states=STATES, state_labels=STATE_LABELS, panel_url=_query(f),
        newer_url=_query(f, page=f["page"] - 1) if f["page"] > 1 else None,
        older_url=_query(f, page=f["page"] + 1) if more else None,
        count_url=lambda **c: _query(f, page=1, **c),
    )
    template = "todos_panel.html" if request.headers.get("x-sb-part") == "panel" else "todos.html"
    return board.page(request, who, template, status=400 if error else 200, **context)


# ------------------------------------------------------------------------------------------ drawer

@human_page
async def drawer(board: Board, request: Request, who) -> Response:  # noqa: ANN001
    try:
        context = await _load_drawer(board, who[0], request.path_params["todo_id"])
    except (NotFound, Invalid):
        return board.not_found(request, who)
    done = request.query_params.get("done", "")
    if done in ACTIONS:
        context["notice"] = ACTIONS[done][1]
    template = "drawer.html" if is_hx(request) else "todo_page.html"
    title = context["t"]["title"]
    return board.page(request, who, template, title=f"Todo: {title}", active="todos", **context)


@human_page
async def drawer_live(board: Board, request: Request, who) -> Response:  # noqa: ANN001
    """The parts of an open drawer a live update refreshes: its facts and actions, and its attempts."""
    try:
        context = await _load_drawer(board, who[0], request.path_params["todo_id"])
    except (NotFound, Invalid):
        return board.not_found(request, who)
    return board.page(request, who, "drawer_live.html", **context)


@human_post
async def act(board: Board, request: Request, who, form) -> Response:  # noqa: ANN001
    human = who[0]
    todo_id = request.path_params["todo_id"]
    action = request.path_params["action"]
    if action not in ACTIONS or len(todo_id) > 64:
        return board.not_found(request, who)
    note = _str(form.get("summary")).strip() or None
    core = board.core
    error = None
    status = 200
    try:
        if action == "claim":
            await todos.claim(core, human, todo_id, claimant=f"board:{human.name}")
        elif action == "complete":
            await todos.complete(core, human, todo_id, summary=note)
        elif action == "fail":
            await todos.fail(core, human, todo_id, summary=note)
        elif action == "release":
            await todos.release(core, human, todo_id, summary=note)
        elif action == "extend":
            await todos.heartbeat(core, human, todo_id)
        elif action == "retry":
            await todos.retry(core, human, todo_id)
        elif action == "cancel":
            await todos.cancel(core, human, todo_id)
        elif action == "input":
            raw = _str(form.get("payload"))
            try:
                payload = json.loads(raw)
            except ValueError as exc:
                raise Invalid(f"input is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                              argument="payload") from None
            await todos.provide_input(core, human, todo_id, payload=payload)
    except NotFound:
        return board.not_found(request, who)
    except Conflict:
        status = 409
        error = (f"{ACTIONS[action][0]} did not apply: this todo changed meanwhile (another worker or tab "
                 f"moved it). Nothing was changed; here is where it stands now.")
    except (Invalid, Forbidden) as exc:
        status = 422
        error = f"{ACTIONS[action][0]} did not apply: {exc.message}."
    except CoreError:
        raise
    if not is_hx(request) and error is None:
        return RedirectResponse(f"/todos/{todo_id}?done={action}", status_code=303, headers=NO_STORE)
    try:
        context = await _load_drawer(board, human, todo_id)
    except (NotFound, Invalid):
        return board.not_found(request, who)
    if error is None:
        context["notice"] = ACTIONS[action][1]
    else:
        context["error"] = error
    template = "drawer_content.html" if is_hx(request) else "todo_page.html"
    return board.page(request, who, template, status=status, title=f"Todo: {context['t']['title']}",
                      active="todos", **context)


# ---------------------------------------------------------------------------------------- new todo

def _new_form_context(eps: list[dict], values: dict | None = None, errors: dict | None = None) -> dict:
    active = [e for e in eps if e["state"] == "active"]
    return {"title": "New todo", "active": "new", "eps": active,
            "queues": sorted({q for e in active for q in e["queues"]}),
            "v": {"endpoint": "", "queue": "", "title": "", "payload": "", "max_attempts": "", **(values or {})},
            "errors": errors or {}}


@human_page
async def new_todo_form(board: Board, request: Request, who) -> Response:  # noqa: ANN001
    eps = await _endpoint_rows(board, who[0])
    values = {"endpoint": request.query_params.get("endpoint", "")[:64]}
    return board.page(request, who, "new_todo.html", **_new_form_context(eps, values))


@human_post
async def new_todo_submit(board: Board, request: Request, who, form) -> Response:  # noqa: ANN001
    human = who[0]
    values = {k: _str(form.get(k)) for k in ("endpoint", "queue", "title", "payload", "max_attempts")}
    errors: dict[str, str] = {}
    payload = None
    if values["payload"].strip():
        try:
            payload = json.loads(values["payload"])
        except ValueError as exc:
            errors["payload"] = f"Payload is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
    max_attempts = None
    if values["max_attempts"].strip():
        if not values["max_attempts"].strip().isdigit():
            errors["max_attempts"] = "Max attempts must be a whole number from 1 to 100."
        else:
            max_attempts = int(values["max_attempts"])
    if not values["endpoint"]:
        errors["endpoint"] = "Choose an endpoint."
    if not values["title"].strip():
        errors["title"] = "A title is required."
    if not errors:
        try:
            todo, _ = await producer.push(board.core, human, values["endpoint"], title=values["title"].strip(),
                                          queue=values["queue"].strip() or None, payload=payload,
                                          max_attempts=max_attempts, source="board")
        except (Invalid, NotFound) as exc:
            field = {"slug": "endpoint", "endpoint": "endpoint", "queue": "queue", "title": "title",
                     "payload": "payload", "max_attempts": "max_attempts"}.get(exc.argument or "", "title")
            message = "Choose one of your endpoints." if isinstance(exc, NotFound) else exc.message
            errors[field] = message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
        else:
            return RedirectResponse(f"/todos/{todo['id']}", status_code=303, headers=NO_STORE)
    eps = await _endpoint_rows(board, human)
    return board.page(request, who, "new_todo.html", status=422, **_new_form_context(eps, values, errors))


def routes() -> list[Route]:
    return [
        Route("/todos", todos_screen, methods=["GET"]),
        Route("/todos/new", new_todo_form, methods=["GET"]),
        Route("/todos/new", new_todo_submit, methods=["POST"]),
        Route("/todos/{todo_id}", drawer, methods=["GET"]),
        Route("/todos/{todo_id}/live", drawer_live, methods=["GET"]),
        Route("/todos/{todo_id}/{action}", act, methods=["POST"]),
    ]
