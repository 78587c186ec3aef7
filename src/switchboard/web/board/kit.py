"""The Board's shared machinery: templates, the signed-in human, CSRF, body caps and page responses.

Other surfaces that add Board screens (the notify-hook delivery log, for one) use it without
touching the Board's files:

- a link in the Board's navigation: append `(label, path)` to `board.extra_nav` (the composition
  root in `web/app.py` passes them the board; read at render time);
- their routes wrapped with `human_page` / `human_post` from this module (sign-in, then for POST the
  body cap and the CSRF check before the handler), handlers `fn(board, request, who[, form])`;
- `board.html_page(request, who, title, body)` to wrap their own escaped `Markup` in the Board layout
  (headers, navigation, `Cache-Control: no-store`); `board.not_found(request, who, what)` for the
  shared not-found body. In a handler, `board_of(request)` is the board object.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ...config import REQUEST_BODY_MAX_BYTES, Settings
from ...core.models import Core, HumanCaller
from .sessions import SESSION_COOKIE, Session, Sessions
from .throttle import LoginThrottle

if TYPE_CHECKING:
    from .live import LiveHub
    from .oidc import Oidc
    from .reveal import Reveals

log = logging.getLogger("switchboard.board")

BODY_CAP = REQUEST_BODY_MAX_BYTES
AUTH_BODY_CAP = 64 * 1024
NO_STORE = {"Cache-Control": "no-store"}
DEFAULT_NEXT = "/todos"


@dataclass
class NavLink:
    label: str
    path: str
    key: str  # compared with the page's `active` to set aria-current


class BodyTooLarge(Exception):
    pass


def safe_next(value: Any) -> str:
    """A local path to go to after sign-in; anything else (another origin, a scheme) becomes /todos."""
    if not isinstance(value, str) or not value or len(value) > 2048:
        return DEFAULT_NEXT
    if not value.startswith("/") or value.startswith("//"):
        return DEFAULT_NEXT
    if "\\" in value or any(ord(c) < 0x21 or ord(c) == 0x7F for c in value):
        return DEFAULT_NEXT
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return DEFAULT_NEXT
    return value


def is_https_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.netloc)


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _when(value: Any) -> str:
    """An RFC 3339 timestamp as `2026-09-22 14:01:05 UTC`."""
    if value is None:
        return ""
    if not isinstance(value, datetime):
        value = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _time(value: Any) -> Markup:
    if not value:
        return Markup("")
    iso = value if isinstance(value, str) else value.isoformat()
    return Markup('<time datetime="{}">{}</time>').format(iso, _when(value))


def make_env() -> Environment:
    env = Environment(loader=PackageLoader("switchboard.web.board", "templates"),
                      autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pretty_json"] = _pretty_json
    env.filters["when"] = _when
    env.filters["time"] = _time
    env.tests["https_url"] = is_https_url
    for name in env.list_templates():  # a template that does not parse stops start-up
        env.get_template(name)
    return env


class Board:
    # Attached after construction by build() (web/board/__init__.py): the live hub.
    hub: LiveHub

    def __init__(self, settings: Settings, sessions: Sessions, reveals: Reveals, oidc: Oidc,
                 extra_nav: list | None = None) -> None:
        self.settings = settings
        self.extra_nav = extra_nav if extra_nav is not None else []
        self.sessions = sessions
        self.reveals = reveals  # the one-time reveals of new secrets (reveal.py)
        self.oidc = oidc  # sign-in with OpenID Connect and GitHub (oidc.py)
        self.throttle = LoginThrottle()
        self.env = make_env()
        self._core: Core | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.nav: list[NavLink] = [
            NavLink("Todos", "/todos", "todos"),
            NavLink("New todo", "/todos/new", "new"),
            NavLink("Endpoints", "/endpoints", "endpoints"),
            NavLink("Queues", "/queues", "queues"),
        ]

    @property
    def core(self) -> Core:
        """The core, from the Board's start (web/board/__init__.py) on."""
        if self._core is None:
            raise RuntimeError("the Board has not started")
        return self._core

    @core.setter
    def core(self, core: Core) -> None:
        self._core = core

    # -------------------------------------------------------------------------------- humans

    async def signed_in(self, request: Request) -> tuple[HumanCaller, Session] | None:
        if "board_human" in request.scope:
            return request.scope["board_human"]
        found = None
        session = self.sessions.read(request.cookies.get(SESSION_COOKIE))
        if session is not None:
            human = await self.sessions.resolve(self.core, session)  # live in the database
            if human is not None:
                found = (human, session)
        request.scope["board_human"] = found
        return found

    # ---------------------------------------------------------------------------------- bodies

    async def body(self, request: Request, cap: int = BODY_CAP) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > cap):
            raise BodyTooLarge
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise BodyTooLarge
            chunks.append(chunk)
        body = b"".join(chunks)
        request._body = body  # request.form() reads the capped body from here
        return body

    async def form(self, request: Request, cap: int = BODY_CAP) -> FormData:
        await self.body(request, cap)
        return await request.form(max_files=0, max_fields=200)

    # ------------------------------------------------------------------------------- responses

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(**context)

    def context(self, request: Request, who: tuple[HumanCaller, Session] | None, **extra: Any) -> dict:
        human, session = who if who else (None, None)
        base = {
            "human": human,
            "csrf": self.sessions.csrf_token(session) if session else "",
            "nav": self.nav + [NavLink(str(item[0]), str(item[1]), str(item[1])) for item in self.extra_nav],
            "active": "",
            "title": "Switchboard",
            "hx": is_hx(request),
            "notice": None,
            "error": None,
        }
        base.update(extra)
        return base

    def page(self, request: Request, who: tuple[HumanCaller, Session] | None, template: str, *,
             status: int = 200, headers: dict | None = None, **extra: Any) -> HTMLResponse:
        html = self.render(template, **self.context(request, who, **extra))
        return HTMLResponse(html, status_code=status, headers={**NO_STORE, **(headers or {})})

    def html_page(self, request: Request, who: tuple[HumanCaller, Session] | None, title: str, body: Markup, *,
                  status: int = 200, active: str = "") -> HTMLResponse:
        """Another surface's screen in the Board layout; `body` must already be escaped markup."""
        return self.page(request, who, "generic.html", status=status, title=title, body=Markup(body),
                         active=active or request.url.path)

    def not_found(self, request: Request, who: tuple[HumanCaller, Session] | None,
                  what: str = "todo") -> HTMLResponse:
        """One body for every not-found of a kind: a foreign id and an unknown id look the same."""
        template = "not_found_part.html" if is_hx(request) else "not_found.html"
        return self.page(request, who, template, status=404, what=what, title="Not found")

    def to_login(self, request: Request) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        url = "/login?" + urlencode({"next": safe_next(target)})
        if is_hx(request):
            return Response(status_code=401, headers={**NO_STORE, "HX-Redirect": url})
        return RedirectResponse(url, status_code=303, headers=NO_STORE)

    def forbidden(self, message: str = "invalid CSRF token") -> Response:
        return HTMLResponse(self.render("forbidden.html", message=message, nav=[], human=None, csrf="",
                                        active="", title="Forbidden", hx=False, notice=None, error=None),
                            status_code=403, headers=NO_STORE)


