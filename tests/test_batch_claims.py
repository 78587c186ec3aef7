"""Batched claims and closes (issue 17, "Batched claims"): `claim_next_batch`, `complete_batch` and
`fail_batch` against a real PostgreSQL, each todo of a batch held to the single verbs' SPEC-0034 rules.

A batch close is per item, not all-or-nothing: each todo is closed or refused by its own state, and the
answer says which. A malformed argument refuses the whole call before anything changes.
"""

from __future__ import annotations

import json

import pytest

from conftest import make_settings, start_thread_server
from core_world import attempt_rows, check, lapse, make_due, make_world, snapshot, sql, todo_row
from mcp_support import body, error_body, push, sdk, vend
from switchboard.core import events, inputs, sweeps, todos
from switchboard.core.errors import Forbidden, Invalid
from switchboard.core.models import VERBS
from switchboard.core.secrets import sha256
from switchboard.mcp.tools import TOOLS
from test_core_inputs import fingerprint


def _ids(got: list[todos.ClaimResult]) -> list[str]:
    return [g.todo["id"] for g in got]


# ------------------------------------------------------------------------------------------ claims

async def test_a_batch_claims_the_oldest_ready_todos_each_under_its_own_attempt(core):
    w = await make_world(core)
    made = [(await w.todo(f"t{i}"))["id"] for i in range(5)]
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    caller = w.e1.with_session("batch-S")
    got = await todos.claim_next_batch(core, caller, max_todos=3, claimant="host/batcher")
    assert _ids(got) == made[:3]  # oldest first
    for g in got:
        assert g.attempt_seq == 1 and g.attempts_total == 1 and g.prior_attempts == [] and g.lease_token is None
        assert g.todo["state"] == "claimed" and g.todo["attempt"] == 1
        row, (a,) = await snapshot(core, g.todo["id"])
        assert (a["seq"], a["attempt"], a["claimer_kind"], a["claimer_session"], a["claimant"]) == (
            1, 1, "endpoint", "batch-S", "host/batcher")
        assert a["claimer_endpoint_id"] == w.e1.endpoint_id and a["ended_at"] is None
        assert a["lease_expires_at"] == row["lease_expires_at"] and a["lease_token_hash"] is None
        assert row["owner"] == a["owner"] == f"agent:{w.e1.agent_id}"
    assert [(e.verb, e.todo_id) for e in seen] == [("claim", i) for i in made[:3]]  # after commit, each
    rest = await todos.claim_next_batch(core, caller, max_todos=100)
    assert _ids(rest) == made[3:]
    assert await todos.claim_next_batch(core, caller, max_todos=100) == []
    for t in made:
        assert (await todo_row(core, t))["state"] == "claimed"
    assert await check(core) == []


async def test_a_batch_takes_pending_due_retries_and_lapsed_leases_with_their_histories(core):
    """SPEC-0034 per todo of one batch: a takeover closes the lapsed attempt lease_expired/requeued in
    the same statement; prior attempts are each todo's own, died for a death and not for a failure."""
    w = await make_world(core)
    reaped = (await w.todo("reaped", max_attempts=3))["id"]
    await todos.claim(core, w.e1, reaped)
    await lapse(core, reaped)
    assert (await sweeps.sweep_once(core)).reaped == 1  # pending again, with a death behind it
    pending = (await w.todo("pending"))["id"]
    retried = (await w.todo("retried", max_attempts=3))["id"]
    lapsed = (await w.todo("lapsed", max_attempts=3))["id"]
    capped = (await w.todo("capped", max_attempts=1))["id"]
    parked = (await w.todo("parked", max_attempts=3))["id"]
    await todos.claim(core, w.e1, retried)
    await todos.fail(core, w.e1, retried, summary="tests red", artifact="https://ci.example/1")
    await make_due(core, retried)
    await todos.claim(core, w.e1, parked)
    await todos.fail(core, w.e1, parked, summary="not due yet")  # backoff still running: not ready
    await todos.claim(core, w.e1.with_session("old"), lapsed)
    await lapse(core, lapsed)
    await todos.claim(core, w.e1, capped)
    await lapse(core, capped)  # lapsed at its cap: the reaper's, never a takeover
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)

    got = await todos.claim_next_batch(core, w.e1.with_session("new"), max_todos=10)
    by_id = {g.todo["id"]: g for g in got}
    assert set(by_id) == {reaped, pending, retried, lapsed}
    assert _ids(got) == [reaped, pending, retried, lapsed]  # by created_at, as claim_next orders
    assert by_id[pending].attempt_seq == 1 and by_id[pending].prior_attempts == []
    r = by_id[reaped]
    assert r.attempt_seq == 2 and [(p["seq"], p["outcome"], p["died"]) for p in r.prior_attempts] == [
        (1, "reaped", True)]
    f = by_id[retried]
    assert f.attempt_seq == 2 and f.todo["attempt"] == 2
    assert [(p["outcome"], p["disposition"], p["died"], p["summary"], p["artifact"]) for p in f.prior_attempts] == [
        ("failed", "retry_scheduled", False, "tests red", "https://ci.example/1")]
    t = by_id[lapsed]
    assert t.attempt_seq == 2 and [(p["outcome"], p["disposition"], p["died"]) for p in t.prior_attempts] == [
        ("lease_expired", "requeued", True)]
    a1, a2 = await attempt_rows(core, lapsed)
    assert (a1["outcome"], a1["disposition"], a1["claimer_session"]) == ("lease_expired", "requeued", "old")
    assert a1["ended_at"] == a2["claimed_at"] and a2["ended_at"] is None  # one statement
    assert a2["claimer_session"] == "new"
    for todo_id in (reaped, retried):
        rows = await attempt_rows(core, todo_id)
        assert [x["seq"] for x in rows] == [1, 2] and rows[1]["ended_at"] is None
        assert (await todo_row(core, todo_id))["next_retry_at"] is None
    assert (await todo_row(core, capped))["attempts_total"] == 1  # left for the reaper
    assert (await todo_row(core, parked))["state"] == "failed"
    verbs = [(e.verb, e.todo_id) for e in seen]
    assert verbs == [("claim", reaped), ("claim", pending), ("claim", retried), ("takeover", lapsed),
                     ("claim", lapsed)]
    assert seen[3].closed_attempt["outcome"] == "lease_expired"
    assert await check(core) == []


