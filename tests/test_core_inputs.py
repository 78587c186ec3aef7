"""Bad input for every argument of every core verb (SYSTEM.md section 17).

Each bad value gets a clear `invalid` naming the argument (or, where the contract says so, a clean
cut), never an unexpected exception, and never a state change: every row of every table is compared
before and after.
"""

from __future__ import annotations

import math
import uuid

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import core_for, create_database
from core_world import attempt_rows, make_world, sql
from switchboard.core import api_tokens, endpoints, humans, producer, settings_store, todos
from switchboard.core.errors import CoreError, Forbidden, Invalid, NotFound

TABLES = ("humans", "human_tokens", "agents", "endpoints", "todos", "todo_attempts", "settings")


async def fingerprint(core) -> list:
    """Every row of every table, in one round trip (hashed per table)."""
    parts = " UNION ALL ".join(
        f"SELECT '{t}' AS t, count(*) AS n, "
        f"md5(coalesce(string_agg(to_jsonb(x)::text, ',' ORDER BY to_jsonb(x)::text), '')) AS h FROM {t} x"
        for t in TABLES)
    return [tuple(r.values()) for r in await sql(core, parts)]


def _deep(n: int):
    x: list = []
    for _ in range(n):
        x = [x]
    return x


WRONG_TYPES = [123, 1.5, True, b"bytes", ["x"], {"x": 1}, object()]
BAD_TEXT = ["\x00", "a\x00b", "\ud800", "x\udfff"]
CONTROL = ["\x07bell", "\x1b[31mred", "a\x7fb"]
BAD_JSON = [b"bytes", {1, 2}, object(), math.nan, math.inf, {"s": "a\x00b"}, {"s": "\ud800"}, _deep(100_000),
            10 ** 5000]
BAD_IDS = WRONG_TYPES + BAD_TEXT + CONTROL + ["", " ", "td x", "x" * 65, None]
NOT_INT = ["5", 1.5, True, b"5", [5], None]


async def _world(core):
    world = await make_world(core, queues=("inbox", "other"))
    world.t = (await world.todo(payload={"p": 1}))["id"]
    await todos.claim(core, world.e1, world.t)
    world.ask = (await world.todo("asks"))["id"]
    await todos.claim(core, world.e1, world.ask)
    await todos.request_input(core, world.e1, world.ask, question="?")
    return world


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def shared(pg_server):
    """One world for the refusals: each of them must leave every table as it was (checked)."""
    uri = create_database(pg_server)
    async with core_for(uri) as c:
        yield await _world(c)


@pytest.fixture
async def w(core):
    return await _world(core)


