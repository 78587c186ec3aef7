"""The todo queue: every transition of SYSTEM.md section 6 and the scoped reads.

Each transition is one SQL statement (a data-modifying CTE) in autocommit mode: the todos update and
the attempt it opens or closes commit together or not at all. Events go to the hook bus after the
statement returns, that is after commit.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from . import admission, events, inputs, queries, shapes
from .errors import Conflict, CoreError, Deferred, Forbidden, Invalid, NotFound
from .inputs import JsonValue
from .models import Caller, Core, EndpointCaller, HumanCaller, scope_params
from .queries import Q
from .secrets import new_lease_token, sha256
from .states import GAUGE_STATES, RETRY_SCHEDULED, TODO_STATES, TodoState

PRIOR_ATTEMPTS = 5


@dataclass
class ClaimResult:
    todo: dict[str, Any]  # full shape
    attempt_seq: int
    attempts_total: int
    prior_attempts: list[dict[str, Any]]
    lease_token: str | None = None
    admission: dict[str, Any] | None = None  # usage of the queue's admission policy, when one applies

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.todo)
        out["attempt_seq"] = self.attempt_seq
        out["attempts_total"] = self.attempts_total
        out["prior_attempts"] = self.prior_attempts
        if self.lease_token is not None:
            out["lease_token"] = self.lease_token
        if self.admission is not None:
            out["admission"] = self.admission
        return out


def new_todo_id() -> str:
    return f"td_{uuid.uuid4()}"


def _ttl(core: Core, caller: Caller, value: int | None) -> int:
    default = core.settings.lease_ttl_seconds
    if isinstance(caller, EndpointCaller) and caller.default_lease_ttl:
        default = caller.default_lease_ttl
    return inputs.lease_ttl(value, default)


_todo_id = inputs.todo_id


async def _one(core: Core, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    # getconn/putconn rather than `async with pool.connection()`: the same hand-back (putconn
    # discards a connection left mid-statement, e.g. on cancellation) without the context-manager
    # layers, about 8 us per statement on the 2-core bench machine (docs/benchmarks.md).
    conn = await core.pool.getconn()
    try:
        cur = await conn.execute(sql, params)
        return await cur.fetchone()
    finally:
        await core.pool.putconn(conn)


async def _one_after(core: Core, first: str, sql: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """`sql`'s first row, after `first` in the same transaction: `first` takes the locks `sql` needs,
    and `sql`, a later statement, sees whatever committed while they were awaited."""
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(first, params)
        cur = await conn.execute(sql, params)
        return await cur.fetchone()


async def _miss(core: Core, caller: Caller, todo_id: str, op: str, *, queue_forbidden: bool = True) -> CoreError:
    """Classify a transition that matched no row (REQ-19)."""
    row = await _one(core, Q.todos.classify_miss, {"id": todo_id, **scope_params(caller)})
    return _missed(caller, op, todo_id, row, queue_forbidden=queue_forbidden)


def _missed(caller: Caller, op: str, todo_id: str, row: dict[str, Any] | None, *,
            queue_forbidden: bool = True) -> CoreError:
    """The error of a transition that matched no row, from the todo's classify_miss row (None: not in
    this caller's reach)."""
    if row is None:
        return NotFound(op=op, todo_id=todo_id)
    if isinstance(caller, EndpointCaller) and not row["queue_granted"]:
        if queue_forbidden:
            return Forbidden("todo's queue not in this endpoint's scope", op=op, todo_id=todo_id)
        return NotFound(op=op, todo_id=todo_id)
    return Conflict(op=op, todo_id=todo_id)


def _fence_params(caller: Caller, lease_token: str | None) -> dict[str, Any]:
    token = inputs.lease_token(lease_token)
    return {"token_hash": sha256(token) if token is not None else None}


def _report(core: Core, summary: str | None, artifact: str | None, result: JsonValue) -> dict[str, Any]:
    """Validate the closing report before any store call (REQ-5)."""
    art = inputs.artifact(artifact)
    result_json = inputs.json_value(result, "result", inputs.RESULT_MAX_BYTES)
    text, cut = inputs.summary(summary)
    # An empty summary is no summary (it is stored as null), so the operator's opt-in applies to it too.
    if text is None and core.settings.attempt_summary_from_result and result is not None:
        text, cut = inputs.summary_from_result(result)
    return {"summary": text, "summary_truncated": cut, "artifact": art,
            "result": Jsonb(result) if result_json is not None else None}


# ---------------------------------------------------------------------------------------- create

async def create(core: Core, *, endpoint_id: uuid.UUID, queue: str, title: str, payload: JsonValue = None,
                 kind: str | None = None, source: str | None = None, key: str | None = None,
                 max_attempts: int | None = None, assignee: str | None = None) -> tuple[dict[str, Any], bool]:
    """Put a todo on a queue. A live todo with the same idempotency key is returned with created=False.

    The caller (surface) has already checked that the endpoint belongs to the producer and is active.
    """
    if not isinstance(endpoint_id, uuid.UUID):
        try:
            endpoint_id = uuid.UUID(endpoint_id)
        except (TypeError, ValueError, AttributeError):
            raise Invalid("endpoint_id must be a UUID", argument="endpoint_id") from None
    checked_title = inputs.text(title, "title", max_chars=inputs.TITLE_MAX_CHARS, required=True)
    payload_json = inputs.json_value(payload, "payload", inputs.PAYLOAD_MAX_BYTES)
    params = {
        "id": new_todo_id(), "endpoint_id": endpoint_id, "queue": inputs.queue(queue),
        "source": source, "kind": inputs.text(kind, "kind", max_chars=inputs.KIND_MAX_CHARS),
        "title": checked_title, "payload": Jsonb(payload) if payload_json is not None else None,
        "key": inputs.text(key, "key", max_chars=inputs.KEY_MAX_CHARS),
        "assignee": inputs.text(assignee, "assignee", max_chars=inputs.ASSIGNEE_MAX_CHARS),
        "max_attempts": inputs.max_attempts(max_attempts, core.settings.default_max_attempts),
    }
    row = await _one(core, Q.todos.create, params)
    if row is None:
        existing = await _one(core, Q.todos.find_live_duplicate, params)
        if existing is not None:
            return shapes.full(existing), False
        await require_live_endpoint(core, endpoint_id)
        # The duplicate finished between the two statements: try once more.
        row = await _one(core, Q.todos.create, params)
        if row is None:
            raise Conflict("a todo with this key is changing state; try again", op="create")
    await core.bus.publish(events.build("create", row, ready="created", source=source))
    return shapes.full(row), True


async def create_team(core: Core, human: HumanCaller, *, team_id: uuid.UUID, queue: str, title: str,
                      payload: JsonValue = None, kind: str | None = None, source: str | None = None,
                      key: str | None = None, max_attempts: int | None = None,
                      assignee: str | None = None) -> tuple[dict[str, Any], bool]:
    """Put a todo on a team queue (`queue` is its label) for a member of the team. A live todo of the
    team with the same idempotency key is returned with created=False; a human who is not a member
    (any more) gets not_found."""
    checked_title = inputs.text(title, "title", max_chars=inputs.TITLE_MAX_CHARS, required=True)
    payload_json = inputs.json_value(payload, "payload", inputs.PAYLOAD_MAX_BYTES)
    params = {
        "id": new_todo_id(), "team_id": team_id, "human_id": human.human_id, "queue": inputs.queue(queue),
        "source": source, "kind": inputs.text(kind, "kind", max_chars=inputs.KIND_MAX_CHARS),
        "title": checked_title, "payload": Jsonb(payload) if payload_json is not None else None,
        "key": inputs.text(key, "key", max_chars=inputs.KEY_MAX_CHARS),
        "assignee": inputs.text(assignee, "assignee", max_chars=inputs.ASSIGNEE_MAX_CHARS),
        "max_attempts": inputs.max_attempts(max_attempts, core.settings.default_max_attempts),
    }
    for _ in range(2):
        row = await _one(core, Q.todos.create_team, params)
        if row is not None:
            await core.bus.publish(events.build("create", row, ready="created", source=source))
            return shapes.full(row), True
        if params["key"] is not None:
            existing = await _one(core, Q.todos.find_live_team_duplicate, params)
            if existing is not None:
                return shapes.full(existing), False
        else:
            break
    raise NotFound("team not found", argument="team", op="create")


