"""The doorbell: live MCP sessions are told when work is ready instead of polling (SYSTEM.md §10).

Every transition that makes a todo claimable (created, released, re-queued by the reaper or the
retry scheduler, manually retried) sends a wake-up at commit through PostgreSQL (`db/listen.py`), so
a todo committed by any process (another server, the CLI, a sweep) rings the sessions this process
holds. For each ready todo the sessions of its endpoint whose queues include the todo's queue get
- `notifications/resources/updated` for the queue's resource (`resources.QUEUE_URI`) when they
  subscribed to it,
- `notifications/claude/channel` (one line naming the todo id, queue and title; no payload, no
  secrets) when the client declared the experimental `claude/channel` capability.

A per-todo gate suppresses a second ring of the same todo within `doorbell_gate_seconds`; a
re-queue or release clears the todo's gate entry first, so quick failures ring again (SPEC-0034
REQ-16). Pending todos nobody claims are re-rung on a widening interval (`core.rings`, on the sweep
tick: the component's `on_tick`), and a session that opens its stream is rung for the oldest pending
todos in its scope.

Admission control (SPEC-0030): no push for a queue whose policy holds claims back now (paused, a
limit of 0, the window's budget spent, the in-flight cap reached): its ready todos ring nobody, and
the queue is remembered. On the sweep tick the queues held back here are judged again, and each one
that reopened (resumed, a slot freed, the window turned, the policy loosened or cleared) is rung once
for its oldest pending todo: an endpoint's queue rings that endpoint's sessions here, a team queue
one session among those that reach it (as a push does; docs/decisions.md D56).

2026-era clients have no session: they open `subscriptions/listen` streams (`listen_streams.py`,
`McpSurface.listeners`) with the queue URIs as `resourceSubscriptions`, and are rung under the same
rules (gate, re-queue clearing it, re-rings, a first ring for what is already pending) with
`notifications/resources/updated` on the stream.

The doorbell is built with the runtime's LISTEN connection (`runtime.listener`), the MCP surface
whose sessions it rings, and an optional counter for the rings (the metrics surface's).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from ..core import admission, rings, teams
from ..core.models import Core
from ..db.listen import ReadyListener
from ..runtime import Component, Runtime
from .listen_streams import ListenStream
from .resources import queue_uri
from .server import McpSurface, connection_of
from .sessions import LiveSession

log = logging.getLogger("switchboard.doorbell")

CHANNEL_METHOD = "notifications/claude/channel"
REQUEUE_REASONS = ("released", "requeued", "retried")
RESYNC_PER_ENDPOINT = 16
WELCOME_LIMIT = 5
SEND_TIMEOUT = 2.0
TITLE_MAX_CHARS = 200

_LINE_BREAKS = re.compile(r"[\r\n\u0085\u2028\u2029]+")
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_CHANNEL_CLOSE = re.compile(r"<\s*/\s*channel\s*>", re.IGNORECASE)


def defuse(text: Any, max_chars: int = TITLE_MAX_CHARS) -> str:
    """Text for a channel line: line breaks folded, controls dropped, `</channel>` neutralised."""
    out = _LINE_BREAKS.sub(" ", str(text or ""))
    out = _CONTROLS.sub("", out)
    out = _CHANNEL_CLOSE.sub("«/channel»", out)
    if len(out) > max_chars:
        out = out[: max_chars - 1] + "…"
    return out.strip()


def channel_params(todo: dict) -> dict:
    """The `notifications/claude/channel` params for one ready todo."""
    queue = defuse(todo["queue"], 64)
    content = f"Todo {todo['id']} is ready on queue {queue}: {defuse(todo['title'])}"
    meta = {"todo_id": str(todo["id"]), "queue": queue}
    for key in ("kind", "source"):
        if todo.get(key):
            meta[key] = defuse(todo[key], 64)
    return {"content": content, "meta": meta}


def _stream_open(mcp: McpSurface, session_id: str) -> bool | None:
    """Whether a session's GET notification stream is open (None when we cannot tell).

    Notifications sent without an open stream vanish (stack.md P7); the session manager's light
    sessions (`session_host.py`) say whether theirs is open.
    """
    session = mcp.manager._server_instances.get(session_id)
    if session is None:
        return False
    return getattr(session, "stream_open", None)


class Doorbell:
    def __init__(self, runtime: Runtime, *, listener: ReadyListener, mcp: McpSurface,
                 count_rings: Callable[[int], None] | None = None) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.mcp = mcp
        self.sessions = mcp.sessions
        self.listeners = mcp.listeners
        self.listener = listener
        self.count_rings = count_rings
        self._unlisten: Callable[[], None] | None = None
        self.gate: dict[str, float] = {}
        self.rering_intervals: tuple[float, ...] = rings.RERING_INTERVALS
        self.stats = {"rung": 0, "gated": 0, "notifications": 0, "elsewhere": 0}
        self._tasks: set[asyncio.Task] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.welcomed: set[str] = set()  # sessions whose opening ring is done (tests wait on it)
        self.team_rung: dict[str, float] = {}  # when each session or stream last got a team todo's ring
        # Queues (endpoint id, team id, queue) whose ready todos admission control kept from ringing:
        # each is rung once when it reopens (`reopen`, on the sweep tick).
        self.held: set[admission.QueueKey] = set()

    # ------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._unlisten = self.listener.subscribe(on_batch=self.on_wakeups, on_reconnect=self.resync)
        self.sessions.on_added.append(self.on_session_added)
        self.listeners.on_added.append(self.on_listener_added)

    async def stop(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self.on_session_added in self.sessions.on_added:
            self.sessions.on_added.remove(self.on_session_added)
        if self.on_listener_added in self.listeners.on_added:
            self.listeners.on_added.remove(self.on_listener_added)
        for task in list(self._tasks):
            task.cancel()

    # ----------------------------------------------------------------------------------- gate

    def _gated(self, todo_id: str) -> bool:
        window = self.settings.doorbell_gate_seconds
        rung_at = self.gate.get(todo_id)
        return rung_at is not None and time.monotonic() - rung_at < window

    def _mark(self, todo_id: str) -> None:
        now = time.monotonic()
        self.gate[todo_id] = now
        if len(self.gate) > 10_000:  # forget expired entries
            window = self.settings.doorbell_gate_seconds
            self.gate = {k: v for k, v in self.gate.items() if now - v < window}

    # ---------------------------------------------------------------------------------- rings

    def _local_endpoints(self) -> set[str]:
        return self.sessions.endpoints() | self.listeners.endpoints()

    def _is_local(self, endpoint_id: str) -> bool:
        """Whether a session or listen stream of `endpoint_id` is held here (no copy of every endpoint)."""
        return self.sessions.has_endpoint(endpoint_id) or self.listeners.has_endpoint(endpoint_id)

    async def on_wakeups(self, batch: list[dict]) -> None:
        """Wake-ups from any process: clear the gate of re-queued todos, then ring the ready ones."""
        latest: dict[str, dict] = {}
        for note in batch:
            if note.get("reason") in REQUEUE_REASONS:
                self.gate.pop(note["todo_id"], None)
            latest[note["todo_id"]] = note
        wanted = {tid: n for tid, n in latest.items()
                  if (self._has_team_queue(n["queue"]) if n.get("team_id") else
                      self._is_local(str(n.get("endpoint_id"))))}
        if not wanted:
            return
        for todo in self._ringable(await rings.pending_by_ids(self.runtime.core, wanted)):
            forced = wanted[todo["id"]].get("reason") == "rering"
            if todo.get("team_id"):
                await self.ring_team(todo, use_gate=not forced, count=_count(wanted[todo["id"]]), shared=True)
            else:
                await self.ring(todo, use_gate=not forced)

    def _ringable(self, todos: list[dict]) -> list[dict]:
        """The todos whose queue admission control does not hold back now (their `held`, read with
        them); the queues of the others are remembered for their reopening ring."""
        held = {_queue_key(t) for t in todos if t.get("held")}
        if not held:
            return todos
        if len(self.held) > 10_000:
            self.held.clear()
        self.held |= held
        return [t for t in todos if not t.get("held")]

    async def reopen(self) -> int:
        """Ring once each queue held back here that admission control no longer holds back, for its
        oldest pending todo. Returns how many notifications went out."""
        if not self.held or not self.runtime.is_open:
            return 0
        core = self.runtime.core
        waiting = set(self.held)
        opened = waiting - await admission.held_back(core, waiting)
        self.held -= opened
        sent = 0
        for endpoint_id, team_id, queue in sorted(opened):
            if team_id:
                todo = await rings.oldest_in_team_queue(core, team_id, queue)
                if todo is not None:
                    sent += await self.ring_team(todo, use_gate=False)
            elif self._is_local(endpoint_id):
                for todo in await rings.oldest_pending(core, endpoint_id, [queue], 1):
                    sent += await self.ring(todo, use_gate=False)
        return sent

    async def on_tick(self, core: Core | None = None) -> None:
        """The sweep tick: the re-ring of unclaimed todos, then the queues that reopened; and the team
        rings' old turns dropped."""
        await self.rering(core)
        await self.reopen()
        if self.runtime.is_open:
            await rings.prune_team_turns(self.runtime.core)

    def _has_team_queue(self, label: str) -> bool:
        """Whether a session or listen stream here names this team queue (before asking the database
        which of their endpoints reach it)."""
        return (any(label in live.caller.queues for live in self.sessions.all())
                or any(label in stream.queues for stream in self.listeners.all()))

    async def ring_team(self, todo: dict, *, use_gate: bool = True, count: int = 1, shared: bool = False) -> int:
        """A ready team todo rings ONE session or listen stream here: among those of endpoints that
        reach its queue now (granted, their human a member) and that would hear it (a listen stream, or
        a session subscribed to the queue or with the channel), the one rung least recently (issue 13;
        docs/decisions.md D35). The gate and the re-queue rules are per todo, as for any todo. A
        wake-up for `count` todos pushed by one statement (a bulk push names its first todo) rings
        up to `count` of them, least recently rung first: one per todo, as if each had rung.
        `shared`: a wake-up every process hears; this process rings only the turns it takes in the
        database (`rings.take_team_turns`, migration 0031), so the todo rings one session in all,
        not one per process."""
        todo_id = str(todo["id"])
        if use_gate and self._gated(todo_id):
            self.stats["gated"] += 1
            return 0
        reach = set(await teams.ring_candidates(self.runtime.core, todo["team_id"], todo["queue"]))
        label = todo["queue"]
        uri = queue_uri(label)
        # Only a session that would hear the ring takes the turn: one that neither subscribed nor
        # declared the channel would swallow the team's one ring and wake nobody.
        sessions = [live for e in reach for live in self.sessions.for_endpoint(e)
                    if label in live.caller.queues and live.hears(uri)]
        streams = [st for e in reach for st in self.listeners.for_endpoint(e) if label in st.queues]
        choices: list[tuple[float, str, LiveSession | ListenStream]] = (
            [(self.team_rung.get(live.session_id, 0.0), live.session_id, live) for live in sessions]
            + [(self.team_rung.get(f"listen:{id(st)}", 0.0), f"listen:{id(st)}", st) for st in streams])
        if not choices:
            return 0
        picked = sorted(choices, key=lambda c: (c[0], c[1]))[:max(count, 1)]
        self._mark(todo_id)
        if shared:
            taken = await rings.take_team_turns(self.runtime.core, todo, want=len(picked), slots=count)
            if taken < len(picked):
                self.stats["elsewhere"] += len(picked) - taken  # rung by another process
            picked = picked[:taken]
            if not picked:
                return 0
        now = time.monotonic()
        if len(self.team_rung) > 10_000:
            self.team_rung.clear()
        for _, key, _ in picked:
            self.team_rung[key] = now
        return await self.ring(todo, use_gate=False,
                               only=[c for _, _, c in picked if isinstance(c, LiveSession)],
                               only_streams=[c for _, _, c in picked if isinstance(c, ListenStream)])

    async def ring(self, todo: dict, *, use_gate: bool = True, only: list[LiveSession] | None = None,
                   only_streams: list[ListenStream] | None = None) -> int:
        """Notify the in-scope sessions and listen streams of a ready todo (`only`/`only_streams`: just
        these, for a first ring). Returns how many notifications went out."""
        todo_id = str(todo["id"])
        if use_gate and self._gated(todo_id):
            self.stats["gated"] += 1
            return 0
        endpoint_id = str(todo["endpoint_id"])
        everyone = only is None and only_streams is None
        targets = self.sessions.for_endpoint(endpoint_id) if everyone else (only or [])
        targets = [s for s in targets if todo["queue"] in s.caller.queues]
        streams = self.listeners.for_endpoint(endpoint_id) if everyone else (only_streams or [])
        if everyone:
            self._mark(todo_id)
        uri = queue_uri(todo["queue"])
        offered = sum(1 for stream in streams if stream.offer(uri))  # written by each stream's own task
        sends = []
        for live in targets:
            if uri in live.subscriptions:
                sends.append(self._send(live, "notifications/resources/updated", {"uri": uri}))
            if live.channel:
                sends.append(self._send(live, CHANNEL_METHOD, channel_params(todo)))
        if not sends and not offered:
            return 0
        # One send (the usual ring) is awaited in place; several run side by side, so a session whose
        # client stopped reading holds up none of the others.
        results = [await sends[0]] if len(sends) == 1 else await asyncio.gather(*sends)
        sent = sum(1 for ok in results if ok) + offered
        self.stats["rung"] += 1
        self.stats["notifications"] += sent
        if self.count_rings is not None:
            self.count_rings(sent)
        return sent

    async def _send(self, live: LiveSession, method: str, params: dict) -> bool:
        try:
            async with asyncio.timeout(SEND_TIMEOUT):  # a deadline on this task, not a task of its own
                await connection_of(live.session).notify(method, params)
            return True
        except Exception as exc:  # a slow or broken session never holds up the others
            log.warning("doorbell send failed", extra={"endpoint": live.caller.slug, "reason": type(exc).__name__})
            return False

    # ------------------------------------------------------------------ re-scan, welcome, re-ring

    async def resync(self) -> None:
        """After a lost LISTEN connection: ring what may have been missed (the gate still applies)."""
        if not self.runtime.is_open:
            return
        by_endpoint: dict[str, set[str]] = {}
        for live in self.sessions.all():
            by_endpoint.setdefault(live.endpoint_id, set()).update(live.caller.queues)
        for stream in self.listeners.all():
            by_endpoint.setdefault(stream.endpoint_id, set()).update(stream.queues)
        for endpoint_id, queues in by_endpoint.items():
            pending = await rings.oldest_pending(self.runtime.core, endpoint_id, sorted(queues), RESYNC_PER_ENDPOINT)
            for todo in self._ringable(pending):
                await self.ring(todo)

    def on_session_added(self, live: LiveSession) -> None:
        task = asyncio.create_task(self._welcome(live), name="doorbell-welcome")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_listener_added(self, stream: ListenStream) -> None:
        task = asyncio.create_task(self._welcome_stream(stream), name="doorbell-welcome-listen")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _welcome_stream(self, stream: ListenStream) -> None:
        """Ring a new listen stream (acknowledged already) for the todos pending in its queues."""
        if not stream.queues:
            return
        try:
            todos = await rings.oldest_pending(self.runtime.core, stream.endpoint_id, stream.queues, WELCOME_LIMIT)
            for todo in self._ringable(todos):
                await self.ring(todo, use_gate=False, only_streams=[stream])
        except Exception:
            log.exception("doorbell welcome ring failed", extra={"endpoint": stream.caller.slug})

    async def _welcome(self, live: LiveSession, wait: float = 10.0) -> None:
        """Ring a session that just opened its stream for the oldest pending todos in its scope."""
        deadline = time.monotonic() + wait
        while True:
            state = _stream_open(self.mcp, live.session_id)
            if state is None:
                await asyncio.sleep(0.5)  # cannot tell: give the client a moment to open its stream
                break
            if state:
                break
            if time.monotonic() > deadline or self.sessions.get(live.session_id) is None:
                self.welcomed.add(live.session_id)
                return
            await asyncio.sleep(0.05)
        try:
            todos = await rings.oldest_pending(self.runtime.core, live.endpoint_id, list(live.caller.queues),
                                               WELCOME_LIMIT)
            for todo in self._ringable(todos):
                await self.ring(todo, use_gate=False, only=[live])
        except Exception:
            log.exception("doorbell welcome ring failed", extra={"endpoint": live.caller.slug})
        finally:
            if len(self.welcomed) > 10_000:
                self.welcomed.clear()
            self.welcomed.add(live.session_id)

    async def rering(self, core: Core | None = None) -> None:
        """Sweep tick (the component's `on_tick`, called with the sweeping core): count a re-ring on
        due pending todos of endpoints with sessions here; the wake-ups their statement sends at
        commit ring every process's sessions."""
        endpoints = self._local_endpoints()
        team_queues = ({q for live in self.sessions.all() for q in live.caller.queues if q.startswith("team:")}
                       | {q for stream in self.listeners.all() for q in stream.queues if q.startswith("team:")})
        if core is None and self.runtime.is_open:
            core = self.runtime.core
        if (endpoints or team_queues) and core is not None:
            await rings.rering_due(core, endpoints, team_queues=team_queues, intervals=self.rering_intervals)


def _queue_key(todo: dict) -> admission.QueueKey:
    """A ready todo's queue identity: its endpoint's queue, or its team's."""
    if todo.get("team_id"):
        return ("", str(todo["team_id"]), todo["queue"])
    return (str(todo["endpoint_id"]), "", todo["queue"])


def _count(note: dict) -> int:
    """How many todos a wake-up stands for (a bulk push sends one per queue with their count)."""
    count = note.get("count")
    return count if isinstance(count, int) and count > 0 else 1


def component(bell: Doorbell) -> Component:
    return Component(name="doorbell", start=bell.start, stop=bell.stop, on_tick=bell.on_tick)