def _cases():
    """(name, argument, value, call(w) -> coroutine). Each must raise Invalid naming `argument`."""
    cases = []

    def add(name, argument, values, make):
        cases.append(pytest.param(argument, list(values), make, id=f"{name}-{argument}"))

    # ids, for every verb that takes one
    id_verbs = {
        "claim": lambda w, v: todos.claim(w.core, w.e1, v),
        "heartbeat": lambda w, v: todos.heartbeat(w.core, w.e1, v),
        "complete": lambda w, v: todos.complete(w.core, w.e1, v),
        "fail": lambda w, v: todos.fail(w.core, w.e1, v),
        "release": lambda w, v: todos.release(w.core, w.e1, v),
        "request_input": lambda w, v: todos.request_input(w.core, w.e1, v),
        "provide_input": lambda w, v: todos.provide_input(w.core, w.h1, v, payload={}),
        "cancel": lambda w, v: todos.cancel(w.core, w.h1, v),
        "retry": lambda w, v: todos.retry(w.core, w.h1, v),
        "get": lambda w, v: todos.get(w.core, w.e1, v),
        "get_owner": lambda w, v: todos.get(w.core, w.h1, v),
        "claim_owner": lambda w, v: todos.claim(w.core, w.h1, v),
    }
    for name, fn in id_verbs.items():
        add(name, "id", BAD_IDS, fn)

    ttl_verbs = {
        "claim": lambda w, v: todos.claim(w.core, w.e1, w.t, lease_ttl_seconds=v),
        "claim_next": lambda w, v: todos.claim_next(w.core, w.e1, lease_ttl_seconds=v),
        "heartbeat": lambda w, v: todos.heartbeat(w.core, w.e1, w.t, lease_ttl_seconds=v),
        "provide_input": lambda w, v: todos.provide_input(w.core, w.h1, w.ask, payload={}, lease_ttl_seconds=v),
    }
    for name, fn in ttl_verbs.items():
        add(name, "lease_ttl_seconds", [x for x in NOT_INT if x is not None] + [10 ** 30 * 1.0], fn)

    for name, fn in {"claim": lambda w, v: todos.claim(w.core, w.e1, w.t, require_fence=v),
                     "claim_next": lambda w, v: todos.claim_next(w.core, w.e1, require_fence=v)}.items():
        add(name, "require_fence", ["yes", 1, 0, 1.0, [True], b"1"], fn)

    for name, fn in {"claim": lambda w, v: todos.claim(w.core, w.e1, w.t, claimant=v),
                     "claim_next": lambda w, v: todos.claim_next(w.core, w.e1, claimant=v)}.items():
        add(name, "claimant", [x for x in WRONG_TYPES], fn)

    add("claim_next", "queue", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "q" * 65, "-x", "a b"],
        lambda w, v: todos.claim_next(w.core, w.e1, queue=v))

    closing = {
        "complete": lambda w, **kw: todos.complete(w.core, w.e1, w.t, **kw),
        "fail": lambda w, **kw: todos.fail(w.core, w.e1, w.t, **kw),
        "release": lambda w, **kw: todos.release(w.core, w.e1, w.t, **kw),
    }
    for name, fn in closing.items():
        add(name, "summary", WRONG_TYPES, lambda w, v, fn=fn: fn(w, summary=v))
        add(name, "artifact", WRONG_TYPES + BAD_TEXT + CONTROL + [
            "file:///etc/passwd", "http://x.example/", "https://" + "a" * 520, "mcp://cairn/../x", " https://x.y/",
            "https://x.y/\n", "HTTPS", "https:///path"], lambda w, v, fn=fn: fn(w, artifact=v))
        add(name, "lease_token", [123, 1.5, True, b"t", ["t"], "t" * 257], lambda w, v, fn=fn: fn(w, lease_token=v))
        if name != "release":
            add(name, "result", BAD_JSON + [{"big": "x" * (64 * 1024)}], lambda w, v, fn=fn: fn(w, result=v))
    add("heartbeat", "lease_token", [123, b"t", "t" * 257],
        lambda w, v: todos.heartbeat(w.core, w.e1, w.t, lease_token=v))
    add("request_input", "lease_token", [123, b"t"], lambda w, v: todos.request_input(w.core, w.e1, w.t, lease_token=v))
    add("fail", "retry", ["no", 0, 1, 1.0, [False], b""], lambda w, v: todos.fail(w.core, w.e1, w.t, retry=v))
    add("request_input", "question", WRONG_TYPES + BAD_TEXT + CONTROL + ["q" * 2049],
        lambda w, v: todos.request_input(w.core, w.e1, w.t, question=v))
    add("provide_input", "payload", BAD_JSON + [None, {"big": "x" * (256 * 1024)}],
        lambda w, v: todos.provide_input(w.core, w.h1, w.ask, payload=v))
    add("get", "attempts_limit", ["5", 1.5, True, b"5", [5]],
        lambda w, v: todos.get(w.core, w.e1, w.t, attempts_limit=v))

    # create (the core call every surface ends in) and push (the producer path)
    def create(w, **kw):
        base = dict(endpoint_id=w.e1.endpoint_id, queue="inbox", title="t")
        base.update(kw)
        return todos.create(w.core, **base)

    add("create", "title", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "   ", "t" * 513, None],
        lambda w, v: create(w, title=v))
    add("create", "queue", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "q" * 65, None], lambda w, v: create(w, queue=v))
    add("create", "payload", BAD_JSON + [{"big": "x" * (256 * 1024)}], lambda w, v: create(w, payload=v))
    add("create", "kind", WRONG_TYPES + BAD_TEXT + CONTROL + ["k" * 65], lambda w, v: create(w, kind=v))
    add("create", "key", WRONG_TYPES + BAD_TEXT + CONTROL + ["k" * 201], lambda w, v: create(w, key=v))
    add("create", "assignee", WRONG_TYPES + BAD_TEXT + CONTROL + ["a" * 201], lambda w, v: create(w, assignee=v))
    add("create", "max_attempts", ["5", 1.5, True, b"5", [5], 0, -1, 101, 10 ** 30],
        lambda w, v: create(w, max_attempts=v))
    add("create", "endpoint_id", ["not-a-uuid", 123, b"x", None, ["x"]], lambda w, v: create(w, endpoint_id=v))

    def push(w, **kw):
        base = dict(title="t", queue="inbox")
        base.update(kw)
        return producer.push(w.core, w.h1, w.slug1, **base)

    add("push", "title", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "t" * 513], lambda w, v: push(w, title=v))
    add("push", "queue", WRONG_TYPES + BAD_TEXT + CONTROL + ["q" * 65, "nope"], lambda w, v: push(w, queue=v))
    add("push", "payload", BAD_JSON[:6], lambda w, v: push(w, payload=v))
    add("push", "max_attempts", [0, 101, "3", True], lambda w, v: push(w, max_attempts=v))
    add("push", "key", ["k" * 201, "\x00"], lambda w, v: push(w, key=v))

    # reads
    add("list_for_endpoint", "state", WRONG_TYPES + BAD_TEXT + ["nope", "PENDING"],
        lambda w, v: todos.list_for_endpoint(w.core, w.e1, state=v))
    add("list_for_endpoint", "queue", WRONG_TYPES + BAD_TEXT + [""],
        lambda w, v: todos.list_for_endpoint(w.core, w.e1, queue=v))
    add("list_for_endpoint", "limit", ["5", 1.5, True, b"5"],
        lambda w, v: todos.list_for_endpoint(w.core, w.e1, limit=v))
    add("list_for_human", "state", WRONG_TYPES + BAD_TEXT + ["nope"],
        lambda w, v: todos.list_for_human(w.core, w.h1, state=v))
    add("list_for_human", "endpoint", [123, b"x"] + BAD_TEXT + ["a b", "x" * 65],
        lambda w, v: todos.list_for_human(w.core, w.h1, endpoint=v))
    add("list_for_human", "queue", [123, b"x"] + BAD_TEXT + ["a b"],
        lambda w, v: todos.list_for_human(w.core, w.h1, queue=v))
    add("list_for_human", "limit", ["5", "x", 1.5, b"5"], lambda w, v: todos.list_for_human(w.core, w.h1, limit=v))
    add("list_for_human", "offset", ["5", 1.5, True], lambda w, v: todos.list_for_human(w.core, w.h1, offset=v))
    add("counts_for_human", "endpoint", BAD_TEXT + [123], lambda w, v: todos.counts_for_human(w.core, w.h1, endpoint=v))

    # endpoints, humans, settings
    add("vend", "agent", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "a" * 65, None],
        lambda w, v: endpoints.vend(w.core, w.h1, agent=v))
    add("vend", "queue", ["inbox", 123, [123], ["\x00"], ["a b"], [["inbox"]], ["q" * 65]],
        lambda w, v: endpoints.vend(w.core, w.h1, agent="a", queues=v))
    add("vend", "verb", ["claim", 123, [123], ["nope"], [["claim"]], ["claim\x00"]],
        lambda w, v: endpoints.vend(w.core, w.h1, agent="a", verbs=v))
    add("vend", "lease_ttl", [59, 86401, 0, -1, "60", True, 60.5, 10 ** 30],
        lambda w, v: endpoints.vend(w.core, w.h1, agent="a", lease_ttl=v))
    add("vend", "expires_in_seconds", ["tomorrow", 5, True],
        lambda w, v: endpoints.vend(w.core, w.h1, agent="a", expires_in_seconds=v))
    add("humans.add", "name", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "a" * 65, "a b", "-x"],
        lambda w, v: humans.add(w.core, v, "password123"))
    add("humans.add", "password", [123, b"password123", ["p"], "short", "\ud800" * 9, "pass\x00word1", "p" * 1025],
        lambda w, v: humans.add(w.core, "newname", v))
    add("settings.set", "value", ["x", "1.5", 1.5, True, None, b"5", 4, 10 ** 12, -1, "9" * 40, "", [5]],
        lambda w, v: settings_store.set_value(w.core, "attempt_history_max_per_todo", v))
    return cases


