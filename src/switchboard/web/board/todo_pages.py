"""The todos screen, the todo drawer (SPEC-0034 REQ-13), the owner's actions, and the new-todo form.

Every read goes through the core with a `HumanCaller`, so a todo of another human's endpoint is the
same not-found as an id never minted (REQ-10). Actions are the owner-action table (core/actions.py):
the drawer offers the ones that apply to the todo as it stands, and the POST handler performs them
(fence-exempt, REQ-6). Refusals map to statuses in one place (`STATUS`): not_found 404 (the same page
as an unknown id), conflict 409 (the drawer with a plain message), deferred 409 (admission control
holds the queue back: the same, saying why), forbidden 403, invalid 422 (the
drawer or form with the message naming the field).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import endpoints, inputs, producer, teams, todos
from ...core.actions import ACTIONS, ActionField, available, perform
from ...core.errors import CoreError, Invalid, NotFound
from ...core.models import HumanCaller
from ...core.states import STATE_LABELS, TODO_STATES
from .kit import NO_STORE, Board, human_page, human_post, is_hx

PAGE_SIZE = 25
# The Board's statuses for the core's refusals (not_found renders the shared not-found page).
STATUS = {"invalid": 422, "forbidden": 403, "not_found": 404, "conflict": 409, "deferred": 409}


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
    offered = available(todo)
    return {
        "t": todo,
        "state_label": STATE_LABELS.get(state, state),
        "held_by": _owner_label(todo, human, agents.get(todo.get("endpoint") or "")),
        "actions": [(a.name, a.label) for a in offered if a.name != "input"],
        "wants_input": any(a.name == "input" for a in offered),
        "takes_note": any("summary" in a.field_names for a in offered),
    }


async def _load_drawer(board: Board, human: HumanCaller, todo_id: str) -> dict:
    todo = await todos.get(board.core, human, todo_id)
    agents = {e["slug"]: e["agent"] for e in await _endpoint_rows(board, human)}
    return _drawer_context(todo, human, agents)


# ------------------------------------------------------------------------------------- todos list

def _filters(request: Request) -> tuple[dict, str | None]:
    """Decode the query string; the core checks the values (see `todos_screen`)."""
    q = request.query_params
    f = {"endpoint": q.get("endpoint", "").strip(), "queue": q.get("queue", "").strip(),
         "team": q.get("team", "").strip(), "state": q.get("state", "").strip(), "dead": q.get("dead") == "1",
         "page": 1}
    page = q.get("page", "1")
    if not page.isdigit() or not 1 <= int(page) <= 100000:
        return f, "page must be a whole number from 1"
    f["page"] = int(page)
    return f, None


async def _list(board: Board, human: HumanCaller, f: dict) -> tuple[list[dict], dict]:
    rows = await todos.list_for_human(board.core, human, endpoint=f["endpoint"] or None, queue=f["queue"] or None,
                                      state=f["state"] or None, dead_letter=f["dead"], limit=PAGE_SIZE + 1,
                                      offset=(f["page"] - 1) * PAGE_SIZE, team=f["team"] or None)
    counts = await todos.counts_for_human(board.core, human, endpoint=f["endpoint"] or None,
                                          queue=f["queue"] or None, team=f["team"] or None)
    return rows, counts


def _query(f: dict, **change: Any) -> str:
    merged = {**f, **change}
    params = {k: v for k, v in (("endpoint", merged["endpoint"]), ("team", merged["team"]),
                                ("queue", merged["queue"]), ("state", merged["state"])) if v}
    if merged["dead"]:
        params["dead"] = "1"
    if merged["page"] and merged["page"] != 1:
        params["page"] = str(merged["page"])
    return "/todos" + ("?" + urlencode(params) if params else "")


@human_page
async def todos_screen(board: Board, request: Request, who) -> Response:
    human = who[0]
    f, error = _filters(request)
    try:
        rows, counts = await _list(board, human, f)
    except Invalid as exc:  # a filter the core refused: say so and show the list without it
        error = error or exc.message
        f = {**f, "endpoint": "", "queue": "", "team": "", "state": ""}
        rows, counts = await _list(board, human, f)
    more = len(rows) > PAGE_SIZE
    eps = await _endpoint_rows(board, human)
    my_teams = await teams.list_for_human(board.core, human)
    queues = sorted({q for e in eps for q in e["queues"]} | ({f["queue"]} if f["queue"] else set()))
    context: dict[str, Any] = dict(
        title="Todos", active="todos", rows=rows[:PAGE_SIZE], counts=counts, f=f, eps=eps, queues=queues,
        teams=my_teams,
        error=error, states=TODO_STATES, state_labels=STATE_LABELS, panel_url=_query(f),
        newer_url=_query(f, page=f["page"] - 1) if f["page"] > 1 else None,
        older_url=_query(f, page=f["page"] + 1) if more else None,
        count_url=lambda **c: _query(f, page=1, **c),
    )
    template = "todos_panel.html" if request.headers.get("x-sb-part") == "panel" else "todos.html"
    return board.page(request, who, template, status=400 if error else 200, **context)


# ------------------------------------------------------------------------------------------ drawer

@human_page
async def drawer(board: Board, request: Request, who) -> Response:
    try:
        context = await _load_drawer(board, who[0], request.path_params["todo_id"])
    except (NotFound, Invalid):
        return board.not_found(request, who)
    done = ACTIONS.get(request.query_params.get("done", ""))
    if done is not None:
        context["notice"] = done.done
    template = "drawer.html" if is_hx(request) else "todo_page.html"
    title = context["t"]["title"]
    return board.page(request, who, template, title=f"Todo: {title}", active="todos", **context)


@human_page
async def drawer_live(board: Board, request: Request, who) -> Response:
    """The parts of an open drawer a live update refreshes: its facts and actions, and its attempts."""
    try:
        context = await _load_drawer(board, who[0], request.path_params["todo_id"])
    except (NotFound, Invalid):
        return board.not_found(request, who)
    return board.page(request, who, "drawer_live.html", **context)


def _decode(field: ActionField, raw: str) -> object:
    """A form value as the action's field type; an empty value leaves the field out."""
    if field.kind == "text":
        return raw.strip() or None
    if not raw.strip():
        return None
    if field.kind == "json":
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise Invalid(f"{field.name} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                          argument=field.name) from None
    if field.kind == "boolean":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    try:
        return int(raw)
    except ValueError:
        raise Invalid(f"{field.name} must be a whole number", argument=field.name) from None


@human_post
async def act(board: Board, request: Request, who, form) -> Response:
    human = who[0]
    todo_id = request.path_params["todo_id"]
    action = ACTIONS.get(request.path_params["action"])
    if action is None:
        return board.not_found(request, who)
    error = None
    status = 200
    try:
        fields: dict[str, Any] = {f.name: _decode(f, _str(form.get(f.name))) for f in action.fields if f.name in form}
        await perform(board.core, human, action.name, todo_id, via="board",
                      **{k: v for k, v in fields.items() if v is not None})
    except CoreError as exc:
        status = STATUS.get(exc.code, 500)
        if status == 404 or exc.argument == "id":  # a malformed id is the same not-found as an unknown one
            return board.not_found(request, who)
        if status == 500:
            raise
        if exc.code == "conflict":
            error = (f"{action.label} did not apply: this todo changed meanwhile (another worker or tab "
                     f"moved it). Nothing was changed; here is where it stands now.")
        else:
            error = f"{action.label} did not apply: {exc.message}."
    if not is_hx(request) and error is None:
        return RedirectResponse(f"/todos/{todo_id}?done={action.name}", status_code=303, headers=NO_STORE)
    try:
        context = await _load_drawer(board, human, todo_id)
    except (NotFound, Invalid):
        return board.not_found(request, who)
    if error is None:
        context["notice"] = action.done
    else:
        context["error"] = error
    template = "drawer_content.html" if is_hx(request) else "todo_page.html"
    return board.page(request, who, template, status=status, title=f"Todo: {context['t']['title']}",
                      active="todos", **context)


# ---------------------------------------------------------------------------------------- new todo

TEAM_CHOICE = "team:"  # the endpoint select's value for a team is `team:<slug>`
MAX_TEAM_QUEUE_LISTS = 20


def _new_form_context(eps: list[dict], my_teams: list[dict], team_queues: list[str], values: dict | None = None,
                      errors: dict | None = None) -> dict:
    active = [e for e in eps if e["state"] == "active"]
    return {"title": "New todo", "active": "new", "eps": active, "teams": my_teams,
            "queues": sorted({q for e in active for q in e["queues"]} | set(team_queues)),
            "v": {"endpoint": "", "queue": "", "title": "", "payload": "", "max_attempts": "", **(values or {})},
            "errors": errors or {}}


async def _new_form_page(board: Board, request: Request, who, values: dict | None = None,
                         errors: dict | None = None, status: int = 200) -> Response:
    human = who[0]
    eps = await _endpoint_rows(board, human)
    my_teams = await teams.list_for_human(board.core, human)
    team_queues = []
    for t in my_teams[:MAX_TEAM_QUEUE_LISTS]:  # the team queues that exist, offered in the queue list
        shown = await teams.show(board.core, human, t["slug"])
        team_queues += [q["queue"] for q in shown["queues"]]
    return board.page(request, who, "new_todo.html", status=status,
                      **_new_form_context(eps, my_teams, team_queues, values, errors))


@human_page
async def new_todo_form(board: Board, request: Request, who) -> Response:
    values = {"endpoint": request.query_params.get("endpoint", "")[:64]}
    return await _new_form_page(board, request, who, values)


def _team_queue(slug: str, queue: str) -> str:
    """The label of a queue of the team `slug`: a bare name, or the team's own label as typed."""
    if not queue:
        raise Invalid("name the team queue, such as inbox", argument="queue")
    if inputs.is_team_label(queue):
        if inputs.team_label(queue)[0] != slug:
            raise Invalid(f"{queue} is not a queue of team {slug}", argument="queue")
        return queue
    return f"{inputs.TEAM_PREFIX}{slug}/{inputs.queue(queue)}"


async def _push(board: Board, human: HumanCaller, values: dict, payload: Any, max_attempts: int | None) -> dict:
    where, queue, title = values["endpoint"], values["queue"].strip(), values["title"].strip()
    if where.startswith(TEAM_CHOICE):
        label = _team_queue(where[len(TEAM_CHOICE):], queue)
        todo, _ = await producer.push_team(board.core, human, label, title=title, payload=payload,
                                           max_attempts=max_attempts, source="board")
    else:
        todo, _ = await producer.push(board.core, human, where, title=title, queue=queue or None, payload=payload,
                                      max_attempts=max_attempts, source="board")
    return todo


@human_post
async def new_todo_submit(board: Board, request: Request, who, form) -> Response:
    human = who[0]
    values = {k: _str(form.get(k)) for k in ("endpoint", "queue", "title", "payload", "max_attempts")}
    errors: dict[str, str] = {}
    payload = None
    if values["payload"].strip():
        try:
            payload = json.loads(values["payload"])
        except json.JSONDecodeError as exc:
            errors["payload"] = f"Payload is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
    max_attempts = None
    if values["max_attempts"].strip():
        try:
            max_attempts = int(values["max_attempts"])
        except ValueError:
            errors["max_attempts"] = "Max attempts must be a whole number."
    if not errors:  # the core checks every value (the endpoint or team, the queue, the title's rules, the range)
        try:
            todo = await _push(board, human, values, payload, max_attempts)
        except (Invalid, NotFound) as exc:
            field = {"slug": "endpoint", "endpoint": "endpoint", "team": "endpoint", "queue": "queue",
                     "title": "title", "payload": "payload", "max_attempts": "max_attempts"}.get(exc.argument or "",
                                                                                               "title")
            message = "Choose one of your endpoints or teams." if isinstance(exc, NotFound) else exc.message
            errors[field] = message[:1].upper() + message[1:] + ("" if message.endswith(".") else ".")
        else:
            return RedirectResponse(f"/todos/{todo['id']}", status_code=303, headers=NO_STORE)
    return await _new_form_page(board, request, who, values, errors, status=422)


def routes() -> list[Route]:
    return [
        Route("/todos", todos_screen, methods=["GET"]),
        Route("/todos/new", new_todo_form, methods=["GET"]),
        Route("/todos/new", new_todo_submit, methods=["POST"]),
        Route("/todos/{todo_id}", drawer, methods=["GET"]),
        Route("/todos/{todo_id}/live", drawer_live, methods=["GET"]),
        Route("/todos/{todo_id}/{action}", act, methods=["POST"]),
    ]