async def require_live_endpoint(core: Core, endpoint_id: uuid.UUID) -> None:
    """Why a push inserted nothing when no duplicate holds the key: the endpoint is gone or not live."""
    row = await _one(core, Q.todos.endpoint_state, {"endpoint_id": endpoint_id})
    if row is None:
        raise NotFound("endpoint not found", argument="endpoint_id", op="create")
    if not row["live"]:
        raise Invalid("endpoint is revoked or expired", argument="endpoint")


# ---------------------------------------------------------------------------------------- claims

def _claim_params(core: Core, caller: Caller, lease_ttl_seconds: int | None, require_fence: bool | None,
                  claimant: str | None) -> tuple[dict[str, Any], str | None]:
    token = new_lease_token() if inputs.boolean(require_fence, "require_fence", False) else None
    params = {
        **scope_params(caller),
        "ttl": _ttl(core, caller, lease_ttl_seconds),
        "claimant": inputs.claimant(claimant),
        "new_token_hash": sha256(token) if token else None,
        "admitted": False,  # the `unpoliced` guard: policed queues only through core/admission.py
    }
    if isinstance(caller, HumanCaller):
        params.update(claimer_kind="owner", claimer_endpoint_id=None, session=None)
    else:
        params.update(claimer_kind="endpoint", claimer_endpoint_id=caller.endpoint_id,
                      session=caller.session_id)
    return params, token


def _result(row: dict[str, Any], token: str | None) -> ClaimResult:
    return ClaimResult(todo=shapes.full(row), attempt_seq=row["attempt_seq"], attempts_total=row["attempts_total"],
                       prior_attempts=[shapes.attempt(a) for a in row["prior_attempts"] or ()], lease_token=token)


def _claim_events(pairs: Claimed, charged: frozenset[str] = frozenset()) -> list[events.Event]:
    """The takeover and claim events of claimed todos; a claim charged to an admission policy (its
    queue in `charged`) says so (`admission_charged`, counted by the metrics)."""
    evs = []
    for got, row in pairs:
        todo = shapes.compact_of(got.todo)  # a copy: the events may share it
        if row.get("closed_attempt"):
            evs.append(events.build("takeover", row, row["closed_attempt"], todo=todo, todo_is_copy=True))
        if row["queue"] in charged:
            evs.append(events.build("claim", row, todo=todo, todo_is_copy=True, admission_charged=True))
        else:
            evs.append(events.build("claim", row, todo=todo, todo_is_copy=True))
    return evs


def _deferral_events(deferred: list[dict[str, Any]]) -> list[events.Event]:
    """One `admission_deferred` event per queue refused (no todo: the metrics count refusals)."""
    return [events.Event(verb="admission_deferred", todo={"id": ""}, endpoint_id="", queue=d["queue"],
                         deferral_reason=d["reason"]) for d in deferred]


async def _fetch(conn: Any, sql: str, params: dict[str, Any], op: str) -> list[dict[str, Any]]:
    try:
        cur = await queries.execute(conn, sql, params)
        return list(await cur.fetchall())
    except psycopg.errors.ExclusionViolation:
        # A racing transition opened an attempt first; the constraint refused ours at commit.
        raise Conflict(op=op, todo_id=params.get("id")) from None


async def claim(core: Core, caller: Caller, todo_id: str, *, lease_ttl_seconds: int | None = None,
                require_fence: bool | None = None, claimant: str | None = None) -> ClaimResult:
    """Claim one todo by id: pending, a lapsed lease below the cap (takeover), or a due retry. On a
    queue under an admission policy the claim is judged and charged (core/admission.py); a refusal is
    the error `deferred`."""
    todo_id = _todo_id(todo_id)
    params, token = _claim_params(core, caller, lease_ttl_seconds, require_fence, claimant)
    params["id"] = todo_id
    conn = await core.pool.getconn()
    try:
        rows = await _fetch(conn, Q.todos.claim, params, "claim")
    finally:
        await core.pool.putconn(conn)
    if not rows:
        miss = await _one(core, Q.todos.classify_miss, {"id": todo_id, **scope_params(caller)})
        if miss is None or not miss["policed"]:
            raise await _miss(core, caller, todo_id, "claim")
        return await _claim_policed(core, caller, params, token, miss)
    pairs = _paired(rows[:1], None, token)
    await core.bus.publish(*_claim_events(pairs))
    return pairs[0][0]


async def _claim_policed(core: Core, caller: Caller, params: dict[str, Any], token: str | None,
                         miss: dict[str, Any]) -> ClaimResult:
    """A claim by id on a policed queue: judge its policy, claim, charge; one transaction. The fast path
    (_admit_and_claim) first, unless the policy refused this queue lately; on a refusal the locked path,
    which says why (the error `deferred`)."""
    queue = miss["queue"]
    admitted_params = {**params, "admitted": True}
    identity = miss["endpoint_id"] or miss["team_id"]
    verdicts: admission.Verdicts | None = None
    rows: list[dict[str, Any]] = []
    conn = await core.pool.getconn()
    try:
        if not core.policed.refused(identity, queue):
            try:
                verdicts, rows = await _admit_and_claim(conn, queue, 1, miss["endpoint_id"], None,
                                                        Q.todos.claim, admitted_params, "claim")
            except admission.Refused:
                core.policed.note(identity, queue, True)
        if verdicts is None:
            try:
                async with conn.pipeline(), conn.transaction():
                    verdicts = await admission.judge(conn, miss["endpoint_id"], [queue])
                    if not verdicts.admitted([queue]):
                        refusal = verdicts.deferred()[0]
                        await core.bus.publish(*_deferral_events([refusal]))
                        raise Deferred(queue=queue, reason=refusal["reason"], pending=refusal["pending"],
                                       next_eligible_at=refusal["next_eligible_at"], op="claim", todo_id=params["id"])
                    core.policed.note(identity, queue, False)
                    rows = await _fetch(conn, Q.todos.claim, admitted_params, "claim")
                    if rows:
                        await admission.charge(conn, verdicts, {queue: 1})
            except psycopg.errors.ExclusionViolation:
                raise Conflict(op="claim", todo_id=params["id"]) from None
            except admission.PASSED_ON as exc:
                raise admission.as_executed(conn, exc) from exc
    finally:
        await core.pool.putconn(conn)
    if not rows:
        raise await _miss(core, caller, params["id"], "claim")
    pairs = _paired(rows[:1], None, token)
    await core.bus.publish(*_claim_events(pairs, frozenset(verdicts.rows)))
    got = pairs[0][0]
    got.admission = verdicts.usage_after(queue, 1)
    return got