@pytest.mark.parametrize("argument, values, make", _cases())
async def test_bad_argument_is_invalid_and_changes_nothing(shared, argument, values, make):
    before = await fingerprint(shared.core)
    for value in values:
        try:
            await make(shared, value)
        except Invalid as err:
            assert err.argument == argument and err.message, (value, err)
        except Exception as exc:
            pytest.fail(f"{argument}={value!r:.80}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{argument}={value!r:.80} was accepted")
        assert await fingerprint(shared.core) == before, f"{argument}={value!r:.80} changed the database"


@pytest.mark.parametrize("make", [
    lambda w, v: todos.get(w.core, w.e1, v), lambda w, v: todos.complete(w.core, w.e1, v),
    lambda w, v: todos.claim(w.core, w.h2, v), lambda w, v: todos.cancel(w.core, w.h1, v),
])
async def test_well_formed_unknown_ids_are_not_found(shared, make):
    core, w = shared.core, shared
    before = await fingerprint(core)
    for value in (f"td_{uuid.uuid4()}", "td_", "x" * 64, "'; DROP TABLE todos; --"[:24].replace(" ", "_")):
        with pytest.raises(NotFound):
            await make(w, value)
    assert await fingerprint(core) == before


@pytest.mark.parametrize("make", [
    lambda w, v: producer.push(w.core, w.h1, v, title="t"), lambda w, v: endpoints.revoke(w.core, w.h1, v),
    lambda w, v: endpoints.get_for_human(w.core, w.h1, v),
])
@pytest.mark.parametrize("slug", WRONG_TYPES + BAD_TEXT + CONTROL + ["", "x" * 65, "nosuchslug"])
async def test_bad_slug_is_not_found_and_changes_nothing(shared, make, slug):
    core, w = shared.core, shared
    before = await fingerprint(core)
    with pytest.raises(NotFound) as err:
        await make(w, slug)
    assert err.value.argument == "slug"
    assert await fingerprint(core) == before


