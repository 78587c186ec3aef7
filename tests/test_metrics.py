"""Prometheus metrics (SYSTEM.md §10, SPEC-0034 REQ-14): counters after commit from the hook bus,
the queue label bound, gauges read at scrape, and the scrape token."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import make_settings, start_thread_server
from core_world import lapse, make_world
from mcp_support import push, sdk, vend
from switchboard.config import ConfigError, load_settings
from switchboard.core import endpoints, sweeps, todos
from switchboard.web.metrics import OTHER, LabelLimiter, Metrics

TOKEN = "m" * 40


def value(m: Metrics, name: str, **labels) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def closed(m: Metrics, queue: str = "inbox") -> dict[str, float]:
    return {o: value(m, "switchboard_todo_attempts_closed_total", queue=queue, outcome=o)
            for o in ("completed", "failed", "released", "lease_expired", "reaped", "canceled", "revoked")}


@pytest.fixture
async def metered(core):
    m = Metrics()
    core.bus.subscribe(m.on_event)
    return m


async def test_a_reap_counts_once_in_each_family(core, metered):
    """REQ-14: the reaper closes one attempt as reaped; both families rise by exactly 1."""
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    before_expired = value(metered, "switchboard_lease_expired_total", queue="inbox")
    before_reaped = closed(metered)["reaped"]
    assert await sweeps.reap(core) == 1
    assert value(metered, "switchboard_lease_expired_total", queue="inbox") == before_expired + 1
    assert closed(metered)["reaped"] == before_reaped + 1
    assert sum(closed(metered).values()) == 1
    assert await sweeps.reap(core) == 0  # nothing else lapsed: nothing more counted
    assert value(metered, "switchboard_lease_expired_total", queue="inbox") == 1


async def test_every_other_outcome_counts_once(core, metered):
    w = await make_world(core)
    m = metered

    async def claimed_todo(**kw):
        t = await w.todo(**kw)
        await todos.claim(core, w.e1, t["id"])
        return t

    t = await claimed_todo()
    await todos.complete(core, w.e1, t["id"], summary="summary-text done")
    t = await claimed_todo()
    await todos.fail(core, w.e1, t["id"], summary="summary-text red")
    t = await claimed_todo()
    await todos.release(core, w.e1, t["id"])
    t = await claimed_todo()
    await lapse(core, t["id"])
    await todos.claim(core, w.e1, t["id"])  # takeover: lease_expired, and a new claim
    await todos.cancel(core, w.h1, t["id"])  # closes the new attempt canceled
    await w.todo()  # a pending todo canceled has no attempt to close
    pending = await w.todo()
    await todos.cancel(core, w.h1, pending["id"])
    t = await claimed_todo()
    await todos.heartbeat(core, w.e1, t["id"])  # closes nothing
    await endpoints.revoke(core, w.h1, w.slug1)  # closes t revoked; the other pending todo has none

    assert closed(m) == {"completed": 1, "failed": 1, "released": 1, "lease_expired": 1, "reaped": 0,
                         "canceled": 1, "revoked": 1}
    assert value(m, "switchboard_lease_expired_total", queue="inbox") == 1  # the takeover
    assert value(m, "switchboard_todos_created_total", queue="inbox", source="unknown") == 7
    assert value(m, "switchboard_todos_claimed_total", queue="inbox") == 6
    assert value(m, "switchboard_todos_completed_total", queue="inbox", outcome="complete") == 1
    assert value(m, "switchboard_todos_completed_total", queue="inbox", outcome="fail") == 1
    text = m.render().decode()
    assert "td_" not in text and "summary-text" not in text  # aggregates only


async def test_created_counts_its_source_bounded_and_never_a_repeat(core, metered):
    w = await make_world(core)
    await todos.create(core, endpoint_id=w.e1.endpoint_id, queue="inbox", title="a", source="operator", key="k")
    await todos.create(core, endpoint_id=w.e1.endpoint_id, queue="inbox", title="a", source="operator", key="k")
    await todos.create(core, endpoint_id=w.e1.endpoint_id, queue="inbox", title="b", source="Weird Source!")
    assert value(metered, "switchboard_todos_created_total", queue="inbox", source="operator") == 1
    assert value(metered, "switchboard_todos_created_total", queue="inbox", source=OTHER) == 1


async def test_the_queue_label_admits_fifty_values_and_folds_the_rest(core, metered):
    queues = [f"q{n:02d}" for n in range(60)]
    w = await make_world(core, queues=queues)
    for q in queues:
        await w.todo(queue=q)
    created = {q: value(metered, "switchboard_todos_created_total", queue=q, source="unknown") for q in queues}
    assert all(created[q] == 1 for q in queues[:50])
    assert all(created[q] == 0 for q in queues[50:])
    assert value(metered, "switchboard_todos_created_total", queue=OTHER, source="unknown") == 10
    # gauges share the limiter: the same 50 names, the rest summed under __other__
    await metered.refresh(core)
    text = metered.render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    pending = {s.labels["queue"]: s.value for s in families["switchboard_queue_todos"].samples
               if s.labels["state"] == "pending"}
    assert len(pending) == 51 and pending[OTHER] == 10 and pending["q00"] == 1
    # the limit is per process and sticky: a queue admitted stays, a late one stays folded
    await w.todo(queue="q55")
    assert value(metered, "switchboard_todos_created_total", queue=OTHER, source="unknown") == 11


def test_label_limiter_rules():
    lim = LabelLimiter(cap=2)
    assert lim("a") == "a" and lim("") == OTHER and lim(OTHER) == OTHER and lim("x" * 129) == OTHER
    assert lim(None) == OTHER
    assert lim("b") == "b" and lim("c") == OTHER and lim("a") == "a"


async def test_gauges_read_live_todos_at_scrape_with_zeros_for_scoped_queues(core, metered):
    w = await make_world(core, queues=("inbox", "empty"))
    a = await w.todo()
    await w.todo()
    await todos.claim(core, w.e1, a["id"])
    parked = await w.todo()
    await todos.claim(core, w.e1, parked["id"])
    await todos.fail(core, w.e1, parked["id"])
    dead = await w.todo(max_attempts=1)
    await todos.claim(core, w.e1, dead["id"])
    await todos.fail(core, w.e1, dead["id"])
    await metered.refresh(core)
    families = {f.name: f for f in text_string_to_metric_families(metered.render().decode())}
    got = {(s.labels["queue"], s.labels["state"]): s.value for s in families["switchboard_queue_todos"].samples}
    assert got[("inbox", "pending")] == 1 and got[("inbox", "claimed")] == 1
    assert got[("inbox", "retry_scheduled")] == 1 and got[("inbox", "dead_letter")] == 1
    assert all(got[("empty", s)] == 0 for s in ("pending", "claimed", "input-required", "retry_scheduled",
                                                 "dead_letter"))
    ages = {s.labels["queue"]: s.value for s in families["switchboard_queue_oldest_pending_seconds"].samples}
    assert ages["empty"] == 0 and ages["inbox"] >= 0


# ------------------------------------------------------------------------------ the endpoint

@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, metrics_token=TOKEN))
    yield srv
    srv.stop()


def test_scrape_auth(server, pg_uri):
    url = server.url + "/metrics"
    for headers in ({}, {"Authorization": "Bearer " + "n" * 40}, {"Authorization": "Basic " + TOKEN},
                    {"Authorization": "Bearer"}, {"Authorization": TOKEN},
                    {"Authorization": "Bearer sbk_" + "a" * 43}, {"Cookie": "session=" + TOKEN}):
        r = httpx.get(url, headers=headers)
        assert r.status_code == 401, headers
        assert r.content == b""
        assert r.headers["www-authenticate"] == 'Bearer realm="switchboard-metrics"'
    r = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}", "Accept": "application/openmetrics-text"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert r.headers["cache-control"] == "no-store"
    assert "switchboard_metrics_collection_errors_total" in r.text
    # unset: closed to everyone
    closed_srv = start_thread_server(make_settings(pg_uri, metrics_token=None))
    try:
        r = httpx.get(closed_srv.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 401 and r.content == b""
    finally:
        closed_srv.stop()


def test_a_short_metrics_token_stops_startup():
    with pytest.raises(ConfigError, match="SWITCHBOARD_METRICS_TOKEN"):
        load_settings(metrics_token="too-short")


async def test_mcp_calls_are_counted_and_timed_by_the_serving_process(core, server):
    a = await vend(core, queues=["build"])
    t = await push(core, a, "counted")

    def scrape() -> str:
        return httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text

    def sample(text: str, name: str, **labels) -> float:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return 0.0

    before = scrape()
    async with sdk(server.url, a) as c:
        await c.call_tool("claim_next", {"claimant": "worker-secret-label"})
        await c.call_tool("complete", {"id": t["id"], "summary": "summary-never-a-label",
                                       "artifact": "https://ci.example.com/artifact-never-a-label"})
        await c.call_tool("complete", {"id": "td_unknown"})
    after = scrape()
    assert sample(after, "switchboard_todos_claimed_total", queue="build") == \
        sample(before, "switchboard_todos_claimed_total", queue="build") + 1
    assert sample(after, "switchboard_todo_attempts_closed_total", queue="build", outcome="completed") == \
        sample(before, "switchboard_todo_attempts_closed_total", queue="build", outcome="completed") + 1
    assert sample(after, "switchboard_mcp_request_duration_seconds_count", verb="claim_next", outcome="ok") >= 1
    assert sample(after, "switchboard_mcp_request_duration_seconds_count", verb="complete", outcome="not_found") >= 1
    assert sample(after, "switchboard_queue_todos", queue="build", state="pending") == 0
    for secret in ("worker-secret-label", "summary-never-a-label", "artifact-never-a-label", t["id"]):
        assert secret not in after
