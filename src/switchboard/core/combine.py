"""Concurrent calls of one kind, run together as one statement (docs/decisions.md D47).

A call whose key has no statement running runs at once (after one turn of the event loop, which lets
calls woken together run together): a lone worker's call runs alone, as it always did. Calls that
arrive while one statement of their key runs wait for it and then go together, up to `limit`, as the
next one: W workers of one endpoint in one process, each claiming or completing one todo at a time,
cost PostgreSQL one statement and one commit per group instead of one per call. What a statement
does for each call is what the call alone would have done (core/todos.py says what a key holds and
how a group runs); a statement that fails fails every call in it.

Per key at most one statement runs at a time. Keys live only while calls of theirs run or wait.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")

# Runs one group: the items of one key, in arrival order; returns one outcome per item, in the same
# order: a value, or the exception that item's call raises.
Run = Callable[[list[Item]], Awaitable[list[Out | BaseException]]]


class _Lane(Generic[Item, Out]):
    __slots__ = ("run", "running", "waiting")

    def __init__(self, run: Run[Item, Out]) -> None:
        self.run = run
        self.running = False
        self.waiting: deque[tuple[Item, asyncio.Future[Out]]] = deque()


class Combiner(Generic[Item, Out]):
    """Groups concurrent calls by key (see the module's docstring). One per kind of call, held by the
    Core; `submit` is only called from the event loop the Core serves.

    A group of several calls runs in a task of its own, never in a caller's: a caller cancelled while
    its group runs (a client gone) loses its own outcome only, as a call alone would, and the others
    get theirs. A call alone runs in its caller's task."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lanes: dict[Hashable, _Lane[Item, Out]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, key: Hashable, item: Item, run: Run[Item, Out]) -> Out:
        """The outcome of `item`: run at once, with the calls that arrive in the same turn of the event
        loop, when no statement of `key` runs; else in the next group. `run` is the key's runner (every
        call of one key passes an equivalent one; the first is kept)."""
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(run)
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        lane.waiting.append((item, future))
        if not lane.running:
            lane.running = True
            try:
                # One turn of the loop: the workers woken by one group's results come back in the
                # same turn, and their next calls join this one instead of waiting for it.
                await asyncio.sleep(0)
            except BaseException:
                future.cancel()
                self._next(key, lane)
                raise
            group = self._take(lane)
            if len(group) > 1:
                self._start(key, lane, group)
            else:  # alone (a lone worker's call): in this task, as a call without the Combiner
                try:
                    out = (await lane.run([item]))[0]
                finally:
                    self._next(key, lane)
                if isinstance(out, BaseException):
                    raise out
                return out
        return await future

    def _take(self, lane: _Lane[Item, Out]) -> list[tuple[Item, asyncio.Future[Out]]]:
        """The next group: up to `limit` of the calls waiting, oldest first (a call cancelled while
        waiting is dropped, not run)."""
        group: list[tuple[Item, asyncio.Future[Out]]] = []
        while lane.waiting and len(group) < self.limit:
            item, future = lane.waiting.popleft()
            if not future.done():
                group.append((item, future))
        return group

    def _next(self, key: Hashable, lane: _Lane[Item, Out]) -> None:
        """Start the next group of `key`, or forget the idle key."""
        group = self._take(lane)
        if not group:
            lane.running = False
            if not lane.waiting:
                del self._lanes[key]
            return
        self._start(key, lane, group)

    def _start(self, key: Hashable, lane: _Lane[Item, Out], group: list[tuple[Item, asyncio.Future[Out]]]) -> None:
        task = asyncio.get_running_loop().create_task(self._run_group(key, lane, group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_group(self, key: Hashable, lane: _Lane[Item, Out],
                         group: list[tuple[Item, asyncio.Future[Out]]]) -> None:
        try:
            outs = await lane.run([item for item, _ in group])
            if len(outs) != len(group):  # never leave a caller waiting for an outcome that will not come
                raise RuntimeError(f"a group of {len(group)} calls got {len(outs)} outcomes")
        except BaseException as exc:  # the statement failed, or the task was cancelled: every call
            for _, future in group:
                if not future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    else:
                        future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for (_, future), out in zip(group, outs, strict=True):
                if future.done():  # its caller was cancelled meanwhile
                    continue
                if isinstance(out, BaseException):
                    future.set_exception(out)
                else:
                    future.set_result(out)
        finally:
            self._next(key, lane)

    def __len__(self) -> int:
        """Keys with a statement running or calls waiting."""
        return len(self._lanes)
