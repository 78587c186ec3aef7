"""The doorbell for team queues (issue 13, docs/decisions.md D35): a ready team todo rings ONE live
session among the endpoints that reach its queue, the least recently rung first; an endpoint that names
the queue but was never granted it, or whose human left the team, is never rung; a re-queue rings again
(SPEC-0034 REQ-16). Real server, real PostgreSQL, the official SDK client with the channel capability."""

from __future__ import annotations

import asyncio
import uuid

from mcp_support import vend
from switchboard.core import endpoints, producer, teams, todos
from test_doorbell import bell, ringing, server, stream_open  # noqa: F401  (the module's server fixture)


async def test_a_team_todo_rings_one_session_least_recently_rung_first(core, server):  # noqa: F811
    slug = f"t{uuid.uuid4().hex[:8]}"
    label = f"team:{slug}/builds"
    a = await vend(core, f"own-{slug}", agent="seed", queues=["inbox"])
    await teams.create(core, a.human, slug)
    await vend(core, f"mem-{slug}", agent="seed", queues=["inbox"])
    await teams.add_member(core, a.human, slug, f"mem-{slug}")
    first = await vend(core, f"own-{slug}", agent="first", queues=[label])  # an owner's vend is granted
    second = await vend(core, f"mem-{slug}", agent="second", queues=[label])  # a member's waits ...
    await teams.grant(core, a.human, slug, label, second.slug)  # ... for the owner's grant
    waiting = await vend(core, f"mem-{slug}", agent="waiting", queues=[label])  # never granted

    async with ringing(server.url, first) as (_, one), ringing(server.url, second) as (_, two), \
            ringing(server.url, waiting) as (_, three):
        for inbox in (one, two, three):
            await stream_open(server, inbox)
        rung = []
        for n in range(4):
            todo, _ = await producer.push_team(core, a.human, label, title=f"build {n}")
            await asyncio.wait_for(_until(lambda: one.rings_for(todo["id"]) or two.rings_for(todo["id"])), 10)
            await asyncio.sleep(0.3)  # time for a wrong second ring to arrive
            got = [name for name, box in (("first", one), ("second", two), ("waiting", three))
                   if box.rings_for(todo["id"])]
            assert len(got) == 1, got  # one session per todo, never the ungranted endpoint's
            rung.append(got[0])
        assert rung in (["first", "second", "first", "second"], ["second", "first", "second", "first"])

        # A re-queue rings again inside the gate window (REQ-16), one session again.
        held = await todos.claim_next(core, await _endpoint(core, first))
        assert held is not None
        await todos.release(core, await _endpoint(core, first), held.todo["id"])
        await asyncio.wait_for(_until(lambda: len(one.rings_for(held.todo["id"]))
                                      + len(two.rings_for(held.todo["id"])) == 2), 10)

        # A member who leaves is not rung any more.
        await teams.leave(core, second.human, slug)
        for n in range(2):
            todo, _ = await producer.push_team(core, a.human, label, title=f"after {n}")
            await asyncio.wait_for(_until(lambda: one.rings_for(todo["id"])), 10)
        await asyncio.sleep(0.3)
        assert not any(two.rings_for(t) for t in _ids(one)[-2:])
        assert not any(three.channel)


async def _endpoint(core, agent):
    return endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))


def _ids(inbox) -> list[str]:
    return [p.meta["todo_id"] for p in inbox.channel]


async def _until(probe) -> None:
    while not probe():
        await asyncio.sleep(0.02)


async def test_a_team_batch_rings_as_many_sessions_as_it_brings_todos(core, server):  # noqa: F811
    """A bulk push sends one wake-up per queue (its first todo and a count): on a team queue it rings
    that many sessions, least recently rung first, not one and not every one."""
    from team_world import make_fleet

    fleet = await make_fleet(core, members=3)  # three endpoints, each granted the team queue
    agents = [_Agent(cred, slug) for cred, slug in zip(fleet.credentials, fleet.ep_slugs, strict=True)]
    async with ringing(server.url, agents[0]) as (_, a), ringing(server.url, agents[1]) as (_, b), \
            ringing(server.url, agents[2]) as (_, c):
        for inbox in (a, b, c):
            await stream_open(server, inbox)
        out = await producer.push_team_many(core, fleet.humans[0], fleet.slug,
                                            [{"title": f"b{i}", "queue": "work"} for i in range(2)])
        first = out[0][0]["id"]
        await asyncio.wait_for(_until(lambda: sum(bool(x.rings_for(first)) for x in (a, b, c)) == 2), 10)
        await asyncio.sleep(0.3)  # time for a wrong third ring to arrive
        assert sum(len(x.rings_for(first)) for x in (a, b, c)) == 2


