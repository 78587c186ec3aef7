"""The Board: the web UI where humans see and steer their agents' work (SYSTEM.md section 9).

Starlette routes, Jinja2 templates with autoescape, htmx and Pico CSS served from this package, no
inline script. Sign-in and sessions live in `login.py` and `sessions.py`, the todos screen and the
attempt drawer in `todo_pages.py`, vending and revocation in `endpoint_pages.py`, the outcome charts
and the endpoint queues' admission policies in `queue_pages.py`, teams in `team_pages.py`, the routes
that change an admission policy in `admission_pages.py`, chat sinks in `notification_pages.py`, notify
hooks and their delivery log in `hook_pages.py`, live updates in `live.py`. `build(runtime)`
makes the `kit.Board` object; the composition root (`web/app.py`) keeps it as
`app.state.surfaces.board` (handlers reach it through `kit.board_of(request)`) and passes it to any
other surface that adds screens (`board.extra_nav` to link them).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ...runtime import Component, Runtime
from . import (
    account_pages,
    admission_pages,
    endpoint_pages,
    hook_pages,
    intake_pages,
    live,
    login,
    notification_pages,
    queue_pages,
    team_pages,
    todo_pages,
)
from .kit import Board, NavLink
from .oidc import Oidc
from .reveal import Reveals
from .sessions import Sessions, load_secret

STATIC = Path(__file__).parent / "static"


def build(runtime: Runtime) -> Board:
    """The Board object: settings, signed sessions (the secret from the settings or the data dir)."""
    settings = runtime.settings
    secret = load_secret(settings.secret_key, Path(settings.data_dir))
    board = Board(settings, Sessions(secret, secure=settings.public_base_url.startswith("https://")), Reveals(secret),
                  Oidc(settings, secret))
    board.hub = live.LiveHub(board)
    board.nav.append(NavLink("Teams", "/teams", "teams"))
    board.nav.append(NavLink("Notifications", "/notifications", "notifications"))
    board.nav.append(NavLink("Webhooks", "/hooks", "hooks"))
    board.nav.append(NavLink("Intake", "/intakes", "intake"))
    board.nav.append(NavLink("Account", "/account", "account"))
    return board


def component(board: Board, runtime: Runtime) -> Component:
    hub = board.hub
    unsubscribe = []

    async def start() -> None:
        board.core = runtime.core
        board.loop = asyncio.get_running_loop()
        unsubscribe.append(runtime.core.bus.subscribe_batch(hub.publish_many))
        hub.origin = runtime.notes.origin
        unsubscribe.append(runtime.listener.subscribe(on_live=hub.hear))

    async def stop() -> None:
        while unsubscribe:
            unsubscribe.pop()()

    routes = [*login.routes(), *todo_pages.routes(), *live.routes(), *endpoint_pages.routes(),
              *queue_pages.routes(), *team_pages.routes(), *admission_pages.routes(), *account_pages.routes(),
              *notification_pages.routes(), *hook_pages.routes(), *intake_pages.routes(),
              Mount("/static", app=StaticFiles(directory=STATIC), name="static")]
    return Component(name="board", routes=routes, start=start, stop=stop)