async def test_a_batch_over_several_queues_and_one_named_queue(core):
    w = await make_world(core, queues=("inbox", "other"))
    a = (await w.todo("a", queue="inbox"))["id"]
    b = (await w.todo("b", queue="other"))["id"]
    c = (await w.todo("c", queue="inbox"))["id"]
    d = (await w.todo("d", queue="other"))["id"]
    assert _ids(await todos.claim_next_batch(core, w.e1, max_todos=2, queue="other")) == [b, d]
    assert _ids(await todos.claim_next_batch(core, w.e1, max_todos=5)) == [a, c]
    with pytest.raises(Forbidden) as err:
        await todos.claim_next_batch(core, w.e1, max_todos=5, queue="elsewhere")
    assert err.value.argument == "queue"
    other = await w.todo("theirs", caller=w.e2)
    assert await todos.claim_next_batch(core, w.e1, max_todos=5) == []  # never another endpoint's
    assert (await todo_row(core, other["id"]))["state"] == "pending"
    assert await check(core) == []


async def test_a_fenced_batch_gives_each_todo_its_own_token(core):
    w = await make_world(core)
    made = [(await w.todo(f"f{i}"))["id"] for i in range(4)]
    got = await todos.claim_next_batch(core, w.e1, max_todos=4, require_fence=True)
    tokens = [g.lease_token for g in got]
    assert all(tokens) and len(set(tokens)) == 4
    for g in got:  # only the hash is stored, each on its own attempt
        (a,) = await attempt_rows(core, g.todo["id"])
        assert bytes(a["lease_token_hash"]) == sha256(g.lease_token)
    # Per todo: its own token works, another todo's token is a conflict, no token is a conflict.
    await todos.heartbeat(core, w.e1, made[0], lease_token=tokens[0])
    out = await todos.complete_batch(core, w.e1, [
        {"id": made[0], "lease_token": tokens[0], "summary": "done 0"},
        {"id": made[1], "lease_token": tokens[2]},
        {"id": made[2]},
        {"id": made[3], "lease_token": tokens[3]},
    ])
    assert [(o["id"], o["ok"]) for o in out] == [(made[0], True), (made[1], False), (made[2], False),
                                                 (made[3], True)]
    assert out[1]["error"]["code"] == out[2]["error"]["code"] == "conflict"
    for t in made[1:3]:
        row, (a,) = await snapshot(core, t)
        assert row["state"] == "claimed" and a["ended_at"] is None
    out = await todos.fail_batch(core, w.e1, [{"id": made[1], "lease_token": tokens[1]},
                                              {"id": made[2], "lease_token": tokens[2], "retry": False}])
    assert all(o["ok"] for o in out)
    assert await check(core) == []


async def test_a_batch_refused_at_commit_is_a_conflict_and_claims_nothing(core):
    """One statement: when the one-open-attempt constraint refuses one todo's new attempt at commit,
    none of the batch is claimed (here a stray open attempt was planted on a pending todo)."""
    from switchboard.core.errors import Conflict

    w = await make_world(core)
    made = [(await w.todo(f"p{i}"))["id"] for i in range(3)]
    await sql(core, "INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, owner, claimed_at,"
                    " lease_expires_at) VALUES (%s, 7, 1, 'owner', 'planted', now(), now())", (made[1],))
    with pytest.raises(Conflict):
        await todos.claim_next_batch(core, w.e1, max_todos=3)
    for t in made:
        assert (await todo_row(core, t))["state"] == "pending"
    assert [len(await attempt_rows(core, t)) for t in made] == [0, 1, 0]


