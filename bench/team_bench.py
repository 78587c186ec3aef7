"""Team queue benchmark (issue 13): claim_next + complete cycles/s on a team queue drained by 20
endpoints of three members, with and without an admission policy, beside today's single-endpoint
figure, in one run.

Variants, interleaved in rounds (the order rotated each round) so that noise on the shared machine
hits all of them alike:

  single       `todos.claim_next` + `todos.complete` by one endpoint on its own queue (the store
               benchmark's `core` variant), every call its own statement (`combine_calls` off), as
               each team endpoint's calls are here: 20 endpoints are 20 keys, so they share nothing
  single-combined  the same with the workers' concurrent calls sharing statements (core/combine.py,
               docs/decisions.md D47), as one endpoint's workers in one process do by default
  team         the same calls on a team queue `team:bench/work`, by 20 endpoints of three members:
               worker i uses endpoint (i + k * workers) mod 20 on its k-th cycle, so every endpoint
               drains the queue whatever the worker count
  team-policy  the same on `team:bench/policed` (20 other endpoints) under an admission policy that
               never refuses (max_in_flight 1,000, 1,000,000 claims a day): every claim takes the
               policed path (a shard of the policy locked, judged, the todo claimed and charged, in
               one autocommit statement: migrations 0022 and 0023)

Each database first gets 20,000 done todos with one completed attempt each (as the store benchmark
does), and every queue a backlog of pending todos topped up before each measurement. CPU per cycle
of this process and of the embedded PostgreSQL is reported next to the rates.

With --levers eight measurement-only variants join the rotation, each on its own policed queue and
endpoints; the first six each turn back one step of the policed path (docs/decisions.md D38, D40),
the last two cut parts of it out to show what the rest costs:

  team-policy-unstriped  `team-policy` with the fast path on one shard (copies of migration 0021's
                       `admit` and 0023's `hold` whose policies have one stripe): its claimers take turns on that row,
                       as they did on the policy row before migration 0021
  team-policy-pipelined  `team-policy` with the fast path of migration 0021: BEGIN, `admit` (charging)
                       and the claim pipelined in one round trip, then COMMIT (two round trips, four
                       statements) instead of the one statement of migration 0022
  team-policy-locked   `team-policy` always on the locked path (verdicts, claim, charge; pipelined in
                       three round trips) instead of the fast path (`admit` charging in the statement
                       that judges, sent with BEGIN and the claim; two round trips)
  team-policy-nopipe   the locked path without pipeline mode: five round trips (BEGIN, verdicts, claim,
                       charge, COMMIT), the policy row locked across all of them
  team-policy-0017     the same with migration 0017's verdict function (created by the bench under
                       another name, reading the window's usage over the shards): the policed path
                       as it was before migration 0020
  team-policy-0022     `team-policy` with migration 0022's `hold` (created by the bench under another
                       name): the shard locked in a subtransaction, the verdict read by the nested
                       judge function, as before migration 0023
  team-policy-barelock measurement only (it judges nothing): `team-policy` with the hold replaced by
                       a bare lock of a free shard in the statement itself (no function, no counts),
                       still charged; what a design that only locks and charges could reach
  team-policy-selectonly measurement only: the policy read with no lock and no charge; what is left is
                       the policed path's statement shape (the verdict row) and its Python

With --team-levers four more, about the team path:

  team-nolock          `team` with the claim statements' share locks on the grant and endpoint rows
                       removed (what the locks that make removal and revocation safe cost)
  team-policy-generic  `team-policy` from a second pool whose sessions run with plan_cache_mode =
                       force_generic_plan (what planning the admission verdict's query on every call
                       costs: PostgreSQL picks a custom plan for it each time)
  team-parsecache      `team` with psycopg's statement parsing cache raised from 4,096 characters to
                       16,384 while it runs (the team claim statement is longer than 4,096, so psycopg
                       parses it again on every call)
  team-generic         `team` from the plan_cache_mode = force_generic_plan pool (whether PostgreSQL
                       plans the team claim statement afresh on every call)

With --explain the run ends with EXPLAIN ANALYZE (rolled back) of each variant's claim statement, and
of the admission verdict and the fast path's `admit`, on the loaded database, and with the number of
generic and custom plans each prepared statement got in ten executions.

    .venv/bin/python bench/team_bench.py                          # about 3 minutes on 2 cores
    .venv/bin/python bench/team_bench.py --rounds 2 --seconds 1.5 # a quick look
    .venv/bin/python bench/team_bench.py --workers 4 --explain
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import _queries as psycopg_queries

sys.path.insert(0, str(Path(__file__).resolve().parent))
import store_bench
from store_bench import (
    BULK_LOAD,
    HISTORY_LOAD,
    Databases,
    ServerCpu,
    Variant,
    _Overlay,
    fmt_table,
    loadavg,
    machine_info,
    measure,
    paired_ratio,
    postgres_server,
    server_facts,
    statements_swapped,
)
from switchboard.config import load_settings
from switchboard.core import admission, endpoints, humans, teams, todos
from switchboard.core.models import Core, EndpointCaller
from switchboard.core.queries import Q
from switchboard.db.pool import open_pool

OWN_QUEUE = "bench"
COMBINED_QUEUE = "bench-combined"  # the single endpoint's second queue, for `single-combined`
TEAM = "bench"
TEAM_QUEUE = f"team:{TEAM}/work"
POLICED_QUEUE = f"team:{TEAM}/policed"
NOLOCK_QUEUE = f"team:{TEAM}/nolock"
GENERIC_QUEUE = f"team:{TEAM}/generic"
PARSE_QUEUE = f"team:{TEAM}/parse"
FORCED_QUEUE = f"team:{TEAM}/forced"
ADMISSION_LEVERS = {"team-policy-unstriped": f"team:{TEAM}/unstriped", "team-policy-pipelined": f"team:{TEAM}/piped",
                    "team-policy-locked": f"team:{TEAM}/locked",
                    "team-policy-nopipe": f"team:{TEAM}/nopipe", "team-policy-0017": f"team:{TEAM}/old",
                    "team-policy-0022": f"team:{TEAM}/hold22", "team-policy-barelock": f"team:{TEAM}/barelock",
                    "team-policy-selectonly": f"team:{TEAM}/selectonly"}
LOCKED_LEVERS = ("team-policy-locked", "team-policy-nopipe", "team-policy-0017")
TEAM_LEVERS = {"team-nolock": NOLOCK_QUEUE, "team-policy-generic": GENERIC_QUEUE, "team-parsecache": PARSE_QUEUE,
               "team-generic": FORCED_QUEUE}
POLICED = {"team-policy", "team-policy-generic", *ADMISSION_LEVERS}
MIGRATIONS = Path(__file__).resolve().parent.parent / "src" / "switchboard" / "db" / "migrations"
LOCKS = " FOR SHARE OF g, e"
GROUP_LOCKS = "\nFOR SHARE OF g, e"
ENDPOINTS = 20
MEMBERS = 3
LEASE_TTL = 1800
LOAD_CHUNK = 50_000

TEAM_LOAD = """
INSERT INTO todos (id, team_id, queue, title, created_at, updated_at)
SELECT 'td_' || gen_random_uuid(), %(team_id)s, %(queue)s, 'bench ' || g,
       now() + g * interval '1 microsecond', now()
  FROM generate_series(1, %(n)s) AS g
