"""SPEC-0034 at the store layer: one named test per scenario (and per stated rule where cheap).

Each test drives the core functions against a real PostgreSQL; time moves by SQL, never by sleeping.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from core_world import (
    age_out_all_but_live,
    attempt_rows,
    check,
    fail_until_dead,
    lapse,
    make_due,
    make_world,
    snapshot,
    sql,
    todo_row,
)
from switchboard.core import endpoints, events, shapes, sweeps, todos
from switchboard.core.errors import Conflict, Forbidden, Invalid, NotFound
from switchboard.core.models import EndpointCaller, HumanCaller, effective_verbs
from switchboard.core.queries import Q
from switchboard.core.secrets import sha256

# ------------------------------------------------------------------------------------------- REQ-1

async def test_req1_fields_after_a_claim(core):
    w = await make_world(core)
    t = await w.todo()
    caller = w.e1.with_session("mcp-session-S")
    got = await todos.claim(core, caller, t["id"], claimant="harness/box/fixer/run-7")
    assert got.attempt_seq == 1
    row, rows = await snapshot(core, t["id"])
    assert len(rows) == 1
    a = rows[0]
    assert a["seq"] == 1 and a["attempt"] == 1
    assert a["claimer_kind"] == "endpoint"
    assert a["claimer_endpoint_id"] == w.e1.endpoint_id
    assert a["claimer_session"] == "mcp-session-S"
    assert a["claimant"] == "harness/box/fixer/run-7"
    assert a["outcome"] is None and a["disposition"] is None and a["ended_at"] is None
    assert a["owner"] == row["owner"] == f"agent:{w.e1.agent_id}"
    assert a["claimed_at"] == row["claimed_at"] and a["lease_expires_at"] == row["lease_expires_at"]
    assert a["last_heartbeat_at"] is None and a["lease_token_hash"] is None
    assert a["summary"] is None and a["summary_truncated"] is False and a["artifact"] is None
    assert await check(core) == []


async def test_req1_owner_claim_records_owner_kind(core):
    """The Board's claim (owning human): claimer_kind owner, no endpoint, no session."""
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.h1, t["id"])
    (a,) = await attempt_rows(core, t["id"])
    assert a["claimer_kind"] == "owner" and a["claimer_endpoint_id"] is None and a["claimer_session"] is None
    assert a["owner"] == f"op:{w.h1.human_id}"