def board_of(request: Request) -> Board:
    """The app's Board object (built once by the composition root, `web/app.py`)."""
    return request.app.state.surfaces.board


def is_hx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


Handler = Callable[..., Awaitable[Response]]


def human_page(fn: Handler) -> Handler:
    """A GET screen for a signed-in human: `fn(board, request, who)`; others go to the sign-in form."""

    @functools.wraps(fn)
    async def handler(request: Request) -> Response:
        board = board_of(request)
        who = await board.signed_in(request)
        if who is None:
            return board.to_login(request)
        return await fn(board, request, who)

    return handler


def human_post(fn: Handler) -> Handler:
    """A state-changing request: signed in, body within the cap, CSRF token checked before the
    handler (and so before any store call). `fn(board, request, who, form)`."""

    @functools.wraps(fn)
    async def handler(request: Request) -> Response:
        board = board_of(request)
        who = await board.signed_in(request)
        if who is None:
            return board.to_login(request)
        try:
            form = await board.form(request)
        except BodyTooLarge:
            return HTMLResponse("request body too large", status_code=413, headers=NO_STORE)
        token = form.get("csrf_token") or request.headers.get("x-csrf-token")
        if not board.sessions.csrf_ok(who[1], token if isinstance(token, str) else None):
            return board.forbidden()
        return await fn(board, request, who, form)

    return handler