async def _admit_and_claim(conn: Any, queue: str, want: int, endpoint_id: uuid.UUID | None,
                           claimer_id: uuid.UUID | None, sql: str, params: dict[str, Any],
                           op: str) -> tuple[admission.Verdicts, list[dict[str, Any]]]:
    """The fast path of a claim on one policed queue, one transaction in pipeline mode: BEGIN,
    `admit` (lock a shard of the policy, or the policy and all its shards near a cap; judge; charge
    `want` claims to the shard held) and the claim statement `sql` (with `admitted`) leave in one
    round trip; then COMMIT when the claim took `want` todos, with the difference charged back to the
    same shard first when it took fewer, or ROLLBACK when it took none. So the committed charge is
    the number of todos claimed, and the admission lock is held for the claim and the commit only
    (migration 0021). Raises admission.Refused, with nothing changed, when the policy does not admit
    `want` claims now (the claim behind `admit` is then skipped)."""
    rows: list[dict[str, Any]] = []
    try:
        async with conn.pipeline(), conn.transaction():
            try:
                verdict = await admission.admit(conn, endpoint_id, queue, want, claimer_id=claimer_id)
                claimed = await conn.execute(sql, params)
                verdicts = await admission.admitted(verdict, queue)
            except psycopg.DatabaseError as exc:  # the claim has not run: a failure of `admit`
                raise admission.verdict_error(exc, [queue]) from None
            rows = list(await claimed.fetchall())
            if not rows:
                raise psycopg.Rollback()
            if verdicts.rows and len(rows) < want:
                await admission.charge(conn, verdicts, {queue: len(rows) - want})
    except psycopg.errors.ExclusionViolation:
        # Refused at COMMIT (REQ-2): a racing transition opened an attempt first; nothing committed.
        raise Conflict(op=op, todo_id=params.get("id")) from None
    except admission.PASSED_ON as exc:
        raise admission.as_executed(conn, exc) from exc
    return verdicts, rows


def _claim_queues(caller: EndpointCaller, queue: str | None) -> list[str]:
    if queue is not None:
        name = inputs.queue(queue)
        if name not in caller.queues:
            raise Forbidden(f"queue {name} not in this endpoint's scope", argument="queue", op="claim_next")
        return [name]
    return list(caller.queues)


def _next_statement(queues: list[str], params: dict[str, Any], batch: bool) -> str:
    """The claim_next statement for these queues, with the parameters it needs set in `params`."""
    team = [q for q in queues if inputs.is_team_label(q)]
    if team == queues and len(team) == 1 and not batch:  # one team queue: a statement with a generic plan
        params["queue"] = team[0]
        return Q.todos.claim_next_team_one
    if team:
        params["queues"] = [q for q in queues if not inputs.is_team_label(q)]
        params["team_queues"] = team
        params["owners"] = [params["owner"]]  # claim_team_batch_arms: the claimers' owners
        return Q.todos.claim_next_mixed_batch if batch else Q.todos.claim_next_mixed
    if len(queues) == 1:  # the common case, with a statement PostgreSQL plans once (todos.sql)
        params["queue"] = queues[0]
        return Q.todos.claim_next_batch_one if batch else Q.todos.claim_next_one
    params["queues"] = queues
    return Q.todos.claim_next_batch if batch else Q.todos.claim_next


Claimed = list[tuple[ClaimResult, dict[str, Any]]]  # each claim with the row it came from


def _claim_statement(queues: list[str], params: dict[str, Any], n: int | None,
                     fenced: bool) -> tuple[str, dict[str, Any], list[str] | None]:
    """One claim_next statement (n None: one todo) with its parameters, and the lease tokens of a
    fenced batch."""
    p = dict(params)
    sql = _next_statement(queues, p, batch=n is not None)
    tokens: list[str] | None = None
    if n is not None:
        p.pop("new_token_hash", None)
        p["max_todos"] = n
        tokens = [new_lease_token() for _ in range(n)] if fenced else None
        p["new_token_hashes"] = [sha256(t) for t in tokens] if tokens else None
    return sql, p, tokens


def _paired(rows: list[dict[str, Any]], tokens: list[str] | None, token: str | None) -> Claimed:
    """Each claimed row with its result and lease token."""
    return [(_result(row, tokens[row["i"] - 1] if tokens else token), row) for row in rows]


async def _claim_some(conn: Any, queues: list[str], params: dict[str, Any], n: int | None,
                      fenced: bool, token: str | None) -> Claimed:
    """Run one claim_next statement (n None: one todo) and pair each row with its lease token."""
    sql, p, tokens = _claim_statement(queues, params, n, fenced)
    return _paired(await _fetch(conn, sql, p, "claim_next"), tokens, token)


async def take_next(core: Core, caller: EndpointCaller, *, queue: str | None = None, max_todos: int | None = None,
                    lease_ttl_seconds: int | None = None, require_fence: bool | None = None,
                    claimant: str | None = None) -> tuple[list[ClaimResult], list[dict[str, Any]]]:
    """claim_next with everything it can say: the todos claimed (oldest first; at most one when
    `max_todos` is None) and the queues admission control deferred (`deferred` entries: queue,
    reason, pending, next_eligible_at), which an empty answer carries."""
    n = inputs.max_todos(max_todos) if max_todos is not None else None
    queues = _claim_queues(caller, queue)
    params, token = _claim_params(core, caller, lease_ttl_seconds, require_fence, claimant)
    if n is None and core.settings.combine_calls and len(queues) == 1 and inputs.is_team_label(queues[0]):
        # one team queue searched: the claim may join those of other endpoints on it (D51)
        return await _take_with_fleet(core, FleetClaim(caller, queues[0], params, token))
    return await _take(core, caller, queues, params, n, token, combine=n is None and core.settings.combine_calls)


async def _take(core: Core, caller: EndpointCaller, queues: list[str], params: dict[str, Any], n: int | None,
                token: str | None, *, combine: bool) -> tuple[list[ClaimResult], list[dict[str, Any]]]:
    """take_next once its arguments are checked: unpoliced queues first (with `combine`, the one
    todo's claim joins the concurrent ones of the same caller), then the policed path."""
    fenced = token is not None
    if caller.endpoint_id not in core.policed:
        if combine:
            pairs = await _claim_with_others(core, caller, queues, params, fenced, token)
        else:
            pairs = await _claim_pooled(core, queues, params, n, fenced, token)
        if pairs:
            return await _claimed(core, pairs, None)
        policed = await admission.any_policy(core, caller.endpoint_id, queues)
        core.policed.mark(caller.endpoint_id, policed)
        if not policed:
            return [], []
    return await _take_policed(core, caller, queues, params, n, fenced, token)


# ------------------------------------------------------------------- a fleet's claims, together

@dataclass(frozen=True)
class FleetClaim:
    """A claim_next for one todo on one team queue, waiting to run with the concurrent ones of other
    endpoints on that queue: its caller, the queue, its checked parameters and its lease token."""

    caller: EndpointCaller
    queue: str
    params: dict[str, Any]
    token: str | None


async def _take_with_fleet(core: Core, claim: FleetClaim) -> tuple[list[ClaimResult], list[dict[str, Any]]]:
    """claim_next of one todo on a team queue, alone or with the concurrent calls of any endpoints on
    that queue with the same lease length and fencing (core/combine.py, docs/decisions.md D51): a
    fleet of agents, each with its own credential, draining one queue. A group is one statement
    (`claim_next_team_group`, or its policed form), each todo claimed for the call it goes to as that
    call alone would claim it; a call the statement gives nothing (its endpoint no longer reaches the
    queue, a todo assigned elsewhere, the queue dry or refused by admission) is answered alone."""
    key = ("fleet", claim.queue, claim.params["ttl"], claim.token is not None)
    return await core.fleet_claims.submit(key, claim, functools.partial(_fleet_group, core))


async def _alone(core: Core, claim: FleetClaim) -> tuple[list[ClaimResult], list[dict[str, Any]]] | BaseException:
    try:
        return await _take(core, claim.caller, [claim.queue], claim.params, None, claim.token, combine=False)
    except Exception as exc:  # this call's own outcome
        return exc


