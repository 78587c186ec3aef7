"""Admission control in the core (SPEC-0030, issue 13): validation naming the field, windows in a time
zone, charging every committed claim (takeovers included, nothing refunded), the deferred answers, a
policy taking effect with its commit in any process, and the admission metrics."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core_world import lapse, make_world, sql
from switchboard.core import admission, todos
from switchboard.core.errors import CoreError, Deferred, Invalid, Unavailable
from switchboard.web.metrics import Metrics


def value(m: Metrics, name: str, **labels) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_in_flight": 10001}, "max_in_flight"),
    ({"max_in_flight": -1}, "max_in_flight"),
    ({"max_in_flight": True}, "max_in_flight"),
    ({"max_claims_per_window": 1_000_001}, "max_claims_per_window"),
    ({"max_claims_per_window": "5"}, "max_claims_per_window"),
])
async def test_bad_limits_are_invalid_naming_the_field(core, kwargs, field):
    w = await make_world(core)
    with pytest.raises(Invalid) as err:
        await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, **kwargs)
    assert err.value.argument == field
    assert await sql(core, "SELECT 1 FROM admission_policies") == []


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"period": "month"}, "window.period"),
    ({"tz": "Mars/Base"}, "window.tz"),
    ({"tz": ""}, "window.tz"),
    ({"start": "25:00"}, "window.start"),
    ({"start": "9:00"}, "window.start"),
    ({"period": "week"}, "window.weekday"),
    ({"period": "hour", "weekday": "mon"}, "window.weekday"),
])
def test_bad_windows_are_invalid_naming_the_field(kwargs, field):
    with pytest.raises(Invalid) as err:
        admission.window(**kwargs)
    assert err.value.argument == field


@pytest.mark.parametrize("tz", ["right/UTC", "posix/Europe/Paris", "localtime"])
async def test_a_zone_the_database_cannot_read_is_invalid(core, tz):
    """Names Python's time zone database accepts and PostgreSQL's does not: refused when set, naming
    the field, instead of failing every claim of the queue afterwards."""
    w = await make_world(core)
    with pytest.raises(Invalid) as err:
        await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=3,
                                   window_spec=admission.window(tz=tz))
    assert err.value.argument == "window.tz"
    assert await sql(core, "SELECT 1 FROM admission_policies") == []
    await w.todo()
    assert (await todos.claim_next(core, w.e1)) is not None


async def window_start(core, period, tz, minute, weekday, at) -> datetime:
    rows = await sql(core, "SELECT switchboard_window_start(%s, %s, %s, %s, %s) AS ws",
                     (period, tz, minute, weekday, at))
    return rows[0]["ws"]


async def test_windows_start_in_their_time_zone(core):
    at = datetime(2026, 3, 11, 2, 30, tzinfo=UTC)  # a Wednesday; 08:00 in Kolkata (+05:30)
    assert await window_start(core, "hour", "UTC", 15, None, at) == datetime(2026, 3, 11, 2, 15, tzinfo=UTC)
    assert await window_start(core, "hour", "Asia/Kolkata", 0, None, at) == datetime(2026, 3, 11, 2, 30,
                                                                                      tzinfo=UTC)
    # Daily at 09:00 Paris (UTC+1 in March before the change): 02:30 UTC is before it, so yesterday's.
    assert await window_start(core, "day", "Europe/Paris", 9 * 60, None, at) == datetime(2026, 3, 10, 8, 0,
                                                                                         tzinfo=UTC)
    # Weekly from Monday 00:00 UTC.
    assert await window_start(core, "week", "UTC", 0, 1, at) == datetime(2026, 3, 9, tzinfo=UTC)
    # Weekly from Thursday 12:00 UTC: last week's Thursday.
    assert await window_start(core, "week", "UTC", 12 * 60, 4, at) == datetime(2026, 3, 5, 12, tzinfo=UTC)


async def test_every_committed_claim_is_charged_and_nothing_refunds(core):
    w = await make_world(core)
    metrics = Metrics()
    core.bus.subscribe(metrics.on_event)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_claims_per_window=3)
    first, second = await w.todo(), await w.todo()
    got = await todos.claim_next(core, w.e1)
    assert got is not None and got.admission["used"] == 1 and got.admission["remaining"] == 2
    await todos.release(core, w.e1, got.todo["id"])  # releasing refunds nothing
    again = await todos.claim_next(core, w.e1)
    assert again is not None and again.admission["used"] == 2
    await lapse(core, again.todo["id"])
    taken = await todos.claim(core, w.e1, again.todo["id"])  # a takeover is a claim: charged
    assert taken.admission["used"] == 3 and taken.admission["remaining"] == 0
    claimed, deferred = await todos.take_next(core, w.e1)
    assert claimed == [] and deferred[0]["queue"] == "inbox" and deferred[0]["reason"] == "window_exhausted"
    assert deferred[0]["pending"] == 1
    assert datetime.fromisoformat(deferred[0]["next_eligible_at"]) <= datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(Deferred) as err:
        await todos.claim(core, w.e1, second["id"])
    assert err.value.to_dict()["reason"] == "window_exhausted"
    shown = await admission.show(core, w.h1, "inbox", endpoint=w.slug1)
    assert (shown["used"], shown["remaining"], shown["status"]) == (3, 0, "window_exhausted")
    assert value(metrics, "switchboard_admission_charged_total", queue="inbox") == 3
    assert value(metrics, "switchboard_admission_refusals_total", queue="inbox", reason="window_exhausted") == 2
    assert first["id"] in {got.todo["id"], again.todo["id"]}


async def test_in_flight_cap_and_pause(core):
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=1)
    a, b = await w.todo(), await w.todo()
    got = await todos.claim_next(core, w.e1)
    assert got is not None and got.admission["in_flight"] == 1
    claimed, deferred = await todos.take_next(core, w.e1)
    assert not claimed and deferred[0]["reason"] == "in_flight_full"
    assert deferred[0]["next_eligible_at"] is not None  # when the live lease lapses at the latest
    # The same instant in the same form as the todo's own times (RFC 3339, UTC, `Z`): an agent may
    # compare the strings.
    assert deferred[0]["next_eligible_at"] == got.todo["lease_expires_at"]
    assert got.admission["window_resets_at"].endswith("Z")
    await todos.complete(core, w.e1, got.todo["id"])
    assert (await todos.claim_next(core, w.e1)) is not None  # the slot came back
    await admission.set_paused(core, w.h1, "inbox", True, endpoint=w.slug1)
    await todos.release(core, w.e1, b["id"] if b["id"] != got.todo["id"] else a["id"])
    claimed, deferred = await todos.take_next(core, w.e1)
    assert not claimed and deferred == [{"queue": "inbox", "reason": "paused", "pending": 1, "next_eligible_at": None}]
    await admission.set_paused(core, w.h1, "inbox", False, endpoint=w.slug1)
    assert (await todos.claim_next(core, w.e1)) is not None
    await admission.clear(core, w.h1, "inbox", endpoint=w.slug1)
    assert await sql(core, "SELECT 1 FROM admission_policies") == []


async def test_a_policy_that_cannot_be_read_fails_closed(core):
    """A policy PostgreSQL cannot judge (here its time zone is unknown to it, as after a time zone
    database lost a name) refuses every claim on its queue, claims nothing and charges nothing; the
    read of its status says it cannot be read."""
    w = await make_world(core)
    t = await w.todo()
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=5)
    await sql(core, "UPDATE admission_policies SET window_tz = 'Nowhere/Lost'")
    for attempt in (lambda: todos.take_next(core, w.e1), lambda: todos.claim_next(core, w.e1),
                    lambda: todos.claim(core, w.e1, t["id"])):
        with pytest.raises(Deferred) as err:
            await attempt()
        assert err.value.to_dict()["reason"] == "admission_unavailable" and err.value.to_dict()["queue"] == "inbox"
    row = (await sql(core, "SELECT state, attempts_total FROM todos WHERE id = %s", (t["id"],)))[0]
    assert (row["state"], row["attempts_total"]) == ("pending", 0)
    assert await sql(core, "SELECT 1 FROM admission_shards WHERE charged > 0") == []
    with pytest.raises(Unavailable) as err:
        await admission.status(core, None, [admission.Identity(queue="inbox", endpoint_id=w.e1.endpoint_id,
                                                               team_id=None)])
    assert "admission policies" in err.value.message
    with pytest.raises(Unavailable):
        await admission.status_for_endpoint(core, w.e1)


async def test_the_invariant_checker_counts_every_lease_a_claim_under_the_cap_saw(core):
    """Leases handed out before a tighter cap may exceed it; a claim committed under the cap may not
    bring the leases in flight above it, older ones included."""
    from core_world import check

    w = await make_world(core)
    for _ in range(3):
        await w.todo()
    held = [await todos.claim_next(core, w.e1) for _ in range(3)]
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=2)
    assert await check(core) == []  # three out, handed out before the cap of two: allowed
    # As if the cap had stood when the third was claimed: that claim saw three in flight.
    await sql(core, "UPDATE admission_policies SET updated_at = (SELECT claimed_at FROM todo_attempts "
                    "WHERE todo_id = %s)", (held[2].todo["id"],))
    assert any("max_in_flight" in p for p in await check(core))
    await todos.complete(core, w.e1, held[0].todo["id"])
    assert await check(core) == []


async def test_a_policy_holds_even_where_a_process_believed_none(core):
    """The unpoliced statements skip a policed queue in SQL: a process whose routing hint says "no
    policy" still cannot claim past it."""
    w = await make_world(core)
    await w.todo()
    core.policed.mark(w.e1.endpoint_id, False)
    await sql(core, "INSERT INTO admission_policies (endpoint_id, queue, paused) VALUES (%s, 'inbox', true)",
              (w.e1.endpoint_id,))
    claimed, deferred = await todos.take_next(core, w.e1)
    assert not claimed and deferred[0]["reason"] == "paused"


