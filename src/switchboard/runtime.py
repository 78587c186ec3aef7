"""The runtime: what one process shares, and the one way to open it.

`open_runtime(settings)` starts or attaches to the database (the embedded server under the data
directory, or `SWITCHBOARD_DATABASE_URL`), migrates, opens the pool and builds the `Core`; with
`listen=True` it also opens the process's LISTEN connection (`runtime.listener`, `db/listen.py`),
which the doorbell, the hook sender and anything else subscribe to. `switchboard serve`, every CLI
command and the test fixtures open the database this way and no other.

`Component` is what a surface hands the composition root (`web/app.py`): routes, an optional ASGI
wrap, start/stop calls inside the app's lifespan, and an optional sweep-tick hook.

This module sits between the core and the surfaces: it imports `config`, `core` and `db`, never a
surface (`mcp`, `web`, `cli`, `relay`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from psycopg import conninfo
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from .config import Settings
from .core import live_notes, metric_spool
from .core.errors import DatabaseUnavailable, Unauthorized
from .core.models import Core
from .db.database import Database
from .db.listen import ReadyListener
from .db.pool import open_pool

Lifecycle = Callable[[], Awaitable[None]]
TickHook = Callable[[Core], Awaitable[None]]  # called on every sweep tick with the sweeping core


@dataclass
class Component:
    """One surface's contribution to the app: routes, a wrap (outermost last), lifecycle, a tick hook."""

    name: str
    routes: list[BaseRoute] = field(default_factory=list)
    wrap: Callable[[ASGIApp], ASGIApp] | None = None
    start: Lifecycle | None = None
    stop: Lifecycle | None = None
    on_tick: TickHook | None = None


class RuntimeClosed(RuntimeError):
    """The core was asked for before `open_runtime` opened it (or after it closed)."""


class Runtime:
    """One process's shared services: settings, the database, the pool behind `Core`, the listener.

    Surfaces receive it at construction time and read `core` once the runtime is open (in their
    `start()` or per request)."""

    def __init__(self, settings: Settings, *, core: Core | None = None) -> None:
        self.settings = settings
        self.listener = ReadyListener()
        self.database: Database | None = None
        self._core = core  # an already open core (a test fixture's); open_runtime sets its own
        self._notes: live_notes.NoteSender | None = None

    @property
    def is_open(self) -> bool:
        return self._core is not None

    @property
    def core(self) -> Core:
        if self._core is None:
            raise RuntimeClosed("the runtime is not open")
        return self._core

    @property
    def notes(self) -> live_notes.NoteSender:
        """What this process tells the others about the todos that moved through it (core/live_notes.py)."""
        if self._notes is None:
            raise RuntimeClosed("the runtime is not open")
        return self._notes


def _with_options(uri: str, options: str) -> str:
    """`uri` with libpq `options` appended to any it carries."""
    if not options:
        return uri
    given = conninfo.conninfo_to_dict(uri).get("options") or ""
    return conninfo.make_conninfo(uri, options=f"{given} {options}".strip())


@asynccontextmanager
async def open_runtime(settings: Settings, *, runtime: Runtime | None = None, migrate: bool = True,
                       listen: bool = False, min_size: int = 2, max_size: int = 10,
                       origin: str | None = None) -> AsyncIterator[Runtime]:
    """Start or attach to the database, migrate (unless told not to), open the pool, build the core;
    with `listen`, open the LISTEN connection too. Everything closes in reverse order on exit.

    `runtime` is a `Runtime(settings)` built earlier (the app builds its surfaces before the lifespan
    opens it); without one, a new runtime is made. `origin="cli"` marks a process that serves no
    /metrics: its transitions are spooled for the serving processes to count (core/metric_spool.py)."""
    rt = runtime if runtime is not None else Runtime(settings)
    if rt.settings is not settings:
        raise ValueError("open_runtime: the runtime was built with other settings")
    db = Database(settings)
    uri = await db.start()
    try:
        if migrate:
            await db.migrate()
        pool_uri = _with_options(uri, metric_spool.session_options(origin))
        pool = await open_pool(pool_uri, min_size=min_size, max_size=max_size,
                               statement_timeout=settings.db_statement_timeout_seconds,
                               lock_timeout=settings.db_lock_timeout_seconds,
                               timeout_error=DatabaseUnavailable, refused_error=Unauthorized)
        try:
            rt.database = db
            rt._core = Core(pool=pool, settings=settings)
            rt._notes = live_notes.NoteSender(rt._core)
            unsubscribe = rt._core.bus.subscribe_batch(rt._notes.collect)
            rt._notes.start()
            if listen:
                await rt.listener.start(uri)
            try:
                yield rt
            finally:
                await rt.listener.stop()
                unsubscribe()
                await rt._notes.stop()  # what moved since the last note, before the pool closes
        finally:
            rt._core = None
            rt._notes = None
            rt.database = None
            await pool.close()
    finally:
        await db.stop()
