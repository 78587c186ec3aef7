"""A first end-to-end pass over the core and the served app, kept as the fastest health check."""

import httpx

from switchboard.core import endpoints, humans, invariants, todos


async def test_push_claim_complete_round_trip(core):
    h = await humans.add(core, "alice", "password123")
    ep, credential = await endpoints.vend(core, h, agent="bot")
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
    todo, created = await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title="t")
    assert created
    got = await todos.claim_next(core, caller, claimant="w1")
    assert got.todo["id"] == todo["id"] and got.attempt_seq == 1 and got.prior_attempts == []
    done = await todos.complete(core, caller, todo["id"], summary="ok")
    assert done["state"] == "done"
    async with core.pool.connection() as conn:
        assert await invariants.check(conn) == []


def test_healthz_reports_database(live_server):
    srv = live_server()
    r = httpx.get(srv.url + "/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "database": "ok"}
