"""A push racing a revocation of its endpoint (found by the chaos soak, bench/soak.py): the todo is
either refused or dead-lettered by the revocation, never left pending on a revoked endpoint where no
one can claim it and no sweep ends it.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import pytest_asyncio

from conftest import clean_database, core_for, create_database
from core_world import check, sql
from switchboard.core import endpoints, humans, producer, todos
from switchboard.core.errors import Invalid

ROUNDS = 200


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def race_uri(pg_server):
    return create_database(pg_server)


@pytest_asyncio.fixture(loop_scope="session")
async def rcore(race_uri):
    clean_database(race_uri)
    async with core_for(race_uri) as c:
        yield c


async def test_create_on_a_revoked_endpoint_is_refused(rcore):
    core = rcore
    h = await humans.add(core, f"h-{uuid.uuid4().hex[:6]}")
    ep, _ = await endpoints.vend(core, h, agent="a", queues=["inbox"])
    await endpoints.revoke(core, h, ep["slug"])
    with pytest.raises(Invalid) as err:
        await todos.create(core, endpoint_id=ep["endpoint_id"], queue="inbox", title="late")
    assert err.value.argument == "endpoint"
    assert await sql(core, "SELECT id FROM todos WHERE endpoint_id = %s", (ep["endpoint_id"],)) == []


async def test_create_on_an_expired_endpoint_is_refused(rcore):
    core = rcore
    h = await humans.add(core, f"h-{uuid.uuid4().hex[:6]}")
    ep, _ = await endpoints.vend(core, h, agent="a", queues=["inbox"])
    await sql(core, "UPDATE endpoints SET expires_at = now() - interval '1 second' WHERE id = %s",
              (ep["endpoint_id"],))
    with pytest.raises(Invalid):
        await todos.create(core, endpoint_id=ep["endpoint_id"], queue="inbox", title="late")


async def test_push_racing_revoke_never_leaves_a_pending_todo_on_a_revoked_endpoint(rcore):
    core = rcore
    h = await humans.add(core, f"h-{uuid.uuid4().hex[:6]}")
    outcomes = {"refused": 0, "dead_lettered": 0}
    for i in range(ROUNDS):
        ep, _ = await endpoints.vend(core, h, agent=f"a{i}", queues=["inbox"])
        slug = ep["slug"]
        pushes = [todos.create(core, endpoint_id=ep["endpoint_id"], queue="inbox", title=f"p{i}-{j}")
                  for j in range(3)]
        results = await asyncio.gather(endpoints.revoke(core, h, slug), *pushes, return_exceptions=True)
        for r in results[1:]:
            if isinstance(r, Invalid):
                outcomes["refused"] += 1
            else:
                assert isinstance(r, tuple), r
        rows = await sql(core, "SELECT state, next_retry_at FROM todos WHERE endpoint_id = %s",
                         (ep["endpoint_id"],))
        for row in rows:
            assert row["state"] == "failed" and row["next_retry_at"] is None, (i, row)
            outcomes["dead_lettered"] += 1
    assert outcomes["refused"] + outcomes["dead_lettered"] == ROUNDS * 3
    assert await check(core) == []


async def test_bulk_push_on_a_revoked_endpoint_is_refused(rcore):
    core = rcore
    h = await humans.add(core, f"h-{uuid.uuid4().hex[:6]}")
    ep, _ = await endpoints.vend(core, h, agent="a", queues=["inbox"])
    # The surface's check passed before the revocation landed: the statement itself must refuse.
    await sql(core, "UPDATE endpoints SET state = 'revoked', revoked_at = now() WHERE id = %s",
              (ep["endpoint_id"],))
    made = await producer._create_batch(core, producer._Owner(endpoint_id=uuid.UUID(ep["endpoint_id"])), "operator", [
        (0, {"queue": "inbox", "kind": None, "title": "late", "payload": None, "key": None,
             "assignee": None, "max_attempts": 5, "payload_size": 0})])
    assert made == []
    assert await sql(core, "SELECT id FROM todos WHERE endpoint_id = %s", (ep["endpoint_id"],)) == []


async def test_bulk_push_racing_revoke_never_leaves_a_pending_todo(rcore):
    core = rcore
    h = await humans.add(core, f"h-{uuid.uuid4().hex[:6]}")
    for i in range(ROUNDS // 2):
        ep, _ = await endpoints.vend(core, h, agent=f"b{i}", queues=["inbox"])
        items = [{"title": f"b{i}-{j}"} for j in range(5)]
        results = await asyncio.gather(endpoints.revoke(core, h, ep["slug"]),
                                       producer.push_many(core, h, ep["slug"], items),
                                       return_exceptions=True)
        assert isinstance(results[1], (list, Invalid)), results[1]
        rows = await sql(core, "SELECT state, next_retry_at FROM todos WHERE endpoint_id = %s",
                         (ep["endpoint_id"],))
        assert all(r["state"] == "failed" and r["next_retry_at"] is None for r in rows), (i, rows)
    assert await check(core) == []
