"""Sign-in, sign-out and the dev login (SYSTEM.md section 9).

`POST /login` checks the sign-in form token first (403 when it is missing or wrong), then the
throttle (429 while this account from this address, or this address, must wait; or while the global
ceiling of password checks is reached), then the password in a worker thread behind a small gate
(`throttle.py`). A successful sign-in starts a session in the database; `POST /logout` ends it for
good. `POST /auth/dev-login` exists only when `SWITCHBOARD_DEV_LOGIN=1`; otherwise both its methods
answer 404.

A crowd of wrong sign-ins is answered on the event loop that also serves `/healthz` and MCP, so the
sign-in forms keep that work small: the URL-encoded form (what the page posts) is parsed with the
standard library, several times cheaper than the general form parser, and refusals are logged at
most once a second per reason (`LoginThrottle.quiet`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ...core import humans
from ...core.errors import Conflict, NotFound
from . import oidc
from .kit import AUTH_BODY_CAP, NO_STORE, Board, BodyTooLarge, board_of, human_post, safe_next
from .sessions import LOGIN_COOKIE, LOGIN_FORM_SECONDS, SESSION_COOKIE, SESSION_SECONDS

log = logging.getLogger("switchboard.board")

DEV_HUMAN = "dev"


def _board(request: Request) -> Board:
    return board_of(request)


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def _login_page(board: Board, request: Request, *, next_path: str, status: int = 200, error: str | None = None,
                name: str = "", headers: dict | None = None) -> Response:
    token = request.cookies.get(LOGIN_COOKIE)
    if not token or len(token) > 128:
        token = board.sessions.new_login_token()
    response = board.page(request, None, "login.html", status=status, headers=headers, title="Sign in",
                          login_token=token, next_path=next_path, error=error, name=name,
                          dev_login=board.settings.dev_login, providers=oidc.buttons(board),
                          start_path=oidc.START_PATH)
    response.set_cookie(LOGIN_COOKIE, token, max_age=LOGIN_FORM_SECONDS, **board.sessions.cookie_args())
    return response


async def _signed_in_response(board: Board, human_id, next_path: str) -> Response:
    value, _ = await board.sessions.start(board.core, human_id)
    response = RedirectResponse(next_path, status_code=303, headers=NO_STORE)
    response.set_cookie(SESSION_COOKIE, value, max_age=SESSION_SECONDS, **board.sessions.cookie_args())
    response.delete_cookie(LOGIN_COOKIE, **board.sessions.cookie_args())
    return response


async def home(request: Request) -> Response:
    board = _board(request)
    who = await board.signed_in(request)
    return RedirectResponse("/todos" if who else "/login", status_code=303, headers=NO_STORE)


async def login_form(request: Request) -> Response:
    board = _board(request)
    next_path = safe_next(request.query_params.get("next"))
    if await board.signed_in(request):
        return RedirectResponse(next_path, status_code=303, headers=NO_STORE)
    return _login_page(board, request, next_path=next_path)


async def login_submit(request: Request) -> Response:
    board = _board(request)
    checked = await _sign_in_form(board, request)
    if isinstance(checked, Response):
        return checked
    form, next_path = checked
    name = _str(form.get("name")).strip()
    password = _str(form.get("password"))
    if not name or not password:
        return _login_page(board, request, next_path=next_path, status=400, name=name,
                           error="Enter your user name and your password.")
    address = _client(request)
    account = name[:64]
    human, refusal = await check_password(board, account, password[:1024], address)
    if refusal is not None:
        wait, message = refusal
        return _login_page(board, request, next_path=next_path, status=429, name=name,
                           headers={"Retry-After": str(wait)}, error=message)
    if human is None:
        log.info("sign-in failed", extra={"reason": "bad_credentials", "client": address})
        return _login_page(board, request, next_path=next_path, status=401, name=name,
                           error="That user name and password do not match.")
    log.info("signed in", extra={"human": human.name})
    return await _signed_in_response(board, human.human_id, next_path)


async def check_password(board: Board, account: str, password: str, address: str | None):
    """(human or None, None) after a password check, or (None, (retry after, message)) when the
    throttle refuses to check it now. Used by sign-in and by the account page's password change."""
    throttle, core = board.throttle, board.core
    wait = await throttle.attempt(core, account, address)  # counted before the check, so concurrent guesses see it
    if wait:
        _log_refusal(throttle, "sign-in throttled", "throttled", address)
        return None, (wait, f"Too many failed sign-ins for this account from this address. "
                            f"Try again in {wait} seconds.")
    busy = throttle.admit()
    if busy:
        await throttle.forgive(core, account, address)
        _log_refusal(throttle, "sign-in ceiling reached", "busy", address)
        return None, (busy, f"Too many sign-ins on this server right now. Try again in {busy} seconds.")
    try:
        async with throttle.verifying():
            human = await humans.verify_password(core, account, password)
    except Exception:  # the database failed, not the guess: it does not count
        with contextlib.suppress(Exception):
            await throttle.forgive(core, account, address)
        raise
    if human is not None:
        await throttle.succeeded(core, account, address)
    else:
        await throttle.confirm_failure(core, account, address)
    return human, None