async def test_req1_deleting_the_todo_deletes_its_attempts(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await sql(core, "DELETE FROM todos WHERE id = %s", (t["id"],))
    assert await attempt_rows(core, t["id"]) == []


# ------------------------------------------------------------------------------------------- REQ-2

async def test_req2_a_lost_claim_race_writes_nothing(core):
    w = await make_world(core)
    t = await w.todo()
    a, b = w.e1.with_session("s-a"), w.e1.with_session("s-b")
    results = await asyncio.gather(todos.claim(core, a, t["id"]), todos.claim(core, b, t["id"]),
                                   return_exceptions=True)
    wins = [r for r in results if isinstance(r, todos.ClaimResult)]
    losses = [r for r in results if isinstance(r, Conflict)]
    assert len(wins) == 1 and len(losses) == 1, results
    rows = await attempt_rows(core, t["id"])
    assert len(rows) == 1 and rows[0]["claimer_session"] in ("s-a", "s-b")
    assert (await todo_row(core, t["id"]))["attempts_total"] == 1


async def test_req2_interrupt_keeps_the_attempt_open(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    (before,) = await attempt_rows(core, t["id"])
    parked = await todos.request_input(core, w.e1, t["id"], question="which branch?")
    assert parked["state"] == "input-required"
    rows = await attempt_rows(core, t["id"])
    assert len(rows) == 1 and rows[0]["ended_at"] is None
    resumed = await todos.provide_input(core, w.h1, t["id"], payload={"branch": "main"})
    assert resumed["state"] == "claimed" and resumed["input"] == {"branch": "main"}
    rows = await attempt_rows(core, t["id"])
    assert len(rows) == 1 and rows[0]["seq"] == 1 and rows[0]["ended_at"] is None
    assert rows[0]["claimed_at"] == before["claimed_at"]
    assert (await todo_row(core, t["id"]))["attempts_total"] == 1
    await todos.complete(core, w.e1, t["id"])
    (a,) = await attempt_rows(core, t["id"])
    assert (a["outcome"], a["disposition"]) == ("completed", "done")
    assert await check(core) == []


# ------------------------------------------------------------------------------------------- REQ-3

async def test_req3_fail_below_the_cap(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=5)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"])
    await make_due(core, t["id"])
    got = await todos.claim(core, w.e1, t["id"])
    assert got.todo["attempt"] == 2 and got.attempt_seq == 2
    out = await todos.fail(core, w.e1, t["id"], result={"error": "x"})
    assert out["state"] == "failed" and out["dead_letter"] is False and out["next_retry_at"] is not None
    a2 = (await attempt_rows(core, t["id"]))[1]
    assert a2["attempt"] == 2 and (a2["outcome"], a2["disposition"]) == ("failed", "retry_scheduled")


async def test_req3_takeover_closes_lease_expired_and_opens_next_in_one_transaction(core):
    w = await make_world(core)
    t = await w.todo()
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    await todos.claim(core, w.e1.with_session("old"), t["id"])
    await lapse(core, t["id"], "1 minute")
    got = await todos.claim_next(core, w.e1.with_session("new"))
    assert got is not None and got.todo["id"] == t["id"] and got.attempt_seq == 2
    a1, a2 = await attempt_rows(core, t["id"])
    assert (a1["outcome"], a1["disposition"]) == ("lease_expired", "requeued")
    assert a1["summary"] is None and a1["artifact"] is None
    assert a2["ended_at"] is None and a2["claimer_session"] == "new"
    # one transaction: both rows carry the same transaction timestamp
    assert a1["ended_at"] == a2["claimed_at"]
    assert got.prior_attempts[0]["seq"] == 1 and got.prior_attempts[0]["outcome"] == "lease_expired"
    assert got.prior_attempts[0]["died"] is True
    verbs = [e.verb for e in seen if e.todo_id == t["id"]]
    assert verbs[-2:] == ["takeover", "claim"]
    assert await check(core) == []


async def test_req3_claim_by_id_takes_over_a_lapsed_lease(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    got = await todos.claim(core, w.h1, t["id"])
    assert got.attempt_seq == 2 and got.prior_attempts[0]["outcome"] == "lease_expired"


async def test_req3_an_owner_extension_is_not_the_holders_heartbeat(core):
    """The owner extending an agent's lease moves the lease but not the attempt's last heartbeat; it is
    recorded apart. The owner's own lease extended by the owner is a heartbeat."""
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"])
    (before,) = await attempt_rows(core, t["id"])
    await todos.heartbeat(core, w.h1, t["id"], lease_ttl_seconds=3600)
    (after,) = await attempt_rows(core, t["id"])
    assert after["last_heartbeat_at"] == before["last_heartbeat_at"]
    assert after["owner_extended_at"] is not None and after["lease_expires_at"] > before["lease_expires_at"]
    shown = (await todos.get(core, w.h1, t["id"]))["attempts"][0]
    assert shown["owner_extended_at"] == shapes.ts(after["owner_extended_at"])
    assert "owner_extended_at" not in (await todos.get(core, w.e1, t["id"]))["attempts"][0]  # owner view only
    mine = await w.todo()
    await todos.claim(core, w.h1, mine["id"])
    await todos.heartbeat(core, w.h1, mine["id"])
    (own,) = await attempt_rows(core, mine["id"])
    assert own["last_heartbeat_at"] is not None and own["owner_extended_at"] is None
    assert await check(core) == []


# ------------------------------------------------------------------------------------------- REQ-4

async def test_req4_the_reaper_records_a_death(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"])
    (a,) = await attempt_rows(core, t["id"])
    beat = a["last_heartbeat_at"]
    assert beat is not None
    await lapse(core, t["id"])
    report = await sweeps.sweep_once(core)
    assert report.reaped == 1
    row, (a,) = await snapshot(core, t["id"])
    assert row["state"] == "pending"
    assert (a["outcome"], a["disposition"]) == ("reaped", "requeued")
    assert a["last_heartbeat_at"] == beat and a["summary"] is None and a["artifact"] is None
    detail = await todos.get(core, w.e1, t["id"])
    assert detail["attempts"][0]["died"] is True
    got = await todos.claim(core, w.e1, t["id"])
    prior = got.prior_attempts[0]
    assert prior["outcome"] == "reaped" and prior["died"] is True and prior["summary"] is None
    assert prior["last_heartbeat_at"] == shapes.ts(beat)


async def test_req4_heartbeat_stamps_the_attempt_in_the_same_statement(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], lease_ttl_seconds=30)
    out = await todos.heartbeat(core, w.e1, t["id"], lease_ttl_seconds=600)
    row, (a,) = await snapshot(core, t["id"])
    assert a["lease_expires_at"] == row["lease_expires_at"]
    assert a["last_heartbeat_at"] == row["updated_at"]  # one statement: the same now()
    assert (a["lease_expires_at"] - a["last_heartbeat_at"]).total_seconds() == 600
    assert out["lease_expires_at"] == shapes.ts(row["lease_expires_at"])


async def test_req4_died_is_derived_from_the_outcome(core):
    for outcome in ("completed", "failed", "released", "lease_expired", "reaped", "canceled", "revoked"):
        entry = shapes.attempt({"seq": 1, "attempt": 1, "claimer_kind": "endpoint", "outcome": outcome})
        assert entry["died"] is (outcome in ("lease_expired", "reaped"))


# ------------------------------------------------------------------------------------------- REQ-5

async def test_req5_no_summary_from_result_by_default(core):
    assert core.settings.attempt_summary_from_result is False
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], result={"error": "tests red"})
    row, (a,) = await snapshot(core, t["id"])
    assert a["summary"] is None and a["summary_truncated"] is False
    assert row["result"] == {"error": "tests red"}


async def test_req5_summary_from_result_when_the_operator_opts_in(core):
    core.settings = core.settings.model_copy(update={"attempt_summary_from_result": True})
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], result={"error": "tests red"})
    row, (a,) = await snapshot(core, t["id"])
    assert a["summary"] == '{"error":"tests red"}' and row["result"] == {"error": "tests red"}
    # An explicit summary still wins, and a long result is cut the same way.
    await make_due(core, t["id"])
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], result={"log": "€" * 1000}, summary="mine")
    assert (await attempt_rows(core, t["id"]))[1]["summary"] == "mine"
    await make_due(core, t["id"])
    await todos.claim(core, w.e1, t["id"])
    await todos.complete(core, w.e1, t["id"], result={"log": "€" * 1000})
    a3 = (await attempt_rows(core, t["id"]))[2]
    assert a3["summary_truncated"] is True and len(a3["summary"].encode()) <= 2048
    assert a3["summary"].startswith('{"log":"€€')