async def test_the_history_cap_holds_under_batch_claims(core):
    """REQ-11 through claim_next_batch: a hot todo claimed again and again by batches (here one after a
    failed attempt and one by taking over a lapsed lease, with a fresh todo in each batch) keeps at
    most attempt_history_max_per_todo attempts, the newest ones and always the open one; the rest are
    counted in attempts_pruned, and the prior attempts each claim hands out are kept ones only."""
    cap = 5  # the setting's floor, so a claim's prior attempts (at most 5) show the pruning too
    await sql(core, "UPDATE settings SET value = %s WHERE key = 'attempt_history_max_per_todo'", (str(cap),))
    w = await make_world(core)
    failing = (await w.todo("failing", max_attempts=100))["id"]
    lapsing = (await w.todo("lapsing", max_attempts=100))["id"]
    rounds = 12
    for k in range(1, rounds + 1):
        fresh = (await w.todo(f"fresh {k}"))["id"]
        got = await todos.claim_next_batch(core, w.e1, max_todos=10)
        assert _ids(got) == [failing, lapsing, fresh]
        assert got[2].attempt_seq == 1 and got[2].prior_attempts == []
        kept = list(range(max(1, k - cap + 1), k + 1))  # the newest `cap` seqs, the open one last
        for g, outcome in ((got[0], "failed"), (got[1], "lease_expired")):
            assert (g.attempt_seq, g.attempts_total, g.todo["attempt"]) == (k, k, k)
            assert [p["seq"] for p in g.prior_attempts] == kept[-2::-1]  # closed and kept, newest first
            assert all(p["outcome"] == outcome for p in g.prior_attempts)
            row, rows = await snapshot(core, g.todo["id"])
            assert [a["seq"] for a in rows] == kept and rows[-1]["ended_at"] is None
            assert all(a["ended_at"] is not None for a in rows[:-1])
            assert (row["attempts_total"], row["attempts_pruned"]) == (k, max(0, k - cap))
        assert [p["summary"] for p in got[0].prior_attempts] == [f"red {s}" for s in kept[-2::-1]]
        await todos.complete(core, w.e1, fresh)
        await todos.fail(core, w.e1, failing, summary=f"red {k}")
        await make_due(core, failing)
        await lapse(core, lapsing)
    for t in (failing, lapsing):
        detail = await todos.get(core, w.e1, t)
        assert (detail["attempts_total"], detail["attempts_pruned"]) == (rounds, rounds - cap)
        assert [a["seq"] for a in detail["attempts"]] == list(range(rounds, rounds - cap, -1))
    assert await check(core) == []


# ------------------------------------------------------------------------------------------ closes

async def test_complete_batch_closes_each_attempt_as_complete_does(core):
    w = await make_world(core)
    made = [(await w.todo(f"c{i}"))["id"] for i in range(3)]
    await todos.claim_next_batch(core, w.e1, max_todos=3)
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    out = await todos.complete_batch(core, w.e1, [
        {"id": made[0], "summary": "first", "artifact": "https://ci.example/a", "result": {"n": 0}},
        {"id": made[1], "summary": "é" * 2000},
        {"id": made[2], "result": [1, 2]},
    ])
    assert [o["id"] for o in out] == made and all(o["ok"] for o in out)
    assert all(o["todo"]["state"] == "done" and o["todo"]["id"] == o["id"] for o in out)
    rows = {t: await snapshot(core, t) for t in made}
    assert rows[made[0]][0]["result"] == {"n": 0} and rows[made[1]][0]["result"] is None
    assert rows[made[2]][0]["result"] == [1, 2]
    for _t, (row, (a,)) in rows.items():
        assert (a["outcome"], a["disposition"]) == ("completed", "done")
        assert row["completed_at"] == a["ended_at"] and row["lease_expires_at"] is None
    assert rows[made[0]][1][0]["summary"] == "first" and rows[made[0]][1][0]["artifact"] == "https://ci.example/a"
    cut = rows[made[1]][1][0]
    assert cut["summary_truncated"] is True and len(cut["summary"].encode()) <= inputs.SUMMARY_MAX_BYTES
    assert [(e.verb, e.todo_id, e.closed_attempt["outcome"]) for e in seen] == [
        ("complete", t, "completed") for t in made]
    assert await check(core) == []