async def _fleet_group(core: Core, claims: list[FleetClaim]) -> list[Any]:
    """Run one group of _take_with_fleet: a call alone as take_next runs it; several in one statement,
    and the calls it gave no todo alone, concurrently."""
    if len(claims) == 1:
        return [await _alone(core, claims[0])]
    queue = claims[0].queue
    ids = [c.caller.endpoint_id for c in claims]
    policed = any(i in core.policed for i in ids)
    if policed and any(core.policed.refused(i, queue) for i in ids):  # lately refused: the locked path
        return list(await asyncio.gather(*(_alone(core, c) for c in claims)))
    # A policy admits at most B claims per statement (migration 0021): a larger group goes as several
    # statements at once, each holding a shard of its own.
    size = (core.policed.take(queue) or len(claims)) if policed else len(claims)
    parts = await asyncio.gather(*(_fleet_part(core, queue, claims[at:at + size], policed)
                                   for at in range(0, len(claims), size)))
    return [out for part in parts for out in part]


async def _fleet_part(core: Core, queue: str, claims: list[FleetClaim], policed: bool) -> list[Any]:
    """One statement of a fleet's group (_fleet_group), and its calls left alone."""
    if len(claims) == 1:
        return [await _alone(core, claims[0])]
    ids = [c.caller.endpoint_id for c in claims]
    outs: list[Any] = [None] * len(claims)
    got = await _claim_fleet(core, queue, claims, policed)
    if got is not None:
        verdicts, pairs = got
        if not policed or not verdicts.rows:
            for endpoint_id in set(ids):
                core.policed.mark(endpoint_id, False)
        elif verdicts.rows.get(queue, {}).get("take") is not None:
            core.policed.note_take(queue, int(verdicts.rows[queue]["take"]))
        await _claimed(core, [(result, row) for result, row, _ in pairs], verdicts if policed else None)
        for k, (result, _row, at) in enumerate(pairs, start=1):
            if verdicts.rows:
                result.admission = verdicts.usage_after(queue, k)
            outs[at] = ([result], [])
    left = [at for at, out in enumerate(outs) if out is None]
    for at, out in zip(left, await asyncio.gather(*(_alone(core, claims[at]) for at in left)), strict=True):
        outs[at] = out
    return outs


def fleet_params(queue: str, claims: list[FleetClaim]) -> tuple[dict[str, Any], list[str] | None]:
    """The parameters of a fleet's group statement (`claim_next_team_group`, or its policed form) for
    these calls, and the lease token of each call when they are fenced."""
    tokens = [new_lease_token() for _ in claims] if claims[0].token is not None else None
    params = {"queue": queue, "ttl": claims[0].params["ttl"], "max_todos": len(claims),
              "endpoint_id": claims[0].caller.endpoint_id,
              "claimers": [c.caller.endpoint_id for c in claims], "owners": [c.caller.owner for c in claims],
              "sessions": [c.caller.session_id for c in claims],
              "claimants": [c.params["claimant"] for c in claims],
              "new_token_hashes": [sha256(t) for t in tokens] if tokens else None}
    return params, tokens


async def _claim_fleet(core: Core, queue: str, claims: list[FleetClaim], policed: bool,
                       ) -> tuple[admission.Verdicts, list[tuple[ClaimResult, dict[str, Any], int]]] | None:
    """The group statement of _fleet_group: the verdict (none unpoliced) and each todo claimed with its
    row and the place of the call it went to; None when the statement failed (a refusal of the group's
    claims, a racing transition's exclusion violation at commit, or anything else): every call is then
    answered alone, as it would have been without the others."""
    params, tokens = fleet_params(queue, claims)
    refused = False
    conn = await core.pool.getconn()
    try:
        if policed:
            verdicts, rows = await admission.claim_admitted(conn, queue, params, group=True)
        else:
            cur = await queries.execute(conn, Q.todos.claim_next_team_group, params)
            verdicts, rows = admission.Verdicts({}), list(await cur.fetchall())
    except admission.Refused:  # near a cap, or more claims than one statement may take: ask fewer next
        for c in claims:
            core.policed.note(c.caller.endpoint_id, queue, True)
        refused = True
    except (psycopg.DatabaseError, CoreError):
        return None
    finally:
        await core.pool.putconn(conn)
    if refused:
        core.policed.note_take(queue, await admission.stripe_take(core, queue))
        return None
    return verdicts, [(_result(row, tokens[row["i"] - 1] if tokens else None), row, row["i"] - 1) for row in rows]


async def _claim_pooled(core: Core, queues: list[str], params: dict[str, Any], n: int | None,
                        fenced: bool, token: str | None) -> Claimed:
    """_claim_some on a connection of the pool."""
    conn = await core.pool.getconn()
    try:
        return await _claim_some(conn, queues, params, n, fenced, token)
    finally:
        await core.pool.putconn(conn)


async def _claim_with_others(core: Core, caller: EndpointCaller, queues: list[str], params: dict[str, Any],
                             fenced: bool, token: str | None) -> Claimed:
    """One todo for claim_next on unpoliced queues, claimed alone or with the concurrent claim_next
    calls of the same caller, queues, lease and claimant (core/combine.py): the group is one batch
    statement, as claim_next_batch of its size, each call getting one of its todos (its own lease,
    attempt, prior attempts and lease token) or none when the queues ran dry."""
    key = (caller, tuple(queues), params["ttl"], params["claimant"], fenced)
    got = await core.claims.submit(key, (params, token), functools.partial(_claim_group, core, queues, fenced))
    return [got] if got is not None else []


async def _claim_group(core: Core, queues: list[str], fenced: bool,
                       items: list[tuple[dict[str, Any], str | None]]) -> list[Any]:
    """Run one group of _claim_with_others: a call alone is the single claim statement."""
    params, token = items[0]
    alone = len(items) == 1
    pairs = await _claim_pooled(core, queues, params, None if alone else len(items), fenced, token if alone else None)
    return [*pairs, *[None] * (len(items) - len(pairs))]


async def _take_policed(core: Core, caller: EndpointCaller, queues: list[str], params: dict[str, Any],
                        n: int | None, fenced: bool,
                        token: str | None) -> tuple[list[ClaimResult], list[dict[str, Any]]]:
    """claim_next on queues some of which are policed: judge, claim within each cap, charge; one
    transaction (core/admission.py). One queue: the fast path first, unless its policy refused this
    endpoint lately (one todo: one autocommit statement, admission.claim_admitted; a batch:
    _admit_and_claim); several queues, or a refusal: the locked path."""
    admitted_params = {**params, "admitted": True}
    want = n or 1
    pairs: Claimed = []
    verdicts: admission.Verdicts | None = None
    conn = await core.pool.getconn()
    try:
        if len(queues) == 1 and not core.policed.refused(caller.endpoint_id, queues[0]):
            try:
                if n is None:  # one todo: one autocommit statement (admit, claim, charge)
                    verdicts, rows = await admission.claim_admitted(conn, queues[0], admitted_params)
                    pairs = _paired(rows, None, token)
                else:
                    sql, p, tokens = _claim_statement(queues, admitted_params, n, fenced)
                    verdicts, rows = await _admit_and_claim(conn, queues[0], want, caller.endpoint_id,
                                                            caller.endpoint_id, sql, p, "claim_next")
                    pairs = _paired(rows, tokens, token)
            except admission.Refused:
                core.policed.note(caller.endpoint_id, queues[0], True)
            except psycopg.errors.ExclusionViolation:
                # Refused at COMMIT (REQ-2): a racing transition opened an attempt first; nothing committed.
                raise Conflict(op="claim_next") from None
        if verdicts is None:
            verdicts, pairs = await _take_locked(core, conn, caller, queues, admitted_params, n, fenced, token)
    finally:
        await core.pool.putconn(conn)
    if not verdicts.rows:
        core.policed.mark(caller.endpoint_id, False)
    per_queue: dict[str, int] = {}
    for _, row in pairs:
        per_queue[row["queue"]] = per_queue.get(row["queue"], 0) + 1
    claimed, _ = await _claimed(core, pairs, verdicts)
    for got in claimed:
        got.admission = verdicts.usage_after(got.todo["queue"], per_queue.get(got.todo["queue"], 0))
    deferred = verdicts.deferred()
    if deferred:
        await core.bus.publish(*_deferral_events(deferred))
    return claimed, ([] if claimed else deferred)