async def test_req5_a_file_url_as_artifact(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    before = await snapshot(core, t["id"])
    with pytest.raises(Invalid) as err:
        await todos.complete(core, w.e1, t["id"], artifact="file:///etc/passwd")
    assert err.value.code == "invalid" and err.value.argument == "artifact"
    assert "artifact" in err.value.message
    after = await snapshot(core, t["id"])
    assert after == before and after[0]["state"] == "claimed"


@pytest.mark.parametrize("artifact, ok", [
    ("mcp://cairn/Zz9", True), ("mcp://cairn/a_b-C", True), ("https://example.com/run/7", True),
    ("http://example.com/x", False), ("https://", False), ("mcp://cairn/", False), ("mcp://cairn/a/b", False),
    ("mcp://cairn/" + "a" * 65, False), ("https://example.com/" + "a" * 500, False), ("javascript:alert(1)", False),
    ("/etc/passwd", False), ("https://exa mple.com/", False), ("https://example.com/\x07", False),
    ("mcp://cairn/Zz9\n", False),  # the whole string must match: `$` would accept the newline
])
async def test_req5_artifact_rules(core, artifact, ok):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    if ok:
        await todos.release(core, w.e1, t["id"], artifact=artifact)
        assert (await attempt_rows(core, t["id"]))[0]["artifact"] == artifact
    else:
        before = await snapshot(core, t["id"])
        with pytest.raises(Invalid) as err:
            await todos.release(core, w.e1, t["id"], artifact=artifact)
        assert err.value.argument == "artifact"
        assert await snapshot(core, t["id"]) == before


async def test_req5_summary_cut_to_2048_bytes_on_a_utf8_boundary(core):
    w = await make_world(core)
    t = await w.todo()
    exact = "x" * 2048
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary=exact)
    a = (await attempt_rows(core, t["id"]))[0]
    assert a["summary"] == exact and a["summary_truncated"] is False
    await make_due(core, t["id"])
    await todos.claim(core, w.e1, t["id"])
    long = "a" + "€" * 1000  # 3001 bytes; a 3-byte character straddles byte 2048
    await todos.complete(core, w.e1, t["id"], summary=long)
    a = (await attempt_rows(core, t["id"]))[1]
    raw = a["summary"].encode("utf-8")
    assert a["summary_truncated"] is True
    assert len(raw) == 2047 and a["summary"] == "a" + "€" * 682 and long.startswith(a["summary"])


async def test_req5_claimant_cut_to_128_bytes_with_control_characters_removed(core):
    w = await make_world(core)
    t = await w.todo()
    label = "run\x00-\x07\x1b[31m7\u200b\n" + "é" * 100
    got = await todos.claim(core, w.e1, t["id"], claimant=label)
    (a,) = await attempt_rows(core, t["id"])
    stored = a["claimant"]
    assert len(stored.encode()) <= 128 and len(stored.encode()) >= 127
    assert not any(ord(c) < 32 or c in "\x7f\u200b" for c in stored)
    assert stored.startswith("run-[31m7éé")
    assert got.todo["state"] == "claimed"


