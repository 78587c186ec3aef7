"""Admission control (SPEC-0030, issue 13; docs/admission.md): per-queue caps on leases in flight and
budgets of claims per window, with a pause switch.

A policy belongs to one queue identity: `(endpoint, queue)` or `(team, queue)`. Every committed claim
on a policed queue is charged one unit (takeovers and claims after a retry included); nothing
refunds. A claim on a policed queue runs as one transaction (core/todos.py):

- fast path, a claim on one policed queue: `admit` judges the policy with a snapshot taken after its
  lock (a VOLATILE function, migrations 0017, 0020 and 0021; always before any todo: one lock order
  for every claimer) and, when it admits, charges the claims in the same statement; a refusal is an
  error (SQLSTATE SBA01) that skips the claim statement sent behind it. The lock is one of the
  policy's shard rows while the committed usage leaves room for every shard holder (claimers of one
  queue hold their shards at once), else the policy row and all its shards (exact, one at a time);
  the charge goes to the shard held. claim_next of one todo is ONE autocommit statement
  (`claim_admitted`, migration 0022): `switchboard_admission_hold` (the same locks and verdict, no
  charge) runs before any todo is read, the claim takes at most one todo, and the statement's last
  step charges the held shard with what it took. A batch or a claim by id sends BEGIN, `admit` (which
  charges) and the claim in one round trip (pipeline mode); the transaction then commits when the
  claim took what was charged, charges back the difference on the same shard when it took fewer, and
  rolls back when it took nothing;
- locked path, a refused queue, several queues or a batch beyond a policy's room: `verdicts` locks
  the policies and their shards and judges exactly, the claim runs on the admitted queues only (at
  most `cap` todos per queue), `charge` adds the claims to shard 0; three round trips (BEGIN with the
  verdicts, the claim, the charge with COMMIT).

A window's usage is the sum of the charges of that window over the policy's shards
(`switchboard_admission_used`; the proof that the shards never over-admit is in migration 0021).

The claim statements everywhere else skip policed queues in SQL (the `unpoliced` fragment), so a
policy takes effect with its commit, whatever this process believes; `policed` below only remembers
which endpoints to send straight to the policed path, and which queues to judge on the locked path
first. When the policies cannot be read the claim fails closed with `deferred` /
`admission_unavailable`.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow

from . import inputs, queries, shapes
from .errors import Deferred, Forbidden, Invalid, NotFound, Unavailable
from .models import Core, EndpointCaller, HumanCaller
from .queries import Q

PERIODS = ("hour", "day", "week")
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
HELD_REASONS = ("window_exhausted", "in_flight_full", "paused")  # a deferral entry: the policy holds it back
REASONS = (*HELD_REASONS, "admission_unavailable")  # and the error `deferred`: no policy could be read
MAX_IN_FLIGHT_MAX = 10_000
MAX_CLAIMS_MAX = 1_000_000
REFUSED_SQLSTATE = "SBA01"  # `admit`: the policy does not admit the claim now (migration 0020)


class Refused(Exception):
    """The fast path's policy did not admit the claim now: judge again on the locked path, which
    reports why."""


@dataclass
class Verdicts:
    """What `verdicts` said about the caller's policed queues, inside the claim's transaction."""

    rows: dict[str, dict[str, Any]]

    def admitted(self, queues: list[str]) -> list[str]:
        return [q for q in queues if q not in self.rows or self.rows[q]["verdict"] == "admitted"]

    def cap(self, queue: str) -> int | None:
        row = self.rows.get(queue)
        return None if row is None else int(row["cap"])

    def deferred(self) -> list[dict[str, Any]]:
        """The refusals to report: never about a team queue the endpoint does not reach now."""
        return [{"queue": r["queue"], "reason": r["verdict"], "pending": r["pending"],
                 "next_eligible_at": shapes.ts(r["next_eligible_at"])}
                for r in self.rows.values() if r["verdict"] != "admitted" and r.get("reached", True)]

    def usage_after(self, queue: str, claimed: int) -> dict[str, Any] | None:
        """The `admission` object of a successful claim on `queue` (None when no policy applies)."""
        r = self.rows.get(queue)
        if r is None:
            return None
        used = r["used"] + claimed
        limit = r["max_claims_per_window"]
        return {"max_in_flight": r["max_in_flight"], "in_flight": r["in_flight"] + claimed,
                "max_claims_per_window": limit, "used": used,
                "remaining": None if limit is None else max(limit - used, 0),
                "window_resets_at": shapes.ts(r["window_resets"])}

    def charges(self, claimed_per_queue: dict[str, int]) -> dict[str, list[Any]]:
        """The `charge` statement's parameters: each policy's units on the shard the verdict holds (the
        fast path's own shard, or shard 0 under the exact verdict's locks; migration 0021)."""
        ids, shards, ns, windows = [], [], [], []
        for queue, n in claimed_per_queue.items():
            r = self.rows.get(queue)
            if r is not None and n:
                ids.append(r["policy_id"])
                shards.append(r.get("shard") or 0)
                ns.append(n)
                windows.append(r["window_starts"])
        return {"ids": ids, "shards": shards, "ns": ns, "windows": windows}


PASSED_ON = (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable,
             psycopg.errors.InvalidAuthorizationSpecification)


def as_executed(conn: AsyncConnection[DictRow], exc: psycopg.Error) -> Exception:
    """In pipeline mode a statement's error surfaces where its result is read, past the pool's cursor
    that reports a timeout and a refused endpoint (SQLSTATE 28000) as the core's errors
    (db/pool.py, DeadlineCursor): the same report here."""
    if isinstance(exc, psycopg.errors.InvalidAuthorizationSpecification):
        refused = getattr(conn, "refused_error", None)
        return refused() if refused is not None else exc
    if isinstance(exc, (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)):
        timeout = getattr(conn, "timeout_error", None)
        return timeout() if timeout is not None else exc
    return exc


def verdict_error(exc: psycopg.DatabaseError, queues: list[str]) -> Exception:
    """What a verdict statement's failure means to the claim: a fast-path refusal, a claimer no longer
    live (28000), a cancellation and a lost connection (the surfaces' `unavailable`, retryable) stay
    what they are; anything else fails closed."""
    if exc.sqlstate == REFUSED_SQLSTATE:
        return Refused()
    if isinstance(exc, (*PASSED_ON, psycopg.OperationalError)):
        return exc
    return Deferred(queue=queues[0] if len(queues) == 1 else ",".join(queues), reason="admission_unavailable")


async def judge(conn: AsyncConnection[DictRow], endpoint_id: UUID | None, queues: list[str], *,
                claimer_id: UUID | None = None) -> Verdicts:
    """Lock and judge the policies of `queues` (first statement of the claim's transaction): those of
    the endpoint `endpoint_id`'s own queues and of team labels. `claimer_id`, the endpoint calling
    claim_next, is refused when no longer live, and hears of no team queue outside its reach."""
    try:
        cur = await conn.execute(Q.admission.verdicts, {"endpoint_id": endpoint_id, "queues": queues,
                                                         "claimer_id": claimer_id})
        rows = await cur.fetchall()
    except psycopg.DatabaseError as exc:
        raise verdict_error(exc, queues) from None
    return Verdicts({r["queue"]: dict(r) for r in rows})


async def admit(conn: AsyncConnection[DictRow], endpoint_id: UUID | None, queue: str, want: int, *,
                claimer_id: UUID | None = None) -> psycopg.AsyncCursor[DictRow]:
    """Send the fast path's `admit` for `want` claims on `queue` (in pipeline mode nothing waits for
    it); `admitted` reads its answer."""
    return await conn.execute(Q.admission.admit, {"endpoint_id": endpoint_id, "queue": queue, "want": want,
                                                  "claimer_id": claimer_id})


async def admitted(cur: psycopg.AsyncCursor[DictRow], queue: str) -> Verdicts:
    """The verdict `admit` charged for (no row: the queue has no policy, nothing charged). Raises
    Refused, or what `verdict_error` makes of another failure."""
    try:
        rows = await cur.fetchall()
    except psycopg.DatabaseError as exc:
        raise verdict_error(exc, [queue]) from None
    return Verdicts({r["queue"]: dict(r) for r in rows})


async def claim_admitted(conn: AsyncConnection[DictRow], queue: str, params: dict[str, Any], *,
                         group: bool = False) -> tuple[Verdicts, list[dict[str, Any]]]:
    """The fast path of claim_next for one todo on ONE policed queue, as one autocommit statement
    (`claim_next_team_admitted` / `claim_next_own_admitted`, migration 0022): lock a shard and judge,
    claim at most one todo, charge exactly what was claimed to that shard. `params` are the claim's
    (the calling endpoint's). Returns the verdict (none: `queue` has no policy) and the claimed rows.
    Raises Refused, with nothing changed, when the policy does not admit the claim now; a racing
    transition's exclusion violation stays what it is; another failure is what `verdict_error` makes
    of it. `group`: the claims of several endpoints on one team queue (`claim_next_team_group_admitted`,
    core/todos.py `_fleet_group`), `params` theirs."""
    if group:
        sql = Q.admission.claim_next_team_group_admitted
    elif inputs.is_team_label(queue):
        sql = Q.admission.claim_next_team_admitted
    else:
        sql = Q.admission.claim_next_own_admitted
    try:
        cur = await queries.execute(conn, sql, {**params, "queue": queue})
        got = await cur.fetchall()
    except psycopg.errors.ExclusionViolation:
        raise
    except psycopg.DatabaseError as exc:
        raise verdict_error(exc, [queue]) from None
    rows, verdicts = [], {}
    for r in got:
        if r["id"] is not None:
            rows.append(r)
        else:  # the verdict row: `adm` as JSON in closed_attempt
            v = dict(r["closed_attempt"])
            for key in ("window_starts", "window_resets", "next_eligible_at"):
                if v.get(key) is not None:
                    v[key] = datetime.fromisoformat(v[key])
            v["policy_id"] = UUID(v["policy_id"])
            v["reached"] = True
            verdicts[v["queue"]] = v
    return Verdicts(verdicts), rows


async def charge(conn: AsyncConnection[DictRow], verdicts: Verdicts, claimed_per_queue: dict[str, int]) -> None:
    params = verdicts.charges(claimed_per_queue)
    if params["ids"]:
        await conn.execute(Q.admission.charge, params)


async def stripe_take(core: Core, queue: str) -> int:
    """The most claims one fast-path statement may ask of the team queue `queue`'s policy (B, migration
    0021); 1 when it has none now."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.admission.stripe_take, {"queue": queue})
        row = await cur.fetchone()
    return int(row["take"]) if row and row["take"] is not None else 1


async def any_policy(core: Core, endpoint_id: UUID, queues: list[str]) -> bool:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.admission.any_policy, {"endpoint_id": endpoint_id, "queues": queues})
        row = await cur.fetchone()
    return bool(row and row["policed"])


