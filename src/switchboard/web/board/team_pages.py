"""Teams (issue 13, docs/teams.md): the list of the human's teams with their role, a form to create one,
and each team's page: members and roles, the team's queues with their counts and admission policies,
and the grants of team queues to members' endpoints.

Every change goes through `core/teams.py`, which checks the caller's role: a `member` reads and may
leave; an `admin` also manages members and grants; an `owner` also manages owners and deletes the team.
The page offers only the controls the role allows, and the server refuses the others anyway (403). A
team the human does not belong to is the shared 404, the same bytes as a team that does not exist.
Refusals map to statuses in one place (`_refused`): a bad value 422 naming the field, a name that
matches nobody 422 too, a conflict 409, a role refusal 403.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import admission, endpoints, inputs, teams
from ...core.errors import Conflict, CoreError, Forbidden, Invalid, NotFound
from . import admission_view
from .kit import NO_STORE, Board, human_page, human_post

ROLES = inputs.TEAM_ROLES
NOTICES = {
    "created": "The team is created; you are its owner.",
    "added": "The member is added.",
    "role": "The role is changed.",
    "removed": "The member is removed; the team todos their agents held are back in the queue.",
    "granted": "The queue is granted to the endpoint.",
    "ungranted": "The grant is taken back; the team todos the endpoint held are back in the queue.",
    **admission_view.NOTICES,
}
LIST_NOTICES = {
    "left": "You left the team; the team todos your agents held are back in its queues.",
    "deleted": "The team is deleted, with its todos, grants and policies.",
}
FIELD_LABELS = {"slug": "Slug", "name": "Name", "human": "Member", "role": "Role", "queue": "Queue",
                "endpoint": "Endpoint", "team": "Team"}


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _team_path(slug: str, done: str | None = None, anchor: str = "") -> str:
    return f"/teams/{slug}" + (f"?{urlencode({'done': done})}" if done else "") + anchor


# ------------------------------------------------------------------------------------------- list

async def _list_page(board: Board, request: Request, who, *, status: int = 200, error: str | None = None,
                     error_field: str | None = None, values: dict | None = None) -> Response:
    rows = await teams.list_for_human(board.core, who[0])
    notice = LIST_NOTICES.get(request.query_params.get("done", "")) if status == 200 else None
    return board.page(request, who, "teams.html", status=status, title="Teams", active="teams", teams=rows,
                      notice=notice, error=error, error_field=error_field,
                      v={"slug": "", "name": "", **(values or {})})


@human_page
async def teams_screen(board: Board, request: Request, who) -> Response:
    return await _list_page(board, request, who)


@human_post
async def create_team(board: Board, request: Request, who, form) -> Response:
    values = {"slug": _str(form.get("slug")), "name": _str(form.get("name"))}
    try:
        team = await teams.create(board.core, who[0], values["slug"], values["name"] or None)
    except (Invalid, Conflict) as exc:
        field = exc.argument if exc.argument in ("slug", "name") else "slug"
        return await _list_page(board, request, who, status=422 if isinstance(exc, Invalid) else 409,
                                error=f"{FIELD_LABELS[field]}: {exc.message}.", error_field=field, values=values)
    return RedirectResponse(_team_path(team["slug"], "created"), status_code=303, headers=NO_STORE)


# ------------------------------------------------------------------------------------------- page

def _queue_rows(team: dict[str, Any], policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The team's queues (those with todos or grants, and those with a policy), each with its counts
    and its policy (None without one)."""
    prefix = f"{inputs.TEAM_PREFIX}{team['slug']}/"
    by_queue = {p["queue"]: p for p in policies if p["queue"].startswith(prefix) and p.get("endpoint") is None}
    rows = {q["queue"]: {**q, "policy": by_queue.get(q["queue"])} for q in team["queues"]}
    for label, p in by_queue.items():
        rows.setdefault(label, {"queue": label, "pending": p["pending"], "in_flight": 0, "parked": 0, "dead": 0,
                                "policy": p})
    out = []
    for i, label in enumerate(sorted(rows)):
        row = rows[label]
        row["name"] = label[len(prefix):]
        row["key"] = f"q{i}"
        out.append(row)
    return out


async def render_team(board: Board, request: Request, who, slug: str, *, status: int = 200,
                      error: str | None = None, error_field: str | None = None, values: dict | None = None,
                      policy_failed: dict[str, Any] | None = None) -> Response:
    """The team page (also rendered again, with the message, by a refused form)."""
    try:
        team = await teams.show(board.core, who[0], slug)
    except NotFound:
        return board.not_found(request, who, "team")
    policies = await admission.list_for_human(board.core, who[0])
    queues = _queue_rows(team, policies)
    role = team["role"]
    manager = role in teams.MANAGERS
    my_eps = [e for e in await endpoints.list_for_human(board.core, who[0]) if e["state"] == "active"]
    notice = NOTICES.get(request.query_params.get("done", "")) if status == 200 else None
    return board.page(
        request, who, "team.html", status=status, title=f"Team {team['name']}", active="teams", team=team,
        role=role, manager=manager, owner=role == "owner", queues=queues, my_eps=my_eps, roles=ROLES,
        notice=notice, error=error, error_field=error_field,
        v={"name": "", "role": "member", "queue": "", "endpoint": "", **(values or {})},
        me=who[0].name, **admission_view.context(policy_failed),
        policy_values=lambda q: admission_view.form_values(q["policy"], q["queue"], None, policy_failed))


