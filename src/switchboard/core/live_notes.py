"""Which todos moved, told to every serving process (docs/decisions.md D63).

The hook bus delivers a transition to the process that committed it. A human's Board page streams
from whichever process served it, so without these notes it heard only the transitions made through
that one process: an agent's calls served by another process, another process's sweeps, or a CLI on
another machine changed the work and the page did not move until it was re-read.

Each process (a server, a CLI command, anything that opens the runtime) gathers the events its bus
publishes and sends them, a fifth of a second at a time and once more when it closes, as one
`pg_notify` on `CHANNEL` (`NoteSender`; db/listen.py listens on it in every serving process): the todos that moved
with their last verb and their owner (endpoint or team), never their contents. A note stays well under
PostgreSQL's 8,000-byte payload: past `MAX_TODOS` todos it names only the owners whose todos moved,
and past `MAX_OWNERS` owners it says only that much moved. A note is a hint, as the Board's frames
are: the page re-reads what it shows through its scoped routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..db.listen import LIVE_CHANNEL
from ..stopping import stop_task
from .events import Event
from .models import Core
from .queries import Q

log = logging.getLogger("switchboard.events")

CHANNEL = LIVE_CHANNEL  # the statement `announce` names it too
MAX_TODOS = 50  # entries of about 100 bytes each
MAX_OWNERS = 80  # ids of 36 characters and their quotes
NOTE_SECONDS = 0.2  # how long a process gathers its events before telling the others
STOP_FLUSH_SECONDS = 2.0


@dataclass(frozen=True)
class Moved:
    todo_id: str  # "" for an event about an endpoint rather than a todo (its revocation)
    verb: str
    endpoint_id: str
    team_id: str


@dataclass(frozen=True)
class Note:
    origin: str
    moved: tuple[Moved, ...] = ()
    endpoints: tuple[str, ...] = ()  # owners some of whose todos moved, when too many to list
    teams: tuple[str, ...] = ()
    everyone: bool = False  # more moved than a note can name


class Gathered:
    """What moved since the last note, kept as small as the note it makes: each todo's last verb while
    they fit in one note, then only the owners, then only that much moved. Cheap per event: a batch of
    100 closes adds 100 events at once."""

    def __init__(self) -> None:
        self.moved: dict[str, tuple[str, str, str, str]] = {}  # key -> (todo id, verb, endpoint, team)
        self.endpoints: set[str] = set()
        self.teams: set[str] = set()
        self.listing = True
        self.everyone = False

    def __bool__(self) -> bool:
        return bool(self.moved or self.endpoints or self.teams or self.everyone)

    def add(self, events: Sequence[Event]) -> None:
        if self.everyone:
            return
        if self.listing and len(self.moved) + len(events) <= MAX_TODOS:
            for e in events:
                row = (e.todo_id, e.verb, e.endpoint_id or "", e.team_id or "")
                key = row[0] or f"{row[1]}:{row[2]}"  # an endpoint's own event has no todo
                self.moved.pop(key, None)  # the last verb, in the order of the last moves
                self.moved[key] = row
            return
        if self.listing:  # too many to list: from now on the owners only
            self.listing = False
            self.endpoints.update(row[2] for row in self.moved.values() if row[2])
            self.teams.update(row[3] for row in self.moved.values() if row[3])
            self.moved.clear()
        self.endpoints.update(e.endpoint_id for e in events if e.endpoint_id)
        self.teams.update(e.team_id for e in events if e.team_id)
        if len(self.endpoints) + len(self.teams) > MAX_OWNERS:
            self.everyone = True
            self.endpoints.clear()
            self.teams.clear()

    def note(self, origin: str) -> str:
        if self.everyone:
            body: dict[str, Any] = {"o": origin, "all": True}
        elif self.listing:
            body = {"o": origin, "m": [list(row) for row in self.moved.values()]}
        else:
            body = {"o": origin, "ep": sorted(self.endpoints), "tm": sorted(self.teams)}
        return json.dumps(body, separators=(",", ":"))


def decode(data: dict[str, Any]) -> Note | None:
    """A note as `Gathered.note` made it (already parsed from JSON); None for anything else."""
    origin = data.get("o")
    if not isinstance(origin, str):
        return None
    if data.get("all") is True:
        return Note(origin, everyone=True)
    if "m" in data:
        rows = data["m"]
        if not isinstance(rows, list) or not all(
                isinstance(r, list) and len(r) == 4 and all(isinstance(x, str) for x in r) for r in rows):
            return None
        return Note(origin, moved=tuple(Moved(*r) for r in rows))
    ids = data.get("ep"), data.get("tm")
    if not all(isinstance(x, list) and all(isinstance(i, str) for i in x) for x in ids):
        return None
    return Note(origin, endpoints=tuple(data["ep"]), teams=tuple(data["tm"]))


async def announce(core: Core, note: str) -> None:
    """Send one note to every process (delivered when this autocommit statement commits)."""
    async with core.pool.connection() as conn:
        await conn.execute(Q.live_notes.announce, {"note": note})


class NoteSender:
    """A process's side of the notes: subscribe `collect` to its bus, `start` it, `stop` it last."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.origin = uuid.uuid4().hex[:16]  # this process, in its notes (its own come back to it)
        self._gathered = Gathered()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    async def collect(self, events: Sequence[Event]) -> None:
        """Hook-bus batch subscriber (after commit)."""
        self._gathered.add(events)
        self._wake.set()

    async def _run(self) -> None:
        while not self._closing:
            await self._wake.wait()
            await asyncio.sleep(NOTE_SECONDS)
            await self.flush()

    async def flush(self) -> None:
        self._wake.clear()
        gathered, self._gathered = self._gathered, Gathered()
        if not gathered:
            return
        try:
            await announce(self.core, gathered.note(self.origin))
        except Exception as exc:  # a hint lost: the other processes' pages re-read on their next frame
            log.warning("live note not sent", extra={"event": "live_note_lost", "reason": type(exc).__name__})

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="live-notes")

    async def stop(self) -> None:
        """End the loop, then send what is left. Bounded: a database gone away does not hold up a
        shutdown. (A cancellation can be lost inside the pool's wait on Python 3.11, when the
        connection it waited for arrives at the same moment: the loop then ends at its next turn,
        and stop_task cancels again meanwhile.)"""
        self._closing = True
        self._wake.set()
        await stop_task(self._task, within=STOP_FLUSH_SECONDS)
        self._task = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_FLUSH_SECONDS):
                await self.flush()
