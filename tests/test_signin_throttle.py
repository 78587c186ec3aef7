"""Sign-in throttling and the password-check gate (issue 12, items 2 and 3), attacked over real HTTP
from several loopback addresses: guesses from one address do not lock the account out from another;
the attacking address is told to wait (429 + Retry-After); a global ceiling bounds password checks;
and while a crowd of wrong sign-ins arrives, `/healthz` and MCP tool calls keep their latency."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest
from starlette.requests import Request

from account_kit import client_from, login_token, try_sign_in
from board_kit import PASSWORD
from conftest import core_for, create_database, make_settings, run_async, start_process_server, start_thread_server
from mcp_support import vend
from switchboard.core import humans
from switchboard.web.board import login
from switchboard.web.board.kit import Board
from switchboard.web.board.throttle import GLOBAL_BURST, PAIR_FREE_FAILURES, REFUSAL_LOG_SECONDS, LoginThrottle


def _retry_after(r: httpx.Response) -> int:
    value = int(r.headers["retry-after"])
    assert value >= 1
    return value


async def test_guesses_from_one_address_do_not_lock_the_account_out_elsewhere(board_server):
    victim = await board_server.human("victim")
    async with client_from(board_server.url, "127.0.0.2") as attacker:
        token = await login_token(attacker)
        answers = await asyncio.gather(*(try_sign_in(attacker, victim.name, f"wrong-guess-{i}", token)
                                         for i in range(60)))
        statuses = Counter(r.status_code for r in answers)
        assert set(statuses) == {401, 429}, statuses
        # Counted as they start: concurrent guesses cannot all slip past the count.
        assert statuses[401] <= PAIR_FREE_FAILURES, statuses
        # The attacking address is told to wait, and its guesses are not checked meanwhile.
        assert all(_retry_after(r) and "Too many failed sign-ins" in r.text
                   for r in answers if r.status_code == 429)
    # The owner, from anywhere else, signs in at once.
    async with client_from(board_server.url, "127.0.0.3") as owner:
        r = await try_sign_in(owner, victim.name, PASSWORD)
        assert r.status_code == 303 and r.cookies.get("sb_session"), (r.status_code, r.headers.get("retry-after"))


async def test_a_success_takes_back_its_count(board_server):
    human = await board_server.human("steady")
    async with client_from(board_server.url, "127.0.0.4") as client:
        for _ in range(PAIR_FREE_FAILURES - 1):
            assert (await try_sign_in(client, human.name, "not-the-password")).status_code == 401
        assert (await try_sign_in(client, human.name)).status_code == 303
        for _ in range(PAIR_FREE_FAILURES - 1):  # the slate was clean again
            assert (await try_sign_in(client, human.name, "not-the-password")).status_code == 401
        assert (await try_sign_in(client, human.name)).status_code == 303


async def test_the_counts_hold_across_processes_and_restarts(fresh_db):
    """Guesses spread over the serving processes behind a proxy, or a process restarted, buy no more
    free failures: the counts are rows every process reads (D64), kept by the SHA-256 of their key."""
    uri = fresh_db
    first, second = start_thread_server(make_settings(uri)), start_thread_server(make_settings(uri))
    try:
        victim = await asyncio.to_thread(_add_human, uri, "spread")
        answers = []
        for i in range(PAIR_FREE_FAILURES + 3):  # alternately to each process, as a round robin sends them
            async with client_from((first, second)[i % 2].url, "127.0.0.9") as client:
                answers.append((await try_sign_in(client, victim, f"wrong-{i}")).status_code)
        assert answers[:PAIR_FREE_FAILURES] == [401] * PAIR_FREE_FAILURES and 429 in answers, answers
        first.stop()
        first = start_thread_server(make_settings(uri))  # a restart forgets nothing
        async with client_from(first.url, "127.0.0.9") as client:
            assert (await try_sign_in(client, victim, PASSWORD)).status_code == 429
        async with client_from(first.url, "127.0.0.10") as client:  # another address is not held up
            assert (await try_sign_in(client, victim, PASSWORD)).status_code == 303
        with psycopg.connect(uri) as conn:
            keys = [bytes(r[0]) for r in conn.execute("SELECT key_hash FROM signin_failures").fetchall()]
        assert keys and all(len(k) == 32 and victim.encode() not in k for k in keys)
    finally:
        first.stop()
        second.stop()


def _add_human(uri: str, prefix: str) -> str:
    async def go():
        async with core_for(uri) as core:
            return (await humans.add(core, f"{prefix}{os.urandom(3).hex()}", PASSWORD)).name

    return run_async(go())


async def test_a_global_ceiling_bounds_password_checks(board_server):
    """Many addresses, each under its own limits: past the ceiling the server asks everyone to wait."""
    board_server.board.throttle = LoginThrottle()
    crowd = GLOBAL_BURST * 3

    async def guess(i: int) -> httpx.Response:
        async with client_from(board_server.url, f"127.0.1.{i + 1}") as client:
            return await try_sign_in(client, f"nobody{i}", "wrong-password", await login_token(client))

    answers = await asyncio.gather(*(guess(i) for i in range(crowd)))
    statuses = Counter(r.status_code for r in answers)
    busy = [r for r in answers if r.status_code == 429]
    assert statuses[401] < crowd and len(busy) >= crowd // 3, statuses
    assert all(_retry_after(r) <= 2 and "on this server" in r.text for r in busy)
    board_server.board.throttle = LoginThrottle()  # the next test starts with a full bucket


def test_refusals_are_logged_at_most_once_a_second_per_reason():
    now = [100.0]
    throttle = LoginThrottle(clock=lambda: now[0])
    assert throttle.quiet("busy") == 0  # the first is logged at once
    assert [throttle.quiet("busy") for _ in range(5)] == [None] * 5  # the next are counted
    assert throttle.quiet("throttled") == 0  # another reason has its own second
    now[0] += REFUSAL_LOG_SECONDS
    assert throttle.quiet("busy") == 5  # the next line carries the count
    assert throttle.quiet("busy") is None


@pytest.mark.parametrize("body", [b"name=a&password=b&login_token=c", b"name=a+b%20c&password=%ff%fe&x",
                                  b"name=1&name=2&&login_token=%E2%82%AC", b"a=1;b=2&=c", b"a=%zz", b""])
async def test_the_sign_in_form_is_read_as_starlettes_form_parser_reads_it(body):
    scope = {"type": "http", "method": "POST", "path": "/login", "query_string": b"",
             "headers": [(b"content-type", b"application/x-www-form-urlencoded"),
                         (b"content-length", str(len(body)).encode())]}

    def receive_once():
        sent = False

        async def receive() -> dict:
            nonlocal sent
            assert not sent
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return receive

    expected = await Request(scope, receive_once()).form()
    got = await login._posted_form(Board.__new__(Board), Request(scope, receive_once()))
    assert got == {k: expected.get(k) for k in expected}


# ------------------------------------------------------------------------------------ latency

ATTACK_ADDRESSES = 10
ATTACK_PER_ADDRESS = 19  # under the per-address free failures: every guess is worth a password check
ATTACK_SCRIPT = Path(__file__).with_name("signin_attack.py")
IDLE_SECONDS = 3.0  # each idle window, before and after the attack
PROBE_PAUSE = 0.01
# p99 under attack within twice the idle p99 of the same round, plus 20 ms for a two-core machine
# loaded by other work (argon2's four lanes, at nice 19, still cost the loop a few ms of wake-up
# latency there: measured 1.2-3.1x at load averages of 3 to 10). What this guards against misses it
# by far: argon2 on the event loop (p99 1.4-3 s) or its lanes at normal priority (5.6-6.8x).
P99_FACTOR = 2.0
P99_MARGIN = 0.020
ATTACKER_NICE = 10
ROUNDS = 2


def _summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"n": len(ordered), "median": statistics.median(ordered),
            "p90": ordered[int(0.9 * (len(ordered) - 1))], "p99": ordered[int(0.99 * (len(ordered) - 1))]}


class _Conn:
    """One keep-alive HTTP/1.1 connection on asyncio streams: a client light enough (well under a
    millisecond of CPU per request) that the probe's latencies are the server's, not its own."""

    def __init__(self, url: str) -> None:
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                      body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}",
                 *(f"{k}: {v}" for k, v in (headers or {}).items())]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        status = int((await self.reader.readline()).split()[1])
        got: dict[str, str] = {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            got[name.strip().lower()] = value.strip()
        length = int(got.get("content-length", "0"))
        return status, got, (await self.reader.readexactly(length)) if length else b""

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _McpProbe:
    """A session-era MCP session on one keep-alive connection, calling `list_todos`."""

    def __init__(self, url: str, agent) -> None:
        self.conn = _Conn(url)
        self.path = f"/mcp/{agent.slug}"
        self.headers = {"Authorization": f"Bearer {agent.credential}", "Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        self.ids = 0

    async def post(self, method: str, params: dict | None = None, notify: bool = False) -> tuple[int, bytes]:
        msg: dict = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
        if not notify:
            self.ids += 1
            msg["id"] = self.ids
        status, headers, body = await self.conn.request("POST", self.path, self.headers, json.dumps(msg).encode())
        if "mcp-session-id" in headers:
            self.headers.update({"Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"})
        return status, body

    async def open(self) -> None:
        status, _ = await self.post("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                                   "clientInfo": {"name": "probe", "version": "0"}})
        assert status == 200
        assert (await self.post("notifications/initialized", notify=True))[0] == 202

    async def call(self) -> None:
        status, body = await self.post("tools/call", {"name": "list_todos", "arguments": {}})
        assert status == 200 and not json.loads(body)["result"].get("isError"), body[:300]


async def _probe(url: str, agent, stop: asyncio.Event) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Sequential `/healthz` GETs and MCP `list_todos` calls, each on its own kept-alive connection,
    until `stop` is set: (monotonic time, latency in seconds) of each."""
    health: list[tuple[float, float]] = []
    calls: list[tuple[float, float]] = []

    async def healthz() -> None:
        conn = _Conn(url)
        try:
            while not stop.is_set():
                t = time.perf_counter()
                status, _, _ = await conn.request("GET", "/healthz")
                health.append((t, time.perf_counter() - t))
                assert status == 200
                await asyncio.sleep(PROBE_PAUSE)
        finally:
            conn.close()

    async def mcp() -> None:
        probe = _McpProbe(url, agent)
        await probe.open()
        try:
            while not stop.is_set():
                t = time.perf_counter()
                await probe.call()
                calls.append((t, time.perf_counter() - t))
                await asyncio.sleep(PROBE_PAUSE)
        finally:
            probe.conn.close()

    await asyncio.gather(healthz(), mcp())
    return health, calls


