"""Bulk push on a team's queues (issues 13 and 17): any member pushes up to 1,000 todos in one statement,
each naming a queue of the team (its name or its label); the team's idempotency keys hold per todo; a
bad item (a label of another team, a missing queue) is `invalid` naming `todos[i].queue` and nothing is
pushed; outside the team it is not_found as for a team that does not exist; the batch's wake-up is one
per queue with its team; and the endpoints the team granted claim what it pushed. Through the core,
the human API and `switchboard todo push --team … --from-file`."""

from __future__ import annotations

import json
import uuid

import httpx
import psycopg
import pytest

from mcp_support import vend
from switchboard.core import producer, todos
from switchboard.core.errors import Invalid, NotFound
from team_world import make_fleet
from test_bulk_push import _cli_env, _sb, drain, listen, server, sql  # noqa: F401  (the module's server)


def team_items(n: int, queues: list[str], key: str | None = "k") -> list[dict]:
    return [{"title": f"job {i}", "queue": queues[i % len(queues)], "payload": {"n": i},
             **({"key": f"{key}-{i}"} if key else {})} for i in range(n)]


async def _team_count(core_or_uri, team_slug: str) -> int:
    query = "SELECT count(*) AS n FROM todos t JOIN teams m ON m.id = t.team_id WHERE m.slug = %s"
    if isinstance(core_or_uri, str):
        async with await psycopg.AsyncConnection.connect(core_or_uri) as conn:
            return (await (await conn.execute(query, (team_slug,))).fetchone())[0]
    return (await sql(core_or_uri, query, (team_slug,)))[0]["n"]


# ------------------------------------------------------------------------------------------- core

async def test_a_member_pushes_a_batch_on_two_team_queues_and_a_granted_endpoint_claims_it(core):
    fleet = await make_fleet(core, members=3, queue="work")
    other = f"team:{fleet.slug}/other"
    batch = team_items(300, ["work", other])  # a bare name and a label, both of this team
    results = await producer.push_team_many(core, fleet.humans[2], fleet.slug, batch, source="api")
    assert len(results) == 300 and all(created for _, created in results)
    assert [t["queue"] for t, _ in results[:2]] == [fleet.label, other]
    rows = await sql(core, "SELECT count(*) AS n, count(DISTINCT team_id) AS teams, count(endpoint_id) AS eps "
                           "FROM todos WHERE team_id IS NOT NULL")
    assert rows == [{"n": 300, "teams": 1, "eps": 0}]

    # The endpoints the team granted claim them under their own credentials (one batch shares one
    # created_at, so which of its todos comes first is not said).
    got = await todos.claim_next(core, fleet.endpoints[1], queue=fleet.label)
    assert got is not None and got.todo["id"] in {t["id"] for t, _ in results if t["queue"] == fleet.label}
    assert got.todo["queue"] == fleet.label


async def test_team_keys_are_honoured_per_todo_and_within_the_call(core):
    fleet = await make_fleet(core, members=2)
    single = await fleet.push("first", key="k-0")
    batch = team_items(4, ["work"]) + [{"title": "again", "queue": "work", "key": "k-1"}]
    results = await producer.push_team_many(core, fleet.humans[1], fleet.slug, batch)
    assert [created for _, created in results] == [False, True, True, True, False]
    assert results[0][0]["id"] == single["id"]
    assert results[4][0]["id"] == results[1][0]["id"]
    assert await _team_count(core, fleet.slug) == 4
    # Redelivered: nothing new.
    again = await producer.push_team_many(core, fleet.humans[1], fleet.slug, batch)
    assert not any(created for _, created in again)
    assert [t["id"] for t, _ in again] == [t["id"] for t, _ in results]


@pytest.mark.parametrize(("bad", "argument"), [
    ({"title": "t", "queue": "team:someone-else/work"}, "todos[2].queue"),
    ({"title": "t"}, "todos[2].queue"),
    ({"title": "t", "queue": "bad queue"}, "todos[2].queue"),
    ({"title": "", "queue": "work"}, "todos[2].title"),
    ({"title": "t", "queue": "work", "max_attempts": 0}, "todos[2].max_attempts"),
    ("not an object", "todos[2]"),
])
async def test_a_bad_item_is_invalid_naming_it_and_nothing_is_pushed(core, bad, argument):
    fleet = await make_fleet(core, members=1, endpoints=1)
    batch = team_items(4, ["work"])
    batch[2] = bad
    with pytest.raises(Invalid) as exc:
        await producer.push_team_many(core, fleet.humans[0], fleet.slug, batch)
    assert exc.value.argument == argument, exc.value.message
    assert await _team_count(core, fleet.slug) == 0


async def test_outside_the_team_it_is_not_found_as_an_unknown_team(core):
    fleet = await make_fleet(core, members=1, endpoints=1)
    stranger = await vend(core, f"s{uuid.uuid4().hex[:6]}", queues=["own"])
    with pytest.raises(NotFound) as foreign:
        await producer.push_team_many(core, stranger.human, fleet.slug, team_items(2, ["work"]))
    with pytest.raises(NotFound) as unknown:
        await producer.push_team_many(core, stranger.human, "no-such-team", team_items(2, ["work"]))
    assert (foreign.value.message, foreign.value.argument) == (unknown.value.message, unknown.value.argument)
    assert await _team_count(core, fleet.slug) == 0


