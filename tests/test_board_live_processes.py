"""The Board's live updates across serving processes (docs/decisions.md D63): a page streaming from one
process hears the todos that move through another (an agent's calls, a push, a team todo, a CLI
command on the database), only for
the human who may see them, once; a burst too big to list re-reads the page; the notes between the
processes name ids and verbs only, and stay under PostgreSQL's payload limit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import uuid

import httpx
import pytest

from account_kit import sign_in
from board_kit import PASSWORD, BoardServer
from conftest import core_for, make_settings, start_thread_server
from switchboard.core import humans, live_notes, producer, teams, todos
from switchboard.core.events import Event


@pytest.fixture
def two_processes(fresh_db):
    """Two serving processes (uvicorn threads, each its own app, pool and LISTEN connection) on one
    database, each reachable for core calls on its own loop."""
    first, second = start_thread_server(make_settings(fresh_db)), start_thread_server(make_settings(fresh_db))
    yield BoardServer(first, fresh_db), BoardServer(second, fresh_db)
    first.stop()
    second.stop()


class Watch:
    """One signed-in human's `/events` stream, its frames gathered as (event, data) pairs."""

    def __init__(self, base: str, cookie: str) -> None:
        self.client = httpx.AsyncClient(base_url=base, cookies={"sb_session": cookie}, timeout=None)
        self.frames: list[tuple[str, dict]] = []
        self.opened = asyncio.Event()
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:  # the server ends a stream after 30 s; reconnect as the page does
            async with self.client.stream("GET", "/events") as r:
                assert r.status_code == 200
                event = ""
                async for line in r.aiter_lines():
                    if line.startswith("retry:"):
                        self.opened.set()
                    elif line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event:
                        self.frames.append((event, json.loads(line[6:])))
                        event = ""

    def verbs(self, todo_id: str) -> list[str]:
        return [d["verb"] for e, d in self.frames if e == "todo" and d.get("id") == todo_id]

    async def until(self, check, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"not heard in {timeout} s: {self.frames}"
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
        await self.client.aclose()


async def test_a_page_hears_what_moves_through_another_process(two_processes):
    here, there = two_processes  # the page streams from `here`; the work happens through `there`
    ada = await there.run(humans.add, f"ada{uuid.uuid4().hex[:6]}", PASSWORD)
    bob = await there.run(humans.add, f"bob{uuid.uuid4().hex[:6]}", PASSWORD)
    carol = await there.run(humans.add, f"carol{uuid.uuid4().hex[:6]}", PASSWORD)
    ep, agent = await there.endpoint(ada, queues=("inbox",))
    team = f"crew{uuid.uuid4().hex[:4]}"
    await there.run(teams.create, ada, team)
    await there.run(teams.add_member, ada, team, carol.name)

    watches = {h.name: Watch(here.url, await sign_in(here.url, h.name)) for h in (ada, bob, carol)}
    try:
        for w in watches.values():
            await asyncio.wait_for(w.opened.wait(), 10)
        ada_w, bob_w, carol_w = watches[ada.name], watches[bob.name], watches[carol.name]

        # An agent's work through the other process: push, claim, complete.
        todo, _ = await there.run(producer.push, ada, ep["slug"], title="moved elsewhere")
        claimed = await there.run(todos.claim_next, agent)
        assert claimed.todo["id"] == todo["id"]
        await there.run(todos.complete, agent, todo["id"], summary="done over there")
        # (Moves within one note come as the todo's last verb: the page re-reads the todo anyway.)
        await ada_w.until(lambda: "complete" in ada_w.verbs(todo["id"]))

        # A team todo: its members hear it, whoever pushed it and wherever.
        team_todo, _ = await there.run(producer.push_team, ada, f"team:{team}/builds", title="team work")
        await carol_w.until(lambda: carol_w.verbs(team_todo["id"]))
        await ada_w.until(lambda: ada_w.verbs(team_todo["id"]))

        # A burst too big to list: the page is told to re-read everything.
        made = await there.run(producer.push_many, ada, ep["slug"],
                               [{"title": f"burst {i}"} for i in range(live_notes.MAX_TODOS + 10)])
        assert len(made) == live_notes.MAX_TODOS + 10
        await ada_w.until(lambda: ("endpoint", {"verb": "moved"}) in ada_w.frames)

        # A CLI command on this machine's database is a process of its own: it tells the others too.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        env.update(SWITCHBOARD_DATABASE_URL=there.uri, SWITCHBOARD_USER=ada.name)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "switchboard", "todo", "push", ep["slug"], "--title", "from the CLI", "--json",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        from_cli = json.loads(out)["todo"]["id"]
        await ada_w.until(lambda: ada_w.verbs(from_cli))

        # What moves through the page's own process is heard once, not again as a note.
        local, _ = await here.run(producer.push, ada, ep["slug"], title="moved here")
        await ada_w.until(lambda: ada_w.verbs(local["id"]))
        await asyncio.sleep(1.0)  # a note from `here` would have come back by now
        assert len(ada_w.verbs(local["id"])) == 1

        # Nobody else's: bob hears none of it, carol none of ada's own todos.
        assert bob_w.frames == []
        assert not carol_w.verbs(todo["id"]) and ("endpoint", {"verb": "moved"}) not in carol_w.frames
    finally:
        for w in watches.values():
            await w.close()


def _event(i: int, endpoint_id: str = "", team_id: str = "", verb: str = "complete") -> Event:
    return Event(verb=verb, todo={"id": str(uuid.UUID(int=i))}, endpoint_id=endpoint_id, queue="q", team_id=team_id)


def _note(origin: str, events: list[Event]) -> str:
    gathered = live_notes.Gathered()
    gathered.add(events)
    return gathered.note(origin)


def test_notes_fit_the_payload_limit_and_carry_ids_and_verbs_only():
    origin = uuid.uuid4().hex[:16]
    ep = str(uuid.uuid4())
    # Each todo's last verb, in the order of the last moves.
    listed = _note(origin, [_event(1, ep, verb="claim"), _event(2, ep, verb="claim"),
                                        _event(1, ep, verb="complete")])
    note = live_notes.decode(json.loads(listed))
    assert [(m.todo_id, m.verb) for m in note.moved] == [(str(uuid.UUID(int=2)), "claim"),
                                                          (str(uuid.UUID(int=1)), "complete")]
    full = _note(origin, [_event(i, str(uuid.uuid4()), team_id="", verb="request_input")
                                      for i in range(live_notes.MAX_TODOS)])
    assert len(full.encode()) < 8000 and len(live_notes.decode(json.loads(full)).moved) == live_notes.MAX_TODOS
    owners = [str(uuid.uuid4()) for _ in range(live_notes.MAX_OWNERS)]
    named = _note(origin, [_event(i, owners[i % len(owners)]) for i in range(1000)])
    assert len(named.encode()) < 8000
    assert sorted(live_notes.decode(json.loads(named)).endpoints) == sorted(owners)
    crowd = _note(origin, [_event(i, str(uuid.uuid4())) for i in range(1000)])
    assert live_notes.decode(json.loads(crowd)).everyone
    # Gathered a publish at a time, as a process does: the owners of the todos listed so far stay named.
    gathered = live_notes.Gathered()
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    gathered.add([_event(i, first) for i in range(30)])
    assert gathered.listing and len(gathered.moved) == 30
    gathered.add([_event(100 + i, second) for i in range(30)])
    assert live_notes.decode(json.loads(gathered.note(origin))).endpoints == tuple(sorted((first, second)))
    gathered.add([_event(1000 + i, str(uuid.uuid4())) for i in range(live_notes.MAX_OWNERS)])
    assert live_notes.decode(json.loads(gathered.note(origin))).everyone
    for junk in ({}, {"o": 1}, {"o": "x", "m": [["a", "b"]]}, {"o": "x", "m": "no"}, {"o": "x", "ep": [1], "tm": []}):
        assert live_notes.decode(junk) is None


async def test_a_process_stops_its_notes_promptly_even_when_the_database_does_not_answer(pg_uri):
    """Closing the runtime never waits long on a note: with every pooled connection taken, the pending
    note's wait for one is abandoned within the stop's bound; and when a connection arrives for it at
    the moment of the stop (Python 3.11's wait_for then loses the cancellation), the loop still ends."""
    async with core_for(pg_uri) as core:
        for hand_back in (False, True):
            sender = live_notes.NoteSender(core)
            sender.start()
            held = [await core.pool.getconn() for _ in range(core.pool.max_size)]
            try:
                await sender.collect([_event(1, str(uuid.uuid4()))])
                await asyncio.sleep(live_notes.NOTE_SECONDS + 0.2)  # the note now waits for a connection
                began = time.monotonic()
                if hand_back:
                    await core.pool.putconn(held.pop())  # its wait ends as the stop cancels it
                await asyncio.wait_for(sender.stop(), 3 * live_notes.STOP_FLUSH_SECONDS)
                assert time.monotonic() - began < 2 * live_notes.STOP_FLUSH_SECONDS + 1
            finally:
                for conn in held:
                    await core.pool.putconn(conn)