async def test_req5_inputs_stored_as_data(core):
    w = await make_world(core)
    t = await w.todo()
    text = "<script>alert(1)</script> ignore previous instructions; DROP TABLE todos; {{x}} %(id)s"
    await todos.claim(core, w.e1, t["id"], claimant=text[:100])
    await todos.release(core, w.e1, t["id"], summary=text)
    (a,) = await attempt_rows(core, t["id"])
    assert a["summary"] == text and a["claimant"] == text[:100]


# ------------------------------------------------------------------------------------------- REQ-6

async def test_req6_the_agent_cannot_close_its_supervisors_attempt(core):
    w = await make_world(core)
    t = await w.todo()
    got = await todos.claim(core, w.e1.with_session("harness"), t["id"], require_fence=True)
    token = got.lease_token
    assert token and len(token) >= 22  # 128 bits in base64url
    (a,) = await attempt_rows(core, t["id"])
    assert bytes(a["lease_token_hash"]) == sha256(token)
    before = await snapshot(core, t["id"])
    with pytest.raises(Conflict):
        await todos.complete(core, w.e1.with_session("agent"), t["id"])
    for verb in (todos.heartbeat, todos.fail, todos.release, todos.request_input):
        with pytest.raises(Conflict):
            await verb(core, w.e1, t["id"])
    after = await snapshot(core, t["id"])
    assert after == before and after[0]["state"] == "claimed"
    # The token is returned once: no read returns it.
    detail = await todos.get(core, w.e1, t["id"])
    assert token not in repr(detail) and "lease_token" not in detail
    assert "lease_token_hash" not in detail["attempts"][0]
    await todos.complete(core, w.e1, t["id"], lease_token=token)


async def test_req6_a_stale_workers_token(core):
    w = await make_world(core)
    t = await w.todo()
    old = await todos.claim(core, w.e1, t["id"], require_fence=True)
    await lapse(core, t["id"])
    new = await todos.claim_next(core, w.e1, require_fence=True)
    assert new.attempt_seq == 2 and new.lease_token != old.lease_token
    before = await snapshot(core, t["id"])
    for call in (lambda: todos.complete(core, w.e1, t["id"], lease_token=old.lease_token),
                 lambda: todos.heartbeat(core, w.e1, t["id"], lease_token=old.lease_token),
                 lambda: todos.fail(core, w.e1, t["id"], lease_token=old.lease_token),
                 lambda: todos.release(core, w.e1, t["id"], lease_token=old.lease_token),
                 lambda: todos.complete(core, w.e1, t["id"])):
        with pytest.raises(Conflict):
            await call()
    assert await snapshot(core, t["id"]) == before
    a2 = before[1][1]
    assert a2["ended_at"] is None
    await todos.heartbeat(core, w.e1, t["id"], lease_token=new.lease_token)
    await todos.complete(core, w.e1, t["id"], lease_token=new.lease_token, summary="done")
    assert (await attempt_rows(core, t["id"]))[1]["outcome"] == "completed"


async def test_req6_unfenced_client_unchanged(core):
    w = await make_world(core)
    t = await w.todo()
    got = await todos.claim(core, w.e1, t["id"])
    assert got.lease_token is None and "lease_token" not in got.as_dict()
    await todos.heartbeat(core, w.e1, t["id"])
    out = await todos.complete(core, w.e1, t["id"], result={"ok": True})
    assert out["state"] == "done"
    (a,) = await attempt_rows(core, t["id"])
    assert a["lease_token_hash"] is None and a["outcome"] == "completed"


async def test_req6_owner_check_still_applies_with_the_right_token(core):
    """The fence narrows the owner check and never widens it: a token does not let a non-holder act."""
    w = await make_world(core)
    t = await w.todo()
    got = await todos.claim(core, w.h1, t["id"], require_fence=True)  # held by the human
    with pytest.raises(Conflict):
        await todos.complete(core, w.e1, t["id"], lease_token=got.lease_token)


@pytest.mark.parametrize("action", ["release", "fail", "complete", "heartbeat", "cancel"])
async def test_req6_human_actions_are_exempt_from_the_fence(core, action):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], require_fence=True)
    expected = {"release": ("released", "pending"), "fail": ("failed", "failed"),
                "complete": ("completed", "done"), "cancel": ("canceled", "canceled"),
                "heartbeat": (None, "claimed")}[action]
    fn = getattr(todos, action)
    await fn(core, w.h1, t["id"])
    row, (a,) = await snapshot(core, t["id"])
    assert (a["outcome"], row["state"]) == expected


# ------------------------------------------------------------------------------------------- REQ-7