async def test_fail_batch_schedules_retries_and_dead_letters_per_todo(core):
    core.settings = core.settings.model_copy(update={"retry_backoff_base_seconds": 10,
                                                     "retry_backoff_max_seconds": 1000})
    w = await make_world(core)
    below = (await w.todo("below", max_attempts=3))["id"]
    at_cap = (await w.todo("cap", max_attempts=1))["id"]
    no_retry = (await w.todo("no", max_attempts=3))["id"]
    await todos.claim_next_batch(core, w.e1, max_todos=3)
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)
    out = await todos.fail_batch(core, w.e1, [
        {"id": below, "summary": "red", "result": {"error": "x"}},
        {"id": at_cap, "summary": "red too"},
        {"id": no_retry, "retry": False},
    ])
    assert all(o["ok"] for o in out)
    assert [o["todo"]["dead_letter"] for o in out] == [False, True, True]
    row, (a,) = await snapshot(core, below)
    assert (a["outcome"], a["disposition"], a["summary"]) == ("failed", "retry_scheduled", "red")
    assert row["state"] == "failed" and row["result"] == {"error": "x"}
    assert round((row["next_retry_at"] - a["ended_at"]).total_seconds()) == 10  # backoff of attempt 1
    for t in (at_cap, no_retry):
        row, (a,) = await snapshot(core, t)
        assert (a["outcome"], a["disposition"]) == ("failed", "dead_lettered") and row["next_retry_at"] is None
    assert [e.verb for e in seen] == ["fail"] * 3
    assert [e.dead_lettered for e in seen] == [False, True, True]
    # The batch's retry default, overridden per item.
    again = (await w.todo("again", max_attempts=3))["id"]
    other = (await w.todo("other", max_attempts=3))["id"]
    await todos.claim_next_batch(core, w.e1, max_todos=2, queue="inbox")
    out = await todos.fail_batch(core, w.e1, [{"id": again}, {"id": other, "retry": True}], retry=False)
    assert [o["todo"]["dead_letter"] for o in out] == [True, False]
    assert await check(core) == []


async def test_a_batch_close_reports_per_item_and_a_foreign_id_is_an_unknown_one(core):
    w = await make_world(core, queues=("inbox", "other"))
    held = (await w.todo("held"))["id"]
    idle = (await w.todo("idle", queue="other"))["id"]
    theirs = (await w.todo("theirs", caller=w.e2))["id"]
    await todos.claim(core, w.e1, held)
    await todos.claim(core, w.e2, theirs)
    unknown = "td_00000000-0000-0000-0000-000000000000"
    narrow = w.e1.__class__(**{**w.e1.__dict__, "queues": ("inbox",)})
    before = {t: await snapshot(core, t) for t in (idle, theirs)}
    for verb in (todos.complete_batch, todos.fail_batch):
        out = await verb(core, w.e1, [{"id": theirs}, {"id": unknown}, {"id": idle}])
        assert [o["ok"] for o in out] == [False, False, False]
        assert out[0]["error"] == out[1]["error"] == {"code": "not_found", "message": "todo not found"}
        assert repr(out[0]["error"]) == repr(out[1]["error"])  # byte-identical
        assert out[2]["error"]["code"] == "conflict"  # its own, not held
    out = await todos.complete_batch(core, narrow, [{"id": idle}])
    assert out[0]["error"]["code"] == "forbidden"  # as complete answers for its own todo elsewhere
    assert {t: await snapshot(core, t) for t in (idle, theirs)} == before
    out = await todos.complete_batch(core, w.e1, [{"id": theirs}, {"id": held, "summary": "ok"}, {"id": unknown}])
    assert [o["ok"] for o in out] == [False, True, False]
    assert (await todo_row(core, held))["state"] == "done"
    assert {t: await snapshot(core, t) for t in (idle, theirs)} == before
    assert await check(core) == []


async def test_complete_batch_takes_each_summary_from_its_result_as_complete_does(core):
    """REQ-5 with the operator's opt-in (attempt_summary_from_result): an item with a result and no
    summary (or an empty one, stored as none) gets the compact JSON of its result as its attempt's
    summary, cut as complete cuts it; an explicit summary still wins; no result is no summary. Each
    item's attempt reads as the attempt of the same report given to the single complete."""
    core.settings = core.settings.model_copy(update={"attempt_summary_from_result": True})
    w = await make_world(core)
    reports = [{"result": {"error": "tests red"}},
               {"result": {"b": [1, 2], "é": None}},
               {"result": {"log": "€" * 1000}},
               {"result": {"error": "x"}, "summary": "mine"},
               {"result": "plain text"},
               {"result": 0},
               {"summary": "no result"},
               {},
               {"result": {"error": "x"}, "summary": ""}]
    single = [(await w.todo(f"single {i}"))["id"] for i in range(len(reports))]
    for t, report in zip(single, reports, strict=True):
        await todos.claim(core, w.e1, t)
        await todos.complete(core, w.e1, t, **report)
    batched = [(await w.todo(f"batched {i}"))["id"] for i in range(len(reports))]
    assert _ids(await todos.claim_next_batch(core, w.e1, max_todos=len(reports))) == batched
    out = await todos.complete_batch(core, w.e1, [{"id": t, **r} for t, r in zip(batched, reports, strict=True)])
    assert all(o["ok"] for o in out)

    def told(a: dict) -> tuple:
        return a["outcome"], a["summary"], a["summary_truncated"]

    got = [told((await attempt_rows(core, t))[0]) for t in batched]
    assert got == [told((await attempt_rows(core, t))[0]) for t in single]
    summaries = [s for _, s, _ in got]
    assert summaries[:2] == ['{"error":"tests red"}', '{"b":[1,2],"é":null}']
    assert got[2][2] is True and summaries[2].startswith('{"log":"€€')
    assert len(summaries[2].encode()) <= inputs.SUMMARY_MAX_BYTES and len(summaries[2].encode()) > 2000
    assert summaries[3:] == ["mine", '"plain text"', "0", "no result", None, '{"error":"x"}']  # "" is none
    assert [r for _, _, r in got].count(True) == 1
    for t, report in zip(batched, reports, strict=True):  # result keeps its meaning, on the todo
        assert (await todo_row(core, t))["result"] == report.get("result")
    # The option off (the default): a batch item's result is never its summary.
    core.settings = core.settings.model_copy(update={"attempt_summary_from_result": False})
    off = (await w.todo("off"))["id"]
    await todos.claim_next_batch(core, w.e1, max_todos=1)
    await todos.complete_batch(core, w.e1, [{"id": off, "result": {"error": "tests red"}}])
    assert told((await attempt_rows(core, off))[0]) == ("completed", None, False)
    assert await check(core) == []


