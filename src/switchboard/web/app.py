"""The composition root: the Starlette application, every surface built explicitly, one lifespan.

`create_app(settings)` builds a `Runtime` (not yet open), then each surface with the collaborators
it needs passed in: the hook sender gets the runtime's LISTEN connection and the metrics; the MCP
surface gets its resource providers (A2UI's when the flag is on) and the tool-call histogram; the
doorbell gets the listener, the MCP surface whose sessions it rings and the ring counter; the Board
gets the runtime. A surface that cannot be built stops the app with `CompositionError` naming it.

The lifespan opens the runtime (`open_runtime(..., listen=True)`), starts the components in order,
runs the sweeps with every component's `on_tick`, and on the way out stops them in reverse.
Components contribute routes and may wrap the ASGI app (outermost last: security's headers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from ..config import Settings
from ..core import health, sweeps
from ..mcp import a2ui as mcp_a2ui
from ..mcp import apps as mcp_apps
from ..mcp import doorbell as mcp_doorbell
from ..mcp import server as mcp_server
from ..runtime import Component, Runtime, open_runtime
from ..stopping import stop_task
from . import api as web_api
from . import board as web_board
from . import hooks as web_hooks
from . import hosts as web_hosts
from . import intake_hook as web_intake_hook
from . import metrics as web_metrics
from . import oauth as web_oauth
from . import security as web_security
from . import sinks as web_sinks
from . import sinks_api as web_sinks_api
from .board.kit import Board

log = logging.getLogger("switchboard.web")

T = TypeVar("T")


class CompositionError(RuntimeError):
    """A surface could not be built; the app does not start without it."""


@dataclass(frozen=True)
class Surfaces:
    """The surfaces of one app, typed; `app.state.surfaces`."""

    metrics: web_metrics.MetricsSurface
    hooks: web_hooks.HookSender
    mcp: mcp_server.McpSurface
    a2ui: mcp_a2ui.A2uiResources | None
    doorbell: mcp_doorbell.Doorbell
    board: Board
    api_limiter: web_api.TokenLimiter
    sinks: web_sinks.SinkSender | None = None


def _build(name: str, make: Callable[[], T]) -> T:
    try:
        return make()
    except Exception as exc:
        raise CompositionError(f"the {name} surface could not be built: {exc}") from exc


def compose(runtime: Runtime) -> tuple[Surfaces, list[Component]]:
    """Build every surface with its collaborators; the components in start order."""
    metrics = _build("metrics", lambda: web_metrics.MetricsSurface(runtime))
    hooks = _build("hooks", lambda: web_hooks.HookSender(runtime, listener=runtime.listener,
                                                          metrics=metrics.metrics))
    a2ui = _build("a2ui", lambda: mcp_a2ui.provider(runtime))
    apps = _build("apps", lambda: mcp_apps.provider(runtime))
    mcp = _build("mcp", lambda: mcp_server.McpSurface(
        runtime, providers=[p for p in (a2ui, apps) if p is not None],
        observe_tool_call=metrics.metrics.observe_tool_call))
    doorbell = _build("doorbell", lambda: mcp_doorbell.Doorbell(
        runtime, listener=runtime.listener, mcp=mcp, count_rings=metrics.metrics.doorbell_rings))
    board = _build("board", lambda: web_board.build(runtime))
    sinks = _build("sinks", lambda: web_sinks.SinkSender(runtime))
    intake = _build("intake", lambda: web_intake_hook.IntakeReceiver(runtime, registry=metrics.metrics.registry))
    if mcp.gateway.sessions_cap is not None:
        metrics.metrics.registry.register(mcp.gateway.sessions_cap)  # live MCP sessions, evictions
    settings = runtime.settings
    api_limiter = web_api.TokenLimiter(settings.api_rate_limit_per_minute, settings.api_rate_limit_burst)
    surfaces = Surfaces(metrics=metrics, hooks=hooks, mcp=mcp, a2ui=a2ui, doorbell=doorbell, board=board,
                        api_limiter=api_limiter, sinks=sinks)
    components = [
        web_metrics.component(metrics),
        web_hooks.component(hooks),
        web_sinks_api.component(sinks),
        mcp_server.component(mcp),
        mcp_doorbell.component(doorbell),
        web_api.component(),
        web_intake_hook.component(intake),  # POST /webhooks/w/… (the intakes' API is among web_api's operations)
        web_oauth.component(runtime),  # OAuth for MCP hosts: metadata, authorization server, consent
        web_board.component(board, runtime),
        web_security.component(),  # its wrap adds the security headers to every response
        web_hosts.component(runtime.settings),  # last: outermost, the Host allow-list before any routing
    ]
    return surfaces, components


async def healthz(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.ctx
    if await health.database_reachable(runtime.core):
        return JSONResponse({"status": "ok", "database": "ok"})
    return JSONResponse({"status": "degraded", "database": "unreachable"}, status_code=503)


def create_app(settings: Settings, *, on_ready: Callable[[Runtime], None] | None = None) -> Starlette:
    runtime = Runtime(settings)
    surfaces, parts = compose(runtime)
    ticks = [part.on_tick for part in parts if part.on_tick is not None]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_runtime(settings, runtime=runtime, listen=True, min_size=2, max_size=20):
            stop = asyncio.Event()
            started: list[Component] = []
            sweeper: asyncio.Task | None = None
            try:
                for part in parts:
                    if part.start:
                        await part.start()
                    started.append(part)
                sweeper = asyncio.create_task(sweeps.run_forever(runtime.core, stop, on_tick=ticks),
                                              name="sweeps")
                if on_ready:
                    on_ready(runtime)
                yield
            finally:
                stop.set()
                await stop_task(sweeper)
                for part in reversed(started):
                    if part.stop:
                        try:
                            await part.stop()
                        except Exception:
                            log.exception("component stop failed", extra={"event": part.name})

    routes: list[BaseRoute] = [Route("/healthz", healthz, methods=["GET"])]
    for part in parts:
        routes.extend(part.routes)
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.ctx = runtime  # request handlers read `request.app.state.ctx.core` / `.settings`
    app.state.surfaces = surfaces
    asgi: ASGIApp = app
    for part in parts:
        if part.wrap:
            asgi = part.wrap(asgi)
    if asgi is not app:  # the outer wrapper answers for the app: its state and routes, as callers expect
        asgi.state = app.state  # type: ignore[attr-defined]  # a wrapper, given the app's state
        asgi.router = app.router  # type: ignore[attr-defined]  # and its routes
    return asgi  # type: ignore[return-value]  # a Starlette app or its wrapper with the same state and routes
