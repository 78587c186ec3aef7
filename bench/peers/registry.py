"""The systems of the peer benchmark, in table order. A new path is one entry here (a class in the
module of its kind: Switchboard's in switchboard.py, overriding `work` and/or `enqueue`)."""

from __future__ import annotations

from collections.abc import Callable

from .harness import System
from .oban_peer import Oban
from .pgqueuer_peer import PgQueuer
from .procrastinate_peer import Procrastinate
from .raw import RawBatch, RawPerJob
from .switchboard import (
    SwitchboardCore,
    SwitchboardCoreAlone,
    SwitchboardCoreBatch,
    SwitchboardCoreRound,
    SwitchboardMcp,
    SwitchboardMcpBatch,
    SwitchboardMcpRound,
)

# key -> a factory (each measurement gets a fresh instance)
SYSTEMS: dict[str, Callable[[], System]] = {}


def register(make: Callable[[], System]) -> str:
    key = make().key
    SYSTEMS[key] = make
    return key


for _make in (
    RawPerJob,
    lambda: RawBatch(10),
    lambda: PgQueuer("asyncpg", None),
    lambda: PgQueuer("asyncpg", 100),
    lambda: PgQueuer("psycopg", None),
    lambda: PgQueuer("psycopg", 100),
    Oban,
    Procrastinate,
    SwitchboardCore,
    SwitchboardCoreAlone,
    lambda: SwitchboardCoreBatch(100),
    lambda: SwitchboardCoreRound(100),
    SwitchboardMcp,
    lambda: SwitchboardMcpBatch(100),
    lambda: SwitchboardMcpRound(100),
    # EXTEND: a bulk push is an `enqueue` override of these classes (switchboard.py)
):
    register(_make)
