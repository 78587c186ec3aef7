"""A claim on a policed queue whose database connection breaks during its admission step (a restarted
or terminated server, as the chaos soak injects) answers the retryable tool error `unavailable`, as any
other call whose connection breaks does; not the error `deferred` with reason `admission_unavailable`,
which says the queue's policy cannot be read (docs/admission.md) and tells the agent to wait for a
queue that is not held back at all.

The 10-minute soak of docs/reliability.md ("2026-12-05: a team queue under an admission policy") saw
one batched `claim_next` on the team queue answered `deferred` while a third of the database's
backends were terminated."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from conftest import clean_database, core_for, terminate_lock_waiter
from switchboard.core import admission
from switchboard.mcp import tools
from team_world import make_fleet


@pytest.mark.parametrize("max_todos", [None, 3], ids=["one-statement", "batch"])
async def test_a_claim_cut_while_it_waits_for_the_admission_lock_answers_unavailable(pg_uri, max_todos):
    clean_database(pg_uri)
    async with core_for(pg_uri) as core:
        f = await make_fleet(core, endpoints=1)
        await admission.set_policy(core, f.humans[0], f.label, max_in_flight=100, max_claims_per_window=1000)
        for _ in range(3):
            await f.push()
        caller = f.endpoints[0]
        args = {"queue": f.label} | ({"max_todos": max_todos} if max_todos else {})
        with psycopg.connect(pg_uri, autocommit=True) as admin, psycopg.connect(pg_uri) as locker:
            # Hold every shard of the policy: the claim's admission step waits for one; then cut it.
            locker.execute("SELECT s.shard FROM admission_shards s JOIN admission_policies p ON p.id = s.policy_id"
                           " WHERE p.queue = %s FOR UPDATE OF s", (f.label,))
            call = asyncio.create_task(tools.call(core, caller, tools.TOOLS["claim_next"], args))
            await terminate_lock_waiter(admin, "the claim (for a shard of the policy)")
            outcome = await asyncio.wait_for(call, 10)
            locker.rollback()
        body = json.loads(outcome.result["content"][0]["text"])
        assert outcome.outcome == "unavailable", body
        assert body["error"]["code"] == "unavailable"
        # Nothing was claimed or charged; the pool replaced the broken connection and the next claim works.
        again = await tools.call(core, caller, tools.TOOLS["claim_next"], args)
        assert again.outcome == "ok"
        status = await admission.status(core, f.humans[0], [await admission.identity(core, f.humans[0], f.label)])
        assert status[0]["used"] == (max_todos or 1)
