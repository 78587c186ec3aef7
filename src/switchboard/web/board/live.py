"""Live updates over SSE: `GET /events` streams, to each signed-in human, which of their todos moved.

A frame names only the todo id and the verb (`event: todo`, `data: {"id": ..., "verb": ...}`); the page
then re-reads what it shows through the ordinary scoped routes, so no todo data, summary or artifact
travels on the stream and a frame reaches only the streams of the human who owns the endpoint, or, for
a team todo, of the team's members at the time of the event (read from the database each time, so a
removed member hears nothing more).

- The hook bus calls `LiveHub.publish_many` after commit; with no stream open it returns at once.
- Other processes' transitions (another server's, a CLI command's) arrive as notes (core/live_notes.py,
  D63): every process sends what its bus published, a fifth of a second at a time, in one
  `pg_notify`, and the hub routes the notes of the others to its streams as it routes its own
  process's events. A note too big to list its todos names their owners, whose streams get a frame
  that re-reads the whole page.
- Per stream a buffer of 16 frames; on overflow a frame is dropped (the page re-reads on the next one).
- At most 4 streams per session (429 beyond). A stream ends after `STREAM_SECONDS` with a `bye` frame
  and the browser reconnects, so a server shutdown never waits long on an open page.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from ...core import live_notes, stats, teams
from ...core.events import Event
from .kit import NO_STORE, Board, board_of

log = logging.getLogger("switchboard.board")

RETRY_MS = 3000
KEEPALIVE_SECONDS = 15.0
STREAM_SECONDS = 30.0
BUFFER = 16
STREAMS_PER_SESSION = 4
_OWNER_CACHE = 10_000
REFRESH_FRAME = "event: endpoint\ndata: " + json.dumps({"verb": "moved"}) + "\n\n"  # the page re-reads all


@dataclass(eq=False)
class _Stream:
    human_id: UUID
    sid: str
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(BUFFER))


class LiveHub:
    def __init__(self, board: Board) -> None:
        self.board = board
        self._streams: dict[UUID, set[_Stream]] = {}
        self._owners: OrderedDict[str, UUID | None] = OrderedDict()
        self.origin = ""  # this process's notes (runtime.notes.origin), heard as its own events already

    def open(self, human_id: UUID, sid: str) -> _Stream | None:
        if sum(1 for s in self._streams.get(human_id, ()) if s.sid == sid) >= STREAMS_PER_SESSION:
            return None
        stream = _Stream(human_id, sid)
        self._streams.setdefault(human_id, set()).add(stream)
        return stream

    def close(self, stream: _Stream) -> None:
        group = self._streams.get(stream.human_id)
        if group is not None:
            group.discard(stream)
            if not group:
                del self._streams[stream.human_id]

    async def _owner(self, endpoint_id: str) -> UUID | None:
        if endpoint_id in self._owners:
            self._owners.move_to_end(endpoint_id)
            return self._owners[endpoint_id]
        owner = await stats.endpoint_owner(self.board.core, endpoint_id)
        self._owners[endpoint_id] = owner
        if len(self._owners) > _OWNER_CACHE:
            self._owners.popitem(last=False)
        return owner

    async def _listeners(self, endpoint_id: str, team_id: str) -> list[_Stream]:
        if team_id:
            members = await teams.member_ids(self.board.core, team_id)
            return [s for human in members for s in self._streams.get(human, ())]
        if not endpoint_id:
            return []
        owner = await self._owner(endpoint_id)
        return list(self._streams.get(owner, ())) if owner else []

    @staticmethod
    def _send(streams: Sequence[_Stream], frame: str) -> None:
        for stream in streams:
            with contextlib.suppress(asyncio.QueueFull):
                stream.queue.put_nowait(frame)

    async def publish(self, todo_id: str, verb: str, endpoint_id: str, team_id: str) -> None:
        """Tell the open streams of the owner (or of a team's members) which todo moved."""
        if not self._streams:
            return
        streams = await self._listeners(endpoint_id, team_id)
        if not streams:
            return
        if verb == "endpoint_revoked":
            frame = "event: endpoint\ndata: " + json.dumps({"verb": verb}) + "\n\n"
        else:
            frame = "event: todo\ndata: " + json.dumps({"id": todo_id, "verb": verb}) + "\n\n"
        self._send(streams, frame)

    async def publish_many(self, events: Sequence[Event]) -> None:
        """Hook-bus subscriber (after commit): this process's events, at once."""
        if not self._streams:
            return
        for event in events:
            await self.publish(event.todo_id, event.verb, event.endpoint_id, event.team_id)

    # ---------------------------------------------------------------------- across processes

    async def hear(self, notes: list[dict]) -> None:
        """Listener subscriber: the other processes' notes, routed to this process's streams."""
        if not self._streams:
            return
        for data in notes:
            note = live_notes.decode(data)
            if note is None or note.origin == self.origin:
                continue
            if note.everyone:
                self._send([s for group in self._streams.values() for s in group], REFRESH_FRAME)
                continue
            for moved in note.moved:
                await self.publish(moved.todo_id, moved.verb, moved.endpoint_id, moved.team_id)
            for endpoint_id in note.endpoints:
                self._send(await self._listeners(endpoint_id, ""), REFRESH_FRAME)
            for team_id in note.teams:
                self._send(await self._listeners("", team_id), REFRESH_FRAME)


async def events(request: Request) -> Response:
    board = board_of(request)
    hub = board.hub
    who = await board.signed_in(request)
    if who is None:
        return HTMLResponse("sign in first", status_code=401, headers=NO_STORE)
    stream = hub.open(who[0].human_id, who[1].sid)
    if stream is None:
        return HTMLResponse("too many streams", status_code=429, headers=NO_STORE)

    async def frames():
        try:
            yield f"retry: {RETRY_MS}\n\n"
            end = time.monotonic() + STREAM_SECONDS
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    yield "event: bye\ndata: {}\n\n"
                    return
                try:
                    frame = await asyncio.wait_for(stream.queue.get(), timeout=min(KEEPALIVE_SECONDS, left))
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                yield frame
        finally:
            hub.close(stream)

    return StreamingResponse(frames(), media_type="text/event-stream",
                             headers={**NO_STORE, "X-Accel-Buffering": "no"},
                             background=BackgroundTask(hub.close, stream))


def routes() -> list[Route]:
    return [Route("/events", events, methods=["GET"])]