def _log_refusal(throttle, message: str, reason: str, address: str | None) -> None:
    held = throttle.quiet(reason)
    if held is None:
        return
    if held:
        message = f"{message} ({held} more refused since the last such line)"
    log.warning(message, extra={"reason": reason, "client": address})


@human_post
async def logout(board: Board, request: Request, who, form) -> Response:
    await board.sessions.end(board.core, who[1])
    response = RedirectResponse("/login", status_code=303, headers=NO_STORE)
    response.delete_cookie(SESSION_COOKIE, **board.sessions.cookie_args())
    return response


async def dev_login(request: Request) -> Response:
    board = _board(request)
    if not board.settings.dev_login:
        return HTMLResponse("Not Found", status_code=404, headers=NO_STORE)
    if request.method != "POST":
        return RedirectResponse("/login", status_code=303, headers=NO_STORE)
    checked = await _sign_in_form(board, request)
    if isinstance(checked, Response):
        return checked
    _, next_path = checked
    log.warning("DEV LOGIN used: no password checked (SWITCHBOARD_DEV_LOGIN=1; never enable this in production)",
                extra={"reason": "dev_login", "client": _client(request)})
    try:
        human = await humans.by_name(board.core, DEV_HUMAN)
    except NotFound:
        try:
            human = await humans.add(board.core, DEV_HUMAN, None)
        except Conflict:
            human = await humans.by_name(board.core, DEV_HUMAN)
    return await _signed_in_response(board, human.human_id, next_path)


async def _sign_in_form(board, request: Request):
    """The posted sign-in form and its local `next`, or the response refusing it (too large, or a
    login token that is missing, expired or from another site)."""
    try:
        form = await _posted_form(board, request)
    except BodyTooLarge:
        return HTMLResponse("request body too large", status_code=413, headers=NO_STORE)
    next_path = safe_next(form.get("next"))
    if not board.sessions.login_token_ok(request.cookies.get(LOGIN_COOKIE), _str(form.get("login_token"))):
        return _login_page(board, request, next_path=next_path, status=403,
                           error="The sign-in form had expired or was not sent from this site. Please try again.")
    return form, next_path


MAX_FORM_FIELDS = 200


async def _posted_form(board: Board, request: Request) -> Mapping[str, Any]:
    """The sign-in form's fields (the last value of a repeated name, as Starlette's form has it).
    An `application/x-www-form-urlencoded` body, which the sign-in pages post, is decoded with the
    standard library exactly as Starlette's parser decodes it (latin-1 bytes, then `+` and
    %-escapes as UTF-8), at a fraction of its cost; any other body goes through Starlette's parser."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return await board.form(request, AUTH_BODY_CAP)
    body = await board.body(request, AUTH_BODY_CAP)
    try:
        return dict(parse_qsl(body.decode("latin-1"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS))
    except ValueError:
        raise HTTPException(status_code=400, detail=f"Too many fields. Maximum number of fields is "
                                                    f"{MAX_FORM_FIELDS}.") from None


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def routes() -> list[Route]:
    return [
        Route("/", home, methods=["GET"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login_submit, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/auth/dev-login", dev_login, methods=["GET", "POST"]),
        *oidc.routes(),
    ]
