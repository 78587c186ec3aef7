"""Store benchmark (SYSTEM.md section 16): claim_next + complete throughput and claim latency.

Throughput: claim_next + complete cycles/s at 1, 4 and 16 asyncio workers, four variants measured
in the same run, interleaved in rounds so that noise on the shared machine hits all of them alike:

  core         `todos.claim_next` + `todos.complete` with an EndpointCaller, attempt writes included
  no-attempts  the same Python path, with the claim_next / complete statements minus the attempt
               CTEs (the pre-attempt-history baseline of SPEC-0034 REQ-18)
  core-sql     the core's two statements sent by raw psycopg, one connection per worker
               (separates the cost of the Python path from the cost of the SQL)
  bare         one minimal claim CTE (writing the attempt row) + one complete statement, raw psycopg

With --batch N four more variants join the same rotation (issue 17, batched claims):

  batch        `todos.claim_next_batch(max_todos=N)` + one `todos.complete_batch` of what it claimed,
               attempt writes included (one attempt opened and closed per todo); a cycle is one todo
  batch-no-attempts  the same Python path with the batch statements minus the attempt CTEs (REQ-18)
  round        a worker's round in one call (D52): `todos.complete_and_take_next` completes the last
               batch and claims the next in one transaction, one commit per batch instead of two
  round-no-attempts  the same with the batch statements minus the attempt CTEs

Each measurement also records the CPU time per cycle of this Python process and of the embedded
PostgreSQL (from /proc), which other people's load on a shared machine moves much less than the
rates do.

Latency: `todos.claim_next` p50/p99 with 1,000 and with 1,000,000 pending todos (bulk-loaded with
INSERT ... SELECT generate_series), each backlog in its own database, alternating between the two;
then the generic plan of the prepared claim statement at the big backlog (index scans only?).

With --notes the run measures progress notes on attempts instead (issue 16), in one database, the
variants interleaved in rounds as above:

  heartbeat         `todos.heartbeat` on a held todo, no note (one todo per worker)
  heartbeat+note    the same with a note of --note-bytes bytes; the attempt keeps the newest 20,
                    so after the first rounds every note also drops the oldest
  claim-plain       `todos.claim_next` + `todos.complete` over todos whose lapsed attempt has no note
                    (a takeover: the claim closes that attempt and returns it in prior_attempts)
  claim-noted       the same over todos whose lapsed attempt carries 20 notes of --note-bytes bytes

Every database first gets 20,000 done todos with one completed attempt each, as a system in service
has: on an empty attempts table the prepared claim statement would be planned with sequential scans
of todo_attempts and keep that plan while the table grows.

Runs on a fresh embedded PostgreSQL in a temporary directory, or on the server of
SWITCHBOARD_DATABASE_URL (its own databases are created there and dropped afterwards).

    make bench                     # full run, about 6-8 minutes on 2 cores
    .venv/bin/python bench/store_bench.py --quick      # about 1 minute, 100,000 as the big backlog
    .venv/bin/python bench/store_bench.py --batch 100 --workers 4,16 --skip-latency   # batched vs per-claim
    .venv/bin/python bench/store_bench.py --notes --workers 1,4    # heartbeat notes and the claim path
    .venv/bin/python bench/store_bench.py --latency-only --big 10000000   # claim latency at 10 million pending
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from switchboard.config import load_settings
from switchboard.core import endpoints, humans, inputs, todos
from switchboard.core.models import Core, EndpointCaller
from switchboard.core.queries import FRAGMENTS_FILE, Q, _read, parse, splice
from switchboard.db import migrate
from switchboard.db.pool import open_pool

QUEUE = "bench"
LEASE_TTL = 1800
LOAD_CHUNK = 50_000

# ------------------------------------------------------------------------------------ bench SQL

# The no-attempts variant: the core's claim_next candidate search, unchanged, followed by the todos
# update alone (no attempt opened, closed or pruned, no attempt counters, no prior_attempts read).
_CLAIM_TAIL_MARKER = ", cap AS ("
NO_ATTEMPTS_CLAIM_TAIL = """
, claimed AS (
    UPDATE todos x
       SET state = 'claimed', owner = %(owner)s,
           lease_expires_at = now() + make_interval(secs => %(ttl)s),
           attempt = x.attempt + 1, claimed_at = now(), next_retry_at = NULL, updated_at = now()
      FROM t
     WHERE x.id = t.id
    RETURNING x.*, t.prior_state
)
SELECT c.*, c.attempt AS attempt_seq, NULL::jsonb AS closed_attempt, '[]'::jsonb AS prior_attempts
  FROM claimed c
"""

# The core's complete minus the attempt CTE: same lock, scope and holder checks on the todo.
NO_ATTEMPTS_COMPLETE = """
WITH t AS (
    SELECT todos.id FROM todos
     WHERE todos.id = %(id)s AND todos.state = 'claimed' AND {{scope}} AND {{holder}}
       FOR UPDATE
), u AS (
    UPDATE todos x
       SET state = 'done', result = %(result)s, completed_at = now(), updated_at = now()
      FROM t
     WHERE x.id = t.id
    RETURNING x.*
){{completed_hooks}}
SELECT u.*, NULL::jsonb AS closed_attempt FROM u
"""

# The bare loop: the smallest single-statement claim that still writes the attempt row, and the
# smallest complete that closes it. No scope, fence or history read.
BARE_CLAIM = """
WITH next AS (
    SELECT id FROM todos
     WHERE endpoint_id = %s AND queue = %s AND state = 'pending'
     ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE todos t
       SET state = 'claimed', owner = %s, lease_expires_at = now() + make_interval(secs => %s),
           attempt = t.attempt + 1, attempts_total = t.attempts_total + 1, claimed_at = now(),
           updated_at = now()
      FROM next WHERE t.id = next.id
    RETURNING t.id, t.attempt, t.attempts_total, t.lease_expires_at
), att AS (
    INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, claimer_endpoint_id, owner,
                               claimed_at, lease_expires_at)
    SELECT id, attempts_total, attempt, 'endpoint', %s, %s, now(), lease_expires_at FROM claimed
    RETURNING todo_id, seq
)
SELECT todo_id, seq FROM att
"""

BARE_COMPLETE = """
WITH a AS (
    UPDATE todo_attempts SET ended_at = now(), outcome = 'completed', disposition = 'done'
     WHERE todo_id = %s AND seq = %s AND ended_at IS NULL
    RETURNING todo_id
)
UPDATE todos t SET state = 'done', completed_at = now(), updated_at = now()
  FROM a WHERE t.id = a.todo_id AND t.state = 'claimed'
RETURNING t.id
"""

BULK_LOAD = """
INSERT INTO todos (id, endpoint_id, queue, title, created_at, updated_at)
SELECT 'td_' || gen_random_uuid(), %(endpoint_id)s, %(queue)s, 'bench ' || g,
       now() + g * interval '1 microsecond', now()
  FROM generate_series(1, %(n)s) AS g
"""


# History: done todos with one completed attempt each, so that the attempts table looks like a
# system that has been running (the planner sees its real size from the first claim on) and the
# prepared claim statements get the plans they would have in service.
HISTORY_LOAD = """
WITH d AS (
    INSERT INTO todos (id, endpoint_id, queue, title, state, owner, attempt, attempts_total, created_at,
                       updated_at, claimed_at, completed_at)
    SELECT 'td_' || gen_random_uuid(), %(endpoint_id)s, %(queue)s, 'history ' || g, 'done', %(owner)s, 1, 1,
           now() - interval '1 day' + g * interval '1 millisecond', now(), now(), now()
      FROM generate_series(1, %(n)s) AS g
    RETURNING id, claimed_at
)
INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at, lease_expires_at, ended_at,
                           outcome, disposition)
SELECT id, 1, 1, 'endpoint', %(owner)s, claimed_at, claimed_at, claimed_at, 'completed', 'done' FROM d
"""


# The batched statements minus the attempt CTEs: the same candidate search and locks, the todos
# updates alone (no attempt opened, closed or pruned, no prior_attempts read).
NO_ATTEMPTS_BATCH_CLAIM_TAIL = """
, claimed AS (
    UPDATE todos x
       SET state = 'claimed', owner = %(owner)s,
           lease_expires_at = now() + make_interval(secs => %(ttl)s),
           attempt = x.attempt + 1, claimed_at = now(), next_retry_at = NULL, updated_at = now()
      FROM t
     WHERE x.id = t.id
    RETURNING x.*, t.prior_state, t.i
)
SELECT c.*, c.attempt AS attempt_seq, NULL::jsonb AS closed_attempt, '[]'::jsonb AS prior_attempts
  FROM claimed c
 ORDER BY c.i
