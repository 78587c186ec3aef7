"""SPEC-0034 REQ-15: a dead-lettering transition carries its last attempt, on the hook bus and in the
`todo.dead_lettered` notify-hook body, for each of the four ways a todo becomes a dead letter."""

from __future__ import annotations

from core_world import lapse, make_due, make_world, sql
from switchboard.core import endpoints, hooks, sweeps, todos

FINAL_KEYS = {"seq", "outcome", "died", "summary", "artifact", "attempts_total"}


class Recorder:
    def __init__(self) -> None:
        self.events = []

    def __call__(self, ev) -> None:
        self.events.append(ev)

    def dead(self, todo_id: str) -> list:
        return [e for e in self.events if e.todo_id == todo_id and e.dead_lettered]


async def setup(core):
    w = await make_world(core)
    await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in", events=["todo.dead_lettered"])
    rec = Recorder()
    core.bus.subscribe(rec)
    return w, rec


async def hook_body(core, todo_id: str) -> dict:
    rows = await sql(core, "SELECT event, body FROM hook_outbox WHERE todo_id = %s", (todo_id,))
    assert [r["event"] for r in rows] == ["todo.dead_lettered"]
    return rows[0]["body"]


async def test_dead_letter_carries_its_last_attempt_fail_at_the_cap(core):
    """The SPEC scenario: attempt 5 of 5 fails with summary `still red` and an artifact."""
    w, rec = await setup(core)
    t = await w.todo("flaky", max_attempts=5)
    for n in range(1, 5):
        await todos.claim(core, w.e1, t["id"])
        await todos.fail(core, w.e1, t["id"], summary=f"red {n}")
        await make_due(core, t["id"])
        assert rec.dead(t["id"]) == []  # below the cap: no final attempt
        assert [e.final_attempt for e in rec.events if e.verb == "fail"][-1] is None
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary="still red", artifact="mcp://cairn/Zz9")

    [ev] = rec.dead(t["id"])
    assert ev.verb == "fail"
    assert ev.final_attempt == {"seq": 5, "outcome": "failed", "died": False, "summary": "still red",
                                "artifact": "mcp://cairn/Zz9", "attempts_total": 5}
    assert ev.todo["dead_letter"] is True
    body = await hook_body(core, t["id"])
    assert body["type"] == "todo.dead_lettered" and body["reason"] == "failed"
    assert {k: body["final_attempt"][k] for k in FINAL_KEYS} == ev.final_attempt
    assert body["attempts_total"] == 5 and "payload" not in body


async def test_dead_letter_carries_its_last_attempt_fail_with_retry_false(core):
    w, rec = await setup(core)
    t = await w.todo("pointless", max_attempts=5)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary="gate says stop", artifact="https://ci.example.com/1", retry=False)
    [ev] = rec.dead(t["id"])
    assert ev.final_attempt == {"seq": 1, "outcome": "failed", "died": False, "summary": "gate says stop",
                                "artifact": "https://ci.example.com/1", "attempts_total": 1}
    body = await hook_body(core, t["id"])
    assert {k: body["final_attempt"][k] for k in FINAL_KEYS} == ev.final_attempt


async def test_dead_letter_carries_its_last_attempt_reaper_at_the_cap(core):
    w, rec = await setup(core)
    t = await w.todo("dies", max_attempts=2)
    await todos.claim(core, w.e1, t["id"])
    await todos.release(core, w.e1, t["id"], summary="not now")  # seq 1, attempt counter stays 1
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    await sweeps.reap(core)  # attempt 2 of 2 lapsed: the reaper dead-letters
    [ev] = rec.dead(t["id"])
    assert ev.verb == "reap"
    assert ev.final_attempt == {"seq": 2, "outcome": "reaped", "died": True, "summary": None, "artifact": None,
                                "attempts_total": 2}
    body = await hook_body(core, t["id"])
    assert body["reason"] == "reaped"
    assert {k: body["final_attempt"][k] for k in FINAL_KEYS} == ev.final_attempt


async def test_dead_letter_carries_its_last_attempt_revocation(core):
    w, rec = await setup(core)
    held = await w.todo("held at revocation")
    await todos.claim(core, w.e1, held["id"])
    await todos.heartbeat(core, w.e1, held["id"])
    waiting = await w.todo("never claimed")
    await endpoints.revoke(core, w.h1, w.slug1)

    [ev] = rec.dead(held["id"])
    assert ev.verb == "revoke"
    assert ev.final_attempt == {"seq": 1, "outcome": "revoked", "died": False, "summary": None, "artifact": None,
                                "attempts_total": 1}
    body = await hook_body(core, held["id"])
    assert body["reason"] == "revoked"
    assert {k: body["final_attempt"][k] for k in FINAL_KEYS} == ev.final_attempt
    # a todo that never had an attempt is still a dead letter; there is no attempt to carry
    [plain] = rec.dead(waiting["id"])
    assert plain.final_attempt is None and plain.dead_lettered_without_attempt is True
    body = await hook_body(core, waiting["id"])
    assert body["reason"] == "revoked" and body["final_attempt"] is None and body["attempts_total"] == 0


async def test_a_parked_retry_dead_lettered_by_revocation_fires_the_hook_once(core):
    w, rec = await setup(core)
    t = await w.todo("parked", max_attempts=3)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary="first try")  # parked: state failed, next_retry_at set
    assert await sql(core, "SELECT count(*) AS n FROM hook_outbox") == [{"n": 0}]
    await endpoints.revoke(core, w.h1, w.slug1)
    body = await hook_body(core, t["id"])
    # the attempt that failed earlier was not closed by the revocation: nothing to carry
    assert body["reason"] == "revoked" and body["final_attempt"] is None and body["attempts_total"] == 1
