"""Faults (SYSTEM.md section 17): a killed server restarts with nothing lost; the pool survives a
database restart; a killed worker's lease is reaped and recorded as died."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import httpx
import psycopg

from conftest import ROOT, clean_database, core_for, create_database, start_process_server
from switchboard.core import endpoints, humans, invariants, sweeps, todos


async def _setup(core):
    h = await humans.add(core, "ops", "password123")
    _, credential = await endpoints.vend(core, h, agent="bot")
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
    return h, caller


async def test_killed_server_restarts_with_nothing_lost(pg_server):
    uri = create_database(pg_server)
    async with core_for(uri) as core:
        h, caller = await _setup(core)
        created = [(await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title=f"t{i}"))[0]
                   for i in range(5)]
        claimed = await todos.claim_next(core, caller, claimant="before-crash")

        srv = start_process_server(uri)
        try:
            assert httpx.get(srv.url + "/healthz").json()["database"] == "ok"
        finally:
            srv.process.send_signal(signal.SIGKILL)  # no graceful shutdown at all
            srv.process.wait(10)

        srv = start_process_server(uri)
        try:
            assert httpx.get(srv.url + "/healthz").status_code == 200
        finally:
            srv.stop()

        detail = await todos.get(core, h, claimed.todo["id"])
        assert detail["state"] == "claimed" and detail["attempts"][0]["claimant"] == "before-crash"
        pending = await todos.list_for_human(core, h, state="pending")
        assert {t["id"] for t in pending} == {t["id"] for t in created} - {claimed.todo["id"]}
        async with core.pool.connection() as conn:
            assert await invariants.check(conn) == []


async def test_pool_survives_a_database_restart(pg_uri):
    """Every server connection is terminated (as a restart would); the next calls still work."""
    clean_database(pg_uri)
    async with core_for(pg_uri) as core:
        h, caller = await _setup(core)
        todo, _ = await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title="survivor")
        with psycopg.connect(pg_uri, autocommit=True) as admin:
            # Wait (up to 5 s each) until the backends are gone, as after a restart; without the
            # timeout the kill may still be in flight when the next call checks a connection out.
            admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                          "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        # The pool checks connections out with a liveness check and replaces broken ones.
        got = await todos.claim_next(core, caller)
        assert got is not None and got.todo["id"] == todo["id"]
        assert (await todos.complete(core, caller, todo["id"]))["state"] == "done"


WORKER = textwrap.dedent("""
    import asyncio, os, sys, time
    from switchboard.config import load_settings
    from switchboard.runtime import open_runtime
    from switchboard.core import endpoints, todos

    async def main():
        settings = load_settings(database_url=os.environ["URI"])
        async with open_runtime(settings, migrate=False, min_size=1, max_size=2) as runtime:
            core = runtime.core
            caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, os.environ["CRED"]))
            got = await todos.claim_next(core, caller, lease_ttl_seconds=1, claimant="doomed")
            await todos.heartbeat(core, caller, got.todo["id"], lease_ttl_seconds=1)
            print("holding", flush=True)
            time.sleep(3600)

    asyncio.run(main())
""")


async def test_killed_worker_is_reaped_and_recorded_as_died(core, pg_uri):
    h = await humans.add(core, "ops", "password123")
    _, credential = await endpoints.vend(core, h, agent="bot")
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
    todo, _ = await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title="risky")
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=dict(os.environ, URI=pg_uri, CRED=credential),
                            stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == b"holding"
    finally:
        proc.kill()
        proc.wait(10)
    async with core.pool.connection() as conn:  # let the 1-second lease lapse without waiting for it
        await conn.execute("UPDATE todos SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
                           (todo["id"],))
    report = await sweeps.sweep_once(core)
    assert report.reaped == 1
    nxt = await todos.claim_next(core, caller, claimant="survivor")
    dead = nxt.prior_attempts[0]
    assert dead["outcome"] == "reaped" and dead["died"] is True and dead["claimant"] == "doomed"
    assert dead["last_heartbeat_at"] is not None and dead["summary"] is None


def test_healthz_reports_an_unreachable_database(pg_server):
    """/healthz answers 503 once the database is gone, and 200 while it is there."""
    from conftest import make_settings, start_thread_server

    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri))
    try:
        assert httpx.get(srv.url + "/healthz").status_code == 200
        name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
        with psycopg.connect(pg_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        r = httpx.get(srv.url + "/healthz", timeout=10)
        assert r.status_code == 503 and r.json() == {"status": "degraded", "database": "unreachable"}
    finally:
        srv.stop()
