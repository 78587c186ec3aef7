"""Progress notes on attempts (issue 16): the holder's heartbeat may carry a note, kept on the open
attempt in the heartbeat's own statement (the newest inputs.NOTES_MAX_PER_ATTEMPT), shown in get_todo
and, as `last_note`, in the next claimer's prior_attempts.

Store-level tests drive the core against a real PostgreSQL; the wire test uses the official MCP SDK
client against the real server. Time moves by SQL or by a one-second lease, never by long sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from conftest import make_settings, start_thread_server
from core_world import attempt_rows, check, lapse, make_world, snapshot
from mcp_support import body, error_body, push, sdk, vend
from switchboard.core import inputs, sweeps, todos
from switchboard.core.errors import Conflict, Invalid

# ------------------------------------------------------------------------------------------ store

async def test_a_note_is_stored_with_the_heartbeat(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="reading the failing test")
    (a,) = await attempt_rows(core, t["id"])
    assert [n["text"] for n in a["notes"]] == ["reading the failing test"]
    # The note's time is the heartbeat's own: the same statement set both.
    from switchboard.core.shapes import ts
    assert ts(a["notes"][0]["at"]) == ts(a["last_heartbeat_at"])
    await todos.heartbeat(core, w.e1, t["id"])  # a heartbeat without a note keeps the notes
    (a,) = await attempt_rows(core, t["id"])
    assert len(a["notes"]) == 1
    assert await check(core) == []


async def test_a_failed_heartbeat_stores_no_note(core):
    w = await make_world(core)
    t = await w.todo()
    got = await todos.claim(core, w.e1, t["id"], require_fence=True)
    before = await snapshot(core, t["id"])
    with pytest.raises(Conflict):  # wrong fence
        await todos.heartbeat(core, w.e1, t["id"], lease_token="not-the-token", note="should not stay")
    with pytest.raises(Conflict):  # no token on a fenced attempt
        await todos.heartbeat(core, w.e1, t["id"], note="should not stay")
    assert await snapshot(core, t["id"]) == before
    await todos.complete(core, w.e1, t["id"], lease_token=got.lease_token)
    # Not held any more: the closed attempt takes no note.
    with pytest.raises(Conflict):
        await todos.heartbeat(core, w.e1, t["id"], lease_token=got.lease_token, note="after the end")
    (a,) = await attempt_rows(core, t["id"])
    assert a["notes"] == []


async def test_the_newest_notes_are_kept(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    n = inputs.NOTES_MAX_PER_ATTEMPT
    for i in range(n + 5):
        await todos.heartbeat(core, w.e1, t["id"], note=f"step {i}")
    (a,) = await attempt_rows(core, t["id"])
    assert [x["text"] for x in a["notes"]] == [f"step {i}" for i in range(5, n + 5)]
    got = await todos.get(core, w.e1, t["id"])
    assert [x["text"] for x in got["attempts"][0]["notes"]] == [f"step {i}" for i in range(5, n + 5)]
    assert got["attempts"][0]["last_note"]["text"] == f"step {n + 4}"
    assert await check(core) == []


async def test_a_note_over_the_limit_is_invalid_and_changes_nothing(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    before = await snapshot(core, t["id"])
    with pytest.raises(Invalid) as exc:
        await todos.heartbeat(core, w.e1, t["id"], note="x" * (inputs.NOTE_MAX_BYTES + 1))
    assert exc.value.argument == "note"
    with pytest.raises(Invalid) as exc:  # bytes, not characters
        await todos.heartbeat(core, w.e1, t["id"], note="é" * (inputs.NOTE_MAX_BYTES // 2 + 1))
    assert exc.value.argument == "note"
    with pytest.raises(Invalid) as exc:
        await todos.heartbeat(core, w.e1, t["id"], note=42)
    assert exc.value.argument == "note"
    assert await snapshot(core, t["id"]) == before
    await todos.heartbeat(core, w.e1, t["id"], note="x" * inputs.NOTE_MAX_BYTES)  # the limit itself is fine
    (a,) = await attempt_rows(core, t["id"])
    assert len(a["notes"][0]["text"]) == inputs.NOTE_MAX_BYTES


async def test_control_characters_are_stripped(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="a\x00b\x1b[31mc\rd\x7fe\x85f\tg\nh")
    (a,) = await attempt_rows(core, t["id"])
    assert a["notes"][0]["text"] == "ab[31mcdef\tg\nh"
    await todos.heartbeat(core, w.e1, t["id"], note="\x01\x02 ")  # nothing left to say: no note
    (a,) = await attempt_rows(core, t["id"])
    assert len(a["notes"]) == 1


async def test_the_owner_extension_takes_no_note(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    with pytest.raises(Invalid) as exc:
        await todos.heartbeat(core, w.h1, t["id"], note="owner says hi")
    assert exc.value.argument == "note"
    await todos.heartbeat(core, w.h1, t["id"])  # the extension itself works
    (a,) = await attempt_rows(core, t["id"])
    assert a["notes"] == [] and a["owner_extended_at"] is not None


async def test_a_died_attempts_last_note_reaches_the_next_claimer(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="cloned the repo")
    await todos.heartbeat(core, w.e1, t["id"], note="bisecting between v1.2 and v1.3")
    await lapse(core, t["id"])
    got = await todos.claim_next(core, w.e1)
    assert got is not None and got.attempt_seq == 2
    (prior,) = got.prior_attempts
    assert prior["died"] is True and prior["summary"] is None
    assert prior["last_note"]["text"] == "bisecting between v1.2 and v1.3"
    assert "notes" not in prior  # only the last one travels with a claim
    detail = await todos.get(core, w.e1, t["id"])
    assert detail["attempts"][0]["notes"] == [] and detail["attempts"][0]["last_note"] is None
    assert [n["text"] for n in detail["attempts"][1]["notes"]] == ["cloned the repo",
                                                                   "bisecting between v1.2 and v1.3"]
    owner = await todos.get(core, w.h1, t["id"])
    assert owner["attempts"][1]["notes"] == detail["attempts"][1]["notes"]
    assert await check(core) == []


async def test_a_batched_claim_carries_the_last_note(core):
    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="halfway")
    await lapse(core, t["id"])
    (got,) = await todos.claim_next_batch(core, w.e1, max_todos=5)
    assert got.prior_attempts[0]["last_note"]["text"] == "halfway"


# ------------------------------------------------------------------------------------------- wire

@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, retry_backoff_base_seconds=0, retry_backoff_max_seconds=0))
    yield srv
    srv.stop()


async def test_wire_a_reaped_attempts_note_in_prior_attempts(core, server):
    """SPEC-0034 REQ-4/REQ-7 with a note: the holder dies after saying what it was doing; the next
    claimer, over the official SDK client, reads that in prior_attempts and in get_todo."""
    a = await vend(core)
    t = await push(core, a)
    async with sdk(server.url, a) as c:
        body(await c.call_tool("claim_next", {"lease_ttl_seconds": 1}))
        body(await c.call_tool("heartbeat", {"id": t["id"], "lease_ttl_seconds": 1,
                                             "note": "migrating table 3 of 7"}))
        await asyncio.sleep(1.2)
        await sweeps.sweep_once(core)  # the reaper closes the lapsed attempt
        got = body(await c.call_tool("claim_next", {}))
        prior = got["prior_attempts"][0]
        assert (prior["outcome"], prior["died"]) == ("reaped", True)
        assert prior["last_note"]["text"] == "migrating table 3 of 7"
        detail = body(await c.call_tool("get_todo", {"id": t["id"]}))
        assert [n["text"] for n in detail["attempts"][1]["notes"]] == ["migrating table 3 of 7"]
        assert detail["attempts"][0]["notes"] == []
        bad = error_body(await c.call_tool("heartbeat", {"id": t["id"], "note": "y" * 513}))
        assert bad["code"] == "invalid" and bad.get("argument") == "note"
        wrong = error_body(await c.call_tool("heartbeat", {"id": t["id"], "note": 5}))
        assert wrong["code"] == "invalid" and wrong.get("argument") == "note"
        tools = {tool.name: tool for tool in (await c.list_tools()).tools}
    note = tools["heartbeat"].input_schema["properties"]["note"]
    assert note["maxLength"] == inputs.NOTE_MAX_BYTES and "never" in note["description"]


# ---------------------------------------------------------------------------------------- the Board

from board_kit import axe_violations, open_drawer, page_for, screenshot  # noqa: E402  (the Board half of the file)

SCRIPT = "<script>alert(1)</script>"


async def test_the_drawer_shows_notes_escaped(board_server, browser):
    """The drawer lists a died attempt's notes under it, oldest first; markup in a note is text."""
    human = await board_server.human("noter")
    _, agent = await board_server.endpoint(human, queues=["builds"])
    todo, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds",
                                     title="Upgrade the parser")
    tid = todo["id"]
    await board_server.run(todos.claim, agent, tid, lease_ttl_seconds=1)
    await board_server.run(todos.heartbeat, agent, tid, lease_ttl_seconds=1, note="read the changelog")
    await board_server.run(todos.heartbeat, agent, tid, lease_ttl_seconds=1, note=f"patching {SCRIPT} now")
    await asyncio.sleep(1.3)
    assert await board_server.run(sweeps.reap) >= 1
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, tid)
        entry = page.locator(f"#sb-attempts-{tid} li[data-sb-attempt='1']")
        assert await entry.get_attribute("data-sb-died") is not None
        notes = entry.locator("[data-sb-notes='1'] .sb-note")
        assert await notes.all_inner_texts() == ["read the changelog", f"patching {SCRIPT} now"]
        assert await notes.nth(1).is_visible()  # a died attempt's notes are shown open
        assert await entry.locator("script").count() == 0
        await page.wait_for_timeout(200)
        await page.watch.assert_clean(page)  # no script ran, no dialog, no CSP report
        assert await axe_violations(page) == []
        await notes.nth(1).evaluate("n => n.scrollIntoView({block: 'center'})")
        await screenshot(page, "drawer-notes")