"""

NO_ATTEMPTS_COMPLETE_BATCH = """
{{held_batch}}, u AS (
    UPDATE todos x
       SET state = 'done', result = t.result, completed_at = now(), updated_at = now()
      FROM t
     WHERE x.id = t.id
    RETURNING x.*
){{completed_hooks}}
SELECT u.*, NULL::jsonb AS closed_attempt FROM u
"""


# --levers: the per-claim statements with one lever of issue 17 pulled each, measured against the core's
# in one run. Each is a text substitution on the core's spliced statement; the bench stops if the core's
# text no longer holds what it replaces.
_CAP_READ = ("SELECT greatest(5, coalesce((SELECT value::int FROM settings WHERE key = "
             "'attempt_history_max_per_todo'),\n                              50)) AS n")
# What the Python path reads of a todo row (shapes.full, events.build) and of a closed attempt (shapes.attempt).
TODO_COLUMNS = ("id, endpoint_id, queue, source, kind, title, state, owner, assignee, attempt, max_attempts, "
                "lease_expires_at, next_retry_at, created_at, payload, input_request, input, attempts_total, "
                "attempts_pruned")
ATTEMPT_COLUMNS = ("seq, attempt, claimer_kind, claimant, claimed_at, last_heartbeat_at, ended_at, outcome, "
                   "disposition, summary, summary_truncated, artifact")


def _sub(sql: str, old: str, new: str, what: str) -> str:
    """`sql` with `old` replaced by `new`, whitespace runs in `old` matching any whitespace (the
    statements' indentation changes when they are tightened to stay under psycopg's parse cache)."""
    pattern = r"\s+".join(re.escape(word) for word in old.split())
    if not old.split() or re.search(pattern, sql) is None:
        raise SystemExit(f"bench: {what}: the core's statement changed; update the bench")
    return re.sub(pattern, lambda _: new, sql)


_CLOSED_KEY = "   WHERE t.prior_state = 'claimed' AND a.todo_id = t.id AND a.seq = t.prior_total"
_COMPLETE_KEY = "     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL"

# The levers that are candidates for the core (`all` pulls them together), then those that only measure
# what a guarantee costs. One more was measured and is in the core now: no prior-attempts read for a
# first attempt (docs/benchmarks.md).
CANDIDATE_LEVERS = ("cap", "narrow", "keyed")
LEVERS = (*CANDIDATE_LEVERS, "all", "arms", "live", "policy", "ownscope", "fk")
_CLAIMER_SET = "claimed_by_endpoint_id = %(claimer_endpoint_id)s::uuid"


def lever_statements(lever: str) -> dict[str, str]:
    """claim_next_one and complete with `lever` pulled:
    cap     no settings read per claim: the history cap as a constant;
    narrow  RETURNING only the columns the caller reads;
    keyed   the attempt each statement closes found by its primary key (the todo's id as a parameter,
            or the taken-over todo's), whatever plan PostgreSQL picked for the join with `t`;
    all     the three together.
    Measurement only, each dropping a guarantee: arms (the pending arm alone, no takeovers or due
    retries), live (no endpoint liveness check), policy (no admission-policy guard), ownscope (complete
    with the endpoint caller's half of `scope` alone: what statements split by caller kind would save),
    fk (claimed_by_endpoint_id set on team todos only: on an endpoint's own todo every first claim checks
    that column's foreign key, a share lock on the endpoint's row; the column names the holder of every
    claimed todo, which the model tests check)."""
    pulled = set(CANDIDATE_LEVERS) if lever == "all" else set(lever.split("+"))  # "a+b": both at once
    claim, complete = Q.todos.claim_next_one, Q.todos.complete
    if "cap" in pulled:
        claim = _sub(claim, _CAP_READ, "SELECT 50 AS n", "cap")
    if "keyed" in pulled:
        claim = _sub(claim, _CLOSED_KEY, "   WHERE a.todo_id = (SELECT id FROM t WHERE prior_state = 'claimed')"
                     + _CLOSED_KEY.replace("   WHERE", " AND"), "keyed")
        complete = _sub(complete, _COMPLETE_KEY,
                        "     WHERE a.todo_id = %(id)s" + _COMPLETE_KEY.replace("     WHERE", " AND"), "keyed")
    if "arms" in pulled:  # measurement only: the pending arm alone (drops the takeover and retry arms)
        start = claim.index("\nUNION ALL\n")
        end = claim.index(") x\n", start)
        claim = claim[:start] + claim[end:]
    if "live" in pulled:  # measurement only: without the per-statement endpoint liveness check
        claim = _sub(claim, " AND switchboard_endpoint_live(%(endpoint_id)s::uuid)", "", "live")
        complete = _sub(complete, " AND switchboard_endpoint_live(%(endpoint_id)s::uuid)", "", "live")
    if "policy" in pulled:  # measurement only: without the admission-policy guard
        claim = _sub(claim, _fragments()["unpoliced"], "true", "policy")
    if "fk" in pulled:  # measurement only: no holder recorded on an endpoint's own todo
        claim = _sub(claim, _CLAIMER_SET, "claimed_by_endpoint_id = CASE WHEN x.team_id IS NOT NULL THEN "
                     "%(claimer_endpoint_id)s::uuid END", "fk")
    if "ownscope" in pulled:  # measurement only: the human caller's half of `scope` left out
        scope = splice(_fragments()["scope"], _fragments(), "bench")
        own = scope[scope.index("THEN ") + 5:scope.index("ELSE ")].strip()
        complete = _sub(complete, scope, f"({own} AND switchboard_endpoint_live(%(endpoint_id)s::uuid))", "ownscope")
    if "narrow" in pulled:
        x_cols = ", ".join(f"x.{c}" for c in TODO_COLUMNS.split(", "))
        c_cols = ", ".join(f"c.{c}" for c in TODO_COLUMNS.split(", "))
        claim = _sub(claim, "RETURNING x.*, t.prior_state", f"RETURNING {x_cols}, t.prior_state", "narrow")
        claim = _sub(claim, "SELECT c.*, (SELECT seq", f"SELECT {c_cols}, (SELECT seq", "narrow")
        complete = _sub(complete, "RETURNING a.*\n", "RETURNING " + ", ".join(
            f"a.{c}" for c in ["todo_id"] + ATTEMPT_COLUMNS.split(", ")) + "\n", "narrow")
        complete = _sub(complete, "    RETURNING x.*\n)", f"    RETURNING {x_cols}\n)", "narrow")
    return {"claim_next_one": claim, "complete": complete}


def tree_statements(where: str) -> dict[str, str]:
    """Every statement of todos.sql as another tree has it, its fragments spliced in (--compare): `where`
    is a directory (a checkout, or its `src`) or a git revision of this repository."""
    def read(name: str) -> str:
        rel = f"switchboard/core/sql/{name}.sql"
        root = Path(where)
        if root.is_dir():
            for candidate in (root / rel, root / "src" / rel):
                if candidate.is_file():
                    return candidate.read_text("utf-8")
            raise SystemExit(f"bench: --compare: no {rel} under {where}")
        import subprocess
        got = subprocess.run(["git", "show", f"{where}:src/{rel}"], capture_output=True, text=True,
                             cwd=Path(__file__).resolve().parent)
        if got.returncode != 0:
            raise SystemExit(f"bench: --compare {where}: neither a directory nor a revision ({got.stderr.strip()})")
        return got.stdout

    fragments = parse(read("fragments"), "fragments")
    return {name: splice(sql, fragments, f"{where}: todos.sql {name}")
            for name, sql in parse(read("todos"), "todos").items()}


def _fragments() -> dict[str, str]:
    return parse(_read(FRAGMENTS_FILE), FRAGMENTS_FILE)


def _splice(sql: str) -> str:
    return splice(sql, _fragments(), "bench")  # fragments may splice fragments


def no_attempts_statements() -> dict[str, str]:
    out = {"complete": _splice(NO_ATTEMPTS_COMPLETE)}
    for name in ("claim_next", "claim_next_one"):
        core_claim = getattr(Q.todos, name)
        if _CLAIM_TAIL_MARKER not in core_claim:
            raise SystemExit(f"bench: the core's {name} no longer ends in the claim tail; update the bench")
        out[name] = core_claim.split(_CLAIM_TAIL_MARKER, 1)[0] + NO_ATTEMPTS_CLAIM_TAIL
    for name in ("claim_next_batch", "claim_next_batch_one"):
        core_claim = getattr(Q.todos, name)
        if _CLAIM_TAIL_MARKER not in core_claim:
            raise SystemExit(f"bench: the core's {name} no longer ends in the claim tail; update the bench")
        out[name] = core_claim.split(_CLAIM_TAIL_MARKER, 1)[0] + NO_ATTEMPTS_BATCH_CLAIM_TAIL
    out["complete_batch"] = splice(NO_ATTEMPTS_COMPLETE_BATCH, _fragments(), "bench: complete_batch")
    return out


class _Overlay:
    """`Q` with some statements of one file replaced; everything else is the core's."""

    def __init__(self, file: str, overrides: dict[str, str]) -> None:
        self._file, self._overrides = file, overrides

    def __getattr__(self, file: str):
        base = getattr(Q, file)
        if file != self._file:
            return base
        overrides = self._overrides

        class _F:
            def __getattr__(self, name: str) -> str:
                return overrides[name] if name in overrides else getattr(base, name)

        return _F()


@contextlib.contextmanager
def statements_swapped(overlay: _Overlay):
    """Run the core's Python path with other SQL: `todos` looks statements up in its module's `Q`."""
    todos.Q = overlay
    try:
        yield
    finally:
        todos.Q = Q


# ------------------------------------------------------------------------------------- machine


def machine_info() -> dict:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count()
    return {"nproc": nproc, "cpu": cpu, "ram_gib": mem_gib, "python": platform.python_version(),
            "psycopg": psycopg.__version__, "platform": platform.platform()}


class ServerCpu:
    """CPU seconds used so far by the embedded PostgreSQL (postmaster and its children), from /proc.

    On a shared machine wall-clock rates move with other people's load; CPU spent per cycle by our
    own processes moves much less, so it is reported next to the rates. Unknown for an external
    server (None)."""

    def __init__(self, pgdata: Path | None) -> None:
        self.pid = None
        if pgdata is not None:
            with contextlib.suppress(OSError, ValueError, IndexError):
                self.pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def seconds(self) -> float | None:
        if self.pid is None:
            return None
        total = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            pid, ppid = int(entry.name), int(fields[1])
            if pid == self.pid or ppid == self.pid:
                total += int(fields[11]) + int(fields[12])  # utime + stime
        return total / self.tick


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


# ------------------------------------------------------------------------------------ databases


@contextlib.contextmanager
def postgres_server():
    """(server uri, how): an external server from SWITCHBOARD_DATABASE_URL, else a fresh embedded one."""
    url = os.environ.get("SWITCHBOARD_DATABASE_URL")
    if url:
        yield url, "external (SWITCHBOARD_DATABASE_URL)", None
        return
    from switchboard.db import embedded

    tmp = Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    server = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = embedded.start(tmp)
        yield server.uri, "embedded, fresh data dir", server.pgdata
    finally:
        if server is not None:
            server.release()
        shutil.rmtree(tmp, ignore_errors=True)


class Databases:
    """Databases created for this run on the server, dropped at the end."""

    def __init__(self, server_uri: str) -> None:
        self.server_uri = server_uri
        self.names: list[str] = []

    async def create(self, label: str, *, target: int | None = None) -> str:
        """A fresh database with the migrations applied, up to `target` when given."""
        name = f"sb_bench_{label}_{uuid.uuid4().hex[:8]}"
        async with await psycopg.AsyncConnection.connect(self.server_uri, autocommit=True) as conn:
            await conn.execute(f'CREATE DATABASE "{name}"')
        self.names.append(name)
        uri = psycopg.conninfo.make_conninfo(self.server_uri, dbname=name)
        async with await psycopg.AsyncConnection.connect(uri, autocommit=True, row_factory=dict_row) as conn:
            await conn.execute("SET client_min_messages = warning")
            await migrate.migrate(conn, target=target)
        return uri

    async def drop_all(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.server_uri, autocommit=True) as conn:
            for name in self.names:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.names.clear()


async def server_facts(uri: str) -> dict:
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        out = {}
        for key in ("server_version", "shared_buffers", "synchronous_commit", "fsync", "max_connections"):
            cur = await conn.execute(f"SHOW {key}")
            out[key] = (await cur.fetchone())[0]
        return out


@dataclass
class Tenant:
    uri: str
    core: Core
    caller: EndpointCaller
    pending: int = 0

    async def load(self, n: int, progress: Callable[[str], None] | None = None) -> float:
        """Bulk-load n pending todos; returns the seconds it took."""
        if n <= 0:
            return 0.0
        t0 = time.perf_counter()
        async with self.core.pool.connection() as conn:
            for start in range(0, n, LOAD_CHUNK):  # chunks: each statement well inside the statement timeout
                await conn.execute(BULK_LOAD, {"endpoint_id": self.caller.endpoint_id, "queue": QUEUE,
                                               "n": min(LOAD_CHUNK, n - start)})
                if progress and (start + LOAD_CHUNK) % 1_000_000 == 0:
                    progress(f"  {start + LOAD_CHUNK:,} loaded, {time.perf_counter() - t0:.0f} s")
        self.pending += n
        return time.perf_counter() - t0

    async def load_history(self, n: int) -> None:
        """n done todos, each with one completed attempt (in another queue of the same endpoint)."""
        async with self.core.pool.connection() as conn:
            await conn.execute(HISTORY_LOAD, {"endpoint_id": self.caller.endpoint_id, "queue": "history",
                                              "owner": self.caller.owner, "n": n})

    async def analyze(self) -> None:
        async with self.core.pool.connection() as conn:
            await conn.execute("VACUUM ANALYZE todos")
            await conn.execute("VACUUM ANALYZE todo_attempts")


async def open_tenant(uri: str, *, pool_max: int) -> Tenant:
    # The pool as the served app opens it (web/app.py): min 2, max 20, the same configure and check.
    pool = await open_pool(uri, min_size=2, max_size=pool_max)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    human = await humans.add(core, "bench")
    _, credential = await endpoints.vend(core, human, agent="bench", queues=[QUEUE])
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential), "bench-session")
    return Tenant(uri=uri, core=core, caller=caller)


