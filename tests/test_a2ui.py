"""A2UI documents (SYSTEM.md section 10a, SPEC-0034 REQ-13) built against the real core.

Every document is checked the way a renderer holding the basic catalog would check it (the official
`validate_payload`) and against the protocol's JSON Schema with the catalog plugged in. Reads go through
the same core functions as get_todo and list_todos, so their scoping is tested here too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from a2ui.core import A2uiValidationError
from a2ui.core.basic_catalog import BasicCatalog
from a2ui.core.validation import SchemaValidator
from a2ui.utils import load_agent_to_renderer_schema, load_common_types_schema, validate_payload
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from core_world import attempt_rows, lapse, make_due, make_world, sql
from switchboard.core import shapes, sweeps, todos
from switchboard.core.errors import NotFound
from switchboard.mcp import a2ui
from switchboard.mcp import a2ui_documents as documents
from switchboard.runtime import Runtime

SCRIPT = "<script>alert(1)</script>"
SESSION = "mcp-session-SECRET-7f3a"


# --------------------------------------------------------------------------------------- helpers

def validate(messages: list[dict]) -> None:
    """Raise unless the messages pass the official checks for the v0.9 basic catalog."""
    catalog = BasicCatalog(documents.PROTOCOL_VERSION)
    validate_payload([catalog], messages)
    s2c = load_agent_to_renderer_schema(documents.PROTOCOL_VERSION)
    common = load_common_types_schema(documents.PROTOCOL_VERSION)
    schema = catalog.to_json()
    schema = json.loads(schema) if isinstance(schema, str) else schema
    base = s2c["$id"].rsplit("/", 1)[0]
    registry = Registry().with_resources([
        (s2c["$id"], DRAFT202012.create_resource(s2c)),
        (f"{base}/catalog.json", DRAFT202012.create_resource(schema)),  # server_to_client's "catalog.json"
        (schema["$id"], DRAFT202012.create_resource(schema)),
        (common["$id"], DRAFT202012.create_resource(common)),
    ])
    validator = SchemaValidator(s2c, registry=registry)
    for message in messages:
        errors = [e.message for e in validator.iter_errors(message)]
        assert not errors, errors


def components(messages: list[dict]) -> dict[str, dict]:
    (update,) = [m["updateComponents"] for m in messages if "updateComponents" in m]
    return {c["id"]: c for c in update["components"]}


def walk(messages: list[dict], start: str = "root") -> list[dict]:
    """The components in reading order, from `start` (the root) down."""
    by_id = components(messages)
    out: list[dict] = []

    def visit(cid: str) -> None:
        comp = by_id[cid]
        out.append(comp)
        for child in ([comp["child"]] if "child" in comp else []) + list(comp.get("children", [])):
            visit(child)

    visit(start)
    return out


def texts(messages: list[dict]) -> list[str]:
    return [c["text"] for c in walk(messages) if c["component"] == "Text"]


def attempt_cards(messages: list[dict]) -> list[list[dict]]:
    """Each attempt card's components in reading order, in the order the document lists them."""
    by_id = components(messages)
    cards = []
    for comp in walk(messages):
        if comp["component"] != "Card":
            continue
        inner = [by_id[comp["child"]]]
        for cid in inner[0].get("children", []):
            inner.append(by_id[cid])
            if "child" in by_id[cid]:
                inner.append(by_id[by_id[cid]["child"]])
        if inner[1]["component"] == "Text" and inner[1]["text"].startswith("Attempt "):
            cards.append(inner[1:])
    return cards


def card_texts(card: list[dict]) -> list[str]:
    return [c["text"] for c in card if c["component"] == "Text"]