async def _take_locked(core: Core, conn: Any, caller: EndpointCaller, queues: list[str],
                       admitted_params: dict[str, Any], n: int | None, fenced: bool,
                       token: str | None) -> tuple[admission.Verdicts, Claimed]:
    """The locked path of claim_next, in pipeline mode (BEGIN with `verdicts`, the claims, `charge` with
    COMMIT): lock and judge the policies, claim on the admitted queues within each one's room,
    charge what was claimed."""
    want = n or 1
    pairs: Claimed = []

    def room_of(queue: str) -> int:
        cap = verdicts.cap(queue)  # None: no policy on this queue
        return want if cap is None else min(cap, want)

    try:
        async with conn.pipeline(), conn.transaction():
            verdicts = await admission.judge(conn, caller.endpoint_id, queues, claimer_id=caller.endpoint_id)
            for q, r in verdicts.rows.items():  # which queues the fast path may try next time
                core.policed.note(caller.endpoint_id, q, r["verdict"] != "admitted" or r["cap"] < want)
            open_queues = verdicts.admitted(queues)
            if open_queues and all(room_of(q) >= want for q in open_queues):
                pairs = await _claim_some(conn, open_queues, admitted_params, n, fenced, token)
            else:  # a policy's room below the batch: queue by queue, each within its room
                for q in open_queues:
                    room = min(want - len(pairs), room_of(q))
                    if room <= 0:
                        break
                    pairs += await _claim_some(conn, [q], admitted_params, None if n is None else room,
                                               fenced, token)
            per_queue: dict[str, int] = {}
            for _, row in pairs:
                per_queue[row["queue"]] = per_queue.get(row["queue"], 0) + 1
            await admission.charge(conn, verdicts, per_queue)
    except psycopg.errors.ExclusionViolation:
        # Refused at COMMIT (REQ-2): a racing transition opened an attempt first; nothing committed.
        raise Conflict(op="claim_next") from None
    except admission.PASSED_ON as exc:
        raise admission.as_executed(conn, exc) from exc
    return verdicts, pairs


async def _claimed(core: Core, pairs: Claimed,
                   verdicts: admission.Verdicts | None) -> tuple[list[ClaimResult], list[dict[str, Any]]]:
    results = [got for got, _ in pairs]
    evs = _claim_events(pairs, frozenset(verdicts.rows) if verdicts is not None else frozenset())
    if evs:
        await core.bus.publish(*evs)
    return results, []


async def claim_next(core: Core, caller: EndpointCaller, *, queue: str | None = None,
                     lease_ttl_seconds: int | None = None, require_fence: bool | None = None,
                     claimant: str | None = None) -> ClaimResult | None:
    """The competing-consumer primitive: the oldest claimable todo in the granted queues, or None
    (take_next also says which queues admission control deferred)."""
    claimed, _ = await take_next(core, caller, queue=queue, lease_ttl_seconds=lease_ttl_seconds,
                                 require_fence=require_fence, claimant=claimant)
    return claimed[0] if claimed else None


async def claim_next_batch(core: Core, caller: EndpointCaller, *, max_todos: int, queue: str | None = None,
                           lease_ttl_seconds: int | None = None, require_fence: bool | None = None,
                           claimant: str | None = None) -> list[ClaimResult]:
    """Batched claim_next: up to `max_todos` (1..inputs.BATCH_CLAIM_MAX) of the oldest claimable todos
    in the granted queues (or `queue`), claimed in ONE statement; an empty list when nothing is ready.

    Each todo is claimed exactly as `claim_next` claims one: pending, a due retry, or a lapsed lease
    below the cap (a takeover, closing the old attempt lease_expired/requeued); each gets its own lease,
    its own attempt (`attempt_seq`), its own five prior attempts and, with `require_fence`, its own
    lease token (only its SHA-256 is stored). The results are oldest first. The claim and takeover
    events of every todo are published after the statement commits. On policed queues each claim is
    charged and no queue passes its cap (take_next).
    """
    claimed, _ = await take_next(core, caller, queue=queue, max_todos=inputs.max_todos(max_todos),
                                 lease_ttl_seconds=lease_ttl_seconds, require_fence=require_fence,
                                 claimant=claimant)
    return claimed


# ----------------------------------------------------------------------------- lease transitions

async def heartbeat(core: Core, caller: Caller, todo_id: str, *, lease_ttl_seconds: int | None = None,
                    lease_token: str | None = None, note: str | None = None) -> dict[str, Any]:
    """Extend the lease. Only the holder's own call is a heartbeat; the owning human extending an
    agent's lease is recorded apart (`owner_extended_at`) and leaves `last_heartbeat_at` alone.

    The holder's `note` (inputs.note: at most NOTE_MAX_BYTES, control characters stripped) is kept
    on the open attempt in the same statement, the newest NOTES_MAX_PER_ATTEMPT of them; a heartbeat
    that does not hold the lease (or is wrongly fenced) stores nothing. An owner's extension is not a
    heartbeat and takes no note."""
    todo_id = _todo_id(todo_id)
    text = inputs.note(note)
    if text is not None and isinstance(caller, HumanCaller):
        raise Invalid("note is only for the lease holder's heartbeat", argument="note")
    params = {**scope_params(caller), **_fence_params(caller, lease_token), "id": todo_id,
              "ttl": _ttl(core, caller, lease_ttl_seconds), "note": text,
              "notes_max": inputs.NOTES_MAX_PER_ATTEMPT}
    row = await _one(core, Q.todos.heartbeat, params)
    if row is None:
        raise await _miss(core, caller, todo_id, "heartbeat")
    await core.bus.publish(events.build("heartbeat", row))
    return shapes.compact(row)


# The columns of the fragment closed_columns (tests/test_queries.py holds the two together) and the
# closed attempt's fields they hold: what shapes.attempt reads of an attempt row.
CLOSED_COLUMNS = tuple((f"closed.{f}", f) for f in shapes.ATTEMPT_ROW_FIELDS)


def _fold_closed(row: dict[str, Any]) -> dict[str, Any]:
    """A row of a statement that returns its closed attempt as `closed.<field>` columns (the fragment
    closed_columns), with those columns folded into `closed_attempt`; other rows as they are."""
    if "closed.seq" in row:
        row["closed_attempt"] = {f: row.pop(k) for k, f in CLOSED_COLUMNS}
    return row


