"""A hypothesis state machine over the real queue (SYSTEM.md section 17): random operations by two
endpoints of two humans (one endpoint used from two sessions) and by the humans themselves, with the
library invariant checker after every step and a small model of what must happen:

- a foreign caller always gets not_found, and a foreign call never succeeds;
- an owner's call on its own todo is refused only as a conflict (never not_found, never internal);
- a fenced attempt refuses an endpoint call without the right token; a wrong token is always refused;
- a successful transition lands in the state the lifecycle table names.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from conftest import clean_database, core_for, create_database
from core_world import make_world
from exploration import explore_until_covered
from switchboard.core import endpoints, invariants, producer, sweeps, todos
from switchboard.core.errors import CoreError

SIDE = {"e1": "1", "e1b": "1", "e2": "2", "e2b": "2", "h1": "1", "h2": "2"}
ENDPOINT_ACTORS = ("e1", "e1b", "e2", "e2b")
HUMAN_ACTORS = ("h1", "h2")
# Who calls, relative to the todo's side (repeats weight the draw towards the todo's own callers).
ROLES = st.sampled_from(["own", "own", "own", "own_other_session", "own_human", "own_human",
                         "foreign", "foreign_human"])
HUMAN_ROLES = st.sampled_from(["own_human", "own_human", "own_human", "foreign_human"])
REFUSALS = {"not_found", "conflict", "forbidden", "invalid"}


class Env:
    loop: asyncio.AbstractEventLoop
    core: object
    uri: str


class QueueMachine(RuleBasedStateMachine):
    env: Env = None
    todos = Bundle("todos")

    def __init__(self) -> None:
        super().__init__()
        self.core = self.env.core
        self.side_of: dict[str, str] = {}
        self.tokens: dict[tuple[str, int], str] = {}
        self.revoked: set[str] = set()
        self.claims: dict[str, int] = {}  # committed claims per todo, as the model counts them
        self.counts = {"ok": 0, "refused": 0}

    # ---------------------------------------------------------------------------------- plumbing

    def run(self, coro):
        return self.env.loop.run_until_complete(coro)

    def sql(self, statement: str, params=None) -> list[dict]:
        async def go():
            async with self.core.pool.connection() as conn:
                cur = await conn.execute(statement, params)
                return await cur.fetchall() if cur.description else []
        return self.run(go())

    def open_attempt(self, t: str) -> dict | None:
        rows = self.sql("SELECT seq, lease_token_hash IS NOT NULL AS fenced FROM todo_attempts"
                        " WHERE todo_id = %s AND ended_at IS NULL", (t,))
        return rows[0] if rows else None

    def state(self, t: str) -> str:
        return self.sql("SELECT state FROM todos WHERE id = %s", (t,))[0]["state"]

    def actor(self, t: str, role: str) -> str:
        own = self.side_of[t]
        other = "2" if own == "1" else "1"
        return {"own": f"e{own}", "own_other_session": f"e{own}b", "own_human": f"h{own}",
                "foreign": f"e{other}", "foreign_human": f"h{other}"}[role]

    def _revoked_endpoint(self, actor: str) -> bool:
        return actor.startswith("e") and SIDE[actor] in self.revoked

    def call(self, actor: str, t: str, make):
        """Run one core call as `actor` on todo `t` and apply the model's rules of refusal."""
        foreign = SIDE[actor] != self.side_of[t]
        revoked = self._revoked_endpoint(actor)
        try:
            out = self.run(make())
        except CoreError as exc:
            self.counts["refused"] += 1
            if revoked and exc.code == "unauthorized":
                # The statement itself refused the revoked endpoint. A statement that reads no row
                # before its miss is classified answers as it would for a live caller below: after
                # the cascade every todo of a revoked endpoint is a dead letter, so nothing changes.
                return None, exc
            assert exc.code in REFUSALS, exc
            if foreign:
                assert exc.code == "not_found", (actor, exc)
            else:
                assert exc.code == "conflict", (actor, exc)
            return None, exc
        self.counts["ok"] += 1
        assert not foreign, f"{actor} changed or read a todo of side {self.side_of[t]}"
        assert not revoked, f"{actor} acted after its endpoint was revoked"
        return out, None

    # ------------------------------------------------------------------------------------- setup

    @initialize()
    def world(self) -> None:
        clean_database(self.env.uri)
        w = self.run(make_world(self.core))
        self.w = w
        self.callers = {"e1": w.e1.with_session("s1"), "e1b": w.e1.with_session("s2"),
                        "e2": w.e2.with_session("s3"), "e2b": w.e2.with_session("s4"), "h1": w.h1, "h2": w.h2}
        self.slugs = {"1": w.slug1, "2": w.slug2}
        self.humans = {"1": w.h1, "2": w.h2}

    # ------------------------------------------------------------------------------------- rules

    @rule(target=todos, side=st.sampled_from("12"), max_attempts=st.integers(1, 3))
    def create(self, side, max_attempts):
        try:
            todo, created = self.run(producer.push(self.core, self.humans[side], self.slugs[side],
                                                   title="t", max_attempts=max_attempts))
        except CoreError as exc:
            assert side in self.revoked and exc.code == "invalid", exc
            return multiple()
        assert created and todo["state"] == "pending"
        self.side_of[todo["id"]] = side
        return todo["id"]

    @rule(t=todos, role=ROLES, fence=st.booleans())
    def claim(self, t, role, fence):
        actor = self.actor(t, role)
        out, _ = self.call(actor, t, lambda: todos.claim(self.core, self.callers[actor], t, require_fence=fence,
                                                         claimant=actor))
        if out is not None:
            self._claimed(t, out, fence)

    @rule(actor=st.sampled_from(ENDPOINT_ACTORS), fence=st.booleans())
    def claim_next(self, actor, fence):
        try:
            out = self.run(todos.claim_next(self.core, self.callers[actor], require_fence=fence))
        except CoreError as exc:
            # A revoked endpoint is refused by the statement itself; nothing else refuses claim_next
            # (only a planted second open attempt could, and none is planted).
            if self._revoked_endpoint(actor) and exc.code == "unauthorized":
                return
            raise AssertionError(exc) from exc
        assert not self._revoked_endpoint(actor), "a revoked endpoint claimed"
        if out is not None:
            self.counts["ok"] += 1
            t = out.todo["id"]
            assert self.side_of[t] == SIDE[actor]
            self._claimed(t, out, fence)

    def _claimed(self, t, out, fence) -> None:
        assert out.todo["state"] == "claimed" and out.attempt_seq == out.attempts_total
        seqs = [p["seq"] for p in out.prior_attempts]
        assert len(seqs) <= 5 and seqs == sorted(seqs, reverse=True) and all(s < out.attempt_seq for s in seqs)
        assert all(p["ended_at"] is not None for p in out.prior_attempts)
        assert (out.lease_token is not None) == fence
        self.claims[t] = self.claims.get(t, 0) + 1
        assert out.attempts_total == self.claims[t]
        if fence:
            self.tokens[(t, out.attempt_seq)] = out.lease_token

    def _lease_call(self, t, actor, token_choice, make):
        """A holder's verb: check the fence model around it."""
        before = self.open_attempt(t)
        token = None
        if token_choice == "right" and before is not None:
            token = self.tokens.get((t, before["seq"]))
        elif token_choice == "wrong":
            token = "not-a-lease-token"
        if actor in HUMAN_ACTORS:
            token = None  # the owning human is fence-exempt and presents none
        out, err = self.call(actor, t, lambda: make(self.callers[actor], token))
        if out is not None and actor in ENDPOINT_ACTORS:
            assert token_choice != "wrong", "a wrong lease token was accepted"
            assert before is not None and (not before["fenced"] or token is not None), "the fence was bypassed"
        return out

    @rule(t=todos, role=ROLES, tok=st.sampled_from(["right", "none", "wrong"]))
    def heartbeat(self, t, role, tok):
        actor = self.actor(t, role)
        out = self._lease_call(t, actor, tok, lambda c, k: todos.heartbeat(self.core, c, t, lease_token=k))
        if out is not None:
            assert out["state"] == "claimed"

    @rule(t=todos, role=ROLES, tok=st.sampled_from(["right", "none", "wrong"]),
          summary=st.one_of(st.none(), st.text(max_size=20)))
    def complete(self, t, role, tok, summary):
        actor = self.actor(t, role)
        out = self._lease_call(t, actor, tok, lambda c, k: todos.complete(self.core, c, t, lease_token=k,
                                                                          summary=summary, result={"by": actor}))
        if out is not None:
            assert out["state"] == "done"

    @rule(t=todos, role=ROLES, tok=st.sampled_from(["right", "none", "wrong"]),
          retry=st.booleans())
    def fail(self, t, role, tok, retry):
        actor = self.actor(t, role)
        out = self._lease_call(t, actor, tok, lambda c, k: todos.fail(self.core, c, t, lease_token=k, retry=retry))
        if out is not None:
            assert out["state"] == "failed"
            assert out["dead_letter"] == (not retry or out["attempt"] >= out["max_attempts"])

    @rule(t=todos, role=st.sampled_from(["own", "own_other_session", "foreign"]),
          tok=st.sampled_from(["right", "none", "wrong"]), fence=st.booleans())
    def complete_then_claim(self, t, role, tok, fence):
        """claim_next with `complete` (D52): the completion answers per item as complete would, and
        the claim as claim_next would, in one transaction."""
        actor = self.actor(t, role)
        before = self.open_attempt(t)
        token = {"right": self.tokens.get((t, before["seq"])) if before else None, "none": None,
                 "wrong": "not-a-lease-token"}[tok]
        item = {"id": t} if token is None else {"id": t, "lease_token": token}
        try:
            results, claimed, _ = self.run(todos.complete_and_take_next(self.core, self.callers[actor], [item],
                                                                        require_fence=fence))
        except CoreError as exc:
            if self._revoked_endpoint(actor) and exc.code == "unauthorized":
                return
            raise AssertionError(exc) from exc
        (res,) = results
        foreign = SIDE[actor] != self.side_of[t]
        if res["ok"]:
            self.counts["ok"] += 1
            assert not foreign and not self._revoked_endpoint(actor), (actor, t)
            assert tok != "wrong" and before is not None and (not before["fenced"] or token is not None)
            assert res["todo"]["state"] == "done"
        else:
            self.counts["refused"] += 1
            assert res["error"]["code"] == ("not_found" if foreign else "conflict") or (
                self._revoked_endpoint(actor) and res["error"]["code"] == "unauthorized"), (actor, res)
        assert not (claimed and self._revoked_endpoint(actor)), "a revoked endpoint claimed"
        for out in claimed:
            self.counts["ok"] += 1
            assert self.side_of[out.todo["id"]] == SIDE[actor]
            self._claimed(out.todo["id"], out, fence)

    @rule(t=todos, role=ROLES, tok=st.sampled_from(["right", "none", "wrong"]))
    def release(self, t, role, tok):
        actor = self.actor(t, role)
        out = self._lease_call(t, actor, tok, lambda c, k: todos.release(self.core, c, t, lease_token=k))
        if out is not None:
            assert out["state"] == "pending"

    @rule(t=todos, role=ROLES, tok=st.sampled_from(["right", "none", "wrong"]))
    def request_input(self, t, role, tok):
        actor = self.actor(t, role)
        before = self.open_attempt(t)
        out = self._lease_call(t, actor, tok, lambda c, k: todos.request_input(self.core, c, t, lease_token=k,
                                                                               question="?"))
        if out is not None:
            assert out["state"] == "input-required" and self.open_attempt(t)["seq"] == before["seq"]

    @rule(t=todos, role=HUMAN_ROLES)
    def provide_input(self, t, role):
        actor = self.actor(t, role)
        before = self.open_attempt(t)
        out, _ = self.call(actor, t, lambda: todos.provide_input(self.core, self.callers[actor], t, payload={"a": 1}))
        if out is not None:
            assert out["state"] == "claimed" and self.open_attempt(t)["seq"] == before["seq"]

    @rule(t=todos, role=HUMAN_ROLES)
    def cancel(self, t, role):
        actor = self.actor(t, role)
        out, _ = self.call(actor, t, lambda: todos.cancel(self.core, self.callers[actor], t))
        if out is not None:
            assert out["state"] == "canceled" and self.open_attempt(t) is None

    @rule(t=todos, role=HUMAN_ROLES)
    def manual_retry(self, t, role):
        actor = self.actor(t, role)
        total = self.sql("SELECT attempts_total FROM todos WHERE id = %s", (t,))[0]["attempts_total"]
        out, _ = self.call(actor, t, lambda: todos.retry(self.core, self.callers[actor], t))
        if out is not None:
            row = self.sql("SELECT state, attempt, attempts_total FROM todos WHERE id = %s", (t,))[0]
            assert row == {"state": "pending", "attempt": 0, "attempts_total": total}

    @rule(t=todos, role=ROLES)
    def get(self, t, role):
        actor = self.actor(t, role)
        out, _ = self.call(actor, t, lambda: todos.get(self.core, self.callers[actor], t))
        if out is not None:
            seqs = [a["seq"] for a in out["attempts"]]
            assert seqs == sorted(seqs, reverse=True)
            assert not seqs or seqs[0] == out["attempts_total"]
            assert sum(a["ended_at"] is None for a in out["attempts"]) == (
                1 if out["state"] in ("claimed", "input-required") else 0)

    @rule(t=todos)
    def lapse_lease(self, t):
        self.sql("UPDATE todos SET lease_expires_at = now() - interval '1 minute'"
                 " WHERE id = %s AND state = 'claimed'", (t,))
        self.sql("UPDATE todo_attempts SET lease_expires_at = now() - interval '1 minute'"
                 " WHERE todo_id = %s AND ended_at IS NULL"
                 "   AND EXISTS (SELECT 1 FROM todos WHERE id = %s AND state = 'claimed')", (t, t))

    @rule(t=todos)
    def retry_due(self, t):
        self.sql("UPDATE todos SET next_retry_at = now() - interval '1 second'"
                 " WHERE id = %s AND next_retry_at IS NOT NULL", (t,))

    @precondition(lambda self: self.counts.get("steps", 0) % 5 == 4)  # else the draw favours it heavily
    @rule()
    def sweep(self):
        self.run(sweeps.sweep_once(self.core))

    @precondition(lambda self: self.counts.get("steps", 0) >= 30 and not self.revoked)
    @rule(side=st.sampled_from("12"))
    def revoke(self, side):
        """Late and once: revocation ends a side's story."""
        out = self.run(endpoints.revoke(self.core, self.humans[side], self.slugs[side]))
        assert out["state"] == "revoked"
        self.revoked.add(side)
        live = self.sql("""SELECT count(*) AS n FROM todos t JOIN endpoints e ON e.id = t.endpoint_id
                            WHERE e.slug = %s AND (t.state IN ('pending', 'claimed', 'input-required')
                                  OR (t.state = 'failed' AND t.next_retry_at IS NOT NULL))""", (self.slugs[side],))
        assert live[0]["n"] == 0

    def teardown(self) -> None:
        totals = self.env.totals
        for k, v in self.counts.items():
            totals[k] = totals.get(k, 0) + v
        for row in self.sql("SELECT state, count(*) AS n FROM todos GROUP BY state"):
            totals[row["state"]] = totals.get(row["state"], 0) + row["n"]
        totals["attempts"] = totals.get("attempts", 0) + self.sql("SELECT count(*) AS n FROM todo_attempts")[0]["n"]

    # --------------------------------------------------------------------------------- invariant

    @invariant()
    def database_is_consistent(self):
        self.counts["steps"] = self.counts.get("steps", 0) + 1
        async def go():
            async with self.core.pool.connection() as conn:
                return await invariants.check(conn)
        assert self.run(go()) == []
        # Only committed claims open attempts: nothing else (sweeps, retries, interrupts) moves the count.
        if self.side_of:
            rows = self.sql("SELECT id, attempts_total FROM todos")
            assert {r["id"]: r["attempts_total"] for r in rows} == {t: self.claims.get(t, 0) for t in self.side_of}


def test_queue_state_machine(pg_server):
    uri = create_database(pg_server)
    loop = asyncio.new_event_loop()
    env = Env()
    env.loop, env.uri, env.totals = loop, uri, {}
    cm = core_for(uri)
    env.core = loop.run_until_complete(cm.__aenter__())
    QueueMachine.env = env

    def missing() -> list[str]:
        """The run exercised both outcomes and reached the states the lifecycle has."""
        totals = env.totals
        return [what for what, reached in (("ok > 100", totals.get("ok", 0) > 100),
                                           ("refused > 100", totals.get("refused", 0) > 100),
                                           ("attempts > 30", totals.get("attempts", 0) > 30)) if not reached]

    try:
        gaps = explore_until_covered(lambda: run_state_machine_as_test(QueueMachine, settings=settings(
            max_examples=60, stateful_step_count=60, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])), missing)
    finally:
        loop.run_until_complete(cm.__aexit__(None, None, None))
        loop.close()
    print("state machine totals:", env.totals)
    assert gaps == []