# ------------------------------------------------------------------------------------ variants

Worker = Callable[[float], Awaitable[tuple[int, bool]]]


async def core_worker(tenant: Tenant, deadline: float) -> tuple[int, bool]:
    core, caller = tenant.core, tenant.caller
    n = 0
    while time.perf_counter() < deadline:
        got = await todos.claim_next(core, caller, lease_ttl_seconds=LEASE_TTL)
        if got is None:
            return n, True
        await todos.complete(core, caller, got.todo["id"])
        n += 1
    return n, False


async def batch_worker(tenant: Tenant, size: int, deadline: float) -> tuple[int, bool]:
    """One batched claim of up to `size` todos, then one batched complete of all of them."""
    core, caller = tenant.core, tenant.caller
    n = 0
    while time.perf_counter() < deadline:
        got = await todos.claim_next_batch(core, caller, max_todos=size, lease_ttl_seconds=LEASE_TTL)
        if not got:
            return n, True
        out = await todos.complete_batch(core, caller, [{"id": g.todo["id"]} for g in got])
        if not all(o["ok"] for o in out):
            raise SystemExit(f"bench: a batched complete was refused: {out}")
        n += len(got)
    return n, False


async def round_worker(tenant: Tenant, size: int, deadline: float) -> tuple[int, bool]:
    """A worker's round in one call (D52): one batched claim, then `todos.complete_and_take_next` that
    completes what the last one claimed and claims the next in one transaction; the last batch is
    completed alone. A todo counts once completed."""
    core, caller = tenant.core, tenant.caller
    n = 0
    got = await todos.claim_next_batch(core, caller, max_todos=size, lease_ttl_seconds=LEASE_TTL)
    while got:
        items = [{"id": g.todo["id"]} for g in got]
        if time.perf_counter() >= deadline:
            out = await todos.complete_batch(core, caller, items)
            got = []
        else:
            out, got, _ = await todos.complete_and_take_next(core, caller, items, max_todos=size,
                                                              lease_ttl_seconds=LEASE_TTL)
        if not all(o["ok"] for o in out):
            raise SystemExit(f"bench: a round's completions were refused: {out}")
        n += len(out)
    return n, time.perf_counter() < deadline


async def core_sql_worker(tenant: Tenant, conn: psycopg.AsyncConnection, deadline: float) -> tuple[int, bool]:
    caller = tenant.caller
    scope = {"human_id": None, "endpoint_id": caller.endpoint_id, "queues": [QUEUE], "owner": caller.owner}
    # The parameters the core sends for a claim on one queue (the bench follows the core's own list).
    claim_params = {**todos._claim_params(tenant.core, caller, LEASE_TTL, None, None)[0], "queue": QUEUE}
    claim_sql, complete_sql = Q.todos.claim_next_one, Q.todos.complete  # what the core sends for one queue
    n = 0
    while time.perf_counter() < deadline:
        cur = await conn.execute(claim_sql, claim_params)
        row = await cur.fetchone()
        if row is None:
            return n, True
        cur = await conn.execute(complete_sql, {**scope, "token_hash": None, "id": row[0], "summary": None,
                                                "summary_truncated": False, "artifact": None, "result": None})
        await cur.fetchone()
        n += 1
    return n, False


async def bare_worker(tenant: Tenant, conn: psycopg.AsyncConnection, deadline: float) -> tuple[int, bool]:
    ep, owner = tenant.caller.endpoint_id, tenant.caller.owner
    n = 0
    while time.perf_counter() < deadline:
        cur = await conn.execute(BARE_CLAIM, (ep, QUEUE, owner, LEASE_TTL, ep, owner))
        row = await cur.fetchone()
        if row is None:
            return n, True
        cur = await conn.execute(BARE_COMPLETE, row)
        await cur.fetchone()
        n += 1
    return n, False


