"""The cross-process wake-up: one dedicated LISTEN connection per process.

Transitions that make a todo claimable send `pg_notify('switchboard_ready', {"todo_id",
"endpoint_id", "queue", "reason"})` from inside their own transaction (migration 0003), so the
notification leaves only when the transition commits, whichever process (server, CLI, sweep) ran it.

The connection is not pooled: a pooled connection would lose its LISTEN when returned. When the
connection is lost, the listener reconnects with backoff and then calls the `on_reconnect` callbacks,
because whatever was committed while it was away was never heard (reference: stack.md §7, P17).
Notifications are hints: consumers re-read the database.

The same connection also listens on `switchboard_credentials` (migration 0008): an endpoint revoked,
rotated, rescoped or deleted by any process sends `{"endpoint_id", "reason"}` at commit, and
`on_credentials` subscribers (the MCP surface: its credential cache and open sessions) get them from a
worker of their own, so a slow doorbell batch never delays a revocation. Those notifications are a
fast path only: the statements themselves refuse a revoked endpoint (`endpoint_live` fragment), and
after a reconnection the `on_reconnect` callbacks assume anything may have been missed.

And on `switchboard_live` (core/live_notes.py): every process's note of the todos that moved through
it, for the Board's live pages (`on_live` subscribers, on a worker of their own).

The runtime (`switchboard.runtime`) owns the process's one listener and starts it once the database
is known; consumers (the doorbell, the hook sender, the MCP surface) `subscribe` to it when they are
built.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable

import psycopg

from ..stopping import stop_tasks

log = logging.getLogger("switchboard.listen")

READY_CHANNEL = "switchboard_ready"
CREDENTIALS_CHANNEL = "switchboard_credentials"
LIVE_CHANNEL = "switchboard_live"
APPLICATION_NAME = "switchboard-listen"  # pg_stat_activity shows "switchboard-listen <process id>"

Batch = Callable[[list[dict]], Awaitable[None]]
Resync = Callable[[], Awaitable[None]]


class ReadyListener:
    """LISTEN on the ready channel; hand notifications to callbacks in batches."""

    def __init__(self, uri: str = "", *, channel: str = READY_CHANNEL,
                 backoff: tuple[float, float] = (0.2, 30.0)) -> None:
        self.uri = uri
        self.channel = channel
        self.backoff = backoff
        self.on_batch: list[Batch] = []
        self.on_reconnect: list[Resync] = []
        self.on_credentials: list[Batch] = []
        self.on_live: list[Batch] = []
        self.connected = asyncio.Event()
        self.connections = 0  # how many times a LISTEN connection was established
        self.backend_pid: int | None = None
        self._task: asyncio.Task | None = None
        self._worker: asyncio.Task | None = None
        self._queue: asyncio.Queue[dict] = asyncio.Queue()
        self._credentials: asyncio.Queue[dict] = asyncio.Queue()
        self._credential_worker: asyncio.Task | None = None
        self._live: asyncio.Queue[dict] = asyncio.Queue()
        self._live_worker: asyncio.Task | None = None

    def subscribe(self, *, on_batch: Batch | None = None, on_reconnect: Resync | None = None,
                  on_credentials: Batch | None = None, on_live: Batch | None = None) -> Callable[[], None]:
        """Register callbacks for wake-up batches, for reconnections, for credential changes and for
        live notes; returns the unsubscribe call."""
        pairs: list[tuple[list, object]] = [(self.on_batch, on_batch), (self.on_reconnect, on_reconnect),
                                            (self.on_credentials, on_credentials), (self.on_live, on_live)]
        for callbacks, cb in pairs:
            if cb is not None:
                callbacks.append(cb)

        def unsubscribe() -> None:
            for callbacks, cb in pairs:
                if cb is not None and cb in callbacks:
                    callbacks.remove(cb)

        return unsubscribe

    async def start(self, uri: str | None = None) -> None:
        if uri is not None:
            self.uri = uri
        if not self.uri:
            raise ValueError("the listener needs a database URI")
        if self._task is None:
            self._task = asyncio.create_task(self._listen_forever(), name="listen-ready")
            self._worker = asyncio.create_task(
                self._deliver_forever(self._queue, self.on_batch,
                                      lambda b: b.get("todo_id") and (b.get("endpoint_id") or b.get("team_id"))),
                name="listen-deliver")
            self._credential_worker = asyncio.create_task(
                self._deliver_forever(self._credentials, self.on_credentials, lambda b: b.get("endpoint_id")),
                name="listen-credentials")
            self._live_worker = asyncio.create_task(
                self._deliver_forever(self._live, self.on_live, lambda b: b.get("o")), name="listen-live")

    async def stop(self) -> None:
        await stop_tasks(self._task, self._worker, self._credential_worker, self._live_worker)
        self._task = self._worker = self._credential_worker = self._live_worker = None
        self.connected.clear()

    async def wait_connected(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(self.connected.wait(), timeout)

    async def _listen_forever(self) -> None:
        delay: float | None = None  # None: the first retry after a good connection waits backoff[0]
        while True:
            try:
                name = f"{APPLICATION_NAME} {os.getpid()}"
                connect = psycopg.AsyncConnection.connect(self.uri, autocommit=True, application_name=name)
                async with await connect as conn:
                    # Channels are our constants, not input; one round trip for all three.
                    await conn.execute(f"LISTEN {self.channel}; LISTEN {CREDENTIALS_CHANNEL}; LISTEN {LIVE_CHANNEL}")
                    self.backend_pid = conn.info.backend_pid
                    self.connections += 1
                    first = self.connections == 1
                    self.connected.set()
                    delay = None
                    if not first:
                        log.info("listen connection restored", extra={"event": "listen_reconnected"})
                        await self._resync()
                    async for note in conn.notifies():
                        if note.channel == CREDENTIALS_CHANNEL:
                            self._credentials.put_nowait(self._parse(note.payload))
                        elif note.channel == LIVE_CHANNEL:
                            if self.on_live:  # nobody here shows live pages: nothing to queue
                                self._live.put_nowait(self._parse(note.payload))
                        else:
                            self._queue.put_nowait(self._parse(note.payload))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection lost or refused: retry with backoff
                log.warning("listen connection lost; reconnecting",
                            extra={"event": "listen_lost", "reason": type(exc).__name__})
            self.connected.clear()
            self.backend_pid = None
            delay = self.backoff[0] if delay is None else min(delay * 2, self.backoff[1])
            await asyncio.sleep(delay)

    @staticmethod
    def _parse(payload: str) -> dict:
        try:
            data = json.loads(payload)
            return data if isinstance(data, dict) else {}
        except ValueError:
            return {}

    async def _resync(self) -> None:
        for cb in list(self.on_reconnect):
            try:
                await cb()
            except Exception:
                log.exception("listen resync callback failed")

    @staticmethod
    async def _deliver_forever(queue: asyncio.Queue[dict], callbacks: list[Batch],
                               keep: Callable[[dict], object]) -> None:
        """Drain everything queued so far and hand it over as one batch (the entries `keep` accepts)."""
        while True:
            batch = [await queue.get()]
            while not queue.empty() and len(batch) < 1000:
                batch.append(queue.get_nowait())
            batch = [b for b in batch if keep(b)]
            if not batch:
                continue
            for cb in list(callbacks):
                try:
                    await cb(batch)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("listen callback failed")