async def test_req7_second_attempt_sees_the_first(core):
    w = await make_world(core)
    t = await w.todo()
    first = await todos.claim(core, w.e1, t["id"], claimant="w1")
    assert first.attempt_seq == 1 and first.prior_attempts == [] and first.attempts_total == 1
    await todos.fail(core, w.e1, t["id"], summary="tests still red", artifact="mcp://cairn/Zz9")
    await make_due(core, t["id"])
    got = await todos.claim(core, w.e1, t["id"])
    assert got.attempt_seq == 2 and got.attempts_total == 2
    p = got.prior_attempts[0]
    assert p["summary"] == "tests still red" and p["artifact"] == "mcp://cairn/Zz9"
    assert set(p) == set(shapes.ATTEMPT_FIELDS)
    assert p["seq"] == 1 and p["attempt"] == 1 and p["claimant"] == "w1" and p["died"] is False
    assert (p["outcome"], p["disposition"]) == ("failed", "retry_scheduled")
    body = got.as_dict()
    assert body["attempt_seq"] == 2 and body["attempts_total"] == 2 and body["prior_attempts"] == [p]
    assert body["id"] == t["id"] and body["payload_size"] == 0


async def test_req7_prior_attempts_are_the_five_newest_closed(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=10)
    for _ in range(7):
        await todos.claim(core, w.e1, t["id"])
        await todos.release(core, w.e1, t["id"])
    got = await todos.claim(core, w.e1, t["id"])
    assert got.attempt_seq == 8
    assert [p["seq"] for p in got.prior_attempts] == [7, 6, 5, 4, 3]
    assert all(p["ended_at"] is not None for p in got.prior_attempts)


# ------------------------------------------------------------------------------------------- REQ-8

async def test_req8_reading_a_dead_letter(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=5)
    await fail_until_dead(core, w.e1, t["id"], 5)
    detail = await todos.get(core, w.e1, t["id"])
    assert detail["dead_letter"] is True and detail["next_retry_at"] is None and detail["state"] == "failed"
    assert [a["seq"] for a in detail["attempts"]] == [5, 4, 3, 2, 1]
    assert detail["attempts"][0]["disposition"] == "dead_lettered"
    assert all(a["disposition"] == "retry_scheduled" for a in detail["attempts"][1:])
    assert detail["attempts_total"] == 5 and detail["attempts_pruned"] == 0
    assert all(set(a) == set(shapes.DETAIL_ATTEMPT_FIELDS) for a in detail["attempts"])


async def test_req8_fail_returns_next_retry_at_and_dead_letter(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=2)
    await todos.claim(core, w.e1, t["id"])
    out = await todos.fail(core, w.e1, t["id"])
    assert out["dead_letter"] is False and out["next_retry_at"] is not None
    await make_due(core, t["id"])
    await todos.claim(core, w.e1, t["id"])
    out = await todos.fail(core, w.e1, t["id"])
    assert out["dead_letter"] is True and out["next_retry_at"] is None


async def test_req8_get_todo_includes_the_open_attempt_and_full_todo(core):
    w = await make_world(core)
    t = await w.todo(payload={"k": "v"})
    await todos.claim(core, w.e1, t["id"], claimant="me")
    detail = await todos.get(core, w.e1, t["id"])
    assert detail["payload"] == {"k": "v"} and detail["result"] is None and detail["dead_letter"] is False
    assert detail["attempts"][0]["ended_at"] is None and detail["attempts"][0]["claimant"] == "me"
    assert detail["attempts_total"] == 1 and detail["attempts_pruned"] == 0


async def test_req8_attempts_limit_default_20_and_max_50(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=100)
    for _ in range(55):
        await todos.claim(core, w.e1, t["id"])
        await todos.release(core, w.e1, t["id"])
    d = await todos.get(core, w.e1, t["id"])
    assert len(d["attempts"]) == 20 and d["attempts"][0]["seq"] == 55
    assert [a["seq"] for a in (await todos.get(core, w.e1, t["id"], attempts_limit=7))["attempts"]] == \
        list(range(55, 48, -1))
    d = await todos.get(core, w.e1, t["id"], attempts_limit=1000)
    assert len(d["attempts"]) == 50  # capped at 50 (and the history itself holds 50)
    assert d["attempts_total"] == 55 and d["attempts_pruned"] == 5


async def test_req8_an_existing_endpoint_gets_the_verb(core):
    w = await make_world(core, verbs=["list_todos", "claim"])
    assert "get_todo" in w.e1.verbs
    # An endpoint row written before the verb existed (scope without get_todo) reads the same way.
    await sql(core, "UPDATE endpoints SET scope_verbs = ARRAY['list_todos', 'claim_next']")
    row = await endpoints.get_for_human(core, w.h1, w.slug1)
    caller = endpoints.caller_from_row(row)
    assert "get_todo" in caller.verbs and "get_todo" not in row["scope_verbs"]
    t = await w.todo()
    assert (await todos.get(core, caller, t["id"]))["id"] == t["id"]
    assert "get_todo" not in effective_verbs(["claim"]) and "release" not in effective_verbs(list(caller.verbs))