async def test_a_batch_close_of_a_todo_its_owner_holds_is_a_conflict_for_that_item(core):
    """REQ-6 per item: a todo the owning human claimed (the Board's or API's claim, claimer_kind
    owner) is not the endpoint's to close, with or without the owner's lease token. That item is a
    conflict; the batch's other items close; the owner's todo and attempt are untouched."""
    w = await make_world(core)
    mine = [(await w.todo(f"mine {i}", max_attempts=3))["id"] for i in range(4)]
    held = (await w.todo("held by its owner"))["id"]
    fenced = (await w.todo("fenced by its owner"))["id"]
    await todos.claim(core, w.h1, held)
    token = (await todos.claim(core, w.h1, fenced, require_fence=True)).lease_token
    assert _ids(await todos.claim_next_batch(core, w.e1, max_todos=10)) == mine  # not the owner's
    for t in (held, fenced):
        (a,) = await attempt_rows(core, t)
        assert a["claimer_kind"] == "owner" and a["owner"] == f"op:{w.h1.human_id}"
    before = {t: await snapshot(core, t) for t in (held, fenced)}
    seen: list[events.Event] = []
    core.bus.subscribe(seen.append)

    out = await todos.complete_batch(core, w.e1, [
        {"id": mine[0], "summary": "done"}, {"id": held, "summary": "not mine to close"},
        {"id": fenced, "lease_token": token}, {"id": mine[1]}])
    assert [(o["id"], o["ok"]) for o in out] == [(mine[0], True), (held, False), (fenced, False), (mine[1], True)]
    assert out[1]["error"]["code"] == out[2]["error"]["code"] == "conflict"
    out = await todos.fail_batch(core, w.e1, [
        {"id": held, "summary": "not mine either"}, {"id": mine[2], "summary": "red"},
        {"id": fenced, "lease_token": token, "retry": False}, {"id": mine[3], "retry": False}])
    assert [(o["id"], o["ok"]) for o in out] == [(held, False), (mine[2], True), (fenced, False), (mine[3], True)]
    assert out[0]["error"]["code"] == out[2]["error"]["code"] == "conflict"

    assert {t: await snapshot(core, t) for t in (held, fenced)} == before  # nothing changed there
    assert [(e.verb, e.todo_id) for e in seen] == [("complete", mine[0]), ("complete", mine[1]),
                                                   ("fail", mine[2]), ("fail", mine[3])]
    assert [(await todo_row(core, t))["state"] for t in mine] == ["done", "done", "failed", "failed"]
    for t, outcome in zip(mine, ("completed", "completed", "failed", "failed"), strict=True):
        (a,) = await attempt_rows(core, t)
        assert a["outcome"] == outcome
    # Still the owner's: the owner closes them.
    await todos.complete(core, w.h1, held)
    await todos.release(core, w.h1, fenced)
    assert [(await attempt_rows(core, t))[0]["outcome"] for t in (held, fenced)] == ["completed", "released"]
    assert await check(core) == []