@dataclass
class Variant:
    name: str
    run: Callable[[int, float], Awaitable[tuple[int, bool]]] = field(repr=False)


def make_variants(tenant: Tenant, raw_conns: list[psycopg.AsyncConnection], batch: int = 0,
                  levers: tuple[str, ...] = (), compare: list[str] | None = None) -> list[Variant]:
    overlay = _Overlay("todos", no_attempts_statements())

    async def gather(workers: list[Awaitable[tuple[int, bool]]]) -> tuple[int, bool]:
        done = await asyncio.gather(*workers)
        return sum(n for n, _ in done), any(s for _, s in done)

    async def core_run(w: int, deadline: float):
        return await gather([core_worker(tenant, deadline) for _ in range(w)])

    async def no_attempts_run(w: int, deadline: float):
        with statements_swapped(overlay):
            return await gather([core_worker(tenant, deadline) for _ in range(w)])

    async def core_sql_run(w: int, deadline: float):
        return await gather([core_sql_worker(tenant, raw_conns[i], deadline) for i in range(w)])

    async def bare_run(w: int, deadline: float):
        return await gather([bare_worker(tenant, raw_conns[i], deadline) for i in range(w)])

    async def batch_run(w: int, deadline: float):
        return await gather([batch_worker(tenant, batch, deadline) for _ in range(w)])

    async def batch_no_attempts_run(w: int, deadline: float):
        with statements_swapped(overlay):
            return await gather([batch_worker(tenant, batch, deadline) for _ in range(w)])

    async def round_run(w: int, deadline: float):
        return await gather([round_worker(tenant, batch, deadline) for _ in range(w)])

    async def round_no_attempts_run(w: int, deadline: float):
        with statements_swapped(overlay):
            return await gather([round_worker(tenant, batch, deadline) for _ in range(w)])

    out = [Variant("core", core_run), Variant("no-attempts", no_attempts_run),
           Variant("core-sql", core_sql_run), Variant("bare", bare_run)]
    if batch:
        out += [Variant("batch", batch_run), Variant("batch-no-attempts", batch_no_attempts_run),
                Variant("round", round_run), Variant("round-no-attempts", round_no_attempts_run)]
    swapped: list[tuple[str, _Overlay]] = []
    for where in compare or ():  # the core's Python path with another tree's statements
        swapped.append((f"compare-{Path(where).name or where}", _Overlay("todos", tree_statements(where))))
    swapped += [(f"lever-{lever}", _Overlay("todos", lever_statements(lever))) for lever in levers]
    for name, other in swapped:

        async def swapped_run(w: int, deadline: float, other=other):
            with statements_swapped(other):
                return await gather([core_worker(tenant, deadline) for _ in range(w)])

        out.append(Variant(name, swapped_run))
    return out


SERVER_CPU = ServerCpu(None)


# ------------------------------------------------------------------------------- notes (issue 16)

NOTED_QUEUE, PLAIN_QUEUE, HEARTBEAT_QUEUE = "noted", "plain", "beats"

# The notes of the `noted` queue's open attempts, set in one statement: as many as an attempt keeps,
# each of %(bytes)s bytes of hex (little to compress, as prose is), oldest first, at the claim time.
FILL_NOTES = """
UPDATE todo_attempts a
   SET notes = (SELECT coalesce(jsonb_agg(jsonb_build_object('at', a.claimed_at, 'text',
                                                    left(repeat(md5(random()::text || g || a.todo_id), 16),
                                                         %(bytes)s)) ORDER BY g), '[]'::jsonb)
                  FROM generate_series(1, %(n)s) g)
  FROM todos t
 WHERE t.id = a.todo_id AND t.queue = %(queue)s AND a.ended_at IS NULL
"""
LAPSE_QUEUES = """
WITH t AS (
    UPDATE todos SET lease_expires_at = now() - interval '1 minute'
     WHERE queue = ANY(%(queues)s::text[]) AND state = 'claimed'
    RETURNING id
)
UPDATE todo_attempts a SET lease_expires_at = now() - interval '1 minute'
  FROM t WHERE a.todo_id = t.id AND a.ended_at IS NULL
"""


async def notes_tenant(uri: str) -> Tenant:
    pool = await open_pool(uri, min_size=2, max_size=20)
    core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
    human = await humans.add(core, "bench-notes")
    _, credential = await endpoints.vend(core, human, agent="bench",
                                         queues=[QUEUE, NOTED_QUEUE, PLAIN_QUEUE, HEARTBEAT_QUEUE])
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential), "bench-session")
    return Tenant(uri=uri, core=core, caller=caller)


async def prepare_takeovers(tenant: Tenant, per_queue: int, note_bytes: int, log) -> None:
    """`per_queue` todos in each of the noted and plain queues, claimed once (by the batched claim)
    and lapsed; the noted ones' open attempts carry a full set of notes first."""
    core, caller = tenant.core, tenant.caller
    async with core.pool.connection() as conn:
        for queue in (NOTED_QUEUE, PLAIN_QUEUE):
            await conn.execute(BULK_LOAD, {"endpoint_id": caller.endpoint_id, "queue": queue, "n": per_queue})
    for queue in (NOTED_QUEUE, PLAIN_QUEUE):
        got = 1
        while got:
            got = len(await todos.claim_next_batch(core, caller, max_todos=100, queue=queue,
                                                   lease_ttl_seconds=LEASE_TTL))
    async with core.pool.connection() as conn:
        await conn.execute(FILL_NOTES, {"queue": NOTED_QUEUE, "n": inputs.NOTES_MAX_PER_ATTEMPT,
                                        "bytes": note_bytes})
        # The plain attempts get the same UPDATE with no note, so both queues' rows were rewritten
        # alike and differ in their notes only.
        await conn.execute(FILL_NOTES, {"queue": PLAIN_QUEUE, "n": 0, "bytes": note_bytes})
        await conn.execute(LAPSE_QUEUES, {"queues": [NOTED_QUEUE, PLAIN_QUEUE]})
    await tenant.analyze()
    log(f"notes: {per_queue:,} lapsed todos per queue, {inputs.NOTES_MAX_PER_ATTEMPT} notes of {note_bytes} "
        "bytes on each noted attempt")


def notes_variants(tenant: Tenant, held: list[str], note: str) -> list[Variant]:
    core, caller = tenant.core, tenant.caller

    async def beat_worker(todo_id: str, with_note: bool, deadline: float) -> tuple[int, bool]:
        n = 0
        while time.perf_counter() < deadline:
            await todos.heartbeat(core, caller, todo_id, lease_ttl_seconds=LEASE_TTL,
                                  note=note if with_note else None)
            n += 1
        return n, False

    async def claim_worker(queue: str, deadline: float) -> tuple[int, bool]:
        n = 0
        while time.perf_counter() < deadline:
            got = await todos.claim_next(core, caller, queue=queue, lease_ttl_seconds=LEASE_TTL)
            if got is None:
                return n, True
            await todos.complete(core, caller, got.todo["id"])
            n += 1
        return n, False

    async def gather(coros) -> tuple[int, bool]:
        got = await asyncio.gather(*coros)
        return sum(c for c, _ in got), any(s for _, s in got)

    def beats(with_note: bool):
        async def run(w: int, deadline: float):
            return await gather([beat_worker(held[i], with_note, deadline) for i in range(w)])
        return run

    def claims(queue: str):
        async def run(w: int, deadline: float):
            return await gather([claim_worker(queue, deadline) for _ in range(w)])
        return run

    return [Variant("heartbeat", beats(False)), Variant("heartbeat+note", beats(True)),
            Variant("claim-plain", claims(PLAIN_QUEUE)), Variant("claim-noted", claims(NOTED_QUEUE))]