# ------------------------------------------------------------------------------------------ REQ-9

async def test_req9_release_on_shutdown(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    out = await todos.release(core, w.e1, t["id"], summary="daemon stopping")
    assert out["state"] == "pending" and out["attempt"] == 1 and "owner" not in out
    row, (a,) = await snapshot(core, t["id"])
    assert row["owner"] is None and row["lease_expires_at"] is None and row["attempt"] == 1
    assert (a["outcome"], a["disposition"], a["summary"]) == ("released", "requeued", "daemon stopping")


# ------------------------------------------------------------------------------------------ REQ-10

async def _assert_same_not_found(calls) -> None:
    bodies = []
    for call in calls:
        with pytest.raises(NotFound) as err:
            await call()
        bodies.append((err.value.code, err.value.to_dict()))
    assert all(b == bodies[0] for b in bodies), bodies
    assert bodies[0][0] == "not_found"


async def test_req10_foreign_todo(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary="secret summary")
    random_id = f"td_{uuid.uuid4()}"
    await _assert_same_not_found([lambda: todos.get(core, w.e2, t["id"]),
                                  lambda: todos.get(core, w.e2, random_id),
                                  lambda: todos.get(core, w.e1, random_id)])


async def test_req10_second_human(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    random_id = f"td_{uuid.uuid4()}"
    await _assert_same_not_found([lambda: todos.get(core, w.h2, t["id"]),
                                  lambda: todos.get(core, w.h2, random_id)])


@pytest.mark.parametrize("caller_name", ["e2", "h2"])
async def test_req10_foreign_transitions_are_not_found_and_change_nothing(core, caller_name):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], require_fence=True)
    other = getattr(w, caller_name)
    before = await snapshot(core, t["id"])
    calls = [lambda: todos.claim(core, other, t["id"]), lambda: todos.heartbeat(core, other, t["id"]),
             lambda: todos.complete(core, other, t["id"]), lambda: todos.fail(core, other, t["id"]),
             lambda: todos.release(core, other, t["id"]), lambda: todos.request_input(core, other, t["id"]),
             lambda: todos.get(core, other, t["id"])]
    if isinstance(other, HumanCaller):
        calls += [lambda: todos.cancel(core, other, t["id"]), lambda: todos.retry(core, other, t["id"]),
                  lambda: todos.provide_input(core, other, t["id"], payload={})]
    await _assert_same_not_found(calls + [lambda: todos.get(core, other, f"td_{uuid.uuid4()}")])
    assert await snapshot(core, t["id"]) == before


async def test_req10_reads_out_of_grant_are_not_found(core):
    w = await make_world(core, queues=("a", "b"))
    t = await w.todo(queue="b")
    narrowed = EndpointCaller(w.e1.endpoint_id, w.e1.agent_id, ("a",), w.e1.verbs, slug=w.e1.slug)
    await _assert_same_not_found([lambda: todos.get(core, narrowed, t["id"]),
                                  lambda: todos.get(core, narrowed, f"td_{uuid.uuid4()}")])
    assert await todos.list_for_endpoint(core, narrowed) == []
    assert await todos.list_for_endpoint(core, w.e2) == []
    assert await todos.list_for_human(core, w.h2) == []


# ------------------------------------------------------------------------------------------ REQ-11

async def test_req11_a_hot_todo_is_capped(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=1)
    for _ in range(60):
        got = await todos.claim(core, w.e1, t["id"])
        await todos.fail(core, w.e1, t["id"], retry=False)
        await todos.retry(core, w.h1, t["id"])
    assert got.attempt_seq == 60
    row, rows = await snapshot(core, t["id"])
    assert len(rows) == 50 and row["attempts_pruned"] == 10 and row["attempts_total"] == 60
    assert [a["seq"] for a in rows] == list(range(11, 61))
    detail = await todos.get(core, w.h1, t["id"])
    assert detail["attempts_total"] == 60 and detail["attempts_pruned"] == 10 and len(detail["attempts"]) == 50
    assert await check(core) == []