"""


class AlwaysLocked(admission.PolicedEndpoints):
    """Routing hints that send every claim to the locked path (the team-policy-* levers)."""

    def __contains__(self, endpoint_id: object) -> bool:
        return True

    def refused(self, endpoint_id: object, queue: str) -> bool:
        return True

    def mark(self, endpoint_id: object, policed: bool) -> None:
        pass

    def note(self, endpoint_id: object, queue: str, refused: bool) -> None:
        pass


@contextlib.asynccontextmanager
async def _no_pipeline(self, *args, **kwargs):
    yield None


@contextlib.contextmanager
def pipeline_off():
    """psycopg's pipeline mode turned into a no-op: every statement waits for its answer."""
    before = psycopg.AsyncConnection.pipeline
    psycopg.AsyncConnection.pipeline = _no_pipeline
    try:
        yield
    finally:
        psycopg.AsyncConnection.pipeline = before


@contextlib.contextmanager
def verdicts_0017():
    """The locked path's `verdicts` calling migration 0017's function (bench_verdicts_0017)."""
    overlay = _Overlay("admission", {"verdicts": Q.admission.verdicts.replace(
        "switchboard_admission_verdicts(", "bench_verdicts_0017(")})
    admission.Q = overlay
    try:
        yield
    finally:
        admission.Q = Q


def old_verdicts_sql() -> str:
    """Migration 0017's verdict function, under the name bench_verdicts_0017, reading the window's
    usage over the shards (migration 0021 moved the charges there)."""
    text = (MIGRATIONS / "0017_admission.sql").read_text("utf-8")
    body = text[text.index("CREATE FUNCTION switchboard_admission_verdicts"):]
    old_used = "CASE WHEN p.charged_window = p.ws THEN p.charged ELSE 0 END AS used_now"
    if old_used not in body:
        raise SystemExit("bench: migration 0017's verdict no longer reads its charges as expected; update it")
    body = body.replace(old_used, "switchboard_admission_used(p.id, p.ws) AS used_now")
    return body.replace("FUNCTION switchboard_admission_verdicts", "OR REPLACE FUNCTION bench_verdicts_0017", 1)


