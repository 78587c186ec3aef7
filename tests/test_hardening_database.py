"""A frozen database, performed against a real running server: PostgreSQL (a throwaway embedded
server of this test's own) is stopped with SIGSTOP, postmaster and backends, for several seconds.
`/healthz` must answer 503 within its 2 s deadline and a tool call must fail with the retryable
`unavailable` error within the statement deadline, instead of either hanging; once the database
runs again, both work."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from conftest import core_for, create_database, make_settings, start_thread_server, throwaway_pg
from mcp_support import Raw, push, vend
from switchboard.db.pool import CLIENT_MARGIN_SECONDS, DatabaseTimeout, open_pool

STATEMENT_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def own_pg():
    """A PostgreSQL server for this module alone: freezing it touches no other test."""
    with throwaway_pg("switchboard-test-frozen-pg-") as server:
        yield server


def _server_pids(pgdata: Path) -> list[int]:
    """The postmaster and every process it started (backends, background workers)."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry))
    return pids


class Frozen:
    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.pids: list[int] = []

    def __enter__(self) -> Frozen:
        self.pids = _server_pids(self.pgdata)
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _timed(fn):
    started = time.monotonic()
    value = fn()
    return value, time.monotonic() - started


def _tool_error(response: httpx.Response) -> dict | None:
    result = response.json()["result"]
    return json.loads(result["content"][0]["text"])["error"] if result.get("isError") else None


async def test_a_frozen_database_gives_a_prompt_503_and_a_retryable_tool_error(own_pg):
    uri = create_database(own_pg.uri)
    srv = start_thread_server(make_settings(uri, db_statement_timeout_seconds=STATEMENT_TIMEOUT,
                                            db_lock_timeout_seconds=STATEMENT_TIMEOUT, mcp_auth_cache_seconds=120))
    try:
        async with core_for(uri) as core:
            agent = await vend(core, "frozen")
            uncached = await vend(core, "frozen", agent="uncached")
            await push(core, agent, "stalled")
        raw = Raw(srv.url, agent.slug, agent.credential)
        assert raw.initialize().status_code == 200
        assert _tool_error(raw.call("list_todos")) is None  # the credential is cached from here on
        assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200

        callers = [Raw(srv.url, agent.slug, agent.credential) for _ in range(2)]
        for caller in callers:
            assert caller.initialize().status_code == 200

        with Frozen(own_pg.pgdata), ThreadPoolExecutor(4) as pool:
            time.sleep(0.2)
            health = pool.submit(_timed, lambda: httpx.get(srv.url + "/healthz", timeout=30))
            claims = [pool.submit(_timed, lambda c=caller: c.call("claim_next")) for caller in callers]
            signing_in = pool.submit(_timed, Raw(srv.url, uncached.slug, uncached.credential).initialize)
            health_response, health_seconds = health.result()
            sign_in, sign_in_seconds = signing_in.result()
            claimed = [c.result() for c in claims]
            time.sleep(1.0)  # frozen a while longer: nothing recovers early by chance

        assert health_response.status_code == 503, health_response.text
        assert health_response.json() == {"status": "degraded", "database": "unreachable"}
        assert health_seconds < 2.6, health_seconds
        # A credential not yet cached cannot be checked: 503 with the same retryable error, not a 500.
        assert sign_in.status_code == 503 and sign_in.headers["retry-after"] == "1"
        assert sign_in.json() == {"error": {"code": "unavailable", "message": "database did not answer in time; retry"}}
        assert sign_in_seconds < STATEMENT_TIMEOUT + CLIENT_MARGIN_SECONDS + 1.5, sign_in_seconds
        for response, seconds in claimed:
            assert response.status_code == 200
            assert _tool_error(response) == {"code": "unavailable",
                                             "message": "database did not answer in time; retry"}
            assert seconds < STATEMENT_TIMEOUT + CLIENT_MARGIN_SECONDS + 1.5, seconds

        # Thawed: the pool replaces the abandoned connections and the same call succeeds.
        deadline = time.monotonic() + 20
        while True:
            body = raw.call("claim_next").json()["result"]
            if not body.get("isError"):
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
        # Either this call claims the todo, or a claim sent just before the freeze was carried out by the
        # database once it ran again (the caller was told `unavailable`): then the todo is held under a
        # lease that nobody renews, and it lapses back to pending like any dead holder's.
        # Or that claim was still running when this one looked, so this one passed over the row it held
        # (SKIP LOCKED), and it then rolled back: the todo is pending, and a later claim takes it once that
        # claim's lock is gone (it may still hold the row for a moment after the todo reads as pending).
        got = json.loads(body["content"][0]["text"])
        while got["empty"]:
            listed = json.loads(raw.call("list_todos").json()["result"]["content"][0]["text"])["todos"]
            states = [(t["title"], t["state"]) for t in listed]
            if states == [("stalled", "claimed")]:
                break
            assert states == [("stalled", "pending")] and time.monotonic() < deadline, states
            time.sleep(0.2)
            got = json.loads(raw.call("claim_next").json()["result"]["content"][0]["text"])
        else:
            assert got["todo"]["title"] == "stalled", got
        assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
        raw.close()
    finally:
        srv.stop()