async def test_a_batch_sends_one_wakeup_per_team_queue_with_its_team_and_count(core, pg_uri):
    fleet = await make_fleet(core, members=2)
    other = f"team:{fleet.slug}/other"
    conn = await listen(pg_uri)
    try:
        out = await producer.push_team_many(core, fleet.humans[0], fleet.slug, team_items(40, ["work", other]))
        notes = await drain(conn)
    finally:
        await conn.close()
    assert sorted((n["queue"], n["count"]) for n in notes) == sorted([(fleet.label, 20), (other, 20)])
    team_id = (await sql(core, "SELECT id FROM teams WHERE slug = %s", (fleet.slug,)))[0]["id"]
    assert {n["team_id"] for n in notes} == {str(team_id)} and {n["endpoint_id"] for n in notes} == {None}
    assert {n["todo_id"] for n in notes} == {out[0][0]["id"], out[1][0]["id"]}


async def test_an_endpoint_batch_naming_a_team_queue_points_to_the_team_route(core):
    fleet = await make_fleet(core, members=1, endpoints=1)
    with pytest.raises(Invalid) as exc:
        await producer.push_many(core, fleet.humans[0], fleet.ep_slugs[0],
                                 [{"title": "t", "queue": fleet.label}])
    assert exc.value.argument == "todos[0].queue" and "/teams/{team}/todos:batch" in exc.value.message


# ---------------------------------------------------------------------------------- human API

async def _api_fleet(uri: str):
    from conftest import core_for
    from switchboard.core import api_tokens

    async with core_for(uri) as c:
        fleet = await make_fleet(c, members=2)
        stranger = await vend(c, f"s{uuid.uuid4().hex[:6]}", queues=["own"])
        member_token, _ = await api_tokens.create(c, fleet.humans[1], scope_name="write")
        stranger_token, _ = await api_tokens.create(c, stranger.human, scope_name="write")
    return fleet, member_token, stranger_token


async def test_the_team_batch_route(server):  # noqa: F811
    srv, uri = server
    fleet, token, stranger_token = await _api_fleet(uri)
    http = httpx.Client(base_url=srv.url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    batch = team_items(1000, ["work", f"team:{fleet.slug}/other"])
    r = http.post(f"/teams/{fleet.slug}/todos:batch", json={"todos": batch})
    assert r.status_code == 201, r.text
    assert (r.json()["created"], r.json()["existing"]) == (1000, 0)
    again = http.post(f"/teams/{fleet.slug}/todos:batch", json={"todos": batch})
    assert again.status_code == 200 and (again.json()["created"], again.json()["existing"]) == (0, 1000)

    bad = team_items(3, ["work"], key="fresh")
    bad[1] = {"title": "t", "queue": "team:another/work"}
    r = http.post(f"/teams/{fleet.slug}/todos:batch", json={"todos": bad})
    assert r.status_code == 400 and r.json()["error"]["argument"] == "todos[1].queue", r.text
    assert await _team_count(uri, fleet.slug) == 1000

    outsider = httpx.Client(base_url=srv.url + "/api/v1", headers={"Authorization": f"Bearer {stranger_token}"},
                            timeout=60)
    foreign = outsider.post(f"/teams/{fleet.slug}/todos:batch", json={"todos": team_items(2, ["work"])})
    unknown = outsider.post("/teams/no-such-team/todos:batch", json={"todos": team_items(2, ["work"])})
    assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content
    assert await _team_count(uri, fleet.slug) == 1000
    doc = http.get("/openapi.json").json()
    assert doc["paths"]["/api/v1/teams/{team}/todos:batch"]["post"]["operationId"] == "team_todo_push_batch"
    http.close()
    outsider.close()


# ---------------------------------------------------------------------------------------- CLI

@pytest.mark.parametrize("mode", ["local", "remote"])
async def test_cli_push_team_from_file(server, tmp_path, mode):  # noqa: F811
    srv, uri = server
    fleet, token, _ = await _api_fleet(uri)
    if mode == "local":
        env = _cli_env(tmp_path, SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_USER=fleet.humans[1].name)
    else:
        env = _cli_env(tmp_path, SWITCHBOARD_DATABASE_URL="postgresql://sb:sb@127.0.0.1:1/none?connect_timeout=2",
                       SWITCHBOARD_URL=srv.url, SWITCHBOARD_TOKEN=token)
    path = tmp_path / "todos.jsonl"
    path.write_text("\n".join(json.dumps(b) for b in team_items(1500, ["work", "other"])) + "\n", encoding="utf-8")
    done = _sb(env, "todo", "push", "--team", fleet.slug, "--from-file", str(path), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["created"], out["existing"]) == (1500, 0)
    assert out["results"][1]["todo"]["queue"] == f"team:{fleet.slug}/other"
    again = _sb(env, "todo", "push", "--team", fleet.slug, "--from-file", str(path))
    assert again.returncode == 0 and again.stdout.strip() == "0 created, 1500 existing", again.stderr

    # A line naming another team's queue: refused naming the line, nothing pushed.
    path.write_text(json.dumps({"title": "a", "queue": "work", "key": "n1"}) + "\n"
                    + json.dumps({"title": "b", "queue": "team:elsewhere/work"}) + "\n", encoding="utf-8")
    bad = _sb(env, "todo", "push", "--team", fleet.slug, "--from-file", str(path), "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["error"]["argument"] == "line 2.queue", bad.stdout
    # --team without --from-file is a usage error.
    usage = _sb(env, "todo", "push", "--team", fleet.slug, "--title", "t")
    assert usage.returncode == 2 and "--team" in usage.stderr
    # A team the human is not in: not_found, as for one that does not exist.
    unknown = _sb(env, "todo", "push", "--team", "no-such-team", "--from-file", str(path), "--json")
    assert unknown.returncode == 1 and json.loads(unknown.stdout)["error"]["code"] == "not_found"
    assert await _team_count(uri, fleet.slug) == 1500