@human_page
async def team_screen(board: Board, request: Request, who) -> Response:
    return await render_team(board, request, who, request.path_params["slug"])


async def _refused(board: Board, request: Request, who, exc: CoreError, values: dict[str, str],
                   message: str | None = None) -> Response:
    slug = request.path_params["slug"]
    if isinstance(exc, NotFound) and exc.argument in (None, "team"):
        return board.not_found(request, who, "team")
    if isinstance(exc, Forbidden):
        return board.page(request, who, "refused.html", status=403, title="Not allowed", message=exc.message,
                          back=_team_path(slug))
    if isinstance(exc, Conflict):
        status = 409
    elif isinstance(exc, (Invalid, NotFound)):
        status = 422
    else:
        raise exc
    field = exc.argument or ""
    label = FIELD_LABELS.get(field, "Team")
    return await render_team(board, request, who, slug, status=status, error=f"{label}: {message or exc.message}.",
                             error_field=field, values=values)


def _form_values(form, *names: str) -> dict[str, str]:
    return {n: _str(form.get(n)) for n in names}


@human_post
async def add_member(board: Board, request: Request, who, form) -> Response:
    slug, values = request.path_params["slug"], _form_values(form, "name", "role")
    try:
        await teams.add_member(board.core, who[0], slug, values["name"], values["role"] or "member")
    except CoreError as exc:
        unknown = isinstance(exc, NotFound) and exc.argument == "human"
        return await _refused(board, request, who, exc, values,
                              f"there is no account named {values['name']}" if unknown else None)
    return RedirectResponse(_team_path(slug, "added", "#sb-members"), status_code=303, headers=NO_STORE)


@human_post
async def change_role(board: Board, request: Request, who, form) -> Response:
    slug, values = request.path_params["slug"], _form_values(form, "name", "role")
    try:
        await teams.set_role(board.core, who[0], slug, values["name"], values["role"])
    except CoreError as exc:
        return await _refused(board, request, who, exc, {})
    return RedirectResponse(_team_path(slug, "role", "#sb-members"), status_code=303, headers=NO_STORE)


@human_post
async def remove_member(board: Board, request: Request, who, form) -> Response:
    slug, values = request.path_params["slug"], _form_values(form, "name")
    try:
        await teams.remove_member(board.core, who[0], slug, values["name"])
    except CoreError as exc:
        return await _refused(board, request, who, exc, {})
    return RedirectResponse(_team_path(slug, "removed", "#sb-members"), status_code=303, headers=NO_STORE)


@human_post
async def leave(board: Board, request: Request, who, form) -> Response:
    try:
        await teams.leave(board.core, who[0], request.path_params["slug"])
    except CoreError as exc:
        return await _refused(board, request, who, exc, {})
    return RedirectResponse("/teams?done=left", status_code=303, headers=NO_STORE)


@human_post
async def grant(board: Board, request: Request, who, form) -> Response:
    slug, values = request.path_params["slug"], _form_values(form, "queue", "endpoint")
    try:
        await teams.grant(board.core, who[0], slug, values["queue"], values["endpoint"])
    except CoreError as exc:
        unknown = isinstance(exc, NotFound) and exc.argument == "endpoint"
        return await _refused(board, request, who, exc, values,
                              "no endpoint of a member of this team has that slug" if unknown else None)
    return RedirectResponse(_team_path(slug, "granted", "#sb-grants"), status_code=303, headers=NO_STORE)


@human_post
async def ungrant(board: Board, request: Request, who, form) -> Response:
    slug, values = request.path_params["slug"], _form_values(form, "queue", "endpoint")
    try:
        await teams.ungrant(board.core, who[0], slug, values["queue"], values["endpoint"])
    except CoreError as exc:
        return await _refused(board, request, who, exc, {})
    return RedirectResponse(_team_path(slug, "ungranted", "#sb-grants"), status_code=303, headers=NO_STORE)


@human_page
async def delete_confirm(board: Board, request: Request, who) -> Response:
    try:
        team = await teams.show(board.core, who[0], request.path_params["slug"])
    except NotFound:
        return board.not_found(request, who, "team")
    live = sum(q["pending"] + q["in_flight"] + q["parked"] for q in team["queues"])
    return board.page(request, who, "team_delete.html", title=f"Delete team {team['name']}", active="teams",
                      team=team, live=live, owner=team.get("role") == "owner")


@human_post
async def delete(board: Board, request: Request, who, form) -> Response:
    try:
        await teams.delete(board.core, who[0], request.path_params["slug"])
    except CoreError as exc:
        return await _refused(board, request, who, exc, {})
    return RedirectResponse("/teams?done=deleted", status_code=303, headers=NO_STORE)


def routes() -> list[Route]:
    return [
        Route("/teams", teams_screen, methods=["GET"]),
        Route("/teams", create_team, methods=["POST"]),
        Route("/teams/{slug}", team_screen, methods=["GET"]),
        Route("/teams/{slug}/members", add_member, methods=["POST"]),
        Route("/teams/{slug}/members/role", change_role, methods=["POST"]),
        Route("/teams/{slug}/members/remove", remove_member, methods=["POST"]),
        Route("/teams/{slug}/leave", leave, methods=["POST"]),
        Route("/teams/{slug}/grants", grant, methods=["POST"]),
        Route("/teams/{slug}/grants/remove", ungrant, methods=["POST"]),
        Route("/teams/{slug}/delete", delete_confirm, methods=["GET"]),
        Route("/teams/{slug}/delete", delete, methods=["POST"]),
    ]