async def test_req11_the_open_attempt_is_never_pruned_and_the_cap_is_a_setting(core):
    w = await make_world(core)
    await sql(core, "UPDATE settings SET value = '2' WHERE key = 'attempt_history_max_per_todo'")  # floor 5
    t = await w.todo(max_attempts=100)
    for _ in range(8):
        await todos.claim(core, w.e1, t["id"])
        await lapse(core, t["id"])
    got = await todos.claim(core, w.e1, t["id"])  # takeover: closes seq 8, opens seq 9
    row, rows = await snapshot(core, t["id"])
    assert [a["seq"] for a in rows] == [5, 6, 7, 8, 9] and rows[-1]["ended_at"] is None
    assert row["attempts_pruned"] == 4 and got.prior_attempts[0]["seq"] == 8
    assert [p["seq"] for p in got.prior_attempts] == [8, 7, 6, 5]
    assert await check(core) == []


async def test_req11_retention_removes_history_with_the_todo(core):
    w = await make_world(core)
    done = await w.todo("done")
    await todos.claim(core, w.e1, done["id"])
    await todos.complete(core, w.e1, done["id"], summary="ok")
    live = {}
    live["pending"] = await w.todo("pending")
    live["claimed"] = await w.todo("claimed")
    await todos.claim(core, w.e1, live["claimed"]["id"])
    live["parked"] = await w.todo("parked")
    await todos.claim(core, w.e1, live["parked"]["id"])
    await todos.fail(core, w.e1, live["parked"]["id"])
    live["input"] = await w.todo("input")
    await todos.claim(core, w.e1, live["input"]["id"])
    await todos.request_input(core, w.e1, live["input"]["id"])
    await age_out_all_but_live(core, done, live)
    assert len(await attempt_rows(core, live["claimed"]["id"])) == 1
    assert await check(core) == []


async def test_req11_retention_by_row_count_never_takes_a_live_todo(core):
    w = await make_world(core)
    terminal = []
    for i in range(3):
        t = await w.todo(f"c{i}")
        await todos.cancel(core, w.h1, t["id"])
        terminal.append(t)
    live = await w.todo("live")
    await sql(core, "UPDATE todos SET updated_at = now() - make_interval(secs => %s) WHERE id = %s",
              (100, terminal[0]["id"]))
    await sql(core, "UPDATE todos SET updated_at = now() - make_interval(secs => %s) WHERE id = %s",
              (50, terminal[1]["id"]))
    await sql(core, "UPDATE settings SET value = '1' WHERE key = 'retention_max_rows'")
    await sweeps.retention(core)
    left = {r["id"] for r in await sql(core, "SELECT id FROM todos")}
    assert left == {terminal[2]["id"], live["id"]}


# ------------------------------------------------------------------------------------------ REQ-12

async def test_req12_retry_after_dead_letter(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=5)
    await fail_until_dead(core, w.e1, t["id"], 5)
    retried = await todos.retry(core, w.h1, t["id"])
    assert retried["state"] == "pending" and retried["attempt"] == 0
    rows = await attempt_rows(core, t["id"])
    assert [a["seq"] for a in rows] == [1, 2, 3, 4, 5]  # retry kept every attempt
    got = await todos.claim(core, w.e1, t["id"])
    assert got.attempt_seq == 6 and got.todo["attempt"] == 1
    a6 = (await attempt_rows(core, t["id"]))[-1]
    assert a6["seq"] == 6 and a6["attempt"] == 1
    assert [p["seq"] for p in got.prior_attempts] == [5, 4, 3, 2, 1]
    detail = await todos.get(core, w.e1, t["id"])
    assert [a["seq"] for a in detail["attempts"]] == [6, 5, 4, 3, 2, 1]


# ------------------------------------------------------------------------------------------ REQ-15

async def test_req15_dead_letter_carries_its_last_attempt(core):
    w = await make_world(core)
    t = await w.todo(max_attempts=5)
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    await fail_until_dead(core, w.e1, t["id"], 4)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary="still red", artifact="mcp://cairn/Zz9")
    ev = seen[-1]
    assert ev.verb == "fail" and ev.dead_lettered
    assert ev.final_attempt == {"seq": 5, "outcome": "failed", "died": False, "summary": "still red",
                                "artifact": "mcp://cairn/Zz9", "attempts_total": 5}
    assert all(e.final_attempt is None for e in seen[:-1])


# ------------------------------------------------------------------------------------------ REQ-18

async def test_req18_rollback_leaves_no_orphan(core):
    """The claim statement runs inside a transaction that then fails: neither row is committed."""
    w = await make_world(core)
    t = await w.todo()
    before = await snapshot(core, t["id"])
    params = {"human_id": None, "endpoint_id": w.e1.endpoint_id, "queues": list(w.e1.queues),
              "owner": w.e1.owner, "id": t["id"], "ttl": 60, "claimant": "x", "new_token_hash": None,
              "claimer_kind": "endpoint", "claimer_endpoint_id": w.e1.endpoint_id, "session": None, "admitted": False}
    with pytest.raises(RuntimeError):
        async with core.pool.connection() as conn:
            async with conn.transaction():
                cur = await conn.execute(Q.todos.claim, params)
                assert (await cur.fetchone())["attempt_seq"] == 1
                cur = await conn.execute("SELECT count(*) AS n FROM todo_attempts WHERE todo_id = %s", (t["id"],))
                assert (await cur.fetchone())["n"] == 1  # prepared inside the transaction
                raise RuntimeError("the transaction fails after the attempt insert")
    assert await snapshot(core, t["id"]) == before