async def test_batched_claims_stay_within_the_cap(core):
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=3, max_claims_per_window=100)
    for _ in range(6):
        await w.todo()
    many = await todos.claim_next_batch(core, w.e1, max_todos=10)
    assert len(many) == 3 and all(g.admission["in_flight"] == 3 for g in many)
    assert (await admission.show(core, w.h1, "inbox", endpoint=w.slug1))["used"] == 3


async def test_another_humans_queue_is_not_found(core):
    w = await make_world(core)
    with pytest.raises(CoreError) as err:
        await admission.set_policy(core, w.h2, "inbox", endpoint=w.slug1, max_in_flight=1)
    assert err.value.code == "not_found"


async def test_scrape_gauges_count_policies_by_status_and_the_todos_held_back(core):
    w = await make_world(core)
    metrics = Metrics()
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=5)
    await admission.set_paused(core, w.h2, "inbox", True, endpoint=w.slug2)
    await w.todo()
    await w.todo(caller=w.e2)
    await w.todo(caller=w.e2)
    await metrics.refresh(core)
    assert value(metrics, "switchboard_admission_policies", queue="inbox", status="open") == 1
    assert value(metrics, "switchboard_admission_policies", queue="inbox", status="paused") == 1
    assert value(metrics, "switchboard_admission_deferred_todos", queue="inbox", reason="paused") == 2


async def test_a_policy_on_a_queue_the_endpoint_does_not_have_is_invalid(core):
    w = await make_world(core)
    with pytest.raises(Invalid) as err:
        await admission.set_policy(core, w.h1, "elsewhere", endpoint=w.slug1, max_in_flight=1)
    assert err.value.argument == "queue"
    assert await sql(core, "SELECT 1 FROM admission_policies") == []
