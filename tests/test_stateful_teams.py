"""A hypothesis state machine over teams, team queues and admission control (issue 13), on the real
database: two teams, three humans whose membership and roles change, endpoints vended (with team
queues), granted, ungranted and revoked, todos pushed to team queues and to endpoints' own queues,
claimed, completed, failed and released by endpoints and by humans, admission policies set, changed,
paused and cleared. The invariant checker (core/invariants.py) runs after every step, and a model
says what each call must do:

- out of reach (a team the human is not in; a team queue the endpoint is not granted, or whose human
  left; a revoked endpoint) a todo is `not_found`, byte-identical to an id never minted, and nothing
  read or listed shows it;
- roles are enforced: a `member` managing members, grants or policies is `forbidden`, an `admin`
  making, unmaking or removing an owner is `forbidden`, a non-member is `not_found`; a team keeps an
  owner (`conflict`);
- in reach, a call succeeds exactly when the lifecycle allows it (the holder on its lease; a member on
  any lease of the team), else `conflict`;
- a policed queue defers (`paused`, `window_exhausted`, `in_flight_full`, judged from the rows) and
  admits otherwise; an empty claim_next lists exactly the deferred queues the endpoint reaches;
- removing a member, and ungranting, hands the leases back `released` / `requeued` (attempt counter
  minus one); revoking an endpoint hands its team leases back `revoked` / `requeued` and dead-letters
  its own todos.
"""

from __future__ import annotations

import asyncio
import collections
import os
import uuid

from hypothesis import HealthCheck, Phase, settings
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
from exploration import explore_until_covered
from switchboard.core import admission, endpoints, humans, invariants, producer, sweeps, teams, todos
from switchboard.core.errors import CoreError

TEAMS = ("ta", "tb")
LABEL = {slug: f"team:{slug}/work" for slug in TEAMS}
TEAM_OF = {label: slug for slug, label in LABEL.items()}
OWN = "own"
HUMANS = 3
MAX_ENDPOINTS = 7
TTL = 3600  # leases outlive any example; lapses are made by SQL
ROLES = ("owner", "admin", "member")
HELD = ("claimed", "input-required")
# SWITCHBOARD_NO_SHRINK=1 reports a failure as found, without minutes of shrinking (when iterating).
PHASES = [p for p in Phase if not (os.environ.get("SWITCHBOARD_NO_SHRINK") and p is Phase.shrink)]
# What every run of the team machine must reach (test_team_state_machine explores again while one is
# missing: tests/exploration.py).
COVERED = ("ok:claim_next", "ok:claim", "refused:not_found", "refused:forbidden", "refused:deferred",
           "ok:remove_member", "ok:grant", "ok:revoke", "handed back released", "handed back revoked",
           "deferred:in_flight_full", "deferred:window_exhausted", "deferred:paused")

EP = st.integers(0, MAX_ENDPOINTS - 1)
HUMAN = st.integers(0, HUMANS - 1)
TEAM = st.sampled_from(TEAMS)
# Who acts on a todo, relative to it (weighted towards the callers that may act): the endpoint holding
# its lease, an endpoint or a human that reaches it, or anyone; `n` picks among the candidates.
ACTOR = st.tuples(st.sampled_from(["holder", "holder", "holder", "reacher", "reacher", "member", "member",
                                   "any_endpoint", "any_human"]), st.integers(0, 20))


class Env:
    loop: asyncio.AbstractEventLoop
    core: object
    uri: str
    totals: collections.Counter


