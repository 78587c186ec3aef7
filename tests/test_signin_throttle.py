"""Sign-in throttling and the password-check gate (issue 12, items 2 and 3), attacked over real HTTP
from several loopback addresses: guesses from one address do not lock the account out from another;
the attacking address is told to wait (429 + Retry-After); a global ceiling bounds password checks;
and while a crowd of wrong sign-ins arrives, `/healthz` and MCP tool calls keep their latency."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
import uuid
from collections import Counter

import httpx
import psycopg
import pytest

from account_kit import client_from, login_token, try_sign_in
from board_kit import PASSWORD
from conftest import core_for, create_database, run_async, start_process_server
from mcp_support import sdk, vend
from switchboard.core import humans
from switchboard.web.board.throttle import GLOBAL_BURST, PAIR_FREE_FAILURES, LoginThrottle


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


# ------------------------------------------------------------------------------------ latency

ATTACK_ADDRESSES = 10
ATTACK_PER_ADDRESS = 19  # under the per-address free failures: every guess is worth a password check


def _summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"n": len(ordered), "median": statistics.median(ordered),
            "p90": ordered[int(0.9 * (len(ordered) - 1))], "p99": ordered[int(0.99 * (len(ordered) - 1))]}


async def _probe(url: str, agent, stop: asyncio.Event, minimum: int) -> tuple[list[float], list[float]]:
    """Sequential `/healthz` GETs and MCP `list_todos` calls until `stop` is set and `minimum` of each
    are taken; returns their latencies in seconds."""
    health: list[float] = []
    calls: list[float] = []

    async def healthz() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            while not (stop.is_set() and len(health) >= minimum):
                t = time.perf_counter()
                r = await client.get("/healthz")
                health.append(time.perf_counter() - t)
                assert r.status_code == 200
                await asyncio.sleep(0.01)

    async def mcp() -> None:
        async with sdk(url, agent) as c:
            while not (stop.is_set() and len(calls) >= minimum):
                t = time.perf_counter()
                result = await c.call_tool("list_todos", {})
                calls.append(time.perf_counter() - t)
                assert not result.is_error
                await asyncio.sleep(0.01)

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


async def test_healthz_and_mcp_keep_their_latency_during_a_sign_in_attack(process_server):
    srv, agent = process_server
    # Warm up (connections, the credential cache), then the idle baseline.
    stop = asyncio.Event()
    stop.set()
    await _probe(srv.url, agent, stop, 20)
    idle_health, idle_mcp = await _probe(srv.url, agent, stop, 120)

    async def attack_from(address: str) -> list[int]:
        async with client_from(srv.url, address, timeout=120) as client:
            token = await login_token(client)
            answers = await asyncio.gather(*(try_sign_in(client, f"guess-{uuid.uuid4().hex[:10]}", "wrong-password",
                                                         token) for _ in range(ATTACK_PER_ADDRESS)))
            return [r.status_code for r in answers]

    stop = asyncio.Event()
    probing = asyncio.create_task(_probe(srv.url, agent, stop, 60))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    attack = await asyncio.wait_for(asyncio.gather(*(attack_from(f"127.0.2.{i + 1}")
                                                     for i in range(ATTACK_ADDRESSES))), 180)
    attack_seconds = time.perf_counter() - started
    stop.set()
    busy_health, busy_mcp = await probing
    statuses = Counter(s for group in attack for s in group)

    figures = {"idle healthz": _summary(idle_health), "attack healthz": _summary(busy_health),
               "idle mcp": _summary(idle_mcp), "attack mcp": _summary(busy_mcp)}
    report = "; ".join(f"{k}: n={v['n']} median={v['median'] * 1000:.1f}ms p90={v['p90'] * 1000:.1f}ms "
                       f"p99={v['p99'] * 1000:.1f}ms" for k, v in figures.items())
    print(f"\nsign-in attack {dict(statuses)} over {attack_seconds:.2f}s; {report}")
    assert statuses[401] >= 5, statuses  # passwords were really checked while we measured
    for idle, busy, name in ((idle_health, busy_health, "healthz"), (idle_mcp, busy_mcp, "mcp")):
        i, b = _summary(idle), _summary(busy)
        # Within 2x of idle, with a small absolute margin for a loaded two-core machine.
        assert b["median"] <= 2 * i["median"] + 0.005, (name, report)
        assert b["p90"] <= 2 * i["p90"] + 0.015, (name, report)