async def history_todo(core, w) -> tuple[dict, str]:
    """Attempt 1 failed with a markup summary and an https artifact (fenced, from a named session);
    attempt 2 heartbeat once and was reaped. Returns the todo and attempt 2's last heartbeat (RFC 3339)."""
    t = await w.todo("fix the flaky build")
    got = await todos.claim(core, w.e1.with_session(SESSION), t["id"], claimant="box-7/fixer",
                            require_fence=True)
    await todos.fail(core, w.e1, t["id"], summary=SCRIPT, artifact="https://ci.example.com/run/41",
                     lease_token=got.lease_token)
    await make_due(core, t["id"])
    await sweeps.sweep_once(core)
    await todos.claim(core, w.e1, t["id"], claimant="box-9/fixer")
    await todos.heartbeat(core, w.e1, t["id"])
    await lapse(core, t["id"])
    assert (await sweeps.sweep_once(core)).reaped == 1
    beat = (await attempt_rows(core, t["id"]))[1]["last_heartbeat_at"]
    return t, shapes.ts(beat)


# ------------------------------------------------------------------------------------- the todo

async def test_todo_document_validates_against_the_official_schema_and_catalog(core):
    w = await make_world(core)
    t, _ = await history_todo(core, w)
    await todos.claim(core, w.e1, t["id"])
    await todos.complete(core, w.e1, t["id"], result={"pr": 12, "note": SCRIPT},
                         artifact="mcp://cairn/abc123", summary="merged")
    doc = await a2ui.read_todo(core, w.e1, t["id"])
    validate(doc)
    assert doc[0] == {"version": "v0.9", "createSurface": {
        "surfaceId": f"switchboard-todo-{t['id']}",
        "catalogId": "https://a2ui.org/specification/v0_9/catalogs/basic/catalog.json"}}
    kinds = {c["component"] for c in walk(doc)}
    assert kinds <= {"Column", "Row", "Card", "Text", "Divider", "Button"}
    assert "Result" in texts(doc) and any('"pr": 12' in x for x in texts(doc))

    # The check can fail: a wrong property type, an unknown component and a dangling child are refused.
    broken = json.loads(json.dumps(doc))
    next(c for c in broken[1]["updateComponents"]["components"] if c["component"] == "Text")["text"] = 7
    with pytest.raises(A2uiValidationError):
        validate(broken)
    broken = json.loads(json.dumps(doc))
    broken[1]["updateComponents"]["components"].append({"id": "x", "component": "Marquee", "text": "hi"})
    with pytest.raises(A2uiValidationError):
        validate(broken)
    broken = json.loads(json.dumps(doc))
    components(broken)["root"]["children"].append("missing")
    with pytest.raises(A2uiValidationError):
        validate(broken)


async def test_attempt_2_reaped_shows_the_died_marker_and_its_last_heartbeat(core):
    """REQ-13 "Drawer shows a death", on the A2UI todo resource."""
    w = await make_world(core)
    t, beat = await history_todo(core, w)
    doc = await a2ui.read_todo(core, w.e1, t["id"])
    validate(doc)
    cards = attempt_cards(doc)
    assert [card_texts(c)[0] for c in cards] == [
        "Attempt 2 (seq 2) · reaped · died: no report",  # newest first
        "Attempt 1 (seq 1) · failed",
    ]
    second, first = (card_texts(c) for c in cards)
    assert f"last heartbeat: {documents.when(beat)}" in second
    assert "claimant: box-9/fixer (endpoint)" in second
    assert any(x.startswith("claimed ") and " · ended " in x for x in second)
    assert not any("summary" in x for x in second)  # a died attempt never reported
    assert "last heartbeat: none" in first and "claimant: box-7/fixer (endpoint)" in first
    assert "died: no report" not in " ".join(first)
    assert "Attempts (2)" in texts(doc)


async def test_summary_markup_is_literal_text_in_a_text_component(core):
    w = await make_world(core)
    t, _ = await history_todo(core, w)
    doc = await a2ui.read_todo(core, w.e1, t["id"])
    holders = [c for c in components(doc).values() if SCRIPT in json.dumps(c, ensure_ascii=False)]
    assert holders == [next(c for c in holders)]  # exactly one component carries it
    assert holders[0]["component"] == "Text" and holders[0]["text"] == SCRIPT
    (first,) = [c for c in attempt_cards(doc) if card_texts(c)[0].startswith("Attempt 1")]
    assert SCRIPT in card_texts(first)