async def test_a_team_todo_nobody_claims_is_rung_again_by_the_sweep(core, server):  # noqa: F811
    """The doorbell's re-ring covers team queues: a due team todo is counted once more and its wake-up
    (naming its team) rings one session again, inside the gate window."""
    from team_world import make_fleet

    fleet = await make_fleet(core, members=1, endpoints=1)
    async with ringing(server.url, _Agent(fleet.credentials[0], fleet.ep_slugs[0])) as (_, inbox):
        await stream_open(server, inbox)
        todo = await fleet.push("waits")
        await asyncio.wait_for(_until(lambda: inbox.rings_for(todo["id"])), 10)
        doorbell = bell(server)
        saved = doorbell.rering_intervals
        doorbell.rering_intervals = (0.0,)
        try:
            await doorbell.rering(core)
        finally:
            doorbell.rering_intervals = saved
        await asyncio.wait_for(_until(lambda: len(inbox.rings_for(todo["id"])) == 2), 10)
    async with core.pool.connection() as conn:
        got = await (await conn.execute("SELECT ring_attempts FROM todos WHERE id = %s", (todo["id"],))).fetchone()
    assert got["ring_attempts"] == 1


async def test_a_team_ring_goes_to_a_session_that_listens(core, server):  # noqa: F811
    """A session that neither subscribed to the queue nor declared the channel hears no push, so it
    never takes a team todo's one ring: every todo rings the session that listens."""
    from team_world import make_fleet

    fleet = await make_fleet(core, members=2, endpoints=2)
    deaf_agent = _Agent(fleet.credentials[0], fleet.ep_slugs[0])
    listener_agent = _Agent(fleet.credentials[1], fleet.ep_slugs[1])
    async with ringing(server.url, deaf_agent, channel=False) as (_, deaf), \
            ringing(server.url, listener_agent) as (_, listener):
        await stream_open(server, listener)
        await asyncio.wait_for(_until(lambda: deaf.session_id in bell(server).welcomed), 10)
        pushed = [await fleet.push(f"job {n}") for n in range(4)]
        for todo in pushed:
            await asyncio.wait_for(_until(lambda t=todo: listener.rings_for(t["id"])), 10)
        assert not deaf.channel and not deaf.updated


async def test_a_team_todo_rings_one_session_across_processes(core, pg_uri):
    """Two serving processes, each holding a listening session of an endpoint that reaches the team
    queue: each push rings one of the two sessions in all (the first process to take the ring's turn),
    not one per process."""
    from conftest import start_process_server
    from team_world import make_fleet

    fleet = await make_fleet(core, members=2, endpoints=2)
    one_agent = _Agent(fleet.credentials[0], fleet.ep_slugs[0])
    two_agent = _Agent(fleet.credentials[1], fleet.ep_slugs[1])
    proc_a, proc_b = start_process_server(pg_uri), start_process_server(pg_uri)
    try:
        async with ringing(proc_a.url, one_agent) as (_, one), ringing(proc_b.url, two_agent) as (_, two):
            warm = await fleet.push("warm-up")  # both streams are open once each has been offered a ring
            await asyncio.wait_for(_until(lambda: one.rings_for(warm["id"]) or two.rings_for(warm["id"])), 15)
            await asyncio.sleep(1.0)
            pushed = [await fleet.push(f"job {n}") for n in range(6)]
            for todo in pushed:
                await asyncio.wait_for(_until(lambda t=todo: one.rings_for(t["id"]) or two.rings_for(t["id"])), 15)
            await asyncio.sleep(1.0)  # time for a second process's ring to arrive
            for todo in pushed:
                assert len(one.rings_for(todo["id"])) + len(two.rings_for(todo["id"])) == 1, todo["id"]
    finally:
        proc_a.stop()
        proc_b.stop()


class _Agent:
    """What `ringing` needs of a vended agent: its credential and its MCP URL."""

    def __init__(self, credential: str, slug: str) -> None:
        self.credential, self.slug = credential, slug

    def url(self, base: str) -> str:
        return f"{base}/mcp/{self.slug}"