def unstriped_admit_sql() -> str:
    """Migration 0021's `admit` and 0023's `hold` under the names bench_admit_unstriped and
    bench_hold_unstriped, with one stripe per policy: their fast path locks shard 0 (or waits for it),
    so the claimers of one queue take turns on one row."""
    out = ["CREATE OR REPLACE FUNCTION bench_one_stripe(m int, w int) RETURNS int LANGUAGE sql IMMUTABLE"
           " AS 'SELECT 1';"]
    for file, name, copy in (("0021_admission_shards.sql", "switchboard_admission_admit", "bench_admit_unstriped"),
                             ("0023_admission_hold_lean.sql", "switchboard_admission_hold", "bench_hold_unstriped")):
        text = (MIGRATIONS / file).read_text("utf-8")
        create = "CREATE OR REPLACE FUNCTION" if "CREATE OR REPLACE FUNCTION" in text else "CREATE FUNCTION"
        body = text[text.index(f"{create} {name}"):]
        if "switchboard_admission_stripes(" not in body:
            raise SystemExit(f"bench: {name} no longer reads its stripes as expected; update it")
        body = body.replace("switchboard_admission_stripes(", "bench_one_stripe(")
        out.append("CREATE OR REPLACE FUNCTION " + body[len(create) + 1:].replace(name, copy, 1))
    return "\n".join(out)


def hold_0022_sql() -> str:
    """Migration 0022's `hold` under the name bench_hold_0022: the fast check inside a subtransaction
    that falls back to the exact verdict in the same statement, the verdict read by the nested
    `switchboard_admission_judge`."""
    text = (MIGRATIONS / "0022_admission_hold.sql").read_text("utf-8")
    body = text[text.index("CREATE FUNCTION switchboard_admission_hold"):]
    return body.replace("FUNCTION switchboard_admission_hold", "OR REPLACE FUNCTION bench_hold_0022", 1)


@contextlib.contextmanager
def hold_0022():
    """The one-statement fast path calling migration 0022's `hold` (bench_hold_0022)."""
    overlay = _Overlay("admission", {
        name: getattr(Q.admission, name).replace("switchboard_admission_hold(", "bench_hold_0022(")
        for name in ("claim_next_team_admitted", "claim_next_own_admitted")})
    admission.Q = overlay
    try:
        yield
    finally:
        admission.Q = Q


HOLD_CALL = ("SELECT v.* FROM switchboard_admission_hold(%(endpoint_id)s::uuid, %(queue)s::text, 1) v"
             " WHERE switchboard_endpoint_live(%(endpoint_id)s::uuid)")
BARE_HOLD = (
    "SELECT s.policy_id, p.queue, 'admitted'::text AS verdict, p.max_in_flight, 0 AS in_flight,"
    " p.max_claims_per_window, 0 AS used, w.ws AS window_starts, switchboard_window_end(p.window_period,"
    " p.window_tz, w.ws) AS window_resets, NULL::int AS pending, NULL::timestamptz AS next_eligible_at,"
    " 1000 AS cap, s.shard FROM admission_policies p CROSS JOIN LATERAL (SELECT s.policy_id, s.shard"
    " FROM admission_shards s WHERE s.policy_id = p.id AND s.shard < 4 ORDER BY s.shard LIMIT 1"
    " FOR UPDATE SKIP LOCKED) s CROSS JOIN LATERAL (SELECT switchboard_window_start(p.window_period, p.window_tz,"
    " p.window_start_minute, p.window_weekday, now()) AS ws) w WHERE p.queue = %(queue)s"
    " AND (p.endpoint_id = %(endpoint_id)s::uuid OR p.team_id IS NOT NULL)"
    " AND switchboard_endpoint_live(%(endpoint_id)s::uuid)")


def _adm_swapped(adm: str, charge: bool):
    """The team fast path with its `adm` replaced by `adm`, and without its charge unless `charge`."""
    base = Q.admission.claim_next_team_admitted
    found = re.search(r", charge AS \(\nUPDATE admission_shards.*?\n\)\n", base, re.S)
    if HOLD_CALL not in base or found is None:
        raise SystemExit("bench: claim_next_team_admitted no longer calls the hold as expected; update it")
    sql = base.replace(HOLD_CALL, adm)
    if not charge:
        sql = sql.replace(found.group(0), ", charge AS (SELECT 1)\n")

    class File:  # Q.admission with this one statement swapped, built once (no per-call overlay cost)
        claim_next_team_admitted = sql

        def __getattr__(self, name: str) -> str:
            return getattr(Q.admission, name)

    class Catalogue:
        admission = File()

        def __getattr__(self, name: str):
            return getattr(Q, name)

    @contextlib.contextmanager
    def swap():
        # The swapped statement is longer than the 4,096 characters up to which psycopg caches a
        # statement's parsing; the real one is shorter, so the cache is raised while this runs.
        before = psycopg_queries.MAX_CACHED_STATEMENT_LENGTH
        psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = 16_384
        admission.Q = Catalogue()
        try:
            yield
        finally:
            admission.Q = Q
            psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = before
    return swap


