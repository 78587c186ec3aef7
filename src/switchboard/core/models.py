"""Who is calling the core, and the context every core function receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from . import inputs
from .combine import Combiner

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import DictRow
    from psycopg_pool import AsyncConnectionPool

    from ..config import Settings
    from .admission import PolicedEndpoints
    from .events import HookBus
    from .todos import ClaimResult, FleetClaim, FleetClose

    # A claim_next call waiting to run with others (its parameters and lease token) and what it gets
    # (its todo with the row it came from, or None); a close and the row it closed (core/todos.py).
    ClaimCombiner = Combiner[tuple[dict[str, Any], str | None], tuple[ClaimResult, dict[str, Any]] | None]
    CloseCombiner = Combiner[dict[str, Any], dict[str, Any]]
    # claim_next calls of any endpoints on one team queue (a fleet's), and what each gets: its todos
    # and the queues admission control deferred, as todos.take_next answers.
    FleetCombiner = Combiner[FleetClaim, tuple[list[ClaimResult], list[dict[str, Any]]]]
    # completes or fails of any endpoints whose one queue is a team queue, and the row each closed.
    FleetCloseCombiner = Combiner[FleetClose, dict[str, Any]]

# The drain family of verbs an endpoint may be granted (SPEC-0034 REQ-8, REQ-9).
VERBS = ("list_todos", "get_todo", "claim", "claim_next", "heartbeat", "complete", "fail", "release",
         "request_input", "admission_status")
DEFAULT_VERBS = ("list_todos", "claim", "claim_next", "heartbeat", "complete", "fail", "release",
                 "request_input")


def effective_verbs(granted: tuple[str, ...] | list[str]) -> frozenset[str]:
    """What a scope allows: `get_todo` is implied by `list_todos`, the read-only `admission_status` by
    `claim` or `claim_next` (SPEC-0030); nothing implies `release`."""
    verbs = set(granted)
    if "list_todos" in verbs:
        verbs.add("get_todo")
    if verbs & {"claim", "claim_next"}:
        verbs.add("admission_status")
    return frozenset(verbs)


@dataclass(frozen=True)
class EndpointCaller:
    """An agent calling with its endpoint credential; scoped to that endpoint and its queues."""

    endpoint_id: UUID
    agent_id: UUID
    queues: tuple[str, ...]
    verbs: frozenset[str]
    session_id: str | None = None
    default_lease_ttl: int | None = None
    slug: str = ""

    @property
    def owner(self) -> str:
        return f"agent:{self.agent_id}"

    def with_session(self, session_id: str | None) -> EndpointCaller:
        return EndpointCaller(self.endpoint_id, self.agent_id, self.queues, self.verbs, session_id,
                              self.default_lease_ttl, self.slug)


@dataclass(frozen=True)
class HumanCaller:
    """The owning human (Board, CLI, human API): every endpoint of their agents, exempt from fences."""

    human_id: UUID
    name: str = ""

    @property
    def owner(self) -> str:
        return f"op:{self.human_id}"


Caller = EndpointCaller | HumanCaller


def _new_bus() -> HookBus:
    from .events import HookBus  # events imports this module

    return HookBus()


def _new_policed() -> PolicedEndpoints:
    from .admission import PolicedEndpoints  # admission imports this module

    return PolicedEndpoints()


def _new_combiner() -> Combiner[Any, Any]:
    # calls run together in one statement at most: a batch call's own bound
    return Combiner(min(inputs.BATCH_CLAIM_MAX, inputs.BATCH_CLOSE_MAX))


@dataclass
class Core:
    """What every core function works with: the pool, the settings and the hook bus; and what this
    process remembers for routing only: the endpoints admission control polices, and the claims and
    closes that run now, which concurrent ones of the same caller join, or on a team queue of any of
    its endpoints (core/combine.py; the setting `combine_calls` false runs every call alone)."""

    pool: AsyncConnectionPool[AsyncConnection[DictRow]]
    settings: Settings
    bus: HookBus = field(default_factory=_new_bus)
    policed: PolicedEndpoints = field(default_factory=_new_policed)
    claims: ClaimCombiner = field(default_factory=_new_combiner)
    closes: CloseCombiner = field(default_factory=_new_combiner)
    fleet_claims: FleetCombiner = field(default_factory=_new_combiner)
    fleet_closes: FleetCloseCombiner = field(default_factory=_new_combiner)


def scope_params(caller: Caller) -> dict[str, Any]:
    if isinstance(caller, HumanCaller):
        return {"human_id": caller.human_id, "endpoint_id": None, "queues": [], "owner": caller.owner}
    return {"human_id": None, "endpoint_id": caller.endpoint_id, "queues": list(caller.queues),
            "owner": caller.owner}