async def test_statement_and_lock_timeouts_are_set_on_every_pooled_connection(own_pg):
    uri = create_database(own_pg.uri)
    pool = await open_pool(uri, min_size=1, max_size=2, statement_timeout=1.5, lock_timeout=0.5)
    try:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT current_setting('statement_timeout') AS s, "
                                     "current_setting('lock_timeout') AS l")
            assert await cur.fetchone() == {"s": "1500ms", "l": "500ms"}
            with pytest.raises(DatabaseTimeout, match="database did not answer in time; retry"):
                await conn.execute("SELECT pg_sleep(5)")
        # A lock held elsewhere: lock_timeout ends the wait, as the same retryable error.
        with psycopg.connect(uri, autocommit=True) as holder:
            holder.execute("CREATE TABLE IF NOT EXISTS lock_probe (id int)")
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE lock_probe IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(DatabaseTimeout) as caught:
                async with pool.connection() as conn, conn.transaction():
                    await conn.execute("SELECT * FROM lock_probe")
            assert caught.value.code == "unavailable"
            assert time.monotonic() - started < 1.5
            holder.execute("ROLLBACK")
    finally:
        await pool.close()


async def test_a_call_whose_client_left_ends_at_once_not_at_the_database_deadline(own_pg):
    import socket
    import threading

    from conftest import start_process_server
    from mcp_support import ACCEPT

    uri = create_database(own_pg.uri)
    async with core_for(uri) as core:
        agent = await vend(core, "left")
    srv = start_process_server(uri, env={"SWITCHBOARD_DB_STATEMENT_TIMEOUT_SECONDS": "4",
                                         "SWITCHBOARD_MCP_AUTH_CACHE_SECONDS": "120"})
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(srv.process.stdout.readline, b"")), daemon=True)
    reader.start()
    try:
        raw = Raw(srv.url, agent.slug, agent.credential)
        assert raw.initialize().status_code == 200
        assert _tool_error(raw.call("list_todos")) is None
        port = int(srv.url.rsplit(":", 1)[1])
        call = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                           "params": {"name": "claim_next", "arguments": {}}})
        with Frozen(own_pg.pgdata):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall((f"POST /mcp/{agent.slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                       f"Authorization: Bearer {agent.credential}\r\nAccept: {ACCEPT}\r\n"
                       f"Content-Type: application/json\r\nMcp-Session-Id: {raw.session_id}\r\n"
                       f"MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {len(call)}\r\n\r\n{call}").encode())
            time.sleep(0.5)
            s.close()  # the client gives up while the database is frozen
            time.sleep(1.5)
            ended = [json.loads(line) for line in list(lines) if line.startswith(b"{")]
        raw.close()
    finally:
        srv.stop()
        reader.join(5)
    mine = [r for r in ended if r.get("logger") == "switchboard.mcp" and r.get("endpoint") == agent.slug
            and r.get("status") == 499]
    assert len(mine) == 1, ended[-5:]
    assert mine[0]["reason"] == "client_disconnect" and mine[0]["latency_ms"] < 1500
