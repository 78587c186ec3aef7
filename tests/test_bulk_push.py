"""Bulk push (issue 17, part 3): up to 1,000 todos in one statement, idempotency keys honoured per
todo, validation all or nothing naming `todos[i].field`, one wake-up per queue, hook outbox rows and
metrics per todo; the human API's `todos:batch` and `switchboard todo push --from-file`, locally and
against a server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_support import vend
from switchboard.core import hooks, producer, shapes, todos
from switchboard.core.errors import Invalid, NotFound
from switchboard.db.listen import READY_CHANNEL

TABLES = ("todos", "todo_attempts", "hook_outbox", "metric_spool")


async def sql(core, query: str, params=None) -> list[dict]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def fingerprint(core) -> list:
    parts = " UNION ALL ".join(
        f"SELECT '{t}' AS t, count(*) AS n, md5(coalesce(string_agg(to_jsonb(x)::text, ',' "
        f"ORDER BY to_jsonb(x)::text), '')) AS h FROM {t} x" for t in TABLES)
    return [tuple(r.values()) for r in await sql(core, parts)]


def items(n: int, *, queues=("build",), key: str | None = "k") -> list[dict]:
    return [{"title": f"job {i}", "queue": queues[i % len(queues)], "payload": {"n": i},
             **({"key": f"{key}-{i}"} if key else {})} for i in range(n)]


# ------------------------------------------------------------------------------------------- core

async def test_a_thousand_todos_in_one_call_in_input_order(core):
    agent = await vend(core, queues=["build", "deploy"])
    batch = items(1000, queues=("build", "deploy"))
    results = await producer.push_many(core, agent.human, agent.slug, batch, source="api")
    assert len(results) == 1000 and all(created for _, created in results)
    assert [t["title"] for t, _ in results] == [b["title"] for b in batch]
    assert [t["queue"] for t, _ in results] == [b["queue"] for b in batch]
    assert set(results[0][0]) >= {"id", "queue", "title", "state", "attempt", "max_attempts", "payload_size"}
    assert "payload" not in results[0][0]  # the compact shape
    rows = await sql(core, "SELECT id, state, source, payload, idempotency_key FROM todos WHERE endpoint_id = %s",
                     (agent.endpoint_id,))
    assert len(rows) == 1000 and {r["state"] for r in rows} == {"pending"} and {r["source"] for r in rows} == {"api"}
    by_id = {r["id"]: r for r in rows}
    for (todo, _), item in zip(results, batch, strict=True):
        assert by_id[todo["id"]]["payload"] == item["payload"]
        assert by_id[todo["id"]]["idempotency_key"] == item["key"]


async def test_redelivering_the_same_batch_creates_nothing_new(core):
    agent = await vend(core, queues=["build"])
    first = await producer.push_many(core, agent.human, agent.slug, items(300))
    before = await fingerprint(core)
    again = await producer.push_many(core, agent.human, agent.slug, items(300))
    assert [created for _, created in again] == [False] * 300
    assert [t["id"] for t, _ in again] == [t["id"] for t, _ in first]
    assert await fingerprint(core) == before
    # A mix: half known, half new, answered in order.
    mixed = items(300)[150:] + items(100, key="new")
    out = await producer.push_many(core, agent.human, agent.slug, mixed)
    assert [c for _, c in out] == [False] * 150 + [True] * 100
    assert [t["id"] for t, _ in out[:150]] == [t["id"] for t, _ in first[150:]]


async def test_a_finished_todo_frees_its_key_as_for_a_single_push(core):
    agent = await vend(core, queues=["build"])
    (old, _), = await producer.push_many(core, agent.human, agent.slug, [{"title": "a", "key": "same"}])
    await sql(core, "UPDATE todos SET state = 'canceled' WHERE id = %s", (old["id"],))
    (new, created), = await producer.push_many(core, agent.human, agent.slug, [{"title": "a", "key": "same"}])
    assert created and new["id"] != old["id"]


async def test_a_key_repeated_in_one_batch_answers_the_first_items_todo(core):
    agent = await vend(core, queues=["build"])
    batch = [{"title": "first", "key": "dup"}, {"title": "other"}, {"title": "second", "key": "dup"},
             {"title": "third", "key": "dup"}]
    out = await producer.push_many(core, agent.human, agent.slug, batch)
    assert [c for _, c in out] == [True, True, False, False]
    assert out[2][0]["id"] == out[3][0]["id"] == out[0][0]["id"] and out[2][0]["title"] == "first"
    assert (await sql(core, "SELECT count(*) AS n FROM todos"))[0]["n"] == 2


@pytest.mark.parametrize("bad, argument", [
    ({"title": ""}, "todos[7].title"),
    ({"title": "x" * 513}, "todos[7].title"),
    ({"title": "t", "queue": "elsewhere"}, "todos[7].queue"),
    ({"title": "t", "max_attempts": 0}, "todos[7].max_attempts"),
    ({"title": "t", "max_attempts": "3"}, "todos[7].max_attempts"),
    ({"title": "t", "payload": "x" * (256 * 1024)}, "todos[7].payload"),
    ({"title": "t", "key": 5}, "todos[7].key"),
    ({"title": "t", "kind": "a\x00b"}, "todos[7].kind"),
    ({"title": "t", "colour": "red"}, "todos[7].colour"),
    ("just a title", "todos[7]"),
])
async def test_a_bad_item_is_invalid_naming_index_and_field_and_nothing_is_pushed(core, bad, argument):
    agent = await vend(core, queues=["build"])
    await producer.push_many(core, agent.human, agent.slug, items(3, key="seen"))
    before = await fingerprint(core)
    batch = items(20)
    batch[7] = bad
    with pytest.raises(Invalid) as err:
        await producer.push_many(core, agent.human, agent.slug, batch)
    assert err.value.argument == argument and err.value.message.startswith(argument)
    assert await fingerprint(core) == before


@pytest.mark.parametrize("batch", [[], items(1001, key=None), "todos", None])
async def test_the_batch_itself_must_be_1_to_1000_objects(core, batch):
    agent = await vend(core, queues=["build"])
    before = await fingerprint(core)
    with pytest.raises(Invalid) as err:
        await producer.push_many(core, agent.human, agent.slug, batch)
    assert err.value.argument == "todos"
    assert await fingerprint(core) == before


async def test_a_foreign_endpoint_is_not_found_like_an_unknown_one(core):
    alice = await vend(core, "alice", queues=["build"])
    bob = await vend(core, "bob", queues=["build"])
    before = await fingerprint(core)
    with pytest.raises(NotFound) as foreign:
        await producer.push_many(core, alice.human, bob.slug, items(5))
    with pytest.raises(NotFound) as unknown:
        await producer.push_many(core, alice.human, "nosuchslug00", items(5))
    assert foreign.value.to_dict() == unknown.value.to_dict()
    assert await fingerprint(core) == before


# -------------------------------------------------------------------------------------- events

async def listen(uri: str):
    conn = await psycopg.AsyncConnection.connect(uri, autocommit=True)
    await conn.execute(f"LISTEN {READY_CHANNEL}")
    return conn


async def drain(conn, quiet: float = 0.5) -> list[dict]:
    got = []
    gen = conn.notifies(timeout=quiet)
    async for note in gen:
        got.append(json.loads(note.payload))
    return got


async def test_a_batch_over_two_queues_sends_two_wakeups(core, pg_uri):
    agent = await vend(core, queues=["build", "deploy"])
    conn = await listen(pg_uri)
    try:
        out = await producer.push_many(core, agent.human, agent.slug, items(500, queues=("build", "deploy")))
        notes = await drain(conn)
    finally:
        await conn.close()
    assert len(notes) == 2
    by_queue = {n["queue"]: n for n in notes}
    assert set(by_queue) == {"build", "deploy"}
    assert {n["count"] for n in notes} == {250}
    assert {n["reason"] for n in notes} == {"created"}
    assert {n["endpoint_id"] for n in notes} == {str(agent.endpoint_id)}
    # Each names the first todo of its queue in the batch (the one the doorbell rings).
    assert by_queue["build"]["todo_id"] == out[0][0]["id"] and by_queue["deploy"]["todo_id"] == out[1][0]["id"]


async def test_hook_outbox_rows_per_todo_created_before_ready(core):
    agent = await vend(core, queues=["build"])
    hook, _ = await hooks.add(core, agent.human, agent.slug, url="http://127.0.0.1:9/h")
    out = await producer.push_many(core, agent.human, agent.slug, items(200))
    rows = await sql(core, "SELECT todo_id, event, body FROM hook_outbox ORDER BY id")
    assert len(rows) == 400
    expected = [(t["id"], ev) for t, _ in out for ev in ("todo.created", "todo.ready")]
    assert [(r["todo_id"], r["event"]) for r in rows] == expected
    body = rows[1]["body"]
    assert body["type"] == "todo.ready" and body["reason"] == "created" and body["title"] == "job 0"
    assert body["endpoint"] == agent.slug and body["queue"] == "build" and body["source"] == "operator"
    # Redelivery adds no outbox row: nothing was created.
    await producer.push_many(core, agent.human, agent.slug, items(200))
    assert len(await sql(core, "SELECT 1 FROM hook_outbox")) == 400


async def test_every_created_todo_is_published_once_after_commit(core):
    agent = await vend(core, queues=["build"])
    seen = []
    core.bus.subscribe(lambda ev: seen.append(ev))
    await producer.push_many(core, agent.human, agent.slug, items(50, key="x")[:30] + items(50, key="x")[:10])
    assert [e.verb for e in seen] == ["create"] * 30 and len({e.todo_id for e in seen}) == 30
    assert {e.ready for e in seen} == {"created"}


async def test_metrics_count_every_created_todo(core):
    from switchboard.web.metrics import Metrics

    agent = await vend(core, queues=["build", "deploy"])
    metrics = Metrics()
    core.bus.subscribe(metrics.on_event)
    await producer.push_many(core, agent.human, agent.slug, items(600, queues=("build", "deploy")), source="api")
    await producer.push_many(core, agent.human, agent.slug, items(600, queues=("build", "deploy")), source="api")
    text = metrics.render().decode()
    counted = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
               if line.startswith("switchboard_todos_created_total{")}
    assert sum(counted.values()) == 600
    assert all('source="api"' in k for k in counted)


async def test_a_batch_reaches_a_batch_subscriber_in_one_call_and_is_counted_per_queue(core):
    """The bus's batch form (`subscribe_batch`): one call per push with every created todo in input
    order, and the metrics count the batch as the per-event form does."""
    from switchboard.web.metrics import Metrics

    agent = await vend(core, queues=["build", "deploy"])
    calls: list[list] = []
    core.bus.subscribe_batch(lambda evs: calls.append(list(evs)))
    batch, single = Metrics(), Metrics()
    core.bus.subscribe_batch(batch.on_events)
    core.bus.subscribe(single.on_event)
    answers = await producer.push_many(core, agent.human, agent.slug, items(600, queues=("build", "deploy")),
                                       source="api")
    assert len(calls) == 1 and [e.todo_id for e in calls[0]] == [t["id"] for t, _ in answers]

    def created(m) -> dict[str, float]:
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in m.render().decode().splitlines()
                if line.startswith("switchboard_todos_created_total{")}

    assert created(batch) == created(single) and sum(created(batch).values()) == 600
    assert len(created(batch)) == 2  # one series per queue


# ---------------------------------------------------------------------------------- human API

@pytest.fixture(scope="module")
def server(pg_server):
    from conftest import create_database, make_settings, start_thread_server

    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri, api_rate_limit_per_minute=100_000, api_rate_limit_burst=10_000))
    yield srv, uri
    srv.stop()


async def _api_world(uri: str):
    from conftest import core_for
    from switchboard.core import api_tokens

    async with core_for(uri) as c:
        alice = await vend(c, f"alice{uuid.uuid4().hex[:6]}", queues=["build", "deploy"])
        bob = await vend(c, f"bob{uuid.uuid4().hex[:6]}", queues=["build"])
        token, _ = await api_tokens.create(c, alice.human, scope_name="write")
    return alice, bob, token


async def _count(uri: str, endpoint_id) -> int:
    async with await psycopg.AsyncConnection.connect(uri) as conn:
        cur = await conn.execute("SELECT count(*) FROM todos WHERE endpoint_id = %s", (endpoint_id,))
        return (await cur.fetchone())[0]


async def test_the_batch_route_pushes_answers_in_order_and_is_idempotent(server):
    srv, uri = server
    alice, bob, token = await _api_world(uri)
    http = httpx.Client(base_url=srv.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    batch = items(1000, queues=("build", "deploy"))
    r = http.post(f"/endpoints/{alice.slug}/todos:batch", json={"todos": batch})
    assert r.status_code == 201, r.text
    body = r.json()
    assert (body["created"], body["existing"], len(body["results"])) == (1000, 0, 1000)
    assert [x["todo"]["title"] for x in body["results"]] == [b["title"] for b in batch]
    again = http.post(f"/endpoints/{alice.slug}/todos:batch", json={"todos": batch})
    assert again.status_code == 200 and (again.json()["created"], again.json()["existing"]) == (0, 1000)
    assert [x["todo"]["id"] for x in again.json()["results"]] == [x["todo"]["id"] for x in body["results"]]
    assert await _count(uri, alice.endpoint_id) == 1000

    # A bad item: invalid naming index and field, nothing pushed (the API's models or the core).
    for bad, argument in (({"title": 5, "queue": "build"}, "todos[3].title"),
                          ({"colour": "red", "title": "t"}, "todos[3].colour"),
                          ({"title": "a\x01b", "queue": "build"}, "todos[3].title"),
                          ({"title": "t", "queue": "nope"}, "todos[3].queue")):
        fresh = items(5, key="fresh")
        fresh[3] = bad
        r = http.post(f"/endpoints/{alice.slug}/todos:batch", json={"todos": fresh})
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, r.text
    for todos_value in ([], items(1001, key=None)):
        r = http.post(f"/endpoints/{alice.slug}/todos:batch", json={"todos": todos_value})
        assert r.status_code == 400 and r.json()["error"]["argument"] == "todos", r.text
    assert await _count(uri, alice.endpoint_id) == 1000

    # Another human's endpoint answers exactly as one that does not exist.
    foreign = http.post(f"/endpoints/{bob.slug}/todos:batch", json={"todos": items(2)})
    unknown = http.post("/endpoints/nosuchslug00/todos:batch", json={"todos": items(2)})
    assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content
    assert await _count(uri, bob.endpoint_id) == 0

    # Past the 1 MiB body cap: 413, nothing pushed.
    big = [{"title": "t", "key": f"big-{i}", "payload": "x" * 2000} for i in range(600)]
    r = http.post(f"/endpoints/{alice.slug}/todos:batch", json={"todos": big})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert await _count(uri, alice.endpoint_id) == 1000
    http.close()


async def test_the_team_batch_route_takes_1_to_1000_todos(server):
    """As the endpoint route: a team's `todos:batch` with an empty list or 1,001 todos (each a good
    todo of the team's queue) is 400 `invalid` naming `todos`, and nothing is pushed; 1,000 are taken."""
    from conftest import core_for
    from switchboard.core import api_tokens
    from team_world import make_fleet

    srv, uri = server
    async with core_for(uri) as c:
        fleet = await make_fleet(c, members=2)
        token, _ = await api_tokens.create(c, fleet.humans[1], scope_name="write")
        before = await fingerprint(c)
    http = httpx.Client(base_url=srv.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    for todos_value in ([], items(1001, queues=("work",), key=None), items(1001, queues=("work",))):
        r = http.post(f"/teams/{fleet.slug}/todos:batch", json={"todos": todos_value})
        assert r.status_code == 400, r.text
        assert (r.json()["error"]["code"], r.json()["error"]["argument"]) == ("invalid", "todos"), r.text
    async with core_for(uri) as c:
        assert await fingerprint(c) == before
        assert (await sql(c, "SELECT count(*) AS n FROM todos t JOIN teams m ON m.id = t.team_id"
                             " WHERE m.slug = %s", (fleet.slug,)))[0]["n"] == 0
    r = http.post(f"/teams/{fleet.slug}/todos:batch", json={"todos": items(1000, queues=("work",))})
    assert r.status_code == 201 and (r.json()["created"], r.json()["existing"]) == (1000, 0), r.text
    assert {x["todo"]["queue"] for x in r.json()["results"]} == {fleet.label}
    http.close()


def test_the_batch_route_is_in_the_openapi_document(server):
    srv, _ = server
    doc = httpx.get(srv.url + "/api/v1/openapi.json").json()
    op = doc["paths"]["/api/v1/endpoints/{slug}/todos:batch"]["post"]
    assert op["operationId"] == "todo_push_batch"
    assert {"201", "200", "400", "404", "413"} <= set(op["responses"])


# ---------------------------------------------------------------------------------------- CLI

SB = str(Path(sys.executable).parent / "switchboard")


def _cli_env(config_home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(XDG_CONFIG_HOME=str(config_home), SWITCHBOARD_LOG_FORMAT="text")
    env.update(extra)
    return env


def _sb(env: dict, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SB, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mode", ["local", "remote"])
async def test_cli_push_from_file_locally_and_remotely(server, tmp_path, mode):
    srv, uri = server
    alice, bob, token = await _api_world(uri)
    if mode == "local":
        env = _cli_env(tmp_path, SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_USER=alice.human.name)
    else:  # a database nothing listens on: a command that quietly acted locally would fail
        env = _cli_env(tmp_path, SWITCHBOARD_DATABASE_URL="postgresql://sb:sb@127.0.0.1:1/none?connect_timeout=2",
                       SWITCHBOARD_URL=srv.url, SWITCHBOARD_TOKEN=token)
    batch = items(2500, queues=("build", "deploy"))
    path = tmp_path / "todos.jsonl"
    path.write_text("\n".join(json.dumps(b) for b in batch[:1200]) + "\n\n"
                    + "\n".join(json.dumps(b) for b in batch[1200:]) + "\n", encoding="utf-8")

    done = _sb(env, "todo", "push", alice.slug, "--from-file", str(path), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["created"], out["existing"], len(out["results"])) == (2500, 0, 2500)
    assert [r["todo"]["title"] for r in out["results"]] == [b["title"] for b in batch]
    assert await _count(uri, alice.endpoint_id) == 2500

    # Redelivery of the same file (from stdin) creates nothing new.
    again = _sb(env, "todo", "push", alice.slug, "--from-file", "-", "--json", stdin=path.read_text())
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["created"], json.loads(again.stdout)["existing"]) == (0, 2500)
    text = _sb(env, "todo", "push", alice.slug, "--from-file", str(path))
    assert text.returncode == 0 and text.stdout.strip() == "0 created, 2500 existing"

    # A bad line (the 1,502nd line of the file: past the first batch) names its line and field; nothing pushed.
    lines = [json.dumps(b) for b in items(1600, key="more")]
    lines[1501] = json.dumps({"title": "t", "queue": "build", "max_attempts": 0})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad = _sb(env, "todo", "push", alice.slug, "--from-file", str(path))
    assert bad.returncode == 1 and "line 1502: max_attempts must be" in bad.stderr, bad.stderr
    lines[1501] = "{not json"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bad = _sb(env, "todo", "push", alice.slug, "--from-file", str(path), "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["argument"] == "line 1502"
    assert await _count(uri, alice.endpoint_id) == 2500

    # Another human's endpoint: not_found, as for one that does not exist.
    path.write_text(json.dumps({"title": "t"}) + "\n", encoding="utf-8")
    foreign = _sb(env, "todo", "push", bob.slug, "--from-file", str(path), "--json")
    unknown = _sb(env, "todo", "push", "nosuchslug00", "--from-file", str(path), "--json")
    assert foreign.returncode == unknown.returncode == 1 and foreign.stdout == unknown.stdout
    assert json.loads(foreign.stdout)["error"]["code"] == "not_found"
    assert await _count(uri, bob.endpoint_id) == 0


async def test_payloads_are_stored_as_sent_and_sized_as_a_single_push_sizes_them(core):
    agent = await vend(core, queues=["build"])
    payloads = [None, {"a": [1, 2, "é"]}, "text", 0, [], {"nested": {"x": None}}]
    out = await producer.push_many(core, agent.human, agent.slug, [{"title": f"p{i}", "payload": p}
                                                                    for i, p in enumerate(payloads)])
    single, _ = await producer.push(core, agent.human, agent.slug, title="one", payload={"a": [1, 2, "é"]})
    assert out[1][0]["payload_size"] == single["payload_size"]
    for (todo, _), p in zip(out, payloads, strict=True):
        row = (await sql(core, "SELECT payload FROM todos WHERE id = %s", (todo["id"],)))[0]
        assert row["payload"] == p
        assert todo["payload_size"] == (0 if p is None else len(json.dumps(p, separators=(",", ":"),
                                                                            ensure_ascii=False).encode()))


async def test_a_live_session_is_rung_once_per_queue_for_a_batch(server):
    """The doorbell of a live SDK session (session era, channel and resource subscriptions): a
    500-todo batch over two queues rings it once per queue, naming the batch's first todo there."""
    from conftest import core_for
    from test_doorbell import ringing, stream_open

    srv, uri = server
    async with core_for(uri) as c:
        agent = await vend(c, f"bell{uuid.uuid4().hex[:6]}", queues=["build", "deploy"])
        uris = ("switchboard://queues/build", "switchboard://queues/deploy")
        async with ringing(srv.url, agent, subscribe=uris) as (_, inbox):
            await stream_open(srv, inbox)
            out = await producer.push_many(c, agent.human, agent.slug, items(500, queues=("build", "deploy")))
            await inbox.wait(lambda: len(inbox.channel) >= 2 and len(inbox.updated) >= 2)
            await asyncio.sleep(1.0)  # anything more would arrive now
    assert sorted(inbox.updated) == sorted(uris)
    assert sorted(p.meta["todo_id"] for p in inbox.channel) == sorted([out[0][0]["id"], out[1][0]["id"]])


# ------------------------------------------------------------------- the cheaper paths of a batch

_TEXTS = st.one_of(
    st.none(), st.just(""), st.just(" "), st.just("  \t"), st.text(max_size=8),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=6),
    st.sampled_from(["job", "a\tb", "a\nb", "a\x00b", "a\x7fb", "a\x1bb", "\ud800", "é ü", "x" * 64, "x" * 65,
                     "k" * 200, "k" * 201, "t" * 512, "t" * 513, "\u200b", "\u00a0", "\u2028"]),
    st.integers(-2, 2), st.booleans(), st.floats(allow_nan=True), st.lists(st.just("a"), max_size=1),
)
_PAYLOADS = st.one_of(
    st.none(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
    st.sampled_from(["a\x00b", "\ud800", "x" * (256 * 1024), "é" * (128 * 1024), "é" * (128 * 1024 - 8)]),
    st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=3) | st.none(), max_size=3),
    st.lists(st.integers() | st.booleans(), max_size=3), st.just({1: "non-string key"}), st.just({"s": {1, 2}}),
)
_QUEUES = st.one_of(st.none(), st.just(""), st.sampled_from(["build", "deploy", "ops", "team:t1/q", "bad queue",
                                                             "-x", "team:T/q"]), st.integers(0, 1),
                    st.lists(st.just("build"), max_size=1))
_GOOD_TEXTS = st.one_of(st.sampled_from(["job", "é ü", "a b", "x" * 64]),
                        st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"]), max_size=8))
_ALL_FIELDS = {"title": _TEXTS, "queue": _QUEUES, "payload": _PAYLOADS, "kind": _TEXTS, "key": _TEXTS,
               "assignee": _TEXTS,
               "max_attempts": st.one_of(st.none(), st.integers(-1, 102), st.booleans(), st.just(3.0), st.just("3"))}


@st.composite
def _items(draw):
    """Mostly good items (good values in every field) with up to two fields from the wide strategies."""
    item = {"title": draw(_GOOD_TEXTS.filter(lambda t: t.strip() != ""))}
    for name in draw(st.sets(st.sampled_from(["queue", "payload", "kind", "key", "assignee", "max_attempts"]))):
        item[name] = draw({"queue": st.sampled_from(["build", "deploy", None, ""]),
                           "payload": st.none() | st.integers()
                           | st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
                           "max_attempts": st.none() | st.integers(1, 100)}.get(name, _GOOD_TEXTS))
    for name in draw(st.sets(st.sampled_from(sorted(_ALL_FIELDS)), max_size=2)):
        item[name] = draw(_ALL_FIELDS[name])
    return item


_ITEMS = st.one_of(
    _items(), _items(),
    st.fixed_dictionaries({}, optional=_ALL_FIELDS),
    st.fixed_dictionaries({"title": st.just("t"), "colour": st.just("red")}),
    st.sampled_from(["just a title", None, 5, ["title"]]),
)
_SCOPES = st.sampled_from([["build"], ["build", "deploy"], ["build", "team:t1/q"], ["team:t1/q"], ["deploy"]])


@settings(max_examples=3000, deadline=None)
@given(raw=_ITEMS, queues=_SCOPES)
def test_the_quick_check_of_an_item_agrees_with_the_full_one(raw, queues):
    """`_plain_item` answers an item only as `_item` would; anything else goes to `_item`, which
    words the refusal."""
    own = producer._own_queues(queues)
    single = queues[0] if len(queues) == 1 and queues[0] in own else None
    quick = producer._plain_item(raw, own, single, 5)
    try:
        full = producer._item(raw, queues, 5)
    except Invalid:
        assert quick is None
        return
    if quick is not None:
        assert quick == full


@settings(max_examples=1500, deadline=None)
@given(batch=st.lists(st.one_of(_items(), _items(), _items(), _ITEMS), min_size=1, max_size=6), queues=_SCOPES)
def test_a_batch_is_answered_as_each_item_checked_alone(batch, queues):
    """`check_items` (whichever path each item takes) answers the items `_item` answers one by one, or is
    `invalid` naming the first item `_item` refuses."""
    expected: list = []
    for i, raw in enumerate(batch):
        try:
            expected.append(producer._item(raw, queues, 5))
        except Invalid:
            with pytest.raises(Invalid) as err:
                producer.check_items(batch, queues, 5)
            assert err.value.argument.startswith(f"todos[{i}]")
            return
    assert producer.check_items(batch, queues, 5) == expected


def test_check_items_names_the_first_bad_item_whichever_path_checked_the_others():
    good = items(5, key="g")
    for bad, argument, message in [({"title": "a\tb\x00"}, "todos[3].title", "todos[3].title must be valid UTF-8 text"),
                                   ({"title": "   "}, "todos[3].title", "todos[3].title is required"),
                                   ({"title": "t", "max_attempts": True}, "todos[3].max_attempts", None)]:
        with pytest.raises(Invalid) as err:
            producer.check_items(good[:3] + [bad] + good[3:], ["build"], 5)
        assert err.value.argument == argument
        assert message is None or err.value.message == message
    # Texts the quick path leaves to the full one are still accepted as a single push accepts them.
    out = producer.check_items([{"title": "line\tone\nline two", "kind": "k\u00a0k"}], ["build"], 5)
    assert out[0]["title"] == "line\tone\nline two" and out[0]["kind"] == "k\u00a0k"


def test_new_todo_ids_are_uuid4_ids_as_a_single_push_makes_them():
    ids = producer.new_todo_ids(5000)
    assert len(set(ids)) == 5000
    for tid in ids[:500]:
        assert tid.startswith("td_")
        u = uuid.UUID(tid[3:])
        assert u.version == 4 and u.variant == uuid.RFC_4122 and str(u) == tid[3:]
    single = todos.new_todo_id()
    assert len(single) == len(ids[0]) and single[:3] == ids[0][:3]


async def test_a_created_todo_is_answered_as_its_stored_row_reads(core):
    """A created todo is not read back: its compact answer is built from what was sent and must equal
    `shapes.compact` of the row as stored, created_at included."""
    agent = await vend(core, queues=["build", "deploy"])
    batch = [{"title": "plain", "queue": "build"},
             {"title": "all", "queue": "deploy", "kind": "k", "assignee": "agent:x", "max_attempts": 9,
              "payload": {"b": [1, "é"], "a": None}, "key": "key-1"},
             {"title": "ü title", "queue": "build", "payload": "text", "kind": "", "assignee": ""},
             {"title": "zero", "queue": "build", "payload": 0, "max_attempts": 1}]
    for source in ("api", "operator"):
        for keyed in (False, True):
            sent = [dict(b, key=f"{source}-{keyed}-{i}") if keyed else {k: v for k, v in b.items() if k != "key"}
                    for i, b in enumerate(batch)]
            out = await producer.push_many(core, agent.human, agent.slug, sent, source=source)
            assert all(c for _, c in out)
            for todo, _ in out:
                row = (await sql(core, "SELECT * FROM todos WHERE id = %s", (todo["id"],)))[0]
                assert todo == shapes.compact(row)
                assert list(todo) == list(shapes.compact(row))  # the same key order on the wire


async def test_a_mixed_batch_honours_the_keys_it_has_and_creates_the_rest_again(core):
    agent = await vend(core, queues=["build"])
    batch = [{"title": "keyed", "key": "m-1"}, {"title": "free"}, {"title": "keyed too", "key": "m-2"}]
    first = await producer.push_many(core, agent.human, agent.slug, batch)
    again = await producer.push_many(core, agent.human, agent.slug, batch)
    assert [c for _, c in first] == [True, True, True] and [c for _, c in again] == [False, True, False]
    assert again[0][0]["id"] == first[0][0]["id"] and again[2][0]["id"] == first[2][0]["id"]
    assert again[1][0]["id"] != first[1][0]["id"]
    assert again[0][0] == first[0][0]  # the existing todo, read back, answers as it was created
    assert (await sql(core, "SELECT count(*) AS n FROM todos"))[0]["n"] == 4


async def test_a_keyed_batch_on_a_revoked_endpoint_answers_only_its_existing_todos(core):
    agent = await vend(core, queues=["build"])
    (held, _), = await producer.push_many(core, agent.human, agent.slug, [{"title": "old", "key": "r-1"}])
    await sql(core, "UPDATE endpoints SET state = 'revoked', revoked_at = now() WHERE id = %s",
              (agent.endpoint_id,))
    before = await fingerprint(core)
    checked = producer.check_items([{"title": "old", "key": "r-1"}, {"title": "new", "key": "r-2"},
                                    {"title": "free"}], ["build"], 5)
    made = await producer._create_batch(core, producer._Owner(endpoint_id=uuid.UUID(str(agent.endpoint_id))),
                                        "operator", list(enumerate(checked)))
    assert [(i, t["id"], c) for i, t, c in made] == [(0, held["id"], False)]
    assert await fingerprint(core) == before


async def test_a_batch_wakeup_names_no_team_and_a_team_push_names_its_team(core, pg_uri):
    from team_world import make_fleet

    agent = await vend(core, queues=["build"])
    fleet = await make_fleet(core, members=2)
    conn = await listen(pg_uri)
    try:
        out = await producer.push_many(core, agent.human, agent.slug, items(3))
        team_todo = await fleet.push("for the team")
        notes = await drain(conn)
    finally:
        await conn.close()
    by_todo = {n["todo_id"]: n for n in notes}
    assert by_todo[out[0][0]["id"]]["team_id"] is None and by_todo[out[0][0]["id"]]["count"] == 3
    team_note = by_todo[team_todo["id"]]
    assert team_note["endpoint_id"] is None and team_note["count"] == 1
    team_id = (await sql(core, "SELECT team_id FROM todos WHERE id = %s", (team_todo["id"],)))[0]["team_id"]
    assert team_note["team_id"] == str(team_id) and team_note["queue"] == fleet.label


async def test_hooks_of_another_endpoint_write_nothing_for_this_batch(core):
    quiet = await vend(core, queues=["build"])
    hooked = await vend(core, "hookedhuman", queues=["build"])
    await hooks.add(core, hooked.human, hooked.slug, url="http://127.0.0.1:9/h")
    await producer.push_many(core, quiet.human, quiet.slug, items(50))
    assert await sql(core, "SELECT 1 FROM hook_outbox") == []
    out = await producer.push_many(core, hooked.human, hooked.slug, items(5, key="h"))
    rows = await sql(core, "SELECT todo_id, event FROM hook_outbox ORDER BY id")
    assert [(r["todo_id"], r["event"]) for r in rows] == [(t["id"], ev) for t, _ in out
                                                          for ev in ("todo.created", "todo.ready")]