async def test_artifact_is_a_link_only_when_https(core):
    w = await make_world(core)
    t, _ = await history_todo(core, w)
    await todos.claim(core, w.e1, t["id"])
    await todos.release(core, w.e1, t["id"], artifact="mcp://cairn/notalink", summary="stopping")
    doc = await a2ui.read_todo(core, w.e1, t["id"])
    validate(doc)
    buttons = [c for c in walk(doc) if c["component"] == "Button"]
    assert len(buttons) == 1
    (button,) = buttons
    assert button["action"] == {"functionCall": {"call": "openUrl",
                                                 "args": {"url": "https://ci.example.com/run/41"}}}
    assert components(doc)[button["child"]] == {"id": button["child"], "component": "Text",
                                                "text": "https://ci.example.com/run/41", "variant": "body"}
    released = attempt_cards(doc)[0]
    assert card_texts(released)[0] == "Attempt 3 (seq 3) · released"
    assert "artifact (not a link): mcp://cairn/notalink" in card_texts(released)
    assert not any(c["component"] == "Button" for c in released)
    # Read-only: the only action anywhere is the client-side openUrl of that link.
    actions = [c["action"] for c in walk(doc) if "action" in c]
    assert actions == [button["action"]]


async def test_no_session_or_lease_secret_reaches_the_document(core):
    w = await make_world(core)
    t, _ = await history_todo(core, w)
    got = await todos.claim(core, w.e1.with_session(SESSION), t["id"], require_fence=True)
    text = documents.dumps(await a2ui.read_todo(core, w.e1, t["id"]))
    (row,) = await sql(core, "SELECT encode(lease_token_hash, 'hex') AS h FROM todo_attempts"
                             " WHERE todo_id = %s AND ended_at IS NULL", (t["id"],))
    for secret in (SESSION, got.lease_token, row["h"], "claimer_session", "lease_token", str(w.e1.endpoint_id)):
        assert secret not in text
    assert "Attempt 3 (seq 3) · in progress" in text


async def test_foreign_unknown_and_malformed_ids_are_the_same_not_found(core):
    w = await make_world(core)
    mine, _ = await history_todo(core, w)
    theirs = await w.todo("theirs", caller=w.e2)
    errors = []
    for todo_id in (theirs["id"], "td_00000000-0000-0000-0000-000000000000", "x" * 200, ""):
        with pytest.raises(NotFound) as caught:
            await a2ui.read_todo(core, w.e1, todo_id)
        errors.append((caught.value.code, caught.value.message, caught.value.to_dict()))
    assert len(set(map(repr, errors))) == 1
    assert (await a2ui.read_todo(core, w.e2, theirs["id"]))  # the owner reads it
    with pytest.raises(NotFound):
        await a2ui.read_todo(core, w.e2, mine["id"])


async def test_an_endpoint_without_list_or_get_cannot_read(core):
    w = await make_world(core, verbs=["claim_next", "complete"])
    t = await w.todo()
    with pytest.raises(NotFound):
        await a2ui.read_todo(core, w.e1, t["id"])
    with pytest.raises(NotFound):
        await a2ui.read_queue(core, w.e1, "inbox")


# ------------------------------------------------------------------------------------ the queue