async def notes_main(args: argparse.Namespace, log) -> int:
    worker_counts = [int(x) for x in args.workers.split(",")]
    info = machine_info()
    global SERVER_CPU
    with postgres_server() as (server_uri, server_how, pgdata):
        SERVER_CPU = ServerCpu(pgdata)
        dbs = Databases(server_uri)
        tenant = None
        try:
            facts = await server_facts(server_uri)
            log(f"PostgreSQL {facts['server_version']} ({server_how}); {info['nproc']} CPUs {info['cpu']}")
            tenant = await notes_tenant(await dbs.create("notes"))
            await tenant.load_history(args.history)
            per_queue = args.takeovers
            await prepare_takeovers(tenant, per_queue, args.note_bytes, log)
            async with tenant.core.pool.connection() as conn:
                await conn.execute(BULK_LOAD, {"endpoint_id": tenant.caller.endpoint_id, "queue": HEARTBEAT_QUEUE,
                                               "n": max(worker_counts)})
            held = []
            for _ in range(max(worker_counts)):
                got = await todos.claim_next(tenant.core, tenant.caller, queue=HEARTBEAT_QUEUE,
                                             lease_ttl_seconds=LEASE_TTL)
                held.append(got.todo["id"])
            note = ("n" * args.note_bytes)[:args.note_bytes]
            variants = notes_variants(tenant, held, note)
            results: dict[str, dict[int, list[dict]]] = {v.name: {w: [] for w in worker_counts} for v in variants}
            for r in range(args.rounds):
                for w in worker_counts:
                    order = variants if r % 2 == 0 else list(reversed(variants))
                    for v in order:
                        m = await measure(v, w, args.seconds)
                        if m["starved"]:
                            log(f"  {v.name} at {w} workers ran out of todos: raise --takeovers")
                        results[v.name][w].append(m)
                log(f"  round {r + 1}/{args.rounds} done")
            rows = []
            for v in variants:
                for w in worker_counts:
                    ms = results[v.name][w]
                    cps = sorted(m["cps"] for m in ms)
                    med = cps[len(cps) // 2]
                    pg = sorted(m["pg_us"] for m in ms if m["pg_us"] is not None)
                    py = sorted(m["py_us"] for m in ms)
                    rows.append([v.name, str(w), f"{med:,.0f}", f"{min(cps):,.0f}-{max(cps):,.0f}",
                                 f"{py[len(py) // 2]:,.0f}", f"{pg[len(pg) // 2]:,.0f}" if pg else "n/a"])
            print(f"Notes benchmark: {args.rounds} rounds x {args.seconds:g} s, note {args.note_bytes} bytes, "
                  f"{inputs.NOTES_MAX_PER_ATTEMPT} kept per attempt; PostgreSQL {facts['server_version']}, "
                  f"{info['nproc']} CPUs")
            print(fmt_table(rows, ["variant", "workers", "ops/s median", "range", "client CPU us/op",
                                   "server CPU us/op"]))
            if args.json:
                Path(args.json).write_text(json.dumps({"notes": {v: {str(w): ms for w, ms in by_w.items()}
                                                                 for v, by_w in results.items()}}, indent=2))
        finally:
            if tenant is not None:
                await tenant.core.pool.close()
            await dbs.drop_all()
    return 0


async def measure(variant: Variant, workers: int, seconds: float) -> dict:
    pg0, py0 = SERVER_CPU.seconds(), time.process_time()
    start = time.perf_counter()
    cycles, starved = await variant.run(workers, start + seconds)
    elapsed = time.perf_counter() - start
    py1, pg1 = time.process_time(), SERVER_CPU.seconds()
    n = max(cycles, 1)
    return {"cycles": cycles, "elapsed": elapsed, "cps": cycles / elapsed, "starved": starved,
            "py_us": (py1 - py0) / n * 1e6, "pg_us": (pg1 - pg0) / n * 1e6 if pg0 is not None else None}


async def throughput(tenant: Tenant, variants: list[Variant], *, worker_counts: list[int], rounds: int,
                     seconds: float, backlog: int, log) -> dict:
    results: dict[str, dict[int, list[float]]] = {v.name: {w: [] for w in worker_counts} for v in variants}
    cpu: dict[str, dict[int, list[tuple]]] = {v.name: {w: [] for w in worker_counts} for v in variants}
    loads: list[float] = []

    async def top_up() -> None:
        await tenant.load(backlog - tenant.pending)

    # Warm-up: every variant at the largest worker count (opens the pool's connections, prepares
    # statements, fills caches); not recorded.
    for v in variants:
        await top_up()
        got = await measure(v, max(worker_counts), min(1.0, seconds))
        tenant.pending -= got["cycles"]
    for r in range(rounds):
        for wi, w in enumerate(worker_counts):
            k = (r + wi) % len(variants)
            for v in variants[k:] + variants[:k]:  # rotate the order each round
                await top_up()
                got = await measure(v, w, seconds)
                tenant.pending -= got["cycles"]
                if got["starved"]:
                    raise SystemExit(f"bench: {v.name} ran out of pending todos; raise the backlog")
                results[v.name][w].append(got["cps"])
                cpu[v.name][w].append((got["py_us"], got["pg_us"]))
                loads.append(loadavg()[0])
                log(f"  round {r + 1}/{rounds}  {w:>2} workers  {v.name:<12} {got['cps']:8.1f} cycles/s")
    return {"rounds": results, "cpu_us": cpu, "loadavg_1m": loads}


# --------------------------------------------------------------------- PostgreSQL CPU interleaved


def _backend_cpu_us(pid: int) -> float:
    """CPU time of one PostgreSQL backend so far, in microseconds (/proc schedstat: nanoseconds)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e3


class RawCycle:
    """One claim + complete by raw psycopg, no Python path: a pair of statements (the core's, another
    tree's, a lever's) with the parameters the core sends for a claim on QUEUE and its complete, or the
    bare statements when the pair is None. `scope` is the endpoint caller's half of the parameters of
    every holder statement."""

    def __init__(self, tenant: Tenant) -> None:
        caller = tenant.caller
        self.ep, self.owner = caller.endpoint_id, caller.owner
        self.claim_params = {**todos._claim_params(tenant.core, caller, LEASE_TTL, None, None)[0], "queue": QUEUE}
        self.scope = {"human_id": None, "endpoint_id": caller.endpoint_id, "queues": [QUEUE],
                      "owner": caller.owner, "token_hash": None, "summary": None, "summary_truncated": False,
                      "artifact": None, "result": None}

    async def __call__(self, conn: psycopg.AsyncConnection, pair: tuple[str, str] | None) -> None:
        if pair is None:
            cur = await conn.execute(BARE_CLAIM, (self.ep, QUEUE, self.owner, LEASE_TTL, self.ep, self.owner))
            row = await cur.fetchone()
            cur = await conn.execute(BARE_COMPLETE, row)
        else:
            cur = await conn.execute(pair[0], self.claim_params)
            cur = await conn.execute(pair[1], {**self.scope, "id": (await cur.fetchone())[0]})
        if await cur.fetchone() is None:
            raise SystemExit("bench: a raw claim + complete matched nothing")


async def pg_cycles(tenant: Tenant, levers: tuple[str, ...], compare: list[str] | None, rounds: int, per_round: int,
                    log) -> str:
    """--pg-cycles: PostgreSQL's CPU per claim_next_one + complete for the core's statements, each
    --compare tree's, each --levers variant's and the bare loop's, one connection (backend) each, the
    variants interleaved cycle by cycle (the order reversed every cycle and rotated every round), so
    that a shared machine's load falls on all of them alike; raw psycopg, no Python path."""
    variants: dict[str, tuple[str, str] | None] = {"core": (Q.todos.claim_next_one, Q.todos.complete)}
    for where in compare or ():
        other = tree_statements(where)
        variants[f"compare-{Path(where).name or where}"] = (other["claim_next_one"], other["complete"])
    for lever in levers:
        got = lever_statements(lever)
        variants[f"lever-{lever}"] = (got["claim_next_one"], got["complete"])
    variants["bare"] = None
    cycle = RawCycle(tenant)

    names = list(variants)
    await tenant.load(len(names) * (rounds * per_round + 20) - tenant.pending + 100)
    conns, pids = {}, {}
    try:
        for name in names:
            conns[name] = await psycopg.AsyncConnection.connect(tenant.uri, autocommit=True)
            pids[name] = conns[name].info.backend_pid
            for _ in range(20):  # prepared after five, then the plan PostgreSQL keeps
                await cycle(conns[name], variants[name])
        us: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            before = {name: _backend_cpu_us(pids[name]) for name in names}
            for i in range(per_round):
                for name in order if i % 2 == 0 else order[::-1]:
                    await cycle(conns[name], variants[name])
            for name in names:
                us[name].append((_backend_cpu_us(pids[name]) - before[name]) / per_round)
            log(f"  pg-cycles round {r + 1}/{rounds}: " + ", ".join(f"{n} {us[n][-1]:.0f}" for n in names))
    finally:
        for c in conns.values():
            await c.close()
    rows = [[n, f"{statistics.median(us[n]):,.0f}", f"{min(us[n]):,.0f}-{max(us[n]):,.0f}",
             f"{paired_ratio(us[n], us['core']):.3f}", f"{paired_ratio(us[n], us['bare']):.3f}"] for n in names]
    return (f"PostgreSQL backend CPU per claim_next_one + complete, µs ({rounds} rounds of {per_round} cycles per"
            " variant, interleaved cycle by cycle, one connection each; ratios: medians of per-round ratios)\n"
            + fmt_table(rows, ["variant", "median", "rounds", "/core", "/bare"]))


# ------------------------------------------------------------------------------------- latency


async def claim_latency(small: Tenant, big: Tenant, *, rounds: int, per_round: int, log) -> dict:
    samples: dict[str, list[float]] = {"small": [], "big": []}
    per_round_p50: dict[str, list[float]] = {"small": [], "big": []}
    tenants = {"small": small, "big": big}
    for label in ("small", "big"):  # warm-up, not recorded
        t = tenants[label]
        for _ in range(20):
            got = await todos.claim_next(t.core, t.caller, lease_ttl_seconds=LEASE_TTL)
            await todos.complete(t.core, t.caller, got.todo["id"])
    loads = []
    for r in range(rounds):
        order = ("small", "big") if r % 2 == 0 else ("big", "small")
        for label in order:
            t = tenants[label]
            got_round = []
            for _ in range(per_round):
                t0 = time.perf_counter()
                got = await todos.claim_next(t.core, t.caller, lease_ttl_seconds=LEASE_TTL)
                dt = time.perf_counter() - t0
                if got is None:
                    raise SystemExit("bench: latency backlog ran out")
                await todos.complete(t.core, t.caller, got.todo["id"])
                got_round.append(dt)
            samples[label].extend(got_round)
            per_round_p50[label].append(statistics.median(got_round))
            loads.append(loadavg()[0])
            log(f"  round {r + 1}/{rounds}  {label:<5} p50 {statistics.median(got_round) * 1000:6.2f} ms")
    return {"samples": samples, "per_round_p50": per_round_p50, "loadavg_1m": loads}


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))  # nearest rank
    return s[k]