class PolicedEndpoints:
    """Which endpoints recently met a policy, to send their claims straight to the policed path, and
    which of their queues a policy recently refused, to judge those on the locked path first (it
    reports the refusal; the fast path would only roll back), and how many claims a fleet's group may
    ask of a queue's policy at once. Only routing hints: the statements
    refuse to claim a policed queue without the lock, and judge every claim, either way."""

    def __init__(self, limit: int = 10_000) -> None:
        self._ids: set[UUID] = set()
        self._refused: set[tuple[UUID, str]] = set()
        self._takes: dict[str, int] = {}
        self._limit = limit

    def __contains__(self, endpoint_id: object) -> bool:
        return endpoint_id in self._ids

    def mark(self, endpoint_id: UUID, policed: bool) -> None:
        if policed:
            if len(self._ids) >= self._limit:
                self._ids.clear()
            self._ids.add(endpoint_id)
        else:
            self._ids.discard(endpoint_id)

    def refused(self, endpoint_id: UUID, queue: str) -> bool:
        return (endpoint_id, queue) in self._refused

    def note(self, endpoint_id: UUID, queue: str, refused: bool) -> None:
        if refused:
            if len(self._refused) >= self._limit:
                self._refused.clear()
            self._refused.add((endpoint_id, queue))
        else:
            self._refused.discard((endpoint_id, queue))

    def take(self, queue: str) -> int | None:
        """How many claims one fast-path statement may take on `queue` (its policy's B, migration
        0021), as a fleet's last group on it learned; None when not known yet."""
        return self._takes.get(queue)

    def note_take(self, queue: str, take: int) -> None:
        if queue not in self._takes and len(self._takes) >= self._limit:
            self._takes.clear()
        self._takes[queue] = max(1, take)


