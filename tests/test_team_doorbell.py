"""The doorbell for team queues (issue 13, docs/decisions.md D35): a ready team todo rings ONE live
session among the endpoints that reach its queue, the least recently rung first; an endpoint that names
the queue but was never granted it, or whose human left the team, is never rung; a re-queue rings again
(SPEC-0034 REQ-16). Real server, real PostgreSQL, the official SDK client with the channel capability."""

from __future__ import annotations

import asyncio
import uuid

from mcp_support import vend
from switchboard.core import endpoints, producer, teams, todos
from test_doorbell import ringing, server, stream_open  # noqa: F401  (the module's server fixture)


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