async def test_batched_closes_are_counted_per_outcome_in_the_metrics(core):
    """REQ-14: every attempt a batch closes is one switchboard_todo_attempts_closed_total increment of
    its outcome (and one switchboard_todos_completed_total of its verb), counted from the bus's batch
    form as the serving process subscribes; an item the batch refused is counted nowhere."""
    from switchboard.web.metrics import Metrics

    m = Metrics()
    core.bus.subscribe_batch(m.on_events)
    w = await make_world(core)
    made = [(await w.todo(f"m{i}", max_attempts=1 if i == 5 else 3))["id"] for i in range(6)]
    held = (await w.todo("held by its owner"))["id"]
    await todos.claim(core, w.h1, held)
    assert _ids(await todos.claim_next_batch(core, w.e1, max_todos=10)) == made
    unknown = "td_00000000-0000-0000-0000-000000000000"

    def counts() -> dict[tuple[str, str], float]:
        got = {("closed", o): m.registry.get_sample_value("switchboard_todo_attempts_closed_total",
                                                          {"queue": "inbox", "outcome": o}) or 0.0
               for o in ("completed", "failed", "released", "lease_expired", "reaped", "canceled", "revoked")}
        for verb in ("complete", "fail"):
            got[("ended", verb)] = m.registry.get_sample_value("switchboard_todos_completed_total",
                                                               {"queue": "inbox", "outcome": verb}) or 0.0
        got[("lapsed", "")] = m.registry.get_sample_value("switchboard_lease_expired_total",
                                                          {"queue": "inbox"}) or 0.0
        return got

    before = counts()
    out = await todos.complete_batch(core, w.e1, [{"id": t} for t in made[:3]] + [{"id": held}, {"id": unknown}])
    assert [o["ok"] for o in out] == [True, True, True, False, False]
    out = await todos.fail_batch(core, w.e1, [{"id": made[3]}, {"id": made[0]}, {"id": made[4], "retry": False},
                                              {"id": made[5]}])
    assert [o["ok"] for o in out] == [True, False, True, True]  # made[0] is done already: a conflict
    assert [o["todo"]["dead_letter"] for o in out if o["ok"]] == [False, True, True]
    after = counts()
    rose = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    assert rose == {("closed", "completed"): 3, ("closed", "failed"): 3, ("ended", "complete"): 3,
                    ("ended", "fail"): 3}
    # What the database holds agrees.
    closed = await sql(core, "SELECT a.outcome, count(*) AS n FROM todo_attempts a JOIN todos t ON t.id = a.todo_id"
                             " WHERE t.id = ANY(%s) AND a.ended_at IS NOT NULL GROUP BY 1", (made + [held],))
    assert {r["outcome"]: r["n"] for r in closed} == {"completed": 3, "failed": 3}


# --------------------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("value", [0, 101, -1, "5", 5.0, True, None, [3]])
async def test_bad_max_todos_is_invalid_and_changes_nothing(core, value):
    w = await make_world(core)
    await w.todo()
    before = await fingerprint(core)
    with pytest.raises(Invalid) as err:
        await todos.claim_next_batch(core, w.e1, max_todos=value)
    assert err.value.argument == "max_todos" and "max_todos" in err.value.message
    assert await fingerprint(core) == before


async def test_bad_items_are_invalid_naming_items_and_change_nothing(core):
    w = await make_world(core)
    t = (await w.todo())["id"]
    await todos.claim(core, w.e1, t)
    cases = [None, [], "td_x", {"id": t}, [t], [{"id": t}] * 2, [{"id": t, "surprise": 1}],
             [{"id": t}, {"id": 5}], [{"id": t, "artifact": "file:///etc/passwd"}],
             [{"id": t, "summary": ["x"]}], [{"id": t, "result": {"big": "x" * 70000}}],
             [{"id": t, "lease_token": "t" * 300}], [{"id": t, "retry": "no"}],
             [{"id": f"td_{i}"} for i in range(inputs.BATCH_CLOSE_MAX + 1)]]
    before = await fingerprint(core)
    for items in cases:
        for verb in (todos.complete_batch, todos.fail_batch):
            if verb is todos.complete_batch and items == [{"id": t, "retry": "no"}]:
                continue
            with pytest.raises(Invalid) as err:
                await verb(core, w.e1, items)
            assert err.value.argument == "items" and "items" in err.value.message, items
    with pytest.raises(Invalid) as err:  # retry is a fail field only
        await todos.complete_batch(core, w.e1, [{"id": t, "retry": True}])
    assert err.value.argument == "items"
    assert await fingerprint(core) == before
    assert await check(core) == []


# -------------------------------------------------------------------------------------------- MCP

