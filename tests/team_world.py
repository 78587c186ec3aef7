"""Helpers for the team tests: a team of humans whose agents' endpoints drain one team queue, each with
its own credential (issue 13). Time is moved by SQL, never by sleeping (see core_world)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from switchboard.core import endpoints, humans, producer, teams
from switchboard.core.models import Core, EndpointCaller, HumanCaller


@dataclass
class Fleet:
    core: Core
    slug: str  # the team's slug
    label: str  # the team queue, team:<slug>/<queue>
    humans: list[HumanCaller]  # humans[0] owns the team, humans[1] is an admin, the rest members
    endpoints: list[EndpointCaller] = field(default_factory=list)  # in vend order
    credentials: list[str] = field(default_factory=list)
    ep_slugs: list[str] = field(default_factory=list)
    ep_human: list[int] = field(default_factory=list)  # index into humans of each endpoint's human

    async def push(self, title: str = "t", *, by: int = 0, **kw) -> dict:
        todo, created = await producer.push_team(self.core, self.humans[by], self.label, title=title, **kw)
        assert created
        return todo

    async def caller(self, i: int, session: str | None = None) -> EndpointCaller | None:
        """Endpoint i as a server would resolve its credential now (None once it stopped working)."""
        row = await endpoints.resolve_credential(self.core, self.credentials[i])
        return endpoints.caller_from_row(row, session) if row is not None else None

    async def vend(self, member: int, *, agent: str = "fixer", queues: list[str] | None = None,
                   grant: bool = True) -> EndpointCaller:
        """Vend an endpoint for humans[member] with the team queue (and an own queue); the owner grants
        it when its vendor could not."""
        ep, credential = await endpoints.vend(self.core, self.humans[member], agent=agent,
                                              queues=queues or ["own", self.label])
        if grant and ep.get("awaiting_grant"):
            await teams.grant(self.core, self.humans[0], self.slug, self.label, ep["slug"])
        caller = endpoints.caller_from_row(await endpoints.resolve_credential(self.core, credential))
        self.endpoints.append(caller)
        self.credentials.append(credential)
        self.ep_slugs.append(ep["slug"])
        self.ep_human.append(member)
        return caller


async def make_fleet(core: Core, *, members: int = 3, endpoints: int | None = None, slug: str | None = None,
                     queue: str = "work") -> Fleet:
    """A team of `members` humans (an owner, an admin, then members) and `endpoints` endpoints (one
    per member by default) dealt round the members, each granted the team queue."""
    tag = uuid.uuid4().hex[:6]
    people = [await humans.add(core, f"m{i}-{tag}") for i in range(members)]
    team_slug = slug or f"t-{tag}"
    await teams.create(core, people[0], team_slug)
    for i, person in enumerate(people[1:], start=1):
        await teams.add_member(core, people[0], team_slug, person.name, "admin" if i == 1 else "member")
    fleet = Fleet(core, team_slug, f"team:{team_slug}/{queue}", people)
    for n in range(members if endpoints is None else endpoints):
        await fleet.vend(n % members, agent=f"fixer-{n // members}")
    return fleet