async def test_other_refusals_name_the_argument(shared):
    core, w = shared.core, shared
    before = await fingerprint(core)
    with pytest.raises(Forbidden) as err:
        await todos.claim_next(core, w.e1, queue="notgranted")
    assert err.value.argument == "queue"
    with pytest.raises(NotFound) as err:
        await todos.create(core, endpoint_id=uuid.uuid4(), queue="inbox", title="t")
    assert err.value.argument == "endpoint_id"
    for key in ("nope", 123, None, "\x00", ["k"]):
        with pytest.raises(NotFound) as err:
            await settings_store.set_value(core, key, 5)
        assert err.value.argument == "key"
        with pytest.raises(NotFound):
            await settings_store.get(core, key)
    for name in ("nobody", "\x00", "\ud800", 5):
        with pytest.raises(NotFound):
            await humans.by_name(core, name)
        assert await humans.verify_password(core, name, "\ud800password") is None
    for cred in ("sbk_\x00", "sbk_\ud800", "x" * 10000, None, "sbk_"):
        assert await endpoints.resolve_credential(core, cred) is None
        assert await api_tokens.resolve(core, cred if cred is None else cred.replace("sbk_", "sbh_")) is None
    assert await fingerprint(core) == before


# ------------------------------------------------------------------------------- documented clean cuts