bare_lock = _adm_swapped(BARE_HOLD, charge=True)
select_only = _adm_swapped(BARE_HOLD.replace(" FOR UPDATE SKIP LOCKED", ""), charge=False)


@contextlib.contextmanager
def admit_unstriped():
    """The fast path's `admit` and `hold` calling their one-stripe copies."""
    overlay = _Overlay("admission", {
        "admit": Q.admission.admit.replace("switchboard_admission_admit(", "bench_admit_unstriped("),
        **{name: getattr(Q.admission, name).replace("switchboard_admission_hold(", "bench_hold_unstriped(")
           for name in ("claim_next_team_admitted", "claim_next_own_admitted")}})
    admission.Q = overlay
    try:
        yield
    finally:
        admission.Q = Q


@contextlib.contextmanager
def admit_pipelined():
    """claim_next's fast path as migration 0021 ran it: BEGIN, `admit` (charging) and the claim in one
    pipeline, then COMMIT (todos._admit_and_claim), in place of the one statement of migration 0022."""

    async def pipelined(conn, queue: str, params: dict):
        sql, p, _ = todos._claim_statement([queue], params, None, False)
        return await todos._admit_and_claim(conn, queue, 1, params["endpoint_id"], params["endpoint_id"], sql, p,
                                            "claim_next")

    one = admission.claim_admitted
    admission.claim_admitted = pipelined
    try:
        yield
    finally:
        admission.claim_admitted = one


@dataclass
class Queue:
    name: str
    callers: list[EndpointCaller]
    load_sql: str
    load_params: dict
    pending: int = 0
    core: Core | None = None  # another core than the bench's (team-policy-generic)


@dataclass
class Bench:
    uri: str
    core: Core
    queues: dict[str, Queue]

    async def top_up(self, backlog: int) -> None:
        for q in self.queues.values():
            n = backlog - q.pending
            if n <= 0:
                continue
            async with self.core.pool.connection() as conn:
                for start in range(0, n, LOAD_CHUNK):
                    await conn.execute(q.load_sql, {**q.load_params, "n": min(LOAD_CHUNK, n - start)})
            q.pending += n


async def open_bench(uri: str, history: int, levers: bool = False, team_levers: bool = False) -> Bench:
    """One database: a human with one endpoint on its own queue; a team of three humans, 20 endpoints
    on the team queue and 20 on the policed team queue (vended by their humans, granted by the owner),
    and with `levers` / `team_levers` 20 more on each of the lever queues."""
    pool = await open_pool(uri, min_size=2, max_size=20)  # as the served app opens it (web/app.py)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    solo = await humans.add(core, "solo")
    _, credential = await endpoints.vend(core, solo, agent="bench", queues=[OWN_QUEUE, COMBINED_QUEUE])
    single = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential), "bench-session")
    people = [await humans.add(core, f"member-{i}") for i in range(MEMBERS)]
    await teams.create(core, people[0], TEAM)
    for i, person in enumerate(people[1:], start=1):
        await teams.add_member(core, people[0], TEAM, person.name, "admin" if i == 1 else "member")
    keys = {"team": TEAM_QUEUE, "team-policy": POLICED_QUEUE}
    if levers:
        keys.update(ADMISSION_LEVERS)
    if team_levers:
        keys.update(TEAM_LEVERS)
    labels = list(keys.values())
    callers: dict[str, list[EndpointCaller]] = {label: [] for label in labels}
    for label in labels:
        for n in range(ENDPOINTS):
            who = people[n % MEMBERS]
            ep, cred = await endpoints.vend(core, who, agent=f"fleet-{n // MEMBERS}", queues=[label])
            if ep.get("awaiting_grant"):
                await teams.grant(core, people[0], TEAM, label, ep["slug"])
            row = await endpoints.resolve_credential(core, cred)
            callers[label].append(endpoints.caller_from_row(row, f"fleet-{label[-4:]}-{n}"))
    for label in (label for key, label in keys.items() if key in POLICED):
        await admission.set_policy(core, people[0], label, max_in_flight=1000, max_claims_per_window=1_000_000,
                                   window_spec=admission.window("day"))
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT id FROM teams WHERE slug = %s", (TEAM,))
        team_id = (await cur.fetchone())["id"]
        await conn.execute(HISTORY_LOAD, {"endpoint_id": single.endpoint_id, "queue": "history",
                                          "owner": single.owner, "n": history})
    queues = {name: Queue(queue, [single], BULK_LOAD, {"endpoint_id": single.endpoint_id, "queue": queue})
              for name, queue in (("single", OWN_QUEUE), ("single-combined", COMBINED_QUEUE))}
    for key, label in keys.items():
        queues[key] = Queue(label, callers[label], TEAM_LOAD, {"team_id": team_id, "queue": label})
    if levers:
        locked = Core(pool=pool, settings=core.settings, policed=AlwaysLocked())
        for key in LOCKED_LEVERS:
            queues[key].core = locked
        async with core.pool.connection() as conn:
            await conn.execute(old_verdicts_sql())
            await conn.execute(unstriped_admit_sql())
            await conn.execute(hold_0022_sql())
    if team_levers:
        generic = psycopg.conninfo.make_conninfo(uri, options="-c plan_cache_mode=force_generic_plan")
        pool2 = await open_pool(generic, min_size=2, max_size=20)
        queues["team-policy-generic"].core = Core(pool=pool2, settings=core.settings)
        queues["team-generic"].core = queues["team-policy-generic"].core
    return Bench(uri, core, queues)