class TeamMachine(RuleBasedStateMachine):
    env: Env = None
    todos = Bundle("todos")

    def __init__(self) -> None:
        super().__init__()
        self.core = self.env.core
        self.counts: collections.Counter = collections.Counter()

    # ---------------------------------------------------------------------------------- plumbing

    def run(self, coro):
        return self.env.loop.run_until_complete(coro)

    def sql(self, statement: str, params=None) -> list[dict]:
        async def go():
            async with self.core.pool.connection() as conn:
                cur = await conn.execute(statement, params)
                return await cur.fetchall() if cur.description else []
        return self.run(go())

    def attempt(self, coro_factory):
        """(result, None) or (None, CoreError)."""
        try:
            return self.run(coro_factory()), None
        except CoreError as exc:
            return None, exc

    def row(self, t: str) -> dict:
        return self.sql("SELECT * FROM todos WHERE id = %s", (t,))[0]

    # ------------------------------------------------------------------------------------- model

    def ep(self, e: int) -> dict:
        return self.eps[e % len(self.eps)]

    def caller(self, e: int, session: str | None = None):
        """An endpoint as a server resolves its credential now; a revoked one keeps its last caller
        (a cache that still believed in it), which the statements themselves must refuse."""
        ep = self.ep(e)
        if not ep["revoked"]:
            row = self.run(endpoints.resolve_credential(self.core, ep["credential"]))
            assert row is not None
            ep["caller"] = endpoints.caller_from_row(row, session or f"s-{ep['slug']}")
        return ep["caller"]

    def role(self, h: int, team: str) -> str | None:
        return self.members[team].get(h)

    def ep_reaches_label(self, ep: dict, label: str) -> bool:
        team = TEAM_OF[label]
        return not ep["revoked"] and (ep["i"], label) in self.grants and ep["human"] in self.members[team]

    def reaches(self, actor: tuple[str, int], t: str) -> bool:
        kind, owner = self.todo_of[t]
        if actor[0] == "h":
            h = actor[1]
            return self.eps[owner]["human"] == h if kind == "own" else h in self.members[owner]
        ep = self.ep(actor[1])
        if ep["revoked"]:
            return False
        return owner == ep["i"] if kind == "own" else self.ep_reaches_label(ep, LABEL[owner])

    def who(self, t: str, draw: tuple[str, int]) -> tuple[str, int]:
        """The actor a draw of ACTOR names for todo t: ("e", endpoint index) or ("h", human index)."""
        kind, n = draw
        eps = [("e", e["i"]) for e in self.eps]
        people = [("h", h) for h in range(HUMANS)]
        if kind == "holder":
            held_by = self.row(t)["claimed_by_endpoint_id"]
            holders = [("e", e["i"]) for e in self.eps if e["id"] == held_by]
            pool = holders or [a for a in eps if self.reaches(a, t)] or eps
        elif kind == "reacher":
            pool = [a for a in eps if self.reaches(a, t)] or eps
        elif kind == "member":
            pool = [a for a in people if self.reaches(a, t)] or people
        else:
            pool = eps if kind == "any_endpoint" else people
        return pool[n % len(pool)]

    def make_caller(self, actor: tuple[str, int]):
        return self.humans[actor[1]] if actor[0] == "h" else self.caller(actor[1])

    def identity_of(self, t: str) -> tuple[str, object]:
        kind, owner = self.todo_of[t]
        return (kind, owner)

    def identity_sql(self, ident: tuple[str, object]) -> tuple[str, tuple]:
        """A WHERE on todos `t` for a queue identity: ("team", slug) or ("own", endpoint index)."""
        kind, owner = ident
        if kind == "team":
            return "t.team_id = (SELECT id FROM teams WHERE slug = %s) AND t.queue = %s", (owner, LABEL[owner])
        return "t.endpoint_id = %s AND t.queue = %s", (self.eps[owner]["id"], OWN)

    def verdict(self, ident: tuple[str, object]) -> dict | None:
        """What admission control must say now about a queue identity, from the rows (None: no policy).
        `hour` lets a step that straddles the hour (a new window) be told apart."""
        where, params = self.identity_sql(ident)
        kind, owner = ident
        pwhere = ("p.team_id = (SELECT id FROM teams WHERE slug = %s) AND p.queue = %s" if kind == "team"
                  else "p.endpoint_id = %s AND p.queue = %s")
        rows = self.sql(f"""
            SELECT p.paused OR p.max_in_flight = 0 OR p.max_claims_per_window = 0 AS paused,
                   p.max_in_flight, p.max_claims_per_window,
                   (SELECT count(*) FROM todos t WHERE {where}
                       AND (t.state = 'input-required' OR (t.state = 'claimed' AND t.lease_expires_at >= now())))
                       AS in_flight,
                   (SELECT count(*) FROM todos t JOIN todo_attempts a ON a.todo_id = t.id WHERE {where}
                       AND a.claimed_at >= greatest(date_trunc('hour', now()), p.created_at)) AS used,
                   (SELECT count(*) FROM todos t WHERE {where} AND t.state = 'pending') AS pending,
                   date_trunc('hour', now()) AS hour
              FROM admission_policies p WHERE {pwhere}""", params + params + params + params)
        if not rows:
            return None
        r = rows[0]
        if r["paused"]:
            reason = "paused"
        elif r["max_claims_per_window"] is not None and r["used"] >= r["max_claims_per_window"]:
            reason = "window_exhausted"
        elif r["max_in_flight"] is not None and r["in_flight"] >= r["max_in_flight"]:
            reason = "in_flight_full"
        else:
            reason = None
        return {"reason": reason, "pending": r["pending"], "hour": r["hour"]}

    def hour(self):
        return self.sql("SELECT date_trunc('hour', now()) AS h")[0]["h"]

    def claimable(self, ident: tuple[str, object]) -> int:
        where, params = self.identity_sql(ident)
        return self.sql(f"""SELECT count(*) AS n FROM todos t WHERE {where} AND (t.state = 'pending'
                             OR (t.state = 'claimed' AND t.lease_expires_at < now() AND t.attempt < t.max_attempts)
                             OR (t.state = 'failed' AND t.next_retry_at <= now() AND t.attempt < t.max_attempts))""",
                        params)[0]["n"]

    def is_claimable(self, t: str) -> bool:
        r = self.row(t)
        now = self.sql("SELECT now() AS n")[0]["n"]
        return (r["state"] == "pending"
                or (r["state"] == "claimed" and r["lease_expires_at"] < now and r["attempt"] < r["max_attempts"])
                or (r["state"] == "failed" and r["next_retry_at"] is not None and r["next_retry_at"] <= now
                    and r["attempt"] < r["max_attempts"]))

    def refused(self, exc: CoreError | None, *codes: str) -> None:
        assert exc is not None, f"the call succeeded where the model expects a refusal ({', '.join(codes)})"
        self.counts["refused"] += 1
        self.counts[f"refused:{exc.code}"] += 1
        assert exc.code in codes, (codes, exc)

    def ok(self, what: str) -> None:
        self.counts["ok"] += 1
        self.counts[f"ok:{what}"] += 1

    # ------------------------------------------------------------------------------------- setup

    @initialize(target=todos)
    def world(self):
        clean_database(self.env.uri)
        self.humans = [self.run(humans.add(self.core, f"h{i}")) for i in range(HUMANS)]
        self.members: dict[str, dict[int, str]] = {"ta": {0: "owner"}, "tb": {1: "owner"}}
        self.run(teams.create(self.core, self.humans[0], "ta"))
        self.run(teams.create(self.core, self.humans[1], "tb"))
        self.run(teams.add_member(self.core, self.humans[0], "ta", "h1", "member"))
        self.run(teams.add_member(self.core, self.humans[1], "tb", "h2", "admin"))
        self.members["ta"][1] = "member"
        self.members["tb"][2] = "admin"
        self.eps: list[dict] = []
        self.grants: set[tuple[int, str]] = set()
        self.todo_of: dict[str, tuple[str, object]] = {}
        self.claims: dict[str, int] = {}
        for h in range(HUMANS):
            self._vend(h, [t for t in TEAMS if h in self.members[t]])
        for h in (1, 2):  # a member's vend waits for a grant: the owner grants it
            for team in TEAMS:
                ep = next(e for e in self.eps if e["human"] == h)
                if h in self.members[team] and (ep["i"], LABEL[team]) not in self.grants:
                    owner = next(o for o, r in self.members[team].items() if r == "owner")
                    self.run(teams.grant(self.core, self.humans[owner], team, LABEL[team], ep["slug"]))
                    self.grants.add((ep["i"], LABEL[team]))
        # Admission from the start (the `policy` rule changes it): one lease at a time on tb's queue, five
        # claims an hour on ta's, two on h0's endpoint's own queue.
        self.run(admission.set_policy(self.core, self.humans[1], LABEL["tb"], max_in_flight=1))
        self.run(admission.set_policy(self.core, self.humans[0], LABEL["ta"], max_claims_per_window=5))
        self.run(admission.set_policy(self.core, self.humans[0], OWN, endpoint=self.eps[0]["slug"],
                                      max_claims_per_window=2))
        return multiple(*self.seed())

    def seed(self) -> list[str]:
        """Work on every queue from the start: two todos on each team queue, one on each own queue."""
        ids = []
        for team in TEAMS:
            owner = next(h for h, r in self.members[team].items() if r == "owner")
            for _ in range(2):
                todo, _ = self.run(producer.push_team(self.core, self.humans[owner], LABEL[team], title="seed",
                                                      max_attempts=3))
                self.todo_of[todo["id"]] = ("team", team)
                ids.append(todo["id"])
        for ep in self.eps:
            todo, _ = self.run(producer.push(self.core, self.humans[ep["human"]], ep["slug"], title="seed",
                                             queue=OWN, max_attempts=3))
            self.todo_of[todo["id"]] = ("own", ep["i"])
            ids.append(todo["id"])
        return ids

    def _vend(self, h: int, team_list: list[str]) -> None:
        labels = [LABEL[t] for t in team_list]
        out, credential = self.run(endpoints.vend(self.core, self.humans[h], agent="bot", queues=[OWN, *labels]))
        i = len(self.eps)
        row = self.run(endpoints.resolve_credential(self.core, credential))
        self.eps.append({"i": i, "human": h, "slug": out["slug"], "credential": credential, "id": row["id"],
                         "revoked": False, "caller": endpoints.caller_from_row(row)})
        waiting = set(out.get("awaiting_grant", []))
        for label in labels:
            managed = self.role(h, TEAM_OF[label]) in ("owner", "admin")
            assert (label in waiting) == (not managed), (label, out)
            if managed:
                self.grants.add((i, label))

    # ------------------------------------------------------------------------------ membership

    @rule(actor=HUMAN, team=TEAM, who=HUMAN, role=st.sampled_from(ROLES))
    def add_member(self, actor, team, who, role):
        out, err = self.attempt(lambda: teams.add_member(self.core, self.humans[actor], team, f"h{who}", role))
        mine = self.role(actor, team)
        if mine is None:
            return self.refused(err, "not_found")
        if mine == "member" or (role == "owner" and mine != "owner"):
            return self.refused(err, "forbidden")
        if who in self.members[team]:
            return self.refused(err, "conflict")
        assert err is None, err
        self.ok("add_member")
        self.members[team][who] = role

    @rule(actor=HUMAN, team=TEAM, who=HUMAN, role=st.sampled_from(ROLES))
    def set_role(self, actor, team, who, role):
        out, err = self.attempt(lambda: teams.set_role(self.core, self.humans[actor], team, f"h{who}", role))
        mine, theirs = self.role(actor, team), self.role(who, team)
        owners = sum(r == "owner" for r in self.members[team].values())
        if mine is None or (mine != "member" and theirs is None):
            return self.refused(err, "not_found")
        if mine == "member" or ("owner" in (role, theirs) and mine != "owner"):
            return self.refused(err, "forbidden")
        if theirs == "owner" and role != "owner" and owners <= 1:
            return self.refused(err, "conflict")
        assert err is None, err
        self.ok("set_role")
        self.members[team][who] = role

    def _hand_back_expected(self, team: str, h: int) -> dict[str, dict]:
        """The team todos held by human h's endpoints or by h, before h leaves the team."""
        rows = self.sql("""SELECT t.id, t.attempt, t.attempts_total FROM todos t
                            WHERE t.team_id = (SELECT id FROM teams WHERE slug = %s)
                              AND t.state IN ('claimed', 'input-required')
                              AND (t.claimed_by_endpoint_id = ANY(%s) OR t.owner = %s)""",
                        (team, [e["id"] for e in self.eps if e["human"] == h], f"op:{self.humans[h].human_id}"))
        return {r["id"]: r for r in rows}

    def _check_handed_back(self, held: dict[str, dict], outcome: str) -> None:
        for t, before in held.items():
            r = self.row(t)
            assert r["state"] == "pending" and r["owner"] is None and r["claimed_by_endpoint_id"] is None, r
            assert r["attempt"] == max(before["attempt"] - 1, 0) and r["attempts_total"] == before["attempts_total"]
            a = self.sql("SELECT outcome, disposition FROM todo_attempts WHERE todo_id = %s AND seq = %s",
                         (t, before["attempts_total"]))[0]
            assert a == {"outcome": outcome, "disposition": "requeued"}, (t, a)
            self.counts[f"handed back {outcome}"] += 1

    def _left(self, team: str, h: int) -> None:
        del self.members[team][h]
        self.grants -= {(e["i"], LABEL[team]) for e in self.eps if e["human"] == h}

    @rule(actor=HUMAN, team=TEAM, who=HUMAN)
    def remove_member(self, actor, team, who):
        held = self._hand_back_expected(team, who)
        out, err = self.attempt(lambda: teams.remove_member(self.core, self.humans[actor], team, f"h{who}"))
        mine, theirs = self.role(actor, team), self.role(who, team)
        owners = sum(r == "owner" for r in self.members[team].values())
        if mine is None:
            return self.refused(err, "not_found")
        if mine == "member" or (theirs == "owner" and mine != "owner"):
            return self.refused(err, "forbidden")
        if theirs is None:
            return self.refused(err, "not_found")
        if theirs == "owner" and owners <= 1:
            return self.refused(err, "conflict")
        assert err is None, err
        self.ok("remove_member")
        assert out["leases_handed_back"] == len(held), (out, held)
        self._left(team, who)
        self._check_handed_back(held, "released")

    @rule(h=HUMAN, team=TEAM)
    def leave(self, h, team):
        held = self._hand_back_expected(team, h)
        out, err = self.attempt(lambda: teams.leave(self.core, self.humans[h], team))
        mine = self.role(h, team)
        owners = sum(r == "owner" for r in self.members[team].values())
        if mine is None:
            return self.refused(err, "not_found")
        if mine == "owner" and owners <= 1:
            return self.refused(err, "conflict")
        assert err is None, err
        self.ok("leave")
        assert out["leases_handed_back"] == len(held)
        self._left(team, h)
        self._check_handed_back(held, "released")

    # ------------------------------------------------------------------------ endpoints, grants

    @precondition(lambda self: len(self.eps) < MAX_ENDPOINTS)
    @rule(h=HUMAN, ta=st.booleans(), tb=st.booleans())
    def vend(self, h, ta, tb):
        wanted = [t for t, on in (("ta", ta), ("tb", tb)) if on]
        if any(h not in self.members[t] for t in wanted):
            before = self.sql("SELECT count(*) AS n FROM endpoints")[0]["n"]
            _, err = self.attempt(lambda: endpoints.vend(self.core, self.humans[h], agent="bot",
                                                         queues=[OWN, *(LABEL[t] for t in wanted)]))
            self.refused(err, "not_found")
            assert self.sql("SELECT count(*) AS n FROM endpoints")[0]["n"] == before  # nothing vended
            return
        self._vend(h, wanted)
        self.ok("vend")

    @rule(actor=HUMAN, team=TEAM, e=EP)
    def grant(self, actor, team, e):
        ep = self.ep(e)
        out, err = self.attempt(lambda: teams.grant(self.core, self.humans[actor], team, LABEL[team], ep["slug"]))
        mine = self.role(actor, team)
        if mine is None:
            return self.refused(err, "not_found")
        if mine == "member":
            return self.refused(err, "forbidden")
        if ep["human"] not in self.members[team]:
            return self.refused(err, "not_found")
        if ep["revoked"]:
            return self.refused(err, "invalid")
        assert err is None, err
        self.ok("grant")
        self.grants.add((ep["i"], LABEL[team]))
        assert LABEL[team] in self.caller(e).queues

    @rule(actor=HUMAN, team=TEAM, e=EP)
    def ungrant(self, actor, team, e):
        ep = self.ep(e)
        label = LABEL[team]
        held = {r["id"]: r for r in self.sql(
            "SELECT id, attempt, attempts_total FROM todos WHERE claimed_by_endpoint_id = %s AND queue = %s"
            " AND state IN ('claimed', 'input-required')", (ep["id"], label))}
        out, err = self.attempt(lambda: teams.ungrant(self.core, self.humans[actor], team, label, ep["slug"]))
        mine = self.role(actor, team)
        if mine is None:
            return self.refused(err, "not_found")
        if mine == "member":
            return self.refused(err, "forbidden")
        if (ep["i"], label) not in self.grants:
            return self.refused(err, "not_found")
        assert err is None, err
        self.ok("ungrant")
        self.grants.discard((ep["i"], label))
        assert out["leases_handed_back"] == len(held)
        self._check_handed_back(held, "released")

    @precondition(lambda self: self.counts["steps"] >= 20 and self.counts["ok:revoke"] < 2)
    @rule(e=EP, holder=st.sampled_from([True, True, False]))
    def revoke(self, e, holder=True):
        """Revoke an endpoint (mostly one holding a team lease)."""
        holders = [x for x in self.eps if not x["revoked"] and self.sql(
            "SELECT 1 FROM todos WHERE claimed_by_endpoint_id = %s AND team_id IS NOT NULL"
            " AND state IN ('claimed', 'input-required')", (x["id"],))]
        ep = holders[e % len(holders)] if holder and holders else self.ep(e)
        if ep["revoked"]:
            return
        held = {r["id"]: r for r in self.sql(
            "SELECT id, attempt, attempts_total FROM todos WHERE claimed_by_endpoint_id = %s AND team_id IS NOT NULL"
            " AND state IN ('claimed', 'input-required')", (ep["id"],))}
        out = self.run(endpoints.revoke(self.core, self.humans[ep["human"]], ep["slug"]))
        assert out["state"] == "revoked"
        ep["revoked"] = True
        self.ok("revoke")
        self._check_handed_back(held, "revoked")
        live = self.sql("""SELECT count(*) AS n FROM todos WHERE endpoint_id = %s
                            AND (state IN ('pending', 'claimed', 'input-required')
                                 OR (state = 'failed' AND next_retry_at IS NOT NULL))""", (ep["id"],))
        assert live[0]["n"] == 0  # its own todos are dead letters (SPEC-0034)

    # ------------------------------------------------------------------------------------ pushes

    @rule(target=todos, h=HUMAN, team=TEAM, max_attempts=st.integers(1, 3),
          member=st.sampled_from([True, True, True, False]))
    def push_team(self, h, team, max_attempts, member):
        if member and self.members[team]:  # mostly a member pushes
            h = sorted(self.members[team])[h % len(self.members[team])]
        out, err = self.attempt(lambda: producer.push_team(self.core, self.humans[h], LABEL[team], title="t",
                                                           max_attempts=max_attempts))
        if h not in self.members[team]:
            self.refused(err, "not_found")
            return multiple()
        assert err is None, err
        todo, created = out
        assert created and todo["state"] == "pending" and todo["queue"] == LABEL[team]
        self.ok("push_team")
        self.todo_of[todo["id"]] = ("team", team)
        return todo["id"]

    @rule(target=todos, e=EP, max_attempts=st.integers(1, 3))
    def push_own(self, e, max_attempts):
        ep = self.ep(e)
        out, err = self.attempt(lambda: producer.push(self.core, self.humans[ep["human"]], ep["slug"], title="t",
                                                      queue=OWN, max_attempts=max_attempts))
        if ep["revoked"]:
            self.refused(err, "invalid")
            return multiple()
        assert err is None, err
        todo, created = out
        assert created and todo["queue"] == OWN
        self.ok("push_own")
        self.todo_of[todo["id"]] = ("own", ep["i"])
        return todo["id"]

    # ------------------------------------------------------------------------------------ claims

    def _claimed(self, t: str, got, actor: tuple[str, int]) -> None:
        assert got.todo["state"] == "claimed" and got.attempt_seq == got.attempts_total
        self.claims[t] = self.claims.get(t, 0) + 1
        assert got.attempts_total == self.claims[t]
        r = self.row(t)
        if actor[0] == "e":
            assert r["claimed_by_endpoint_id"] == self.ep(actor[1])["id"]
        else:
            assert r["claimed_by_endpoint_id"] is None and r["owner"] == f"op:{self.humans[actor[1]].human_id}"

    @rule(e=EP, pick=st.integers(0, 3))
    def claim_next(self, e, pick=0, queue=None):
        ep = self.ep(e)
        caller = self.caller(e)
        queues = list(caller.queues)
        if queue is None and pick:
            queue = queues[pick % len(queues)]
        asked = queues if queue is None else [queue]
        reached = [q for q in asked if q == OWN or (not ep["revoked"] and self.ep_reaches_label(ep, q))]
        idents = {q: (("own", ep["i"]) if q == OWN else ("team", TEAM_OF[q])) for q in reached}
        verdicts = {q: self.verdict(i) for q, i in idents.items()}
        ready = {q: self.claimable(i) for q, i in idents.items()}
        hour = self.hour()
        out, err = self.attempt(lambda: todos.take_next(self.core, caller, queue=queue, lease_ttl_seconds=TTL,
                                                        claimant=ep["slug"]))
        if ep["revoked"]:  # refused by the statements; or nothing reached at all to refuse on
            if err is None:
                assert out == ([], []), out
                return
            return self.refused(err, "unauthorized")
        assert err is None, err
        claimed, deferred = out
        if self.hour() != hour:
            return  # a new window began during the step: the verdicts above may have changed
        open_ = [q for q in reached if (verdicts[q] is None or verdicts[q]["reason"] is None) and ready[q]]
        if claimed:
            (got,) = claimed
            t = got.todo["id"]
            assert got.todo["queue"] in open_, (got.todo["queue"], verdicts, ready)
            assert deferred == []
            self.ok("claim_next")
            self._claimed(t, got, ("e", e))
            self.last_claimed = t
            v = verdicts[got.todo["queue"]]
            assert (got.admission is not None) == (v is not None)
            return
        assert open_ == [], (open_, verdicts, ready)
        expected = sorted((q, v["reason"], v["pending"]) for q, v in verdicts.items() if v and v["reason"])
        # Only the queues it reaches: a team queue it lost tells it nothing, not even its backlog.
        assert sorted((d["queue"], d["reason"], d["pending"]) for d in deferred) == expected, (deferred, expected)
        self.counts["claim_next empty"] += 1
        for d in deferred:
            self.counts[f"deferred:{d['reason']}"] += 1

    @rule(target=todos, team=TEAM, n=st.integers(0, 20),
          then=st.sampled_from(["complete", "fail", "release", "keep", "heartbeat", "request_input", "lapse"]))
    def drain(self, team, n, then):
        """A worker's loop on a team queue: one of the endpoints that reach it claims the next todo there
        (as claim_next above, with the model's expectations) and acts on it at once."""
        label = LABEL[team]
        workers = [e["i"] for e in self.eps if self.ep_reaches_label(e, label)]
        if not workers:
            return multiple()
        e = workers[n % len(workers)]
        before = self.counts["ok:claim_next"]
        self.claim_next(e, queue=label)
        if self.counts["ok:claim_next"] == before:
            return multiple()
        t = self.last_claimed
        actor = ("holder", 0)
        if then == "complete":
            self.complete(t, actor)
        elif then == "fail":
            self.fail(t, actor, retry=n % 2 == 0)
        elif then == "release":
            self.release(t, actor)
        elif then == "heartbeat":
            self.heartbeat(t, actor)
        elif then == "request_input":
            self.request_input(t, actor)
        elif then == "lapse":
            self.lapse_lease(t)
        return t

    @rule(team=TEAM, n=st.integers(0, 20))
    def hand_back_drill(self, team, n):
        """A worker holding a lease on the team queue loses the queue: its human is removed by an owner,
        or leaves, or a manager takes the grant back; the lease is handed back (`released`). The three
        ways take turns within an example, removal first, so every example that drills meets a removal
        (a drawn way could miss it). The turn reads this example's own counts only: a rule that read
        anything carried over from earlier examples would replay differently, and Hypothesis rejects
        that as inconsistent data generation."""
        how = ("remove", "leave", "ungrant")[self.counts["hand-back drills"] % 3]
        label = LABEL[team]
        owners = sorted(h for h, r in self.members[team].items() if r == "owner")
        workers = [e["i"] for e in self.eps if self.ep_reaches_label(e, label)
                   and not (how != "ungrant" and owners == [e["human"]])]  # the last owner stays
        if not workers or not owners:
            return
        e = workers[n % len(workers)]
        before = self.counts["ok:claim_next"]
        self.claim_next(e, queue=label)
        if self.counts["ok:claim_next"] == before:
            return
        self.counts["hand-back drills"] += 1
        human = self.eps[e]["human"]
        if how == "remove":
            self.remove_member(next(o for o in owners if o != human) if human in owners else owners[0], team, human)
        elif how == "leave":
            self.leave(human, team)
        else:
            self.ungrant(owners[0], team, e)
        self.ok(f"hand-back drill {how}")

    @rule(team=TEAM, n=st.integers(0, 20))
    def deferral_drill(self, team, n):
        """A manager closes the team queue in each of the three ways in turn (pauses it, spends its
        budget down to what was used, caps its leases at those in flight): each time a worker's
        claim_next there is deferred, a claim of one of its pending todos by id is the error
        `deferred`, each with the reason the rows give; then the policy is put back as it was (or
        cleared). Every drill tries all three, so a run that drills at all meets each reason it can."""
        for why in ("paused", "window_exhausted", "in_flight_full"):
            self._drill(team, n, why)

    def _drill(self, team, n, why):
        label = LABEL[team]
        managers = sorted(h for h, r in self.members[team].items() if r != "member")
        workers = [e["i"] for e in self.eps if self.ep_reaches_label(e, label)]
        if not managers or not workers:
            return
        manager = self.humans[managers[n % len(managers)]]
        before = self.sql("SELECT p.* FROM admission_policies p JOIN teams tm ON tm.id = p.team_id"
                          " WHERE tm.slug = %s", (team,))
        v = self.verdict(("team", team))
        used = self.sql("SELECT count(*) AS n FROM todos t JOIN todo_attempts a ON a.todo_id = t.id"
                        " JOIN teams tm ON tm.id = t.team_id WHERE tm.slug = %s"
                        " AND a.claimed_at >= date_trunc('hour', now())", (team,))[0]["n"]
        flying = self.sql("SELECT count(*) AS n FROM todos t JOIN teams tm ON tm.id = t.team_id WHERE tm.slug = %s"
                          " AND (t.state = 'input-required' OR (t.state = 'claimed' AND t.lease_expires_at >= now()))",
                          (team,))[0]["n"]
        limits = {"max_in_flight": before[0]["max_in_flight"] if before else None,
                  "max_claims_per_window": before[0]["max_claims_per_window"] if before else None}
        if why == "paused":
            self.run(admission.set_paused(self.core, manager, label, True))
        elif why == "window_exhausted" and v is not None and used:  # the budget counts from the policy's start
            self.run(admission.set_policy(self.core, manager, label, max_in_flight=limits["max_in_flight"],
                                          max_claims_per_window=self.verdict_used(team)))
        elif why == "in_flight_full" and flying:
            self.run(admission.set_policy(self.core, manager, label, max_in_flight=flying,
                                          max_claims_per_window=limits["max_claims_per_window"]))
        else:
            return
        self.claim_next(workers[n % len(workers)], queue=label)
        pending = [t for t, o in self.todo_of.items() if o == ("team", team) and self.row(t)["state"] == "pending"]
        if pending:
            self.claim(pending[n % len(pending)], ("reacher", n))
        if not before:
            self.run(admission.clear(self.core, manager, label))
        elif why == "paused":
            self.run(admission.set_paused(self.core, manager, label, before[0]["paused"]))
        else:
            self.run(admission.set_policy(self.core, manager, label, **limits))
        self.ok(f"drill {why}")

    def verdict_used(self, team: str) -> int:
        """The units the team queue's policy has charged in this window (what `verdict` counts)."""
        rows = self.sql("""SELECT count(*) AS n FROM admission_policies p JOIN teams tm ON tm.id = p.team_id
                             JOIN todos t ON t.team_id = p.team_id AND t.queue = p.queue
                             JOIN todo_attempts a ON a.todo_id = t.id
                            WHERE tm.slug = %s AND a.claimed_at >= greatest(date_trunc('hour', now()), p.created_at)""",
                        (team,))
        return rows[0]["n"]

    @rule(t=todos, actor=ACTOR)
    def claim(self, t, actor):
        actor = self.who(t, actor)
        reach = self.reaches(actor, t)
        v = self.verdict(self.identity_of(t))
        claimable = self.is_claimable(t)
        hour = self.hour()
        out, err = self.attempt(lambda: todos.claim(self.core, self.make_caller(actor), t, lease_ttl_seconds=TTL))
        if not reach:
            revoked = actor[0] == "e" and self.ep(actor[1])["revoked"]
            return self.refused(err, *(("unauthorized", "not_found", "conflict") if revoked else ("not_found",)))
        if self.hour() != hour:
            return
        if v is not None and v["reason"] is not None:
            self.refused(err, "deferred")
            assert err.reason == v["reason"] and err.queue == self.row(t)["queue"]
            self.counts[f"deferred:{err.reason}"] += 1
            return
        if not claimable:
            return self.refused(err, "conflict")
        assert err is None, err
        self.ok("claim")
        self._claimed(t, out, actor)
        assert (out.admission is not None) == (v is not None)

    # ----------------------------------------------------------------------------- lease verbs

    def _lease(self, t, actor, verb: str, make, *, lapsed_ok: bool = True):
        """A lease verb: not_found out of reach; in reach it succeeds exactly when the caller holds
        the claimed lease (an endpoint: its own claim; a member or owner: any), else conflict."""
        actor = self.who(t, actor)
        before = self.row(t)
        reach = self.reaches(actor, t)
        if actor[0] == "e":
            holder = before["claimed_by_endpoint_id"] == self.ep(actor[1])["id"] and \
                before["owner"] == f"agent:{self.ep(actor[1])['caller'].agent_id}"
        else:
            holder = True
        lapsed = before["lease_expires_at"] is not None and \
            self.sql("SELECT %s::timestamptz < now() AS l", (before["lease_expires_at"],))[0]["l"]
        capped = bool(self.sql("""SELECT 1 FROM admission_policies p WHERE p.queue = %s
                                   AND p.max_in_flight IS NOT NULL AND (p.endpoint_id = %s OR p.team_id = %s)""",
                                (before["queue"], before["endpoint_id"], before["team_id"])))
        out, err = self.attempt(lambda: make(self.make_caller(actor)))
        if not reach:
            revoked = actor[0] == "e" and self.ep(actor[1])["revoked"]
            return self.refused(err, *(("unauthorized", "not_found", "conflict") if revoked else ("not_found",)))
        should = before["state"] == "claimed" and holder and (lapsed_ok or not (lapsed and capped))
        if not should:
            return self.refused(err, "conflict")
        assert err is None, (verb, err)
        self.ok(verb)
        return out

    @rule(t=todos, actor=ACTOR)
    def complete(self, t, actor):
        out = self._lease(t, actor, "complete", lambda c: todos.complete(self.core, c, t, summary="done"))
        if out is not None:
            assert out["state"] == "done"

    @rule(t=todos, actor=ACTOR, retry=st.booleans())
    def fail(self, t, actor, retry):
        out = self._lease(t, actor, "fail", lambda c: todos.fail(self.core, c, t, retry=retry, summary="red"))
        if out is not None:
            assert out["state"] == "failed"
            assert out["dead_letter"] == (not retry or out["attempt"] >= out["max_attempts"])

    @rule(t=todos, actor=ACTOR)
    def release(self, t, actor):
        out = self._lease(t, actor, "release", lambda c: todos.release(self.core, c, t, summary="later"))
        if out is not None:
            assert out["state"] == "pending"

    @rule(t=todos, actor=ACTOR)
    def heartbeat(self, t, actor):
        # A lapsed lease on a queue with an in-flight cap is not revived: its slot may be another's.
        out = self._lease(t, actor, "heartbeat", lambda c: todos.heartbeat(self.core, c, t, lease_ttl_seconds=TTL),
                          lapsed_ok=False)
        if out is not None:
            assert out["state"] == "claimed"

    @rule(t=todos, actor=ACTOR)
    def request_input(self, t, actor):
        out = self._lease(t, actor, "request_input",
                          lambda c: todos.request_input(self.core, c, t, question="which?"), lapsed_ok=False)
        if out is not None:
            assert out["state"] == "input-required"

    def _human_verb(self, t, draw, verb, make, allowed_states) -> dict | None:
        _, h = self.who(t, ("member" if draw[0] != "any_human" else "any_human", draw[1]))
        before = self.row(t)
        out, err = self.attempt(lambda: make(self.humans[h]))
        if not self.reaches(("h", h), t):
            return self.refused(err, "not_found")
        if not allowed_states(before):
            return self.refused(err, "conflict")
        assert err is None, (verb, err)
        self.ok(verb)
        return out

    @rule(t=todos, h=ACTOR)
    def provide_input(self, t, h):
        out = self._human_verb(t, h, "provide_input",
                               lambda c: todos.provide_input(self.core, c, t, payload={"a": 1}, lease_ttl_seconds=TTL),
                               lambda r: r["state"] == "input-required")
        if out is not None:
            assert out["state"] == "claimed"

    @rule(t=todos, h=ACTOR)
    def cancel(self, t, h):
        out = self._human_verb(t, h, "cancel", lambda c: todos.cancel(self.core, c, t),
                               lambda r: r["state"] in ("pending", "claimed", "input-required"))
        if out is not None:
            assert out["state"] == "canceled"

    @rule(t=todos, h=ACTOR)
    def manual_retry(self, t, h):
        out = self._human_verb(t, h, "retry", lambda c: todos.retry(self.core, c, t), lambda r: r["state"] == "failed")
        if out is not None:
            assert out["state"] == "pending" and out["attempt"] == 0

    # ------------------------------------------------------------------------------------- reads

    @rule(t=todos, actor=ACTOR)
    def get(self, t, actor):
        actor = self.who(t, actor)
        caller = self.make_caller(actor)
        out, err = self.attempt(lambda: todos.get(self.core, caller, t))
        if self.reaches(actor, t):
            assert err is None, err
            self.ok("get")
            assert out["id"] == t
            return
        if actor[0] == "e" and self.ep(actor[1])["revoked"]:
            return self.refused(err, "unauthorized")
        self.refused(err, "not_found")
        _, unknown = self.attempt(lambda: todos.get(self.core, caller, f"td_{uuid.uuid4()}"))
        assert err.to_dict() == unknown.to_dict()  # byte-identical to an id never minted (REQ-10)

    def _list_for_endpoint(self, e: int) -> None:
        ep = self.eps[e]
        caller = self.caller(e)
        out, err = self.attempt(lambda: todos.list_for_endpoint(self.core, caller, limit=200))
        if ep["revoked"]:  # a stale caller is refused by the statement itself
            return self.refused(err, "unauthorized")
        assert err is None, err
        expected = {t for t in self.todo_of if self.reaches(("e", e), t)}
        assert {x["id"] for x in out} == expected, ({x["id"] for x in out} ^ expected)
        self.ok("list_for_endpoint")

    def _admission_status(self, e: int) -> None:
        ep = self.eps[e]
        if ep["revoked"]:
            return
        out = self.run(admission.status_for_endpoint(self.core, self.caller(e)))
        for item in out:
            assert item["queue"] == OWN or self.ep_reaches_label(ep, item["queue"]), item
        self.ok("admission_status")

    def _show_team(self, h: int, team: str) -> None:
        out, err = self.attempt(lambda: teams.show(self.core, self.humans[h], team))
        if self.role(h, team) is None:
            return self.refused(err, "not_found")
        assert err is None, err
        assert {m["name"]: m["role"] for m in out["members"]} == {f"h{x}": r for x, r in self.members[team].items()}
        reaching = {g["endpoint"] for g in out["grants"] if g["reaches"]}
        assert reaching == {e["slug"] for e in self.eps if self.ep_reaches_label(e, LABEL[team])}
        self.ok("show_team")

    @precondition(lambda self: self.counts["steps"] % 4 == 0)  # it reads everything: not every step
    @rule()
    def reads(self):
        """What every caller reads: exactly the todos in its reach, policies and teams of its own."""
        for e in range(len(self.eps)):
            self._list_for_endpoint(e)
            self._admission_status(e)
        for h in range(HUMANS):
            out = self.run(todos.list_for_human(self.core, self.humans[h], limit=500))
            assert {x["id"] for x in out} == {t for t in self.todo_of if self.reaches(("h", h), t)}
            self.ok("list_for_human")
            for team in TEAMS:
                self._show_team(h, team)
                if self.role(h, team) != "owner":  # only an owner deletes a team (owners are not asked)
                    _, err = self.attempt(lambda h=h, team=team: teams.delete(self.core, self.humans[h], team))
                    self.refused(err, "not_found" if self.role(h, team) is None else "forbidden")

    # ---------------------------------------------------------------------------------- policies

    def _policy_target(self, team: str | None, e: int) -> tuple[str, dict]:
        if team is not None:
            return LABEL[team], {}
        return OWN, {"endpoint": self.ep(e)["slug"]}

    def _may_manage(self, actor: int, team: str | None, e: int) -> str | None:
        """The refusal a human must get managing this queue identity's policy (None: allowed)."""
        if team is None:
            return None if self.ep(e)["human"] == actor else "not_found"
        mine = self.role(actor, team)
        return "not_found" if mine is None else "forbidden" if mine == "member" else None

    @rule(team=st.one_of(TEAM, st.none()), who=st.sampled_from(["manager", "manager", "manager", "anyone"]),
          n=st.integers(0, 20), e=EP, action=st.sampled_from(["set", "set", "pause", "resume", "clear"]),
          max_in_flight=st.sampled_from([1, 2, None, 0, 3]), max_claims=st.sampled_from([None, 3, 1, 0, 10]))
    def policy(self, team, who, n, e, action, max_in_flight, max_claims):
        """Set, pause, resume or clear the policy of a team queue (mostly by one of its managers) or of
        an endpoint's own queue (mostly by its human)."""
        if who == "anyone":
            actor = n % HUMANS
        elif team is not None:
            managers = sorted(h for h, r in self.members[team].items() if r != "member")
            actor = managers[n % len(managers)] if managers else n % HUMANS
        else:
            actor = self.ep(e)["human"]
        queue, kw = self._policy_target(team, e)
        ident = ("team", team) if team is not None else ("own", self.ep(e)["i"])
        had = self.verdict(ident) is not None
        human = self.humans[actor]
        if action == "set":
            out, err = self.attempt(lambda: admission.set_policy(self.core, human, queue, **kw,
                                                                 max_in_flight=max_in_flight,
                                                                 max_claims_per_window=max_claims))
        elif action == "clear":
            out, err = self.attempt(lambda: admission.clear(self.core, human, queue, **kw))
        else:
            out, err = self.attempt(lambda: admission.set_paused(self.core, human, queue, action == "pause", **kw))
        refusal = self._may_manage(actor, team, e) or (None if had or action != "clear" else "not_found")
        if refusal:
            return self.refused(err, refusal)
        assert err is None, err
        if action == "set":
            assert out["max_in_flight"] == max_in_flight and out["max_claims_per_window"] == max_claims
        elif action != "clear":
            assert out["paused"] is (action == "pause") and (out["status"] == "paused") >= (action == "pause")
        self.ok(f"policy {action}")

    # ------------------------------------------------------------------------------------- time

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

    @precondition(lambda self: self.counts["steps"] % 7 == 6)
    @rule()
    def sweep(self):
        self.run(sweeps.sweep_once(self.core))

    # --------------------------------------------------------------------------------- invariant

    @invariant()
    def database_is_consistent(self):
        self.counts["steps"] += 1

        async def go():
            async with self.core.pool.connection() as conn:
                return await invariants.check(conn)
        assert self.run(go()) == []
        if self.todo_of:  # only committed claims open attempts (a hand-back opens none)
            rows = self.sql("SELECT id, attempts_total FROM todos")
            assert {r["id"]: r["attempts_total"] for r in rows} == {t: self.claims.get(t, 0) for t in self.todo_of}

    def teardown(self) -> None:
        self.env.totals.update(self.counts)
        for row in self.sql("SELECT outcome, count(*) AS n FROM todo_attempts GROUP BY outcome"):
            self.env.totals[f"attempts {row['outcome']}"] += row["n"]


def test_team_state_machine(pg_server):
    uri = create_database(pg_server)
    loop = asyncio.new_event_loop()
    env = Env()
    env.loop, env.uri, env.totals = loop, uri, collections.Counter()
    cm = core_for(uri)
    env.core = loop.run_until_complete(cm.__aenter__())
    TeamMachine.env = env

    def missing() -> list[str]:
        """What the run is about and has not reached yet: claims in and out of reach, hand-backs,
        deferrals, roles."""
        totals = env.totals
        gaps = [] if totals["ok"] > 200 and totals["refused"] > 100 else ["ok > 200 and refused > 100"]
        return gaps + [key for key in COVERED if totals[key] == 0]

    try:
        gaps = explore_until_covered(lambda: run_state_machine_as_test(TeamMachine, settings=settings(
            max_examples=40, stateful_step_count=60, deadline=None, phases=PHASES,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])), missing)
    finally:
        loop.run_until_complete(cm.__aexit__(None, None, None))
        loop.close()
    print("team state machine totals:", dict(sorted(env.totals.items())))
    assert gaps == []
