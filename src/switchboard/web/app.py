"""The Starlette application: one lifespan that owns the database, the core, the sweeps and every
surface component.

A component is a module under `switchboard` with `def component(ctx: AppContext) -> Component`.
Components contribute routes, may wrap the ASGI app (outermost last), and get start/stop calls inside
the lifespan, in order (stop in reverse).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from ..config import Settings
from ..core import health, sweeps
from ..core.models import Core
from ..db.database import Database
from ..db.pool import open_pool

log = logging.getLogger("switchboard.web")

# Surface components, in start order. Missing modules are skipped (a feature not built yet).
COMPONENTS = (
    "switchboard.web.metrics",
    "switchboard.web.hooks",
    "switchboard.mcp.server",
    "switchboard.mcp.doorbell",
    "switchboard.mcp.a2ui",
    "switchboard.web.api",
    "switchboard.web.board",
    "switchboard.web.security",  # last: its wrap is outermost, so every response gets the headers
)


@dataclass
class AppContext:
    """Shared by the components of one process: the core and anything they publish to each other."""

    settings: Settings
    core: Core | None = None
    shared: dict[str, Any] = field(default_factory=dict)


@dataclass
class Component:
    name: str
    routes: list[BaseRoute] = field(default_factory=list)
    wrap: Callable[[ASGIApp], ASGIApp] | None = None
    start: Callable[[], Awaitable[None]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None


def _load_components(ctx: AppContext, names: tuple[str, ...]) -> list[Component]:
    out = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        if hasattr(module, "component"):
            out.append(module.component(ctx))
    return out


async def healthz(request: Request) -> JSONResponse:
    ctx: AppContext = request.app.state.ctx
    if await health.database_reachable(ctx.core):  # type: ignore[arg-type]
        return JSONResponse({"status": "ok", "database": "ok"})
    return JSONResponse({"status": "degraded", "database": "unreachable"}, status_code=503)


def create_app(settings: Settings, *, components: tuple[str, ...] = COMPONENTS,
               on_ready: Callable[[AppContext], None] | None = None) -> Starlette:
    ctx = AppContext(settings=settings)
    parts = _load_components(ctx, components)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        db = Database(settings)
        await db.start()
        stop = asyncio.Event()
        started: list[Component] = []
        sweeper = None
        pool = None
        try:
            await db.migrate()
            pool = await open_pool(db.uri, min_size=2, max_size=20)
            ctx.core = Core(pool=pool, settings=settings)
            ctx.core.database = db  # type: ignore[attr-defined]
            ctx.shared["database_uri"] = db.uri
            for part in parts:
                if part.start:
                    await part.start()
                started.append(part)
            sweeper = asyncio.create_task(sweeps.run_forever(ctx.core, stop), name="sweeps")
            if on_ready:
                on_ready(ctx)
            yield
        finally:
            stop.set()
            if sweeper:
                sweeper.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sweeper
            for part in reversed(started):
                if part.stop:
                    try:
                        await part.stop()
                    except Exception:
                        log.exception("component stop failed", extra={"event": part.name})
            if pool is not None:
                await pool.close()
            await db.stop()

    routes: list[BaseRoute] = [Route("/healthz", healthz, methods=["GET"])]
    for part in parts:
        routes.extend(part.routes)
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.ctx = ctx
    asgi: ASGIApp = app
    for part in parts:
        if part.wrap:
            asgi = part.wrap(asgi)
    if asgi is not app:
        asgi.state = app.state  # type: ignore[attr-defined]
        asgi.router = app.router  # type: ignore[attr-defined]
    return asgi  # type: ignore[return-value]
