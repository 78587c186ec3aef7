"""The doorbell under admission control (SPEC-0030, issue 13): no push for a queue whose policy holds
claims back, and one ring when it reopens (docs/decisions.md D56).

A real server, real PostgreSQL and the official SDK client, as tests/test_doorbell.py; the sweep tick
is driven by hand (`Doorbell.on_tick`), as the server's sweeper calls it.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from conftest import make_settings, start_thread_server
from core_world import sql
from mcp_support import push, vend
from switchboard.core import admission, producer, teams
from test_doorbell import bell, quiet_for, ringing, stream_open


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


async def tick(srv) -> None:
    """The server's sweep tick for the doorbell, run on the server's own loop."""
    b = bell(srv)
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(b.on_tick(), b.loop))


async def test_a_paused_queue_rings_nobody_and_rings_once_when_resumed(core, server):
    a = await vend(core, queues=["build"])
    await admission.set_paused(core, a.human, "build", True, endpoint=a.slug)
    async with ringing(server.url, a) as (_, inbox):
        await stream_open(server, inbox)
        held = await push(core, a, "waits for the switch")
        await quiet_for(0.5)
        assert inbox.rings_for(held["id"]) == []  # the push made no ring
        await tick(server)  # still paused: nothing
        await quiet_for(0.3)
        assert inbox.channel == []
        await admission.set_paused(core, a.human, "build", False, endpoint=a.slug)
        await tick(server)
        await inbox.wait(lambda: inbox.rings_for(held["id"]))
        await tick(server)  # rung once: the queue is no longer held back
        await quiet_for(0.3)
        assert len(inbox.rings_for(held["id"])) == 1


async def test_a_full_queue_rings_when_a_slot_frees(core, server):
    a = await vend(core, queues=["deploy"])
    await admission.set_policy(core, a.human, "deploy", endpoint=a.slug, max_in_flight=1)
    async with ringing(server.url, a) as (c, inbox):
        await stream_open(server, inbox)
        first = await push(core, a, "first")
        await inbox.wait(lambda: inbox.rings_for(first["id"]))
        got = json.loads((await c.call_tool("claim", {"id": first["id"]})).content[0].text)
        assert got["id"] == first["id"]
        second = await push(core, a, "second")  # the one slot is taken: no push
        await quiet_for(0.5)
        assert inbox.rings_for(second["id"]) == []
        await tick(server)
        await quiet_for(0.3)
        assert inbox.rings_for(second["id"]) == []
        await c.call_tool("complete", {"id": first["id"], "summary": "done"})
        await tick(server)
        await inbox.wait(lambda: inbox.rings_for(second["id"]))
        assert len(inbox.rings_for(second["id"])) == 1


async def test_a_session_opening_on_a_paused_queue_is_not_rung_for_it(core, server):
    a = await vend(core, queues=["held", "free"])
    await admission.set_paused(core, a.human, "held", True, endpoint=a.slug)
    waiting = await push(core, a, "behind the switch", queue="held")
    ready = await push(core, a, "ready", queue="free")
    async with ringing(server.url, a) as (_, inbox):
        await stream_open(server, inbox)
        await inbox.wait(lambda: inbox.rings_for(ready["id"]))
        assert inbox.rings_for(waiting["id"]) == []


async def test_a_paused_team_queue_rings_one_session_when_resumed(core, server):
    owner = (await vend(core, "tina", queues=["inbox"])).human
    await teams.create(core, owner, "night")
    a = await vend(core, "tina", agent="first", queues=["team:night/jobs"])  # the owner's vend grants
    b = await vend(core, "tina", agent="second", queues=["team:night/jobs"])
    await admission.set_paused(core, owner, "team:night/jobs", True)
    async with ringing(server.url, a) as (_, inbox_a), ringing(server.url, b) as (_, inbox_b):
        await stream_open(server, inbox_a)
        await stream_open(server, inbox_b)
        todo, _ = await producer.push_team(core, owner, "team:night/jobs", title="nightly")
        await quiet_for(0.5)
        assert inbox_a.channel == [] and inbox_b.channel == []
        await admission.set_paused(core, owner, "team:night/jobs", False)
        await tick(server)
        both = (inbox_a, inbox_b)
        await asyncio.wait_for(_until(lambda: sum(len(i.rings_for(todo["id"])) for i in both) >= 1), 10)
        await quiet_for(0.3)
        assert sum(len(i.rings_for(todo["id"])) for i in both) == 1  # one session, as a push rings


async def _until(probe) -> None:
    while not probe():
        await asyncio.sleep(0.02)


async def test_a_held_back_todo_spends_no_re_ring(core, server):
    """The re-ring on the sweep tick passes over a todo whose queue is held back: its ring would reach
    nobody, and it keeps its five re-rings for after the queue reopens."""
    a = await vend(core, queues=["nightly"])
    await admission.set_paused(core, a.human, "nightly", True, endpoint=a.slug)
    b = bell(server)
    async with ringing(server.url, a) as (_, inbox):
        await stream_open(server, inbox)
        held = await push(core, a, "paused work")
        b.rering_intervals = (0.0,)
        try:
            await tick(server)
            await quiet_for(0.3)
            assert await sql(core, "SELECT ring_attempts FROM todos WHERE id = %s", (held["id"],)) == [
                {"ring_attempts": 0}]
            await admission.set_paused(core, a.human, "nightly", False, endpoint=a.slug)
            await tick(server)  # the reopening ring; the re-ring counts the todo from now on
            await inbox.wait(lambda: inbox.rings_for(held["id"]))
        finally:
            b.rering_intervals = (300.0, 1200.0, 3600.0, 21600.0)