async def _close(core: Core, caller: Caller, op: str, sql: str, params: dict[str, Any], *,
                 ready: str | None = None, batch_sql: str | None = None, fleet_sql: str | None = None,
                 lock_sql: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One lease transition by the holder. With `batch_sql` (complete, fail) it runs alone or with the
    concurrent ones of the same op and caller scope (core/combine.py) as one `batch_sql` statement,
    which does for each todo what `sql` does for one; an endpoint whose only queue is a team queue
    joins instead the concurrent ones of every endpoint on that queue, as one `fleet_sql` statement
    (D51). With `lock_sql` (a transition that is not the holder's, which a claim can race) that
    statement runs first, in the same transaction. Returns the row and its compact shape."""
    fleet = _fleet_queue(caller) if core.settings.combine_calls else None
    if fleet is not None and fleet_sql is not None and isinstance(caller, EndpointCaller):
        row = await core.fleet_closes.submit((op, fleet), FleetClose(caller, params),
                                             functools.partial(_fleet_close_group, core, op, sql, fleet_sql, fleet))
    elif batch_sql is not None and core.settings.combine_calls:
        key = (op, caller.with_session(None) if isinstance(caller, EndpointCaller) else caller)
        row = await core.closes.submit(key, params, functools.partial(_close_group, core, caller, op, sql, batch_sql))
    else:
        alone = await (_one(core, sql, params) if lock_sql is None else _one_after(core, lock_sql, sql, params))
        if alone is None:
            raise await _miss(core, caller, params["id"], op)
        row = alone
    todo = shapes.compact(_fold_closed(row))
    await core.bus.publish(events.build(op, row, row.get("closed_attempt"), ready=ready, todo=todo))
    return row, todo


async def _close_alone(core: Core, caller: Caller, op: str, sql: str, params: dict[str, Any]) -> Any:
    """One close run on its own, for a group: its row, or the error its call alone would raise."""
    row = await _one(core, sql, params)
    return row if row is not None else await _miss(core, caller, params["id"], op)


async def _close_group(core: Core, caller: Caller, op: str, sql: str, batch_sql: str,
                       items: list[dict[str, Any]]) -> list[Any]:
    """Run one group of _close: a call alone is `sql`; several are one `batch_sql` statement over
    their first occurrences of each id, and a repeated id then runs alone. Each call gets its row or
    the error its call alone would have raised."""
    if len(items) == 1:
        return [await _close_alone(core, caller, op, sql, items[0])]
    first: dict[str, dict[str, Any]] = {}
    for item in items:
        first.setdefault(item["id"], item)
    unique = list(first.values())
    params = _close_arrays(caller, unique, with_retry=op == "fail")
    if op == "fail":
        params.update(backoff_base=unique[0]["backoff_base"], backoff_max=unique[0]["backoff_max"])
    rows, errors = await _close_many(core, caller, op, batch_sql, params)
    out: list[Any] = []
    for item in items:
        if first[item["id"]] is item:
            out.append(rows.get(item["id"]) or errors[item["id"]])
        else:
            out.append(await _close_alone(core, caller, op, sql, item))
    return out


def _fleet_queue(caller: Caller) -> str | None:
    """The team queue of an endpoint granted that queue alone (a fleet's member): its held todos are
    that queue's, so its closes may join those of the fleet's other endpoints."""
    if isinstance(caller, EndpointCaller) and len(caller.queues) == 1 and inputs.is_team_label(caller.queues[0]):
        return caller.queues[0]
    return None


@dataclass(frozen=True)
class FleetClose:
    """A complete or fail waiting to run with the concurrent ones of other endpoints on its team queue:
    the caller and the parameters of its single statement."""

    caller: EndpointCaller
    params: dict[str, Any]


async def _fleet_close_group(core: Core, op: str, sql: str, fleet_sql: str, queue: str,
                             items: list[FleetClose]) -> list[Any]:
    """Run one group of fleet closes: a call alone is `sql`; several are one `fleet_sql` statement over
    the first occurrence of each id, each item checked against its own endpoint. A call the statement
    did not close (not held by its endpoint, wrongly fenced, its endpoint no longer live or in reach,
    a repeated id), and every call when the statement fails, is then run alone, which closes it or
    says why not exactly as it would have."""

    async def alone(item: FleetClose) -> Any:
        try:
            return await _close_alone(core, item.caller, op, sql, item.params)
        except Exception as exc:  # this call's own outcome
            return exc

    if len(items) == 1:
        return [await alone(items[0])]
    first: dict[str, FleetClose] = {}
    for item in items:
        first.setdefault(item.params["id"], item)
    unique = list(first.values())
    params = {**_close_arrays(unique[0].caller, [u.params for u in unique], with_retry=op == "fail"),
              "queue": queue, "claimers": [u.caller.endpoint_id for u in unique],
              "owners": [u.caller.owner for u in unique]}
    if op == "fail":
        params.update(backoff_base=unique[0].params["backoff_base"], backoff_max=unique[0].params["backoff_max"])
    rows: dict[str, dict[str, Any]] = {}
    conn = await core.pool.getconn()
    try:
        cur = await conn.execute(fleet_sql, params)
        rows = {r["id"]: _fold_closed(r) for r in await cur.fetchall()}
    except (psycopg.DatabaseError, CoreError):
        rows = {}
    finally:
        await core.pool.putconn(conn)
    out: list[Any] = [rows[i.params["id"]] if first[i.params["id"]] is i and i.params["id"] in rows else None
                      for i in items]
    left = [at for at, row in enumerate(out) if row is None]
    for at, got in zip(left, await asyncio.gather(*(alone(items[at]) for at in left)), strict=True):
        out[at] = got
    return out


async def complete(core: Core, caller: Caller, todo_id: str, *, result: JsonValue = None,
                   summary: str | None = None, artifact: str | None = None,
                   lease_token: str | None = None) -> dict[str, Any]:
    todo_id = _todo_id(todo_id)
    params = {**scope_params(caller), **_fence_params(caller, lease_token), "id": todo_id,
              **_report(core, summary, artifact, result)}
    _, todo = await _close(core, caller, "complete", Q.todos.complete, params, batch_sql=Q.todos.complete_batch,
                           fleet_sql=Q.todos.complete_fleet)
    return todo


async def fail(core: Core, caller: Caller, todo_id: str, *, result: JsonValue = None,
               summary: str | None = None, artifact: str | None = None, lease_token: str | None = None,
               retry: bool | None = True) -> dict[str, Any]:
    """Fail the attempt: a parked retry with backoff below the cap, else (or with retry=False) a dead letter."""
    todo_id = _todo_id(todo_id)
    retry = inputs.boolean(retry, "retry", True)
    params = {**scope_params(caller), **_fence_params(caller, lease_token), "id": todo_id,
              **_report(core, summary, artifact, result), "retry": retry,
              "backoff_base": core.settings.retry_backoff_base_seconds,
              "backoff_max": core.settings.retry_backoff_max_seconds}
    _, todo = await _close(core, caller, "fail", Q.todos.fail, params, batch_sql=Q.todos.fail_batch,
                           fleet_sql=Q.todos.fail_fleet)
    return todo


# ------------------------------------------------------------------------------- batched closes

_CLOSE_ITEM_FIELDS = frozenset({"id", "lease_token", "summary", "artifact", "result"})
_FAIL_ITEM_FIELDS = _CLOSE_ITEM_FIELDS | {"retry"}


def _batch_params(core: Core, caller: Caller, items: object, allowed: frozenset[str],
                  retry_default: bool | None, name: str = "items") -> dict[str, Any]:
    """Check every item before any store call: a bad item refuses the whole call (`invalid` naming
    the argument, `name`), so nothing changes."""
    checked = inputs.batch_items(items, allowed, name)
    each: list[dict[str, Any]] = []
    seen: set[str] = set()
    for n, item in enumerate(checked):
        try:
            todo_id = _todo_id(item.get("id"))
            token = _fence_params(caller, item.get("lease_token"))
            report = _report(core, item.get("summary"), item.get("artifact"), item.get("result"))
            retry = inputs.boolean(item.get("retry"), "retry", retry_default) if retry_default is not None else None
        except Invalid as exc:
            raise Invalid(f"{name}[{n}]: {exc.message}", argument=name) from None
        if todo_id in seen:
            raise Invalid(f"{name}[{n}]: id repeats an earlier item", argument=name)
        seen.add(todo_id)
        each.append({"id": todo_id, **token, **report, "retry": retry})
    return _close_arrays(caller, each, with_retry=retry_default is not None)


def _column(each: list[dict[str, Any]], key: str, absent: object = None) -> list[Any] | None:
    """One parameter array of a batched close: the items' `key` values, or None (SQL NULL) when every
    item has the `absent` value. held_batch's unnest pads a NULL array with NULLs, and the statement
    reads a NULL as the absent value; dumping a list costs psycopg work per element in Python, which
    for a batch of bare completes (no fence, no report) was a tenth of its Python time."""
    values = [p[key] for p in each]
    return None if all(v is absent for v in values) else values


def _close_arrays(caller: Caller, each: list[dict[str, Any]], *, with_retry: bool) -> dict[str, Any]:
    """The parameters of complete_batch / fail_batch from the parameters of each todo's single close
    (id, token_hash, the report of _report and, for fail, retry); ids distinct."""
    return {**scope_params(caller), "ids": [p["id"] for p in each],
            "token_hashes": _column(each, "token_hash"),
            "summaries": _column(each, "summary"),
            "summaries_truncated": _column(each, "summary_truncated", False),
            "artifacts": _column(each, "artifact"),
            "results": _column(each, "result"),
            "retries": [p["retry"] for p in each] if with_retry else None}


async def _close_many(core: Core, caller: Caller, op: str, sql: str,
                      params: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, CoreError]]:
    """Run a batched close: the rows of the todos it closed, by id, and the error of each id it did not
    (classified as _miss classifies one)."""
    conn = await core.pool.getconn()
    try:
        return await _close_many_on(conn, caller, op, sql, params)
    finally:
        await core.pool.putconn(conn)


async def _close_many_on(conn: Any, caller: Caller, op: str, sql: str,
                         params: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, CoreError]]:
    """_close_many on a connection the caller holds (inside its transaction, or autocommit)."""
    cur = await conn.execute(sql, params)
    by_id = {r["id"]: _fold_closed(r) for r in await cur.fetchall()}
    missed = [i for i in params["ids"] if i not in by_id]
    seen = {}
    if missed:
        cur = await conn.execute(Q.todos.classify_miss_batch, {**scope_params(caller), "ids": missed})
        seen = {r["id"]: r for r in await cur.fetchall()}
    return by_id, {i: _missed(caller, op, i, seen.get(i)) for i in missed}


async def _close_batch(core: Core, caller: Caller, op: str, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    by_id, errors = await _close_many(core, caller, op, sql, params)
    return await _closes_reported(core, op, params, by_id, errors)


async def _closes_reported(core: Core, op: str, params: dict[str, Any], by_id: dict[str, dict[str, Any]],
                           errors: dict[str, CoreError]) -> list[dict[str, Any]]:
    """After the commit of a batched close: publish its events, and answer per item in the items' order."""
    shaped = {i: shapes.compact(row) for i, row in by_id.items()}
    if by_id:  # in the items' order
        await core.bus.publish(*(events.build(op, by_id[i], by_id[i].get("closed_attempt"), todo=shaped[i])
                                 for i in params["ids"] if i in by_id))
    return [{"id": i, "ok": True, "todo": shaped[i]} if i in by_id
            else {"id": i, "ok": False, "error": errors[i].to_dict()} for i in params["ids"]]


async def complete_batch(core: Core, caller: Caller, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Batched complete: each item `{id, lease_token?, summary?, artifact?, result?}` (1 to
    inputs.BATCH_CLOSE_MAX, ids distinct) is completed exactly as `complete` completes one, all in ONE
    statement. Per item, not all-or-nothing: the answer lists, in the items' order,
    `{"id", "ok": true, "todo": <compact>}` or `{"id", "ok": false, "error": {"code", "message"}}` with
    the single verb's codes (not_found, byte-identical for unknown and foreign ids; conflict when not
    held or wrongly fenced; forbidden for the endpoint's own todo outside its queues). A malformed item
    refuses the whole call (`invalid`, argument `items`) before anything changes. Events are published
    after commit for every todo closed. The MCP tool `complete` calls this when `items` is given.
    """
    params = _batch_params(core, caller, items, _CLOSE_ITEM_FIELDS, None)
    return await _close_batch(core, caller, "complete", Q.todos.complete_batch, params)


async def fail_batch(core: Core, caller: Caller, items: list[dict[str, Any]], *,
                     retry: bool | None = True) -> list[dict[str, Any]]:
    """Batched fail: as `complete_batch`, each item failed exactly as `fail` fails one (a parked retry
    with backoff below the cap, else a dead letter). An item's own `retry` overrides `retry`."""
    default = inputs.boolean(retry, "retry", True)
    params = _batch_params(core, caller, items, _FAIL_ITEM_FIELDS, default)
    params.update(backoff_base=core.settings.retry_backoff_base_seconds,
                  backoff_max=core.settings.retry_backoff_max_seconds)
    return await _close_batch(core, caller, "fail", Q.todos.fail_batch, params)


async def complete_and_take_next(core: Core, caller: EndpointCaller, items: list[dict[str, Any]], *,
                                 queue: str | None = None, max_todos: int | None = None,
                                 lease_ttl_seconds: int | None = None, require_fence: bool | None = None,
                                 claimant: str | None = None,
                                 ) -> tuple[list[dict[str, Any]], list[ClaimResult], list[dict[str, Any]]]:
    """A worker's round in one call: complete `items` (as complete_batch) and claim the next todos (as
    take_next), in ONE transaction, so the round costs one commit instead of two (docs/decisions.md
    D52). Answers (the per-item results of complete_batch, the todos claimed, the queues deferred).

    Every item and argument is checked before anything runs: a bad one refuses the whole call and
    nothing changes. The completions are per item, as complete_batch's; they commit with the claims,
    or, when the claim loses a race at commit, alone before the claim is run again as take_next runs
    it. Any other error rolls both back and is raised: nothing changed. An endpoint with policed queues
    runs the two steps one after the other (the completions commit, then the policed claim)."""
    close = _batch_params(core, caller, items, _CLOSE_ITEM_FIELDS, None, "complete")
    n = inputs.max_todos(max_todos) if max_todos is not None else None
    queues = _claim_queues(caller, queue)
    params, token = _claim_params(core, caller, lease_ttl_seconds, require_fence, claimant)
    fenced = token is not None
    if caller.endpoint_id in core.policed:
        results = await _close_batch(core, caller, "complete", Q.todos.complete_batch, close)
        claimed, deferred = await _take(core, caller, queues, params, n, token, combine=False)
        return results, claimed, deferred
    raced = False
    conn = await core.pool.getconn()
    try:
        async with conn.transaction():
            by_id, errors = await _close_many_on(conn, caller, "complete", Q.todos.complete_batch, close)
            pairs = await _claim_some(conn, queues, params, n, fenced, token)
    except (psycopg.errors.ExclusionViolation, Conflict):
        raced = True  # refused at COMMIT (REQ-2): a racing claim opened an attempt first; nothing committed
    finally:
        await core.pool.putconn(conn)
    if raced:  # the completions do not depend on the claim: they go alone, and the claim as its verb runs
        results = await _close_batch(core, caller, "complete", Q.todos.complete_batch, close)
        claimed, deferred = await _take(core, caller, queues, params, n, token, combine=False)
        return results, claimed, deferred
    results = await _closes_reported(core, "complete", close, by_id, errors)
    if pairs:
        claimed, _ = await _claimed(core, pairs, None)
        return results, claimed, []
    policed = await admission.any_policy(core, caller.endpoint_id, queues)
    core.policed.mark(caller.endpoint_id, policed)
    if not policed:
        return results, [], []
    claimed, deferred = await _take_policed(core, caller, queues, params, n, fenced, token)
    return results, claimed, deferred


async def release(core: Core, caller: Caller, todo_id: str, *, summary: str | None = None,
                  artifact: str | None = None, lease_token: str | None = None) -> dict[str, Any]:
    """Give the lease back: pending again, attempt counter unchanged, attempt closes `released`."""
    todo_id = _todo_id(todo_id)
    params = {**scope_params(caller), **_fence_params(caller, lease_token), "id": todo_id,
              **_report(core, summary, artifact, None)}
    row, _ = await _close(core, caller, "release", Q.todos.release, params, ready="released")
    return shapes.full(row)


async def request_input(core: Core, caller: Caller, todo_id: str, *, question: str | None = None,
                        lease_token: str | None = None) -> dict[str, Any]:
    """The holder asks its human for input: input-required, attempt stays open, lease paused."""
    todo_id = _todo_id(todo_id)
    q = inputs.question(question)
    params = {**scope_params(caller), **_fence_params(caller, lease_token), "id": todo_id, "question": q}
    row = await _one(core, Q.todos.request_input, params)
    if row is None:
        raise await _miss(core, caller, todo_id, "request_input")
    await core.bus.publish(events.build("request_input", row))
    return shapes.compact(row)


async def provide_input(core: Core, caller: HumanCaller, todo_id: str, *, payload: JsonValue,
                        lease_ttl_seconds: int | None = None) -> dict[str, Any]:
    """The owning human answers an input-required todo; it resumes claimed under a fresh lease."""
    todo_id = _todo_id(todo_id)
    text = inputs.json_value(payload, "payload", inputs.PAYLOAD_MAX_BYTES)
    if text is None:
        raise Invalid("payload is required", argument="payload")
    params = {**scope_params(caller), "id": todo_id, "input": Jsonb(payload),
              "ttl": _ttl(core, caller, lease_ttl_seconds)}
    row = await _one(core, Q.todos.provide_input, params)
    if row is None:
        raise await _miss(core, caller, todo_id, "input")
    await core.bus.publish(events.build("provide_input", row))
    return shapes.full(row)


async def cancel(core: Core, caller: HumanCaller, todo_id: str) -> dict[str, Any]:
    """Cancel a todo that is not finished; its open attempt, if any, closes `canceled`. Two statements in
    one transaction: the todo is locked first, so that a claim committing meanwhile is seen whole."""
    todo_id = _todo_id(todo_id)
    params = {**scope_params(caller), "id": todo_id}
    _, todo = await _close(core, caller, "cancel", Q.todos.cancel, params, lock_sql=Q.todos.lock_for_cancel)
    return todo


async def retry(core: Core, caller: HumanCaller, todo_id: str) -> dict[str, Any]:
    """Manual retry of a dead letter or a parked retry (REQ-12): fresh budget, history kept."""
    todo_id = _todo_id(todo_id)
    row = await _one(core, Q.todos.retry, {**scope_params(caller), "id": todo_id})
    if row is None:
        raise await _miss(core, caller, todo_id, "retry")
    await core.bus.publish(events.build("retry", row, ready="retried"))
    return shapes.compact(row)


# ----------------------------------------------------------------------------------------- reads

async def get(core: Core, caller: Caller, todo_id: str, *, attempts_limit: int | None = None) -> dict[str, Any]:
    """The get_todo shape (REQ-8). Foreign, unknown and out-of-grant ids are the same not_found."""
    todo_id = _todo_id(todo_id)
    owner_view = isinstance(caller, HumanCaller)
    limit = inputs.attempts_limit(attempts_limit, owner_view=owner_view)
    row = await _one(core, Q.todos.get, {**scope_params(caller), "id": todo_id, "attempts_limit": limit})
    if row is None:
        raise NotFound(op="get_todo", todo_id=todo_id)
    return shapes.todo_detail(row, row["attempts"], owner_view=owner_view)


async def list_for_endpoint(core: Core, caller: EndpointCaller, *, queue: str | None = None,
                            state: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    if queue is not None:
        name = inputs.queue(queue)
        if name not in caller.queues:
            raise Forbidden(f"queue {name} not in this endpoint's scope", argument="queue", op="list_todos")
        queues = [name]
    else:
        queues = list(caller.queues)
    state = inputs.state(state)
    n = inputs.list_limit(limit)
    team = [q for q in queues if inputs.is_team_label(q)]
    params = {"endpoint_id": caller.endpoint_id, "queues": [q for q in queues if q not in team],
              "team_queues": team, "state": state, "limit": n}
    sql = Q.todos.list_for_endpoint_teams if team else Q.todos.list_for_endpoint
    async with core.pool.connection() as conn:
        cur = await conn.execute(sql, params)
        return [shapes.compact(r) for r in await cur.fetchall()]


def _human_filters(caller: HumanCaller, endpoint: str | None, queue: str | None,
                   team: str | None = None) -> dict[str, Any]:
    return {"human_id": caller.human_id,
            "slug": inputs.identifier(endpoint, "endpoint") if endpoint else None,
            "queue": inputs.queue(queue) if queue else None,
            "team": inputs.team_slug(team) if team else None}


async def list_for_human(core: Core, caller: HumanCaller, *, endpoint: str | None = None,
                         queue: str | None = None, state: str | None = None, dead_letter: bool = False,
                         limit: int | None = None, offset: int | None = None,
                         team: str | None = None) -> list[dict[str, Any]]:
    """The todos of the human's endpoints and of their teams (`team`: one team's, by slug)."""
    params = _human_filters(caller, endpoint, queue, team)
    params.update(state=inputs.state(state), dead_letter=inputs.boolean(dead_letter, "dead_letter", False),
                  limit=inputs.count(limit, "limit", default=inputs.LIST_LIMIT_DEFAULT, low=1,
                                     high=inputs.OWNER_LIST_LIMIT_MAX),
                  offset=inputs.count(offset, "offset", default=0, low=0, high=inputs.OFFSET_MAX))
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.todos.list_for_human, params)
        rows = await cur.fetchall()
    out = []
    for r in rows:
        item = shapes.compact(r)
        item["endpoint"] = r["endpoint_slug"]
        item["team"] = r["team_slug"]
        item["updated_at"] = shapes.ts(r["updated_at"])
        item["held_back"] = bool(r["held"])
        out.append(item)
    return out


async def counts_for_human(core: Core, caller: HumanCaller, *, endpoint: str | None = None,
                           queue: str | None = None, team: str | None = None) -> dict[str, int]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.todos.counts_for_human, _human_filters(caller, endpoint, queue, team))
        rows = await cur.fetchall()
    counts = {s: 0 for s in TODO_STATES}
    counts["dead_letter"] = 0
    for r in rows:
        counts[r["state"]] = r["n"]
        counts["dead_letter"] += r["dead"]
    return counts


async def queue_counts(core: Core, caller: EndpointCaller, queue: str) -> dict[str, int]:
    """Live todos of one granted queue by state (pending, claimed, input-required, retry_scheduled)."""
    name = inputs.queue(queue)
    if name not in caller.queues:
        raise Forbidden(f"queue {name} not in this endpoint's scope", argument="queue", op="queue_counts")
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.todos.queue_counts_for_endpoint,
                                 {"endpoint_id": caller.endpoint_id, "queue": name})
        rows = await cur.fetchall()
    counts = {s: 0 for s in GAUGE_STATES[:-1]}  # the live states and retry_scheduled
    for r in rows:
        counts[RETRY_SCHEDULED if r["state"] == TodoState.FAILED else r["state"]] += r["n"]
    return counts