def variants(bench: Bench) -> list[Variant]:
    core = bench.core

    async def single_worker(deadline: float, key: str = "single") -> tuple[int, bool]:
        q = bench.queues[key]
        caller = q.callers[0]
        n = 0
        while time.perf_counter() < deadline:
            got = await todos.claim_next(core, caller, queue=q.name, lease_ttl_seconds=LEASE_TTL)
            if got is None:
                return n, True
            await todos.complete(core, caller, got.todo["id"])
            n += 1
        return n, False

    async def team_worker(q: Queue, i: int, workers: int, deadline: float) -> tuple[int, bool]:
        c = q.core or core
        n = 0
        while time.perf_counter() < deadline:
            caller = q.callers[(i + n * workers) % len(q.callers)]
            got = await todos.claim_next(c, caller, queue=q.name, lease_ttl_seconds=LEASE_TTL)
            if got is None:
                return n, True
            await todos.complete(c, caller, got.todo["id"])
            n += 1
        return n, False

    async def gather(coros) -> tuple[int, bool]:
        done = await asyncio.gather(*coros)
        return sum(n for n, _ in done), any(s for _, s in done)

    def run_single(w: int, deadline: float):
        async def go():
            settings = core.settings
            core.settings = settings.model_copy(update={"combine_calls": False})  # as every team endpoint's call
            try:
                return await gather([single_worker(deadline) for _ in range(w)])
            finally:
                core.settings = settings
        return go()

    def run_single_combined(w: int, deadline: float):
        return gather([single_worker(deadline, "single-combined") for _ in range(w)])

    def run_team(key: str):
        def run(w: int, deadline: float):
            return gather([team_worker(bench.queues[key], i, w, deadline) for i in range(w)])
        return run

    nolock = _Overlay("todos", {"claim_next_team_one": Q.todos.claim_next_team_one.replace(LOCKS, ""),
                                "claim_next_team_group": Q.todos.claim_next_team_group.replace(GROUP_LOCKS, "")})

    def run_nolock(w: int, deadline: float):
        async def go():
            with statements_swapped(nolock):
                return await gather([team_worker(bench.queues["team-nolock"], i, w, deadline) for i in range(w)])
        return go()

    def run_parsecache(w: int, deadline: float):
        async def go():
            before = psycopg_queries.MAX_CACHED_STATEMENT_LENGTH
            psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = 16_384
            try:
                return await gather([team_worker(bench.queues["team-parsecache"], i, w, deadline) for i in range(w)])
            finally:
                psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = before
        return go()

    def run_swapped(key: str, *swaps):
        def run(w: int, deadline: float):
            async def go():
                with contextlib.ExitStack() as stack:
                    for swap in swaps:
                        stack.enter_context(swap())
                    return await gather([team_worker(bench.queues[key], i, w, deadline) for i in range(w)])
            return go()
        return run

    out = [Variant("single", run_single), Variant("single-combined", run_single_combined),
           Variant("team", run_team("team")), Variant("team-policy", run_team("team-policy"))]
    if "team-policy-locked" in bench.queues:
        out += [Variant("team-policy-unstriped", run_swapped("team-policy-unstriped", admit_unstriped)),
                Variant("team-policy-pipelined", run_swapped("team-policy-pipelined", admit_pipelined)),
                Variant("team-policy-locked", run_team("team-policy-locked")),
                Variant("team-policy-nopipe", run_swapped("team-policy-nopipe", pipeline_off)),
                Variant("team-policy-0017", run_swapped("team-policy-0017", pipeline_off, verdicts_0017)),
                Variant("team-policy-0022", run_swapped("team-policy-0022", hold_0022)),
                Variant("team-policy-barelock", run_swapped("team-policy-barelock", bare_lock)),
                Variant("team-policy-selectonly", run_swapped("team-policy-selectonly", select_only))]
    if "team-nolock" in bench.queues:
        if LOCKS not in Q.todos.claim_next_team_one or GROUP_LOCKS not in Q.todos.claim_next_team_group:
            raise SystemExit("bench: the core's claim_next_team_one no longer locks as team-nolock expects; update it")
        out += [Variant("team-nolock", run_nolock), Variant("team-policy-generic", run_team("team-policy-generic")),
                Variant("team-parsecache", run_parsecache), Variant("team-generic", run_team("team-generic"))]
    return out