# ------------------------------------------------------------------------------------ policies

@dataclass(frozen=True)
class Window:
    period: str
    tz: str
    start_minute: int
    weekday: int | None


def _limit(value: object, argument: str, maximum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise Invalid(f"{argument} must be a whole number from 0 to {maximum}, or none", argument=argument)
    return value


def window(period: object = "hour", tz: object = "UTC", start: object = "00:00",
           weekday: object = None) -> Window:
    """Validate a window: period hour|day|week, an IANA time zone, a start HH:MM, a weekday for weeks."""
    if period not in PERIODS:
        raise Invalid(f"window period must be one of {', '.join(PERIODS)}", argument="window.period")
    if not isinstance(tz, str) or not tz or len(tz) > 64:
        raise Invalid("window tz must be an IANA time zone such as Europe/Paris", argument="window.tz")
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise Invalid(f"window tz {tz!r} is not an IANA time zone", argument="window.tz") from None
    if not isinstance(start, str) or len(start) != 5 or start[2] != ":" or not (start[:2] + start[3:]).isdigit():
        raise Invalid("window start must be HH:MM", argument="window.start")
    hours, minutes = int(start[:2]), int(start[3:])
    if hours > 23 or minutes > 59:
        raise Invalid("window start must be HH:MM from 00:00 to 23:59", argument="window.start")
    day: int | None = None
    if period == "week":
        if not isinstance(weekday, str) or weekday.lower()[:3] not in WEEKDAYS:
            raise Invalid("a weekly window needs a weekday (mon..sun)", argument="window.weekday")
        day = WEEKDAYS.index(weekday.lower()[:3]) + 1
    elif weekday is not None:
        raise Invalid("weekday applies to weekly windows only", argument="window.weekday")
    return Window(str(period), tz, hours * 60 + minutes, day)


@dataclass(frozen=True)
class Identity:
    """A queue identity a human may manage: one of their endpoints' queues, or a team queue."""

    queue: str
    endpoint_id: UUID | None
    team_id: UUID | None
    role: str | None = None  # the human's team role, for a team queue


async def identity(core: Core, human: HumanCaller, queue: object, endpoint: object = None) -> Identity:
    """Resolve `queue` (a team label, or a queue of the endpoint `endpoint` by slug) for a human;
    outside their reach it is not_found."""
    from . import endpoints, teams  # teams imports nothing of this module; endpoints neither

    label = inputs.queue(queue)
    if inputs.is_team_label(label):
        async with core.pool.connection() as conn:
            team = await teams.team_for_label(conn, human, label)
        return Identity(label, None, team["id"], team["role"])
    if endpoint is None:
        raise Invalid("an endpoint's queue needs the endpoint (its slug); a team queue is team:<slug>/<queue>",
                      argument="endpoint")
    row = await endpoints.get_for_human(core, human, endpoint)
    if label not in row["scope_queues"]:
        raise Invalid(f"queue {label} is not one of this endpoint's queues ({', '.join(row['scope_queues'])})",
                      argument="queue")
    return Identity(label, row["id"], None)


def _require_manage(ident: Identity) -> None:
    if ident.team_id is not None and ident.role not in ("owner", "admin"):
        raise Forbidden("only a team owner or admin may change a team queue's admission policy", argument="queue")


async def set_policy(core: Core, human: HumanCaller, queue: object, *, endpoint: object = None,
                     max_in_flight: object = None, max_claims_per_window: object = None,
                     window_spec: Window | None = None, paused: object = None) -> dict[str, Any]:
    ident = await identity(core, human, queue, endpoint)
    _require_manage(ident)
    w = window_spec or window()
    if paused is not None and not isinstance(paused, bool):
        raise Invalid("paused must be true or false", argument="paused")
    params = {"queue": ident.queue, "endpoint_id": ident.endpoint_id, "team_id": ident.team_id,
              "max_in_flight": _limit(max_in_flight, "max_in_flight", MAX_IN_FLIGHT_MAX),
              "max_claims_per_window": _limit(max_claims_per_window, "max_claims_per_window", MAX_CLAIMS_MAX),
              "period": w.period, "tz": w.tz, "start_minute": w.start_minute, "weekday": w.weekday,
              "paused": paused, "human_id": human.human_id}
    sql = Q.admission.upsert_team if ident.team_id is not None else Q.admission.upsert_endpoint
    async with core.pool.connection() as conn:
        try:
            await conn.execute(Q.admission.zone_known, {"tz": w.tz})
        except psycopg.errors.InvalidParameterValue:
            raise Invalid(f"window tz {w.tz!r} is not a time zone this database knows",
                          argument="window.tz") from None
        written = await (await conn.execute(sql, params)).fetchone()
    if written is None:
        raise _team_gone()
    return (await status(core, human, [ident]))[0]


def _team_gone() -> NotFound:
    """A team policy write that found the team deleted, or its human no longer a manager, meanwhile:
    the answer for a team outside the human's reach (teams.team_for_label), byte for byte."""
    return NotFound("team not found", argument="team")


async def set_paused(core: Core, human: HumanCaller, queue: object, paused: bool, *,
                     endpoint: object = None) -> dict[str, Any]:
    ident = await identity(core, human, queue, endpoint)
    _require_manage(ident)
    sql = Q.admission.set_paused_team if ident.team_id is not None else Q.admission.set_paused_endpoint
    async with core.pool.connection() as conn:
        cur = await conn.execute(sql, {"queue": ident.queue, "endpoint_id": ident.endpoint_id,
                                       "team_id": ident.team_id, "paused": paused, "human_id": human.human_id})
        written = await cur.fetchone()
    if written is None:
        raise _team_gone()
    return (await status(core, human, [ident]))[0]


async def clear(core: Core, human: HumanCaller, queue: object, *, endpoint: object = None) -> dict[str, Any]:
    ident = await identity(core, human, queue, endpoint)
    _require_manage(ident)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.admission.clear, {"queue": ident.queue, "endpoint_id": ident.endpoint_id,
                                                     "team_id": ident.team_id})
        gone = await cur.fetchone()
    if gone is None:
        raise NotFound("no admission policy on this queue", argument="queue")
    return {"queue": ident.queue, "cleared": True}