# ------------------------------------------------------------------------------------------- A2UI

async def test_the_a2ui_todo_document_shows_notes(core):
    pytest.importorskip("a2ui")
    from switchboard.mcp import a2ui
    from test_a2ui import attempt_cards, card_texts, validate

    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="first step")
    await todos.heartbeat(core, w.e1, t["id"], note=SCRIPT)
    doc = await a2ui.read_todo(core, w.e1, t["id"])
    validate(doc)
    (card,) = attempt_cards(doc)
    lines = card_texts(card)
    shown = [x.split(" · ", 1)[1] for x in lines if x.endswith("first step") or x.endswith(SCRIPT)]
    assert shown == ["first step", SCRIPT]  # oldest first, markup as the characters it holds
    assert any(x.startswith("progress notes") and "not instructions" in x for x in lines)


# ----------------------------------------------------------------------------------- relay ledger

async def test_the_relay_ledger_includes_notes(core):
    """The ledger is built from the owner's view of the todos (GET /api/v1/todos/{id}, todos.get):
    a died attempt's notes reach attempt-ledger.yml, oldest first; an attempt without notes has none."""
    import yaml

    from conftest import ROOT
    from switchboard.relay import epic as epics
    from switchboard.relay import ledger
    from switchboard.relay.state import EpicState

    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="installed the toolchain")
    await todos.heartbeat(core, w.e1, t["id"], note="running the slow suite")
    await lapse(core, t["id"])
    await todos.claim(core, w.e1, t["id"])  # takes over: attempt 1 closes lease_expired
    view = await todos.get(core, w.h1, t["id"])
    e = epics.load(ROOT / "examples" / "relay" / "epic.yml")
    first = e.order[0]
    state = EpicState(record={"created_at": view["created_at"]}, todos={first: [view]})
    doc = ledger.document(e, state, ledger.task_views(e, state))
    entries = yaml.safe_load(ledger.render(doc))["attempts"][first]
    assert [a["seq"] for a in entries] == [1, 2]
    assert entries[0]["died"] is True
    assert [n["text"] for n in entries[0]["notes"]] == ["installed the toolchain", "running the slow suite"]
    assert "notes" not in entries[1]


# ------------------------------------------------------------------------------------- invariants

async def test_the_invariant_checker_sees_notes_out_of_bounds(core):
    from core_world import sql

    w = await make_world(core)
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.heartbeat(core, w.e1, t["id"], note="fine")
    await todos.complete(core, w.e1, t["id"])
    assert await check(core) == []
    await sql(core, "UPDATE todo_attempts SET notes = notes || jsonb_build_array(jsonb_build_object("
                    "'at', ended_at + interval '1 second', 'text', 'late')) WHERE todo_id = %s", (t["id"],))
    assert any("notes" in p for p in await check(core))
    for n in (inputs.NOTES_MAX_PER_ATTEMPT, inputs.NOTES_MAX_PER_ATTEMPT + 1):  # in time, at and over the bound
        await sql(core, "UPDATE todo_attempts SET notes = (SELECT jsonb_agg(jsonb_build_object("
                        "'at', claimed_at, 'text', g::text)) FROM generate_series(1, %s) g) WHERE todo_id = %s",
                  (n, t["id"]))
        assert any("notes" in p for p in await check(core)) == (n > inputs.NOTES_MAX_PER_ATTEMPT)
    await sql(core, "DELETE FROM todos WHERE id = %s", (t["id"],))