async def test_lease_ttl_non_positive_is_the_default_and_huge_is_clamped(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], lease_ttl_seconds=0)
    row = (await sql(core, "SELECT * FROM todos WHERE id = %s", (t["id"],)))[0]
    assert (row["lease_expires_at"] - row["claimed_at"]).total_seconds() == core.settings.lease_ttl_seconds
    await todos.heartbeat(core, w.e1, t["id"], lease_ttl_seconds=-5)
    await todos.heartbeat(core, w.e1, t["id"], lease_ttl_seconds=10 ** 30)
    row = (await sql(core, "SELECT * FROM todos WHERE id = %s", (t["id"],)))[0]
    assert (row["lease_expires_at"] - row["updated_at"]).total_seconds() == 86400


async def test_attempts_limit_non_positive_is_the_default_and_huge_is_capped(core, w):
    for limit in (0, -1, 10 ** 30):
        assert len((await todos.get(core, w.e1, w.t, attempts_limit=limit))["attempts"]) == 1
        assert len((await todos.get(core, w.h1, w.t, attempts_limit=limit))["attempts"]) == 1


async def test_summary_drops_nul_and_lone_surrogates_and_keeps_the_rest_as_data(core, w):
    await todos.release(core, w.e1, w.t, summary="a\x00b\ud800c\x07\n")
    (a,) = await attempt_rows(core, w.t)
    assert a["summary"] == "abc\x07\n" and a["summary_truncated"] is False


async def test_claimant_controls_removed_and_cut(core, w):
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"], claimant="\x00\ud800\x07")  # nothing left: no label
    assert (await attempt_rows(core, t["id"]))[0]["claimant"] is None


async def test_question_over_2048_bytes_is_refused_and_2048_fit(core, w):
    """The core owns the question's limit (the MCP schema's maxLength states it): over 2048 bytes of
    UTF-8 is refused naming the argument, exactly 2048 bytes is kept whole."""
    with pytest.raises(Invalid) as err:
        await todos.request_input(core, w.e1, w.t, question="€" * 683)  # 2049 bytes
    assert err.value.argument == "question" and "2048 bytes" in err.value.message
    await todos.request_input(core, w.e1, w.t, question="€" * 682 + "ab")  # 2048 bytes
    row = (await sql(core, "SELECT input_request FROM todos WHERE id = %s", (w.t,)))[0]
    assert row["input_request"] == "€" * 682 + "ab"


async def test_large_but_allowed_json_round_trips(core, w):
    payload = {"deep": _deep(200), "big": 10 ** 300, "text": "é\u2028\x07" * 1000, "neg": -1.5e300}
    t, _ = await todos.create(core, endpoint_id=w.e1.endpoint_id, queue="inbox", title="t", payload=payload)
    detail = await todos.get(core, w.h1, t["id"])
    assert detail["payload"]["big"] == 10 ** 300 and detail["payload"]["text"] == payload["text"]


# ------------------------------------------------------------------------------------------ hypothesis

ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.binary(max_size=8),
    st.text(st.characters(exclude_categories=()), max_size=40),
    st.text(st.characters(exclude_categories=()), min_size=2000, max_size=3000),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
)
ALLOWED = {"invalid", "conflict", "not_found", "forbidden"}

