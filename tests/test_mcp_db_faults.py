"""A tool call whose database connection breaks under it (a restarted or terminated server, as the
chaos soak injects) answers the retryable tool error `unavailable`, never `internal`."""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg

from conftest import clean_database, core_for, terminate_lock_waiter
from switchboard.core import endpoints, humans, todos
from switchboard.mcp import tools


async def test_a_call_whose_backend_is_terminated_answers_unavailable(pg_uri, caplog):
    clean_database(pg_uri)
    async with core_for(pg_uri) as core:
        h = await humans.add(core, f"ops-{uuid.uuid4().hex[:6]}", "password123")
        _, credential = await endpoints.vend(core, h, agent="bot")
        caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
        todo, _ = await todos.create(core, endpoint_id=caller.endpoint_id, queue="inbox", title="held")
        with psycopg.connect(pg_uri, autocommit=True) as admin, psycopg.connect(pg_uri) as locker:
            # Hold the todo's row so the claim's statement waits on it, then kill the waiting backend.
            locker.execute("SELECT id FROM todos WHERE id = %s FOR UPDATE", (todo["id"],))
            call = asyncio.create_task(tools.call(core, caller, tools.TOOLS["claim"], {"id": todo["id"]}))
            await terminate_lock_waiter(admin, "the claim (on the todo's row)")
            outcome = await asyncio.wait_for(call, 10)
            locker.rollback()
        assert outcome.outcome == "unavailable"
        # The warning names what PostgreSQL said (57P01: the backend was terminated), so a deadlock
        # (40P01) or a serialization failure would be told apart from a lost connection.
        assert [r.sqlstate for r in caplog.records if r.getMessage() == "tool call failed on the database"] == ["57P01"]
        assert outcome.result["isError"] is True
        body = json.loads(outcome.result["content"][0]["text"])
        assert body["error"]["code"] == "unavailable" and "retry" in body["error"]["message"]
        # The pool replaced the broken connection: the next call works.
        again = await tools.call(core, caller, tools.TOOLS["claim"], {"id": todo["id"]})
        assert again.outcome == "ok"