@pytest.fixture
def process_server(pg_server):
    uri = create_database(pg_server)

    async def seed():
        async with core_for(uri) as core:
            agent = await vend(core, "latency-owner", queues=["inbox"])
            await humans.add(core, "latency-victim", PASSWORD)
            return agent

    agent = run_async(seed())
    # The MCP rate limit is lifted: the probe calls as fast as it can, and the subject is sign-in.
    srv = start_process_server(uri, env={"SWITCHBOARD_RATE_LIMIT_RPS": "10000",
                                         "SWITCHBOARD_RATE_LIMIT_BURST": "10000"})
    # Its log goes to a pipe: drain it, or a full pipe would stall the server.
    threading.Thread(target=srv.process.stdout.read, daemon=True).start()
    yield srv, agent
    srv.stop()
    name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _attack_round(srv, agent, first_address: str) -> tuple[Counter, dict[str, dict], list[str]]:
    """Probe idle, attack, probe idle again: (the attack's statuses, the figures, the bounds missed)."""
    stop = asyncio.Event()
    probing = asyncio.create_task(_probe(srv.url, agent, stop))
    await asyncio.sleep(IDLE_SECONDS)
    attack_from = time.perf_counter()
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, str(ATTACK_SCRIPT), srv.url, first_address, str(ATTACK_ADDRESSES), str(ATTACK_PER_ADDRESS),
        stdout=asyncio.subprocess.PIPE, preexec_fn=lambda: os.nice(ATTACKER_NICE))
    out, _ = await asyncio.wait_for(attacker.communicate(), 180)
    attack_until = time.perf_counter()
    await asyncio.sleep(IDLE_SECONDS)
    stop.set()
    health, calls = await probing
    assert attacker.returncode == 0
    statuses = Counter(json.loads(out))

    def windows(samples: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        idle = [lat for t, lat in samples if t + lat < attack_from or t > attack_until]
        busy = [lat for t, lat in samples if attack_from <= t <= attack_until]
        return idle, busy

    figures: dict[str, dict] = {}
    missed: list[str] = []
    for name, samples in (("healthz", health), ("mcp", calls)):
        idle, busy = windows(samples)
        i, b = figures[f"idle {name}"], figures[f"attack {name}"] = _summary(idle), _summary(busy)
        assert b["n"] >= 50, (name, b)
        for stat, factor, margin in (("median", 2, 0.002), ("p90", 2, 0.005), ("p99", P99_FACTOR, P99_MARGIN)):
            if b[stat] > factor * i[stat] + margin:
                missed.append(f"{name} {stat} {b[stat] * 1000:.1f} ms > {factor} x {i[stat] * 1000:.1f} ms "
                              f"+ {margin * 1000:.0f} ms")
    return statuses, figures, missed


async def test_healthz_and_mcp_keep_their_latency_during_a_sign_in_attack(process_server):
    """A crowd of wrong sign-ins while light probes call `/healthz` and MCP `list_todos` in a row.

    The attacking clients run in a process of their own at a lower priority: on a real server they
    are other machines, here they share its two cores, and their own work is not the server's. The
    idle baseline is taken in the same round, before and after the attack, so the bounds compare the
    server with itself on a machine that may be busy with other work; a second round (fresh
    addresses) runs only when the first misses a bound, since one burst of someone else's load can
    land on one window. Password checks off the event loop, at the lowest priority and one at a
    time keep every bound; argon2 on the loop, or its lanes at normal priority, miss them all."""
    srv, agent = process_server
    stop = asyncio.Event()
    stop.set()
    await _probe(srv.url, agent, stop)  # warm up: connections, the credential cache
    reports = []
    for round_no in range(1, ROUNDS + 1):
        statuses, figures, missed = await _attack_round(srv, agent, f"127.0.{1 + round_no}.1")
        report = "; ".join(f"{k}: n={v['n']} median={v['median'] * 1000:.1f}ms p90={v['p90'] * 1000:.1f}ms "
                           f"p99={v['p99'] * 1000:.1f}ms" for k, v in figures.items())
        reports.append(f"round {round_no}: sign-in attack {dict(statuses)}; {report}; missed: {missed or 'none'}")
        print("\n" + reports[-1])
        assert statuses[401] >= 5, statuses  # passwords were really checked while we measured
        if not missed:
            return
    raise AssertionError("\n".join(reports))