def public(row: dict[str, Any]) -> dict[str, Any]:
    """A policy with its usage now, as people and agents read it."""
    used = row["used"]  # the current window's charges over the policy's shards
    limit = row["max_claims_per_window"]
    weekday = WEEKDAYS[row["window_weekday"] - 1] if row["window_weekday"] else None
    minute = row["window_start_minute"]
    return {
        "queue": row["queue"], "endpoint": row.get("endpoint_slug"),
        "max_in_flight": row["max_in_flight"], "in_flight": row["in_flight"],
        "max_claims_per_window": limit, "used": used,
        "remaining": None if limit is None else max(limit - used, 0),
        "window": {"period": row["window_period"], "tz": row["window_tz"],
                   "start": f"{minute // 60:02d}:{minute % 60:02d}", "weekday": weekday},
        "window_resets_at": shapes.ts(row["resets"]), "paused": bool(row["paused"]), "status": row["status"],
        "pending": row["pending"],
    }


async def status(core: Core, human: HumanCaller | None, idents: list[Identity]) -> list[dict[str, Any]]:
    if not idents:
        return []
    params = {"queues": [i.queue for i in idents],
              "endpoint_ids": [i.endpoint_id for i in idents if i.endpoint_id is not None],
              "team_ids": [i.team_id for i in idents if i.team_id is not None]}
    rows = await _status_rows(core, params)
    wanted = {(i.queue, i.endpoint_id, i.team_id) for i in idents}
    return [public(r) for r in rows if (r["queue"], r["endpoint_id"], r["team_id"]) in wanted]