@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_mcp_batched_claim_next_complete_and_fail(core, server, mode):
    """Every result is validated against the listed output schema (mcp_support.Checked): the batched
    shapes and the single shapes of the same tools."""
    a = await vend(core, queues=["work"], verbs=list(VERBS))
    other = await vend(core, "bob", queues=["work"], verbs=list(VERBS))
    made = [(await push(core, a, f"w{i}", payload={"n": i}, max_attempts=2))["id"] for i in range(5)]
    theirs = (await push(core, other, "theirs"))["id"]
    unknown = "td_00000000-0000-0000-0000-000000000000"
    async with sdk(server.url, a, mode=mode) as c:
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert listed["claim_next"].input_schema["properties"]["max_todos"]["maximum"] == inputs.BATCH_CLAIM_MAX
        assert listed["complete"].input_schema["properties"]["items"]["maxItems"] == inputs.BATCH_CLOSE_MAX
        got = body(await c.call_tool("claim_next", {"max_todos": 3, "require_fence": True, "claimant": "b/1"}))
        assert got["empty"] is False and [x["todo"]["id"] for x in got["todos"]] == made[:3]
        assert all(x["attempt_seq"] == 1 and x["prior_attempts"] == [] and x["lease_token"] for x in got["todos"])
        assert got["todos"][0]["todo"]["payload"] == {"n": 0}
        tokens = {x["todo"]["id"]: x["lease_token"] for x in got["todos"]}
        done = body(await c.call_tool("complete", {"items": [
            {"id": made[0], "lease_token": tokens[made[0]], "summary": "ok", "result": {"ok": True}},
            {"id": theirs}, {"id": unknown},
            {"id": made[1], "lease_token": "wrong"},
        ]}))
        res = done["results"]
        assert [(r["id"], r["ok"]) for r in res] == [(made[0], True), (theirs, False), (unknown, False),
                                                     (made[1], False)]
        assert res[0]["todo"]["state"] == "done"
        assert json.dumps(res[1]["error"]) == json.dumps(res[2]["error"])  # byte-identical not_found
        assert res[1]["error"]["code"] == "not_found" and res[3]["error"]["code"] == "conflict"
        failed = body(await c.call_tool("fail", {"retry": False, "items": [
            {"id": made[1], "lease_token": tokens[made[1]], "summary": "broke"},
            {"id": made[2], "lease_token": tokens[made[2]], "retry": True}]}))
        assert [r["todo"]["dead_letter"] for r in failed["results"]] == [True, False]
        rest = body(await c.call_tool("claim_next", {"max_todos": 100}))
        assert [x["todo"]["id"] for x in rest["todos"]] == made[3:] and "lease_token" not in rest["todos"][0]
        assert body(await c.call_tool("claim_next", {"max_todos": 100})) == {"empty": True, "todos": []}
        single = body(await c.call_tool("complete", {"id": made[3]}))  # the single form, unchanged
        assert single["state"] == "done" and "results" not in single
        assert body(await c.call_tool("claim_next", {})) == {"empty": True}
        for args, argument in [({"max_todos": 0}, "max_todos"), ({"max_todos": 101}, "max_todos"),
                               ({"max_todos": "5"}, "max_todos")]:
            err = error_body(await c.call_tool("claim_next", args))
            assert (err["code"], err["argument"]) == ("invalid", argument) and argument in err["message"]
        for verb in ("complete", "fail"):
            for args, argument in [({}, "id"), ({"items": []}, "items"), ({"items": "x"}, "items"),
                                   ({"items": [{"id": made[4]}], "id": made[4]}, "id"),
                                   ({"items": [{"id": made[4]}], "summary": "s"}, "summary"),
                                   ({"items": [{"id": made[4], "artifact": "ftp://x"}]}, "items")]:
                err = error_body(await c.call_tool(verb, args))
                assert (err["code"], err["argument"]) == ("invalid", argument), (verb, args, err)
    assert (await todos.get(core, (await _caller(core, a)), made[4]))["state"] == "claimed"
    assert await check(core) == []


async def test_mcp_batched_closes_take_summaries_from_results_when_the_operator_opts_in(core, live_server):
    """REQ-5 over MCP: with attempt_summary_from_result set on the server, each item of a batched
    complete or fail without a summary has the compact JSON of its result as its attempt's summary."""
    srv = live_server(attempt_summary_from_result=True)
    a = await vend(core, queues=["work"], verbs=list(VERBS))
    made = [(await push(core, a, f"r{i}", max_attempts=3))["id"] for i in range(4)]
    async with sdk(srv.url, a) as c:
        got = body(await c.call_tool("claim_next", {"max_todos": 4}))
        assert [x["todo"]["id"] for x in got["todos"]] == made
        done = body(await c.call_tool("complete", {"items": [
            {"id": made[0], "result": {"error": "tests red", "n": [1, 2]}},
            {"id": made[1], "result": {"ok": True}, "summary": "explicit"}]}))
        failed = body(await c.call_tool("fail", {"items": [
            {"id": made[2], "result": {"log": "€" * 1000}}, {"id": made[3]}]}))
    assert all(r["ok"] for r in done["results"] + failed["results"])
    rows = [(await attempt_rows(core, t))[0] for t in made]
    assert [(r["outcome"], r["summary"]) for r in rows[:2]] == [
        ("completed", '{"error":"tests red","n":[1,2]}'), ("completed", "explicit")]
    assert rows[2]["outcome"] == "failed" and rows[2]["summary_truncated"] is True
    assert rows[2]["summary"].startswith('{"log":"€€') and len(rows[2]["summary"].encode()) <= inputs.SUMMARY_MAX_BYTES
    assert (rows[3]["outcome"], rows[3]["summary"], rows[3]["summary_truncated"]) == ("failed", None, False)
    assert (await todo_row(core, made[0]))["result"] == {"error": "tests red", "n": [1, 2]}
    assert await check(core) == []