async def test_queue_document_lists_pending_todos_as_cards(core):
    w = await make_world(core, queues=("inbox", "ops"))
    fresh = await w.todo("fresh one")
    died, _ = await history_todo(core, w)  # pending again after the reap
    released = await w.todo("handed back")
    await todos.claim(core, w.e1, released["id"])
    await todos.release(core, w.e1, released["id"], summary="shutting down")
    busy = await w.todo("being worked on")
    await todos.claim(core, w.e1, busy["id"])
    other_queue = await w.todo("elsewhere", queue="ops")
    foreign = await w.todo("not mine", caller=w.e2)
    await sql(core, "UPDATE todos SET created_at = now() - interval '2 hours 5 minutes' WHERE id = %s",
              (fresh["id"],))

    doc = await a2ui.read_queue(core, w.e1, "inbox")
    validate(doc)
    text = documents.dumps(doc)
    for absent in (busy, other_queue, foreign):
        assert absent["id"] not in text and absent["title"] not in text
    cards = [[x["text"] for x in walk(doc, c["id"]) if x["component"] == "Text"]
             for c in walk(doc) if c["component"] == "Card"]
    assert len(cards) == 3

    def card(todo: dict) -> list[str]:
        (found,) = [c for c in cards if c[1].startswith(todo["id"])]
        return found

    assert card(fresh)[:2] == ["fresh one", f"{fresh['id']} · pending"]
    assert card(fresh)[2:] == ["age", "2h 5m", "attempt counter", "attempt 0 of 5",
                               "last outcome", "never claimed"]
    assert card(died)[-4:] == ["attempt counter", "attempt 2 of 5", "last outcome", "reaped · died: no report"]
    assert card(released)[-1] == "released"
    # Oldest first: the queue's order of work.
    titles = [x for x in texts(doc) if x in ("fresh one", "fix the flaky build", "handed back")]
    assert titles == ["fresh one", "fix the flaky build", "handed back"]


async def test_queue_outside_the_grant_is_not_found_like_an_unknown_one(core):
    w = await make_world(core, queues=("inbox",))
    await w.todo("theirs", caller=w.e2)
    errors = []
    for name in ("ops", "no-such-queue", "bad name!"):
        with pytest.raises(NotFound) as caught:
            await a2ui.read_queue(core, w.e1, name)
        errors.append(caught.value.to_dict())
    assert errors == [errors[0]] * 3
    empty = await a2ui.read_queue(core, w.e1, "inbox")
    validate(empty)
    assert "No pending todos." in texts(empty)


def test_age_reads_in_two_units():
    now = datetime(2026, 9, 22, 14, 0, tzinfo=UTC)
    for delta, want in ((timedelta(seconds=45), "45s"), (timedelta(minutes=3, seconds=12), "3m 12s"),
                        (timedelta(hours=2, minutes=5), "2h 5m"), (timedelta(days=4, hours=1), "4d 1h"),
                        (timedelta(seconds=-5), "0s")):
        assert documents.age(shapes.ts(now - delta), now) == want


# ------------------------------------------------------------------------------------- provider

async def test_provider_is_registered_only_with_the_flag(core):
    off = Runtime(core.settings.model_copy(update={"a2ui": False}), core=core)
    assert a2ui.provider(off) is None
    on = Runtime(core.settings.model_copy(update={"a2ui": True}), core=core)
    provider = a2ui.provider(on)
    assert provider is not None
    assert "switchboard://todo/{id}/a2ui" in provider.instructions()

    w = await make_world(core)
    t = await w.todo("listed")
    listed = [str(r.uri) for r in await provider.list_resources(w.e1)]
    assert listed == ["switchboard://queue/inbox/a2ui", f"switchboard://todo/{t['id']}/a2ui"]
    assert {r.mime_type for r in await provider.list_resources(w.e1)} == {"application/a2ui+json"}
    assert [x.uri_template for x in provider.list_templates(w.e1)] == [
        "switchboard://queue/{name}/a2ui", "switchboard://todo/{id}/a2ui"]
    mime, text = await provider.read(w.e1, f"switchboard://todo/{t['id']}/a2ui?w=640")
    assert mime == "application/a2ui+json" and json.loads(text)[0]["version"] == "v0.9"
    assert await provider.read(w.e1, "switchboard://queues/inbox") is None  # not its kind
    assert await provider.read(w.e1, f"switchboard://todo/{t['id']}/a2ui/extra") is None

    # A provider built while the flag is off answers nothing, whatever registered it.
    quiet = a2ui.A2uiResources(off)
    assert await quiet.list_resources(w.e1) == [] and quiet.list_templates(w.e1) == []
    assert await quiet.read(w.e1, f"switchboard://todo/{t['id']}/a2ui") is None
    assert quiet.instructions() is None


def test_a_server_without_a2ui_never_loads_the_a2ui_packages():
    probe = ("import sys, switchboard.mcp.a2ui, switchboard.web.app; "
             "print(sorted(m for m in sys.modules if m == 'a2ui' or m.startswith('a2ui.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