def charge_check(key: str, units: int, opened: int) -> str:
    if key == "team-policy-selectonly":
        return " (this lever charges nothing)"
    return " (equal)" if units == opened else " (DIFFER)"


async def wal_lsn(bench: Bench) -> int:
    """Bytes of WAL written so far (WAL per cycle: what the writes of a variant amount to)."""
    async with bench.core.pool.connection() as conn:
        cur = await conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS b")
        return int((await cur.fetchone())["b"])


async def explain(bench: Bench) -> str:
    """EXPLAIN ANALYZE, rolled back, of each variant's claim statement and of the admission verdict."""
    single = bench.queues["single"].callers[0]
    team = bench.queues["team"].callers[0]
    policed = bench.queues["team-policy"].callers[0]

    def claim_params(caller: EndpointCaller, **kw) -> dict:
        return {"human_id": None, "endpoint_id": caller.endpoint_id, "owner": caller.owner, "ttl": LEASE_TTL,
                "claimant": None, "new_token_hash": None, "claimer_kind": "endpoint",
                "claimer_endpoint_id": caller.endpoint_id, "session": None, "admitted": False, **kw}

    cases = [
        ("single: claim_next_one", Q.todos.claim_next_one, claim_params(single, queues=[OWN_QUEUE], queue=OWN_QUEUE)),
        ("team: claim_next_team_one", Q.todos.claim_next_team_one, claim_params(team, queues=[], queue=TEAM_QUEUE)),
        ("team-policy: verdicts", Q.admission.verdicts, {"endpoint_id": policed.endpoint_id,
                                                         "claimer_id": policed.endpoint_id,
                                                         "queues": [POLICED_QUEUE]}),
        ("team-policy: claim_next_team_one (admitted)", Q.todos.claim_next_team_one,
         claim_params(policed, queues=[], queue=POLICED_QUEUE, admitted=True)),
        ("team-policy: admit (the pipelined fast path, one claim)", Q.admission.admit,
         {"endpoint_id": policed.endpoint_id, "claimer_id": policed.endpoint_id, "queue": POLICED_QUEUE, "want": 1}),
        ("team-policy: claim_next_team_admitted (the fast path, one statement)", Q.admission.claim_next_team_admitted,
         claim_params(policed, queues=[], queue=POLICED_QUEUE, admitted=True)),
    ]
    out = []
    async with await psycopg.AsyncConnection.connect(bench.uri) as conn:
        for title, sql, params in cases:
            cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
            out.append(f"--- {title}\n" + "\n".join(r[0] for r in await cur.fetchall()))
            await conn.rollback()
        # Does the prepared statement keep a generic plan (planned once) or is it planned on every
        # call? Ten executions each, prepared from the first, rolled back.
        conn.prepare_threshold = 0
        counts = []
        for title, sql, params in cases:
            await conn.execute("DEALLOCATE ALL", prepare=False)
            for _ in range(10):
                await (await conn.execute(sql, params, prepare=True)).fetchall()
            cur = await conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements", prepare=False)
            g, c = (await cur.fetchall())[0]
            counts.append(f"{title}: {g} generic, {c} custom plans")
            await conn.rollback()
        out.append("--- prepared plans after 10 executions (rolled back)\n" + "\n".join(counts))
        # The admission verdict is a function: its inner statements' plans, as auto_explain logs them.
        msgs: list[str] = []
        conn.add_notice_handler(lambda d: msgs.append(d.message_primary or ""))
        for title, sql, params in (cases[2], cases[4]):
            for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                            "auto_explain.log_analyze = on", "auto_explain.log_buffers = on",
                            "auto_explain.log_level = notice"):  # SET in the transaction: again after each rollback
                await conn.execute("LOAD 'auto_explain'", prepare=False) \
                    if setting.startswith("auto_explain.log_min") else None
                await conn.execute(f"SET {setting}", prepare=False)
            msgs.clear()
            await (await conn.execute(sql, params, prepare=False)).fetchall()
            await conn.rollback()
            out.append(f"--- {title}, inner statements (auto_explain)\n" + "\n\n".join(msgs))
    for title, name in (("team: claim_next_team_one", "claim_next_team_one"),
                        ("single: claim_next_one", "claim_next_one"),
                        ("team-policy: claim_next_team_admitted", "admission.claim_next_team_admitted")):
        out.append(f"--- {title}, generic plan\n" + await generic_plan(bench, name))
    return "\n\n".join(out)