async def explain_claim(tenant: Tenant, statement: str = "claim_next_one") -> str:
    """EXPLAIN ANALYZE of the core's claim statement on this backlog, rolled back."""
    params = {**todos._claim_params(tenant.core, tenant.caller, LEASE_TTL, None, None)[0], "queue": QUEUE}
    async with await psycopg.AsyncConnection.connect(tenant.uri) as conn:
        cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + getattr(Q.todos, statement), params)
        plan = "\n".join(r[0] for r in await cur.fetchall())
        await conn.rollback()
    return plan


async def generic_plan(tenant: Tenant, statement: str = "claim_next_one") -> str:
    """EXPLAIN (GENERIC_PLAN) of a core statement: the plan its prepared statement runs with."""
    names: list[str] = []

    def placeholder(m: re.Match) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", placeholder, getattr(Q.todos, statement))
    async with await psycopg.AsyncConnection.connect(tenant.uri, autocommit=True) as conn:
        cur = await conn.execute("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + text, prepare=False)
        return "\n".join(r[0] for r in await cur.fetchall())


# --------------------------------------------------------------------------------------- report


def variant_cpu_report(tput: dict, worker_counts: list[int], compare: list[str] | None) -> str:
    """One row per variant: cycles/s and its ratio to core, CPU per cycle of this Python process and of
    PostgreSQL, and PostgreSQL's CPU per cycle over core's and over the bare loop's (issue 17: within
    1.2x of the bare statements). Ratios are medians of per-round ratios (the variants of one round run
    back to back, so they share that round's load)."""
    r, cpu = tput["rounds"], tput["cpu_us"]
    rows = []
    for w in worker_counts:
        for v in r:
            pg = [x[1] for x in cpu[v][w]]
            known = None not in pg
            rows.append([str(w), v, f"{statistics.median(r[v][w]):.0f}", f"{paired_ratio(r[v][w], r['core'][w]):.2f}",
                         f"{statistics.median(x[0] for x in cpu[v][w]):.0f}",
                         f"{statistics.median(pg):.0f}" if known else "?",
                         f"{paired_ratio(pg, [x[1] for x in cpu['core'][w]]):.2f}" if known else "?",
                         f"{paired_ratio(pg, [x[1] for x in cpu['bare'][w]]):.2f}" if known else "?"])
    head = ("variants, CPU per cycle in microseconds (medians of the rounds)"
            + ("; compare-X = the core's Python path with the statements of X" if compare else "")
            + "; levers: " + " ".join(lever_statements.__doc__.split(":", 1)[1].split()))
    return head + "\n" + fmt_table(rows, ["workers", "variant", "cycles/s", "/core", "Python", "PostgreSQL",
                                          "PG /core", "PG /bare"])


def fmt_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(str(c).rjust(w) if i else str(c).ljust(w)
                                 for i, (c, w) in enumerate(zip(r, widths, strict=True))) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


class _SkipLatency(Exception):
    """--skip-latency: leave the latency part out (the batch comparison needs only throughput)."""


def paired_ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


async def main(args: argparse.Namespace) -> int:
    log = (lambda *_: None) if args.silent else (lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.notes:
        return await notes_main(args, log)
    worker_counts = [int(x) for x in args.workers.split(",")]
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = loadavg()
    t_start = time.perf_counter()
    info = machine_info()
    global SERVER_CPU
    with postgres_server() as (server_uri, server_how, pgdata):
        SERVER_CPU = ServerCpu(pgdata)
        dbs = Databases(server_uri)
        tenants: list[Tenant] = []
        raw_conns: list[psycopg.AsyncConnection] = []
        try:
            facts = await server_facts(server_uri)
            log(f"PostgreSQL {facts['server_version']} ({server_how}); {info['nproc']} CPUs {info['cpu']}")

            if args.latency_only:
                return await latency_only(args, dbs, tenants, facts, server_how, info, started, load_start, t_start,
                                          log)

            # ---- throughput
            tp = await open_tenant(await dbs.create("tp"), pool_max=20)
            tenants.append(tp)
            await tp.load(args.backlog)
            await tp.load_history(args.history)
            await tp.analyze()
            if args.pg_cycles:
                pg_lines = await pg_cycles(tp, args.levers, args.compare, args.rounds, args.pg_cycles, log)
                print(f"Store benchmark, {started}, --pg-cycles; machine: {info['nproc']} CPUs ({info['cpu']}),"
                      f" PostgreSQL {facts['server_version']} ({server_how}); load average (1 min) {load_start[0]:.2f}"
                      f" at start, {loadavg()[0]:.2f} at end\n" + pg_lines)
                return 0
            for _ in range(max(worker_counts)):
                raw_conns.append(await psycopg.AsyncConnection.connect(tp.uri, autocommit=True))
            variants = make_variants(tp, raw_conns, args.batch, args.levers, args.compare)
            log(f"throughput: {args.rounds} rounds x {len(worker_counts)} worker counts x {len(variants)} variants"
                f" x {args.seconds:g} s")
            tput = await throughput(tp, variants, worker_counts=worker_counts, rounds=args.rounds,
                                    seconds=args.seconds, backlog=args.backlog, log=log)

            # ---- latency
            lat = plan_big = generic_big = big_load_s = None
            if args.skip_latency:
                raise _SkipLatency
            small = await open_tenant(await dbs.create("small"), pool_max=4)
            big = await open_tenant(await dbs.create("big"), pool_max=4)
            tenants += [small, big]
            used = args.latency_rounds * args.latency_samples + 20
            await small.load(args.small + used)
            log(f"bulk-loading {args.big + used:,} pending todos")
            big_load_s = await big.load(args.big + used, log)
            log(f"  loaded in {big_load_s:.1f} s")
            await small.load_history(args.history)
            await big.load_history(args.history)
            await small.analyze()
            await big.analyze()
            lat = await claim_latency(small, big, rounds=args.latency_rounds, per_round=args.latency_samples,
                                      log=log)
            plan_big = await explain_claim(big)
            generic_big = await generic_plan(big)
        except _SkipLatency:
            pass
        finally:
            for c in raw_conns:
                await c.close()
            for t in tenants:
                await t.core.pool.close()
            await dbs.drop_all()
    load_end = loadavg()
    total_s = time.perf_counter() - t_start

    # ---- report
    med = {v: {w: statistics.median(xs) for w, xs in by_w.items()} for v, by_w in tput["rounds"].items()}
    rows = []
    for w in worker_counts:
        r = tput["rounds"]
        rows.append([str(w)] + [f"{med[v][w]:.0f}" for v in ("core", "no-attempts", "core-sql", "bare")] + [
            f"{paired_ratio(r['core'][w], r['no-attempts'][w]):.2f}",
            f"{paired_ratio(r['core'][w], r['bare'][w]):.2f}",
            f"{paired_ratio(r['core'][w], r['core-sql'][w]):.2f}",
            f"{paired_ratio(r['core-sql'][w], r['bare'][w]):.2f}"])
    tput_table = fmt_table(rows, ["workers", "core", "no-attempts", "core-sql", "bare",
                                  "core/no-att", "core/bare", "core/core-sql", "core-sql/bare"])

    def cpu_cell(v: str, w: int) -> str:
        xs = tput["cpu_us"][v][w]
        py = statistics.median(x[0] for x in xs)
        if xs[0][1] is None:
            return f"{py:.0f} + ?"
        return f"{py:.0f} + {statistics.median(x[1] for x in xs):.0f}"

    names = tuple(tput["rounds"])
    cpu_table = fmt_table([[str(w)] + [cpu_cell(v, w) for v in names] for w in worker_counts],
                          ["workers"] + list(names))

    batch_lines: list[str] = []
    r = tput["rounds"]
    if args.batch:
        brows = []
        for w in worker_counts:
            brows.append([str(w)] + [f"{med[v][w]:.0f}" for v in ("core", "batch", "batch-no-attempts", "round",
                                                                  "round-no-attempts")] + [
                f"{paired_ratio(r['batch'][w], r['core'][w]):.2f}",
                f"{paired_ratio(r['batch'][w], r['batch-no-attempts'][w]):.2f}",
                f"{paired_ratio(r['round'][w], r['batch'][w]):.2f}",
                f"{paired_ratio(r['round'][w], r['round-no-attempts'][w]):.2f}"])
        batch_lines = [
            "",
            f"batched: claim_next_batch(max_todos={args.batch}) + complete_batch, todos/s (same rounds; a cycle"
            " is one todo claimed and completed, its attempt opened and closed)",
            fmt_table(brows, ["workers", "core (per claim)", "batch", "batch-no-attempts", "round",
                              "round-no-attempts", "batch/core", "batch/no-att", "round/batch",
                              "round/no-att"]),
        ]
    if args.levers or args.compare:
        batch_lines += ["", variant_cpu_report(tput, worker_counts, args.compare)]
    if lat is None:
        return _report_without_latency(args, tput, tput_table, cpu_table, batch_lines, worker_counts, started,
                                       total_s, info, facts, server_how, load_start, load_end)
    s, b = lat["samples"]["small"], lat["samples"]["big"]
    lat_rows = [[f"{args.small:,}", f"{pct(s, 50) * 1000:.2f}", f"{pct(s, 99) * 1000:.2f}", str(len(s))],
                [f"{args.big:,}", f"{pct(b, 50) * 1000:.2f}", f"{pct(b, 99) * 1000:.2f}", str(len(b))]]
    lat_table = fmt_table(lat_rows, ["pending", "p50 ms", "p99 ms", "samples"])
    p50_ratio = pct(b, 50) / pct(s, 50)
    p50_ratio_paired = paired_ratio(lat["per_round_p50"]["big"], lat["per_round_p50"]["small"])

    w_target = 4 if 4 in worker_counts else worker_counts[0]
    r = tput["rounds"]
    targets = [
        (f"core >= 0.90 x no-attempts at {w_target} workers (REQ-18)",
         paired_ratio(r["core"][w_target], r["no-attempts"][w_target]), 0.90, ">="),
        (f"core >= 0.85 x bare SQL at {w_target} workers",
         paired_ratio(r["core"][w_target], r["bare"][w_target]), 0.85, ">="),
        ("claim_next p50 at big backlog <= 1.5 x p50 at 1,000", p50_ratio, 1.5, "<="),
    ]
    target_lines = []
    for name, value, limit, op in targets:
        ok = value >= limit if op == ">=" else value <= limit
        target_lines.append(f"- {name}: {value:.2f} -> {'met' if ok else 'MISSED'}")

    all_loads = tput["loadavg_1m"] + lat["loadavg_1m"]
    machine = (f"{info['nproc']} CPUs ({info['cpu']}), {info['ram_gib']} GiB RAM, PostgreSQL "
               f"{facts['server_version']} ({server_how}; shared_buffers {facts['shared_buffers']}, "
               f"synchronous_commit {facts['synchronous_commit']}, fsync {facts['fsync']}), Python "
               f"{info['python']}, psycopg {info['psycopg']}, event loop {args.loop}")
    load_line = (f"load average (1 min): {load_start[0]:.2f} at start, {min(all_loads):.2f}-{max(all_loads):.2f}"
                 f" (median {statistics.median(all_loads):.2f}) during, {load_end[0]:.2f} at end")
    def scans(plan: str) -> list[str]:
        return [ln.strip().removeprefix("-> ").strip() for ln in plan.splitlines()
                if "Scan" in ln and "CTE Scan" not in ln and "Subquery Scan" not in ln]

    generic_scans = scans(generic_big)
    timings = [ln.strip() for ln in plan_big.splitlines() if ln.startswith(("Planning Time", "Execution Time"))]
    seq = [ln for ln in generic_scans if "Seq Scan" in ln]

    out = "\n".join([
        f"Store benchmark, {started}, {'quick' if args.quick else 'full'} run, {total_s:.0f} s",
        f"machine: {machine}",
        load_line,
        "",
        f"claim_next + complete cycles/s (median of {args.rounds} rounds of {args.seconds:g} s; ratios are the"
        " median of per-round ratios)",
        tput_table,
        *batch_lines,
        "",
        "CPU per cycle, microseconds: this Python process + PostgreSQL (median of the rounds)",
        cpu_table,
        "",
        f"claim_next latency (core path, {args.latency_rounds} alternating rounds of {args.latency_samples})",
        lat_table,
        f"p50 ratio {p50_ratio:.2f} (median of per-round p50 ratios {p50_ratio_paired:.2f});"
        f" big backlog bulk-loaded in {big_load_s:.1f} s",
        "",
        f"claim_next_one at {args.big:,} pending, generic (prepared) plan: "
        + ("index scans only" if not seq else "SEQUENTIAL SCANS: " + "; ".join(seq)),
        *("  " + ln for ln in generic_scans),
        "  EXPLAIN ANALYZE (custom plan, rolled back): " + ", ".join(timings),
        "",
        "targets:",
        *target_lines,
    ])
    print(out)
    if args.explain:
        print("\ngeneric plan:\n" + generic_big + "\n\nEXPLAIN ANALYZE:\n" + plan_big)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "started": started, "quick": args.quick, "seconds_total": total_s, "machine": info,
            "postgres": facts, "server": server_how, "loop": args.loop,
            "loadavg": {"start": load_start, "end": load_end, "during": all_loads},
            "throughput": {v: {str(w): xs for w, xs in by_w.items()} for v, by_w in tput["rounds"].items()},
            "cpu_us_python_postgres": {v: {str(w): xs for w, xs in by_w.items()} for v, by_w in tput["cpu_us"].items()},
            "latency_ms": {k: {"p50": pct(v, 50) * 1000, "p99": pct(v, 99) * 1000, "n": len(v)}
                           for k, v in lat["samples"].items()},
            "latency_backlogs": {"small": args.small, "big": args.big},
            "targets": [{"name": n, "value": v, "limit": lim, "op": op} for n, v, lim, op in targets],
            "plan_big": plan_big, "generic_plan_big": generic_big,
        }, indent=2, default=str))
    return 0


