"""`admission_status` over the official MCP client reads a policy in the shape its owner reads it with
`queue policy show` and `GET /api/v1/admission/{scope}/{queue}`: `endpoint` is the endpoint's own slug
on its own queue, null on a team queue."""

from __future__ import annotations

import pytest

from conftest import make_settings, start_thread_server
from mcp_support import Agent, body, sdk
from switchboard.core import admission
from team_world import make_fleet


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


async def test_admission_status_names_the_endpoint_as_the_owners_read_does(core, server):
    f = await make_fleet(core, members=2)
    owner = f.humans[0]
    await admission.set_policy(core, owner, "own", endpoint=f.ep_slugs[0], max_in_flight=3)
    await admission.set_policy(core, owner, f.label, max_claims_per_window=10)
    agent = Agent(slug=f.ep_slugs[0], credential=f.credentials[0], endpoint_id=str(f.endpoints[0].endpoint_id),
                  human=owner, queues=list(f.endpoints[0].queues))

    async with sdk(server.url, agent) as c:
        got = body(await c.call_tool("admission_status", {}))["policies"]
        one = body(await c.call_tool("admission_status", {"queue": "own"}))["policies"]

    by_queue = {p["queue"]: p for p in got}
    assert set(by_queue) == {"own", f.label}
    assert by_queue["own"]["endpoint"] == f.ep_slugs[0] and by_queue[f.label]["endpoint"] is None
    assert one == [by_queue["own"]]
    assert by_queue["own"] == await admission.show(core, owner, "own", endpoint=f.ep_slugs[0])
    assert by_queue[f.label] == await admission.show(core, owner, f.label)
