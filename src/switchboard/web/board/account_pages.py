"""The account page: change your password (with the current one) and list and revoke your API tokens.

Every POST carries the CSRF token (`human_post`). The current password is checked through the same
throttle and gate as sign-in. A password change ends every Board session of the human (in the
database, so in every process) and starts a fresh one for this browser. Revoking a token takes
effect at once everywhere: the producer API looks every token up in the database. Another human's
token id answers exactly like an unknown one.
"""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...core import api_tokens, humans
from ...core.errors import Conflict, Invalid, NotFound
from .kit import NO_STORE, Board, human_page, human_post
from .login import check_password
from .sessions import SESSION_COOKIE, SESSION_SECONDS

log = logging.getLogger("switchboard.board")

NOTICES = {
    "password": "Your password is changed. Every other browser signed in as you is signed out.",
    "revoked": "The token is revoked. Requests that carry it are refused from now on.",
}


def _str(value) -> str:
    return value if isinstance(value, str) else ""


async def _page(board: Board, request: Request, who, *, status: int = 200, error: str | None = None,
                headers: dict | None = None) -> Response:
    tokens = await api_tokens.list_for(board.core, who[0])
    notice = NOTICES.get(request.query_params.get("done", "")) if status == 200 else None
    return board.page(request, who, "account.html", status=status, headers=headers, title="Account",
                      active="account", tokens=tokens, error=error, notice=notice)


@human_page
async def account(board: Board, request: Request, who) -> Response:
    return await _page(board, request, who)


@human_post
async def change_password(board: Board, request: Request, who, form) -> Response:
    human = who[0]
    current, new, again = (_str(form.get(k)) for k in ("current", "new", "again"))
    if not current or not new:
        return await _page(board, request, who, status=400, error="Enter your current password and a new one.")
    if new != again:
        return await _page(board, request, who, status=422, error="The two new passwords differ.")
    address = request.client.host if request.client else None
    checked, refusal = await check_password(board, human.name, current[:1024], address)
    if refusal is not None:
        wait, message = refusal
        return await _page(board, request, who, status=429, error=message, headers={"Retry-After": str(wait)})
    if checked is None or checked.human_id != human.human_id:
        log.info("password change refused", extra={"reason": "bad_credentials", "client": address})
        return await _page(board, request, who, status=400, error="Your current password is not right.")
    try:
        ended = await humans.set_password(board.core, human, new)
    except Invalid as exc:
        return await _page(board, request, who, status=422, error=f"New password: {exc.message}.")
    log.info("password changed", extra={"human": human.name, "sessions_ended": ended})
    value, _ = await board.sessions.start(board.core, human.human_id)
    response = RedirectResponse("/account?done=password", status_code=303, headers=NO_STORE)
    response.set_cookie(SESSION_COOKIE, value, max_age=SESSION_SECONDS, **board.sessions.cookie_args())
    return response


@human_post
async def revoke_token(board: Board, request: Request, who, form) -> Response:
    try:
        row, _ = await api_tokens.revoke(board.core, who[0], request.path_params["token_id"])
    except (NotFound, Conflict):  # an id of someone else's token reads like an unknown one
        return board.not_found(request, who, "token")
    log.info("token revoked", extra={"human": who[0].name, "prefix": row["prefix"]})
    return RedirectResponse("/account?done=revoked", status_code=303, headers=NO_STORE)


def routes() -> list[Route]:
    return [
        Route("/account", account, methods=["GET"]),
        Route("/account/password", change_password, methods=["POST"]),
        Route("/account/tokens/{token_id}/revoke", revoke_token, methods=["POST"]),
    ]