def _scrape(url: str) -> dict[tuple[str, tuple], float]:
    """The counters of the server's /metrics, {(name, sorted labels): value}."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(url + "/metrics", headers={"Authorization": "Bearer " + "m" * 40}, timeout=10)
    assert resp.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(resp.text) for s in fam.samples
            if s.name.startswith("switchboard_") and s.name.endswith("_total")}


async def test_mcp_batched_closes_count_on_metrics_per_outcome(core, server):
    """REQ-14 on the server's /metrics: a batched complete and a batched fail raise
    switchboard_todo_attempts_closed_total by the number of items each closed, per outcome; the items
    refused (a todo its owner holds, an unknown id, a todo closed already) count nowhere, and the
    owner's todo is left as it was."""
    a = await vend(core, "meterer", queues=["metered"], verbs=list(VERBS))
    made = [(await push(core, a, f"m{i}", max_attempts=1 if i == 4 else 3))["id"] for i in range(5)]
    held = (await push(core, a, "held by its owner"))["id"]
    await todos.claim(core, a.human, held)
    owners = await snapshot(core, held)
    unknown = "td_00000000-0000-0000-0000-000000000000"
    before = _scrape(server.url)
    async with sdk(server.url, a) as c:
        got = body(await c.call_tool("claim_next", {"max_todos": 10}))
        assert [x["todo"]["id"] for x in got["todos"]] == made
        done = body(await c.call_tool("complete", {"items": [{"id": made[0]}, {"id": held}, {"id": made[1]},
                                                             {"id": unknown}]}))
        assert [(r["ok"], r.get("error", {}).get("code")) for r in done["results"]] == [
            (True, None), (False, "conflict"), (True, None), (False, "not_found")]
        failed = body(await c.call_tool("fail", {"items": [{"id": made[2]}, {"id": made[0]}, {"id": held},
                                                           {"id": made[3], "retry": False}, {"id": made[4]}]}))
        assert [(r["ok"], r.get("error", {}).get("code")) for r in failed["results"]] == [
            (True, None), (False, "conflict"), (False, "conflict"), (True, None), (True, None)]
    after = _scrape(server.url)
    rose = {k: after[k] - before.get(k, 0.0) for k in after
            if after[k] != before.get(k, 0.0) and ("queue", "metered") in k[1]}
    assert rose == {
        ("switchboard_todos_claimed_total", (("queue", "metered"),)): 5,
        ("switchboard_todo_attempts_closed_total", (("outcome", "completed"), ("queue", "metered"))): 2,
        ("switchboard_todo_attempts_closed_total", (("outcome", "failed"), ("queue", "metered"))): 3,
        ("switchboard_todos_completed_total", (("outcome", "complete"), ("queue", "metered"))): 2,
        ("switchboard_todos_completed_total", (("outcome", "fail"), ("queue", "metered"))): 3,
    }
    assert await snapshot(core, held) == owners
    assert await check(core) == []


async def _caller(core, agent):
    from switchboard.core import endpoints
    return endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))


def test_the_output_schemas_admit_both_shapes_and_refuse_an_error():
    import jsonschema
    old = {"error": {"code": "not_found", "message": "todo not found"}}
    for name in ("complete", "fail", "claim_next"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(old, TOOLS[name].output_schema, cls=jsonschema.Draft202012Validator)
    jsonschema.validate({"results": []}, TOOLS["complete"].output_schema, cls=jsonschema.Draft202012Validator)


async def test_the_example_worker_drains_in_batches(core, server):
    """examples/worker.py --batch 5 as a real process: claims up to five per call, reports failures with
    a batched fail and completions with the next claim_next, and every todo ends with exactly one
    closed attempt."""
    from test_mcp_workers import WorkerProcess, rows

    a = await vend(core, "carol")
    ids = [(await push(core, a, f"{'bad' if i % 4 == 0 else 'job'} {i}", max_attempts=1))["id"]
           for i in range(12)]
    command = 'case "$SWITCHBOARD_TODO_TITLE" in bad*) echo broke; exit 1;; esac; echo fine'
    w = WorkerProcess(a.url(server.url), a.credential, "--batch", "5", "--command", command,
                      "--exit-when-idle", "1")
    assert w.wait(90) == 0, w.output[-2000:]
    assert "claimed 5 todos" in w.output
    got = await rows(core, "SELECT id, title, state FROM todos WHERE id = ANY(%s)", ids)
    assert {r["id"]: r["state"] for r in got} == {
        r["id"]: ("failed" if r["title"].startswith("bad") else "done") for r in got}
    atts = await rows(core, "SELECT todo_id, outcome, summary, lease_token_hash, claimed_at, ended_at"
                            " FROM todo_attempts WHERE todo_id = ANY(%s)", ids)
    assert len(atts) == 12 and len({x["todo_id"] for x in atts}) == 12
    assert all(x["lease_token_hash"] is not None and x["summary"] in ("fine", "broke") for x in atts)
    # a batch's completions went with the next claim_next (D52): one transaction, so one now()
    ended = {x["ended_at"] for x in atts if x["outcome"] == "completed"}
    assert ended & {x["claimed_at"] for x in atts}, "no completion shared its transaction with a claim"
    assert await check(core) == []