FUZZ = {
    "claim.claimant": lambda w, t, v: todos.claim(w.core, w.e1, t, claimant=v),
    "claim.lease_ttl_seconds": lambda w, t, v: todos.claim(w.core, w.e1, t, lease_ttl_seconds=v),
    "claim.require_fence": lambda w, t, v: todos.claim(w.core, w.e1, t, require_fence=v),
    "claim_next.queue": lambda w, t, v: todos.claim_next(w.core, w.e1, queue=v),
    "heartbeat.lease_token": lambda w, t, v: todos.heartbeat(w.core, w.e1, t, lease_token=v),
    "complete.result": lambda w, t, v: todos.complete(w.core, w.e1, t, result=v),
    "complete.summary": lambda w, t, v: todos.complete(w.core, w.e1, t, summary=v),
    "complete.artifact": lambda w, t, v: todos.complete(w.core, w.e1, t, artifact=v),
    "fail.retry": lambda w, t, v: todos.fail(w.core, w.e1, t, retry=v),
    "release.summary": lambda w, t, v: todos.release(w.core, w.e1, t, summary=v),
    "request_input.question": lambda w, t, v: todos.request_input(w.core, w.e1, t, question=v),
    "get.id": lambda w, t, v: todos.get(w.core, w.e1, v),
    "complete.id": lambda w, t, v: todos.complete(w.core, w.e1, v),
    "get.attempts_limit": lambda w, t, v: todos.get(w.core, w.e1, t, attempts_limit=v),
    "create.title": lambda w, t, v: todos.create(w.core, endpoint_id=w.e1.endpoint_id, queue="inbox", title=v),
    "create.payload": lambda w, t, v: todos.create(w.core, endpoint_id=w.e1.endpoint_id, queue="inbox",
                                                   title="t", payload=v),
    "list_for_endpoint.state": lambda w, t, v: todos.list_for_endpoint(w.core, w.e1, state=v),
}


@pytest.mark.parametrize("target", sorted(FUZZ))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(value=ANYTHING)
async def test_fuzz_argument_never_breaks_and_refusals_change_nothing(core, w, target, value):
    t = (await w.todo())["id"]
    await todos.claim(core, w.e1, t)
    before = await fingerprint(core)
    try:
        out = await FUZZ[target](w, t, value)
    except CoreError as exc:
        assert exc.code in ALLOWED, exc
        if exc.code == "invalid":
            assert exc.argument == target.split(".")[1] or (target.endswith(".id") and exc.argument == "id")
        assert await fingerprint(core) == before
        return
    # Accepted: whatever was stored respects the limits.
    for a in await attempt_rows(core, t):
        assert a["summary"] is None or len(a["summary"].encode()) <= 2048
        assert a["claimant"] is None or (len(a["claimant"].encode()) <= 128
                                         and not any(ord(c) < 32 for c in a["claimant"]))
    del out


def test_mcp_input_schemas_state_the_cores_limits_and_only_decode_json():
    """One validation layer: the MCP schemas quote the core's constants and enums; the MCP decoding
    checks JSON types only and leaves the values to the core (which refuses, naming the argument)."""
    from switchboard.core import inputs
    from switchboard.core.states import TODO_STATES
    from switchboard.mcp import schemas
    from switchboard.mcp.tools import TOOLS

    def props(verb: str) -> dict:
        return TOOLS[verb].input_schema["properties"]

    assert props("complete")["artifact"]["maxLength"] == inputs.ARTIFACT_MAX_BYTES
    assert props("heartbeat")["lease_token"]["maxLength"] == inputs.LEASE_TOKEN_MAX_CHARS
    assert props("claim")["id"]["maxLength"] == inputs.ID_MAX_CHARS
    assert props("claim_next")["queue"]["maxLength"] == inputs.QUEUE_LABEL_MAX_CHARS
    assert props("list_todos")["queue"]["maxLength"] == inputs.QUEUE_LABEL_MAX_CHARS
    assert props("request_input")["question"]["maxLength"] == inputs.QUESTION_MAX_BYTES
    assert props("list_todos")["state"]["enum"] == list(TODO_STATES)
    assert props("list_todos")["limit"]["default"] == inputs.LIST_LIMIT_DEFAULT
    assert str(inputs.LIST_LIMIT_MAX) in props("list_todos")["limit"]["description"]
    assert props("get_todo")["attempts_limit"]["default"] == inputs.ATTEMPTS_LIMIT_DEFAULT
    assert str(inputs.LEASE_MAX_SECONDS) in props("claim")["lease_ttl_seconds"]["description"]
    long = "https://e.example/" + "a" * 600
    decoded = schemas.check_arguments(TOOLS["complete"].by_name, ("id",), {"id": "td_x", "artifact": long})
    assert decoded["artifact"] == long
    with pytest.raises(Invalid) as err:
        inputs.artifact(long)
    assert err.value.argument == "artifact"