async def _status_rows(core: Core, params: dict[str, Any]) -> list[DictRow]:
    """The `status` statement's rows. A policy PostgreSQL cannot judge (its time zone unknown, as after
    a time zone database lost a name) fails the read as `unavailable`, where its claims fail closed as
    `deferred` / `admission_unavailable`."""
    async with core.pool.connection() as conn:
        try:
            cur = await conn.execute(Q.admission.status, params)
            return await cur.fetchall()
        except psycopg.DatabaseError as exc:
            raise Unavailable("the admission policies of these queues cannot be read now; their claims are "
                              "deferred (admission_unavailable)") from exc


async def show(core: Core, human: HumanCaller, queue: object, *, endpoint: object = None) -> dict[str, Any]:
    ident = await identity(core, human, queue, endpoint)
    got = await status(core, human, [ident])
    if not got:
        raise NotFound("no admission policy on this queue", argument="queue")
    return got[0]


async def list_for_human(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.admission.for_human, {"human_id": human.human_id})
        idents = [Identity(r["queue"], r["endpoint_id"], r["team_id"]) for r in await cur.fetchall()]
    return await status(core, human, idents)


QueueKey = tuple[str, str, str]  # (endpoint id, team id, queue), the unused id "": a ready todo's queue


async def held_back(core: Core, keys: set[QueueKey]) -> set[QueueKey]:
    """Those of `keys` whose policy holds claims back now (paused, a limit of 0, the window's budget
    spent, the in-flight cap reached). The doorbell pushes nothing for them (SPEC-0030) and rings once
    when they reopen. Unlocked, a hint: a claim is judged by its own statement."""
    if not keys:
        return set()
    ordered = sorted(keys)
    params = {"endpoint_ids": [e or None for e, _, _ in ordered], "team_ids": [t or None for _, t, _ in ordered],
              "queues": [q for _, _, q in ordered]}
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.admission.held_back, params)
        rows = await cur.fetchall()
    return {(str(r["endpoint_id"] or ""), str(r["team_id"] or ""), r["queue"]) for r in rows}


async def status_for_endpoint(core: Core, caller: EndpointCaller, queue: object = None) -> list[dict[str, Any]]:
    """The read-only `admission_status` verb: the policies of the endpoint's queues (or one of them), in
    the shape its owner reads (`public`): `endpoint` is this endpoint's own slug (already in its MCP URL)
    for its own queues, null for a team queue."""
    if queue is not None:
        label = inputs.queue(queue)
        if label not in caller.queues:
            raise Forbidden(f"queue {label} not in this endpoint's scope", argument="queue")
        queues = [label]
    else:
        queues = list(caller.queues)
    team_ids: list[UUID] = []
    team_labels = [q for q in queues if inputs.is_team_label(q)]
    if team_labels:
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.teams.reached_teams, {"endpoint_id": caller.endpoint_id,
                                                             "team_queues": team_labels})
            team_ids = [r["team_id"] for r in await cur.fetchall()]
    params = {"queues": queues, "endpoint_ids": [caller.endpoint_id], "team_ids": team_ids}
    return [public(r) for r in await _status_rows(core, params)]