async def latency_only(args: argparse.Namespace, dbs: Databases, tenants: list[Tenant], facts: dict, server_how: str,
                       info: dict, started: str, load_start: tuple[float, float, float], t_start: float, log) -> int:
    """--latency-only: the claim latency by backlog alone (the big backlog may be 10,000,000), with the
    sizes on disk of the big database and the generic plan of the claim statement there."""
    small = await open_tenant(await dbs.create("small"), pool_max=4)
    big = await open_tenant(await dbs.create("big"), pool_max=4)
    tenants += [small, big]
    used = args.latency_rounds * args.latency_samples + 20
    await small.load(args.small + used)
    log(f"bulk-loading {args.big + used:,} pending todos")
    big_load_s = await big.load(args.big + used, log)
    log(f"  loaded in {big_load_s:.1f} s")
    await small.load_history(args.history)
    await big.load_history(args.history)
    t0 = time.perf_counter()
    await small.analyze()
    await big.analyze()
    analyze_s = time.perf_counter() - t0
    async with big.core.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT pg_size_pretty(pg_relation_size('todos')) AS heap, pg_size_pretty(pg_indexes_size('todos'))"
            " AS indexes, pg_size_pretty(pg_database_size(current_database())) AS db,"
            " (SELECT count(*) FROM todos WHERE state = 'pending') AS pending")
        sizes = await cur.fetchone()
    log(f"big database: {sizes['pending']:,} pending; todos heap {sizes['heap']}, its indexes {sizes['indexes']},"
        f" database {sizes['db']}")
    lat = await claim_latency(small, big, rounds=args.latency_rounds, per_round=args.latency_samples, log=log)
    plan_big = await explain_claim(big)
    generic_big = await generic_plan(big)
    s, b = lat["samples"]["small"], lat["samples"]["big"]
    table = fmt_table([[f"{args.small:,}", f"{pct(s, 50) * 1000:.2f}", f"{pct(s, 99) * 1000:.2f}", str(len(s))],
                       [f"{args.big:,}", f"{pct(b, 50) * 1000:.2f}", f"{pct(b, 99) * 1000:.2f}", str(len(b))]],
                      ["pending", "p50 ms", "p99 ms", "samples"])
    p50_ratio = pct(b, 50) / pct(s, 50)
    paired = paired_ratio(lat["per_round_p50"]["big"], lat["per_round_p50"]["small"])
    scans = [ln.strip().removeprefix("-> ").strip() for ln in generic_big.splitlines()
             if "Scan" in ln and "CTE Scan" not in ln and "Subquery Scan" not in ln]
    seq = [ln for ln in scans if "Seq Scan" in ln]
    timings = [ln.strip() for ln in plan_big.splitlines() if ln.startswith(("Planning Time", "Execution Time"))]
    loads = lat["loadavg_1m"]
    out = "\n".join([
        f"Store benchmark, {started}, claim latency only (--latency-only), {time.perf_counter() - t_start:.0f} s",
        f"machine: {info['nproc']} CPUs ({info['cpu']}), {info['ram_gib']} GiB RAM, PostgreSQL"
        f" {facts['server_version']} ({server_how}; shared_buffers {facts['shared_buffers']}, synchronous_commit"
        f" {facts['synchronous_commit']}, fsync {facts['fsync']}), Python {info['python']}, psycopg {info['psycopg']},"
        f" event loop {args.loop}",
        f"load average (1 min): {load_start[0]:.2f} at start, {min(loads):.2f}-{max(loads):.2f} during the timed"
        f" rounds, {loadavg()[0]:.2f} at end",
        f"big backlog: {args.big + used:,} pending bulk-loaded in {big_load_s:.0f} s; VACUUM ANALYZE of both"
        f" {analyze_s:.0f} s; todos heap {sizes['heap']}, its indexes {sizes['indexes']}, database {sizes['db']}",
        "",
        f"claim_next latency (core path, {args.latency_rounds} alternating rounds of {args.latency_samples})",
        table,
        f"p50 ratio {p50_ratio:.2f} (median of per-round p50 ratios {paired:.2f}); per-round p50 ms: small "
        + ", ".join(f"{x * 1000:.2f}" for x in lat["per_round_p50"]["small"]) + "; big "
        + ", ".join(f"{x * 1000:.2f}" for x in lat["per_round_p50"]["big"]),
        "",
        f"claim_next_one at {args.big:,} pending, generic (prepared) plan: "
        + ("index scans only" if not seq else "SEQUENTIAL SCANS: " + "; ".join(seq)),
        *("  " + ln for ln in scans),
        "  EXPLAIN ANALYZE (custom plan, rolled back): " + ", ".join(timings),
        "",
        f"target: claim_next p50 at {args.big:,} pending <= 1.5 x p50 at {args.small:,}: {p50_ratio:.2f} -> "
        + ("met" if p50_ratio <= 1.5 else "MISSED"),
    ])
    print(out)
    if args.explain:
        print("\ngeneric plan:\n" + generic_big + "\n\nEXPLAIN ANALYZE:\n" + plan_big)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "started": started, "machine": info, "postgres": facts, "server": server_how, "loop": args.loop,
            "big_load_seconds": big_load_s, "analyze_seconds": analyze_s, "sizes": sizes,
            "latency_ms": {k: {"p50": pct(v, 50) * 1000, "p99": pct(v, 99) * 1000, "n": len(v)}
                           for k, v in lat["samples"].items()},
            "per_round_p50_ms": {k: [x * 1000 for x in v] for k, v in lat["per_round_p50"].items()},
            "latency_backlogs": {"small": args.small, "big": args.big}, "loadavg_1m": loads,
            "plan_big": plan_big, "generic_plan_big": generic_big,
        }, indent=2, default=str))
    return 0