async def generic_plan(bench: Bench, statement: str) -> str:
    names: list[str] = []

    def placeholder(m: re.Match) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    file, _, name = statement.rpartition(".")
    text = re.sub(r"%\((\w+)\)s", placeholder, getattr(getattr(Q, file or "todos"), name))
    async with await psycopg.AsyncConnection.connect(bench.uri, autocommit=True) as conn:
        cur = await conn.execute("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + text, prepare=False)
        return "\n".join(r[0] for r in await cur.fetchall())


async def main(args: argparse.Namespace) -> int:
    log = (lambda *_: None) if args.silent else (lambda msg: print(msg, file=sys.stderr, flush=True))
    worker_counts = [int(x) for x in args.workers.split(",")]
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = loadavg()
    t0 = time.perf_counter()
    info = machine_info()
    with postgres_server() as (server_uri, server_how, pgdata):
        store_bench.SERVER_CPU = ServerCpu(pgdata)
        dbs = Databases(server_uri)
        bench = None
        try:
            facts = await server_facts(server_uri)
            log(f"PostgreSQL {facts['server_version']} ({server_how}); {info['nproc']} CPUs {info['cpu']}")
            uri = await dbs.create("team")
            bench = await open_bench(uri, args.history, args.levers, args.team_levers)
            await bench.top_up(args.backlog)
            async with bench.core.pool.connection() as conn:
                await conn.execute("VACUUM ANALYZE todos")
                await conn.execute("VACUUM ANALYZE todo_attempts")
            vs = variants(bench)
            if args.only:
                keep = {"single", "single-combined", *args.only.split(",")}
                vs = [v for v in vs if v.name in keep]
            results = {v.name: {w: [] for w in worker_counts} for v in vs}
            cpu = {v.name: {w: [] for w in worker_counts} for v in vs}
            wal: dict[str, dict[int, list[float]]] = {v.name: {w: [] for w in worker_counts} for v in vs}
            loads: list[float] = []
            for v in vs:  # warm-up: pools, prepared statements, caches; not recorded
                await bench.top_up(args.backlog)
                got = await measure(v, max(worker_counts), 1.0)
                bench.queues[v.name].pending -= got["cycles"]
            log(f"{args.rounds} rounds x {len(worker_counts)} worker counts x {len(vs)} variants x {args.seconds:g} s")
            for r in range(args.rounds):
                for wi, w in enumerate(worker_counts):
                    k = (r + wi) % len(vs)
                    for v in vs[k:] + vs[:k]:
                        await bench.top_up(args.backlog)
                        lsn0 = await wal_lsn(bench)
                        got = await measure(v, w, args.seconds)
                        wal[v.name][w].append((await wal_lsn(bench) - lsn0) / max(got["cycles"], 1))
                        bench.queues[v.name].pending -= got["cycles"]
                        if got["starved"]:
                            raise SystemExit(f"bench: {v.name} ran out of pending todos; raise --backlog")
                        results[v.name][w].append(got["cps"])
                        cpu[v.name][w].append((got["py_us"], got["pg_us"]))
                        loads.append(loadavg()[0])
                        log(f"  round {r + 1}/{args.rounds}  {w:>2} workers  {v.name:<12} {got['cps']:8.1f} cycles/s")
            charges = []  # (variant, units charged, attempts opened) of every policed queue
            async with bench.core.pool.connection() as conn:
                for key in (k for k in bench.queues if k in POLICED):
                    label = bench.queues[key].name
                    cur = await conn.execute(
                        "SELECT switchboard_admission_used(p.id, switchboard_window_start(p.window_period, p.window_tz,"
                        " p.window_start_minute, p.window_weekday, now())) AS charged,"
                        " (SELECT count(*) FROM admission_shards s WHERE s.policy_id = p.id AND s.charged > 0)"
                        " AS shards"
                        " FROM admission_policies p WHERE p.queue = %s", (label,))
                    row = await cur.fetchone()
                    units, used_shards = row["charged"], row["shards"]
                    cur = await conn.execute("SELECT count(*) AS n FROM todo_attempts a JOIN todos t"
                                             " ON t.id = a.todo_id WHERE t.queue = %s", (label,))
                    charges.append((key, units, (await cur.fetchone())["n"], used_shards))
            plans = await explain(bench) if args.explain else None
        finally:
            if bench is not None:
                await bench.core.pool.close()
                for q in bench.queues.values():
                    if q.core is not None:
                        await q.core.pool.close()
            await dbs.drop_all()
    load_end = loadavg()
    total = time.perf_counter() - t0

    names = [v.name for v in vs]
    ratios = [("team", "single"), ("team-policy", "single"), ("team-policy", "team"), ("single-combined", "single"),
              ("team", "single-combined"), ("team-policy", "single-combined")]
    if args.levers:
        ratios += [("team-policy", "team-policy-pipelined"), ("team-policy-pipelined", "single"),
                   ("team-policy", "team-policy-unstriped"), ("team-policy-unstriped", "team-policy-locked"),
                   ("team-policy", "team-policy-locked"), ("team-policy-locked", "team-policy-nopipe"),
                   ("team-policy-nopipe", "team-policy-0017"), ("team-policy-0017", "single"),
                   ("team-policy", "team-policy-0022"), ("team-policy-0022", "single"),
                   ("team-policy-barelock", "single"), ("team-policy-selectonly", "single"),
                   ("team-policy-selectonly", "team")]
    if args.team_levers:
        ratios += [("team-nolock", "team"), ("team-policy-generic", "team-policy"), ("team-parsecache", "team"),
                   ("team-generic", "team")]
    ratios = [(a, b) for a, b in ratios if a in names and b in names]
    rows = []
    for w in worker_counts:
        rows.append([str(w)] + [f"{statistics.median(results[n][w]):,.0f}" for n in names]
                    + [f"{paired_ratio(results[a][w], results[b][w]):.2f}" for a, b in ratios])

    def cell(n: str, w: int) -> str:
        xs = cpu[n][w]
        py = statistics.median(x[0] for x in xs)
        pg = [x[1] for x in xs if x[1] is not None]
        return f"{py:.0f} + {statistics.median(pg):.0f}" if pg else f"{py:.0f} + ?"

    machine = (f"{info['nproc']} CPUs ({info['cpu']}), {info['ram_gib']} GiB RAM, PostgreSQL "
               f"{facts['server_version']} ({server_how}; shared_buffers {facts['shared_buffers']}, "
               f"synchronous_commit {facts['synchronous_commit']}, fsync {facts['fsync']}), Python "
               f"{info['python']}, psycopg {info['psycopg']}, event loop {args.loop}")
    # Against both single-endpoint figures: `single` (each call its own statement, as every call was when
    # issue 13 was written) and `single-combined` (one endpoint's concurrent calls sharing statements, D47).
    targets = [(f"{n} >= 0.90 x {base} at {w} workers", paired_ratio(results[n][w], results[base][w]))
               for base in ("single", "single-combined") if base in names
               for w in worker_counts for n in ("team", "team-policy") if n in names]
    out = "\n".join([
        f"Team queue benchmark, {started}, {total:.0f} s",
        f"machine: {machine}",
        f"load average (1 min): {load_start[0]:.2f} at start, {min(loads):.2f}-{max(loads):.2f}"
        f" (median {statistics.median(loads):.2f}) during, {load_end[0]:.2f} at end",
        "",
        f"claim_next + complete cycles/s (median of {args.rounds} rounds of {args.seconds:g} s; ratios are the"
        f" median of per-round ratios); team queues drained by {ENDPOINTS} endpoints of {MEMBERS} members",
        fmt_table(rows, ["workers", *names, *(f"{a}/{b}" for a, b in ratios)]),
        "",
        "CPU per cycle, microseconds: this Python process + PostgreSQL (median of the rounds)",
        fmt_table([[str(w)] + [cell(n, w) for n in names] for w in worker_counts], ["workers", *names]),
        "",
        "WAL per cycle, bytes (median of the rounds)",
        fmt_table([[str(w)] + [f"{statistics.median(wal[n][w]):,.0f}" for n in names] for w in worker_counts],
                  ["workers", *names]),
        "",
        "policy charges: " + "; ".join(f"{key} {units:,} units charged on {shards} shards, {opened:,} attempts"
                                       " opened" + charge_check(key, units, opened)
                                       for key, units, opened, shards in charges),
        "",
        "targets (issue 13: within 10 % of the single-endpoint figure):",
        *(f"- {name}: {value:.2f} -> {'met' if value >= 0.90 else 'MISSED'}" for name, value in targets),
    ])
    print(out)
    if plans:
        print("\n" + plans)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "started": started, "seconds_total": total, "machine": info, "postgres": facts,
            "loadavg": {"start": load_start, "end": load_end, "during": loads},
            "throughput": {n: {str(w): xs for w, xs in by.items()} for n, by in results.items()},
            "cpu_us_python_postgres": {n: {str(w): xs for w, xs in by.items()} for n, by in cpu.items()},
        }, indent=2, default=str))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,4,20", help="worker counts, comma separated (default 1,4,20)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement (default 4)")
    p.add_argument("--backlog", type=int, default=40_000, help="pending todos kept per queue (default 40,000)")
    p.add_argument("--history", type=int, default=20_000,
                   help="done todos with one attempt each, loaded first (default 20,000)")
    p.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the claim statements at the end")
    p.add_argument("--levers", action="store_true", help="also the measurement-only variants of the policed path"
                                                          " (team-policy-unstriped, -locked, -nopipe, -0017)")
    p.add_argument("--team-levers", action="store_true", help="also the measurement-only variants of the team path"
                                                               " (team-nolock, -policy-generic, -parsecache, -generic)")
    p.add_argument("--only", help="run only these variants, comma separated (single always runs: the ratios'"
                                  " base)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    return p.parse_args(argv)


def run() -> int:
    args = parse_args()
    if args.loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            args.loop = "asyncio"
        else:
            return uvloop.run(main(args))
    return asyncio.run(main(args))


if __name__ == "__main__":
    sys.exit(run())