async def test_req18_a_claim_refused_at_commit_writes_neither_row(core):
    """A planted open attempt makes the claim's own attempt insert fail at commit (23P01): the
    todos update in the same statement is rolled back with it, and the caller gets conflict."""
    w = await make_world(core)
    t = await w.todo()
    await sql(core, "INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at,"
                    " lease_expires_at) VALUES (%s, 99, 1, 'owner', 'planted', now(), now())", (t["id"],))
    before = await snapshot(core, t["id"])
    with pytest.raises(Conflict):
        await todos.claim(core, w.e1, t["id"])
    with pytest.raises(Conflict):
        await todos.claim_next(core, w.e1)
    after = await snapshot(core, t["id"])
    assert after == before and after[0]["state"] == "pending" and after[0]["attempts_total"] == 0
    assert [a["seq"] for a in after[1]] == [99]


# ------------------------------------------------------------------------------------------ REQ-19

async def test_req19_fence_mismatch_is_conflict(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], require_fence=True)
    with pytest.raises(Conflict) as err:
        await todos.heartbeat(core, w.e1, t["id"], lease_token="not-the-token")
    assert err.value.code == "conflict" and not isinstance(err.value, Forbidden)
    assert "token" not in err.value.message.lower() or "not-the-token" not in err.value.message
    # An unfenced attempt also refuses a presented token (it cannot equal a missing hash).
    t2 = await w.todo()
    await todos.claim(core, w.e1, t2["id"])
    with pytest.raises(Conflict):
        await todos.heartbeat(core, w.e1, t2["id"], lease_token="anything")


async def test_req19_classify_miss_not_found_conflict_forbidden(core):
    w = await make_world(core, queues=("a", "b"))
    t = await w.todo(queue="b")
    with pytest.raises(NotFound):
        await todos.complete(core, w.e1, f"td_{uuid.uuid4()}")
    with pytest.raises(NotFound):
        await todos.complete(core, w.e2, t["id"])
    with pytest.raises(Conflict) as err:
        await todos.complete(core, w.e1, t["id"])  # present, pending: wrong state
    assert err.value.op == "complete" and err.value.todo_id == t["id"]
    assert str(err.value).startswith(f"complete {t['id']}: conflict")
    narrowed = EndpointCaller(w.e1.endpoint_id, w.e1.agent_id, ("a",), w.e1.verbs, slug=w.e1.slug)
    with pytest.raises(Forbidden) as err:
        await todos.claim(core, narrowed, t["id"])
    assert err.value.code == "forbidden" and err.value.op == "claim"
    with pytest.raises(Forbidden):
        await todos.claim_next(core, narrowed, queue="b")
    with pytest.raises(Invalid) as err:
        await todos.complete(core, w.e1, t["id"], artifact="ftp://x")
    assert err.value.argument == "artifact"


async def test_req19_logs_carry_no_token_summary_or_artifact(core):
    """Every record the core logs during a fenced life (including a subscriber that fails with the
    attempt in its message) is formatted by both formatters without a secret or report text."""
    from core_world import capture_logs

    _, stop = capture_logs()

    def leaky(event):
        raise RuntimeError(f"subscriber saw {event.closed_attempt} {event.final_attempt}")

    core.bus.subscribe(leaky)
    try:
        w = await make_world(core)
        _, credential = await endpoints.vend(core, w.h1, agent="secretive")
        t = await w.todo(max_attempts=1)
        got = await todos.claim(core, w.e1, t["id"], require_fence=True, claimant="label-7f3a")
        with pytest.raises(Conflict):
            await todos.complete(core, w.e1, t["id"], lease_token="wrong-token-9c1d")
        await todos.heartbeat(core, w.e1, t["id"], lease_token=got.lease_token)
        await todos.fail(core, w.e1, t["id"], lease_token=got.lease_token, summary="summary-text-51ab",
                         artifact="mcp://cairn/artifact51ab", result={"secret": "result-text-51ab"})
        await sweeps.sweep_once(core)
    finally:
        logged = stop()
    assert "subscriber failed" in logged  # the failing subscriber was logged, and only its class name
    for secret in (got.lease_token, "wrong-token-9c1d", credential, "summary-text-51ab", "artifact51ab",
                   "result-text-51ab", "label-7f3a"):
        assert secret not in logged