def _report_without_latency(args, tput, tput_table, cpu_table, batch_lines, worker_counts, started, total_s,
                            info, facts, server_how, load_start, load_end) -> int:
    r = tput["rounds"]
    targets = []
    for w in worker_counts:
        targets.append((f"core >= 0.90 x no-attempts at {w} workers (REQ-18)",
                        paired_ratio(r["core"][w], r["no-attempts"][w]), 0.90))
        if args.batch:
            targets.append((f"batch >= 0.90 x batch-no-attempts at {w} workers (REQ-18)",
                            paired_ratio(r["batch"][w], r["batch-no-attempts"][w]), 0.90))
            targets.append((f"round >= 0.90 x round-no-attempts at {w} workers (REQ-18)",
                            paired_ratio(r["round"][w], r["round-no-attempts"][w]), 0.90))
    machine = (f"{info['nproc']} CPUs ({info['cpu']}), {info['ram_gib']} GiB RAM, PostgreSQL "
               f"{facts['server_version']} ({server_how}; shared_buffers {facts['shared_buffers']}, "
               f"synchronous_commit {facts['synchronous_commit']}, fsync {facts['fsync']}), Python "
               f"{info['python']}, psycopg {info['psycopg']}, event loop {args.loop}")
    loads = tput["loadavg_1m"]
    out = "\n".join([
        f"Store benchmark, {started}, throughput only (--skip-latency), {total_s:.0f} s",
        f"machine: {machine}",
        f"load average (1 min): {load_start[0]:.2f} at start, {min(loads):.2f}-{max(loads):.2f} during,"
        f" {load_end[0]:.2f} at end",
        "",
        f"claim_next + complete cycles/s (median of {args.rounds} rounds of {args.seconds:g} s; ratios are the"
        " median of per-round ratios)",
        tput_table,
        *batch_lines,
        "",
        "CPU per cycle (per todo), microseconds: this Python process + PostgreSQL (median of the rounds)",
        cpu_table,
        "",
        "targets:",
        *(f"- {n}: {v:.2f} -> {'met' if v >= lim else 'MISSED'}" for n, v, lim in targets),
    ])
    print(out)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "started": started, "seconds_total": total_s, "machine": info, "postgres": facts,
            "server": server_how, "loop": args.loop, "batch": args.batch,
            "throughput": {v: {str(w): xs for w, xs in by_w.items()} for v, by_w in r.items()},
            "cpu_us_python_postgres": {v: {str(w): xs for w, xs in by_w.items()} for v, by_w in tput["cpu_us"].items()},
        }, indent=2, default=str))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run: 2 rounds, 1.5 s, big backlog 100,000")
    p.add_argument("--workers", default="1,4,16", help="worker counts, comma separated (default 1,4,16)")
    p.add_argument("--rounds", type=int, help="throughput rounds (default 5, quick 2)")
    p.add_argument("--seconds", type=float, help="seconds per measurement (default 4, quick 1.5)")
    p.add_argument("--backlog", type=int, help="pending todos kept for the throughput loops (default 30,000;"
                                                " 300,000 with --batch)")
    p.add_argument("--batch", type=int, default=0, metavar="N",
                   help="also measure claim_next_batch(max_todos=N) + complete_batch, with and without attempt"
                        " writes (1-100)")
    p.add_argument("--skip-latency", action="store_true", help="measure throughput only")
    p.add_argument("--latency-only", action="store_true",
                   help="measure the claim latency by backlog only (no throughput), e.g. with --big 10000000")
    p.add_argument("--levers", nargs="?", const=",".join(LEVERS), default="",
                   help="also measure the per-claim levers of issue 17, each as its own variant: all of them, or"
                        f" a comma-separated list of {', '.join(LEVERS)}, or of combinations such as cap+prior"
                        " (see lever_statements)")
    p.add_argument("--compare", metavar="TREE_OR_REV", action="append",
                   help="also run the core's Python path with another tree's todos.sql and fragments.sql (a"
                        " directory, e.g. from `git worktree add`, or a git revision), in the same rounds;"
                        " may be given more than once")
    p.add_argument("--history", type=int, default=20_000,
                   help="done todos with one attempt each, loaded into every database first (default 20,000)")
    p.add_argument("--small", type=int, default=1_000, help="small latency backlog (default 1,000)")
    p.add_argument("--big", type=int, help="big latency backlog (default 1,000,000, quick 100,000)")
    p.add_argument("--latency-rounds", type=int, help="alternating latency rounds (default 6, quick 2)")
    p.add_argument("--latency-samples", type=int, help="claims timed per latency round (default 250, quick 100)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                   help="event loop (uvloop, as uvicorn uses it when installed)")
    p.add_argument("--explain", action="store_true", help="print the full claim_next plan at the big backlog")
    p.add_argument("--notes", action="store_true",
                   help="measure heartbeat notes and claim_next over attempts with notes (issue 16), nothing else")
    p.add_argument("--note-bytes", type=int, default=200, help="bytes per note with --notes (default 200)")
    p.add_argument("--takeovers", type=int, default=20_000,
                   help="lapsed todos per queue for the claim variants of --notes (default 20,000)")
    p.add_argument("--pg-cycles", type=int, default=0, metavar="N",
                   help="only PostgreSQL's CPU per claim + complete of the core's, --compare trees', --levers and"
                        " the bare statements, N cycles per variant and round, interleaved cycle by cycle")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--silent", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 5)
    args.seconds = args.seconds or (1.5 if quick else 4.0)
    args.big = args.big or (100_000 if quick else 1_000_000)
    args.latency_rounds = args.latency_rounds or (2 if quick else 6)
    args.latency_samples = args.latency_samples or (100 if quick else 250)
    args.backlog = args.backlog or (300_000 if args.batch else 30_000)
    args.levers = tuple(x for x in args.levers.split(",") if x)
    unknown = {x for lever in args.levers for x in lever.split("+")} - set(LEVERS)
    if unknown:
        p.error(f"--levers: unknown {', '.join(sorted(unknown))} (known: {', '.join(LEVERS)})")
    if args.batch and not 1 <= args.batch <= 100:
        p.error("--batch must be from 1 to 100")
    return args


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
