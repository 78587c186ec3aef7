"""Team queues report to notification sinks (docs/notifications.md "Team queues"): a team's dead
letters, stuck queues and digest rows go to the sinks of the team's owners and admins as they are at
the time of the event, never to a plain member's sinks nor to anyone outside the team; an endpoint
todo's messages are what they were. A team's own sinks (D60) hear about that team's queues whoever
manages it; its owners and admins change them, its members read them.

Real PostgreSQL; time is moved by SQL or by the `now` the sweep tick takes, never by sleeping. The
bodies are read from `sink_outbox` and rendered with `sink_messages.render` (the sender's own HTTP
path is the same for every message and is tested in test_sinks.py).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import psycopg

from core_world import sql
from switchboard.core import humans, sink_messages, sinks, teams, todos
from switchboard.core.errors import Conflict, Forbidden, Invalid, NotFound
from switchboard.db import migrate
from team_world import make_fleet

BASE = "https://board.example.com"


async def _sinks_for_everyone(core, fleet, events: list[str], **kw) -> tuple[dict[str, str], object]:
    """One generic sink each for the owner, the admin, the member and a human outside the team; the
    sink ids by role, and the outsider."""
    outsider = await humans.add(core, f"out-{uuid.uuid4().hex[:6]}")
    owners = {"owner": fleet.humans[0], "admin": fleet.humans[1], "member": fleet.humans[2], "outsider": outsider}
    ids = {}
    for role, human in owners.items():
        sink = await sinks.add(core, human, kind="generic", url=f"https://hooks.example.com/{role}", name=role,
                               events=events, **kw)
        ids[role] = sink["sink_id"]
    return ids, outsider


def _role_of(ids: dict[str, str]) -> dict[str, str]:
    return {sink_id: role for role, sink_id in ids.items()}


async def _outbox(core, event: str) -> list[dict]:
    return await sql(core, "SELECT sink_id::text AS sink_id, dedup_key, body FROM sink_outbox WHERE event = %s "
                           "ORDER BY id", (event,))


# ------------------------------------------------------------------------------------ dead letters

async def test_a_team_dead_letter_reaches_the_owners_and_admins_sinks_only(core):
    fleet = await make_fleet(core, members=3)
    ids, _ = await _sinks_for_everyone(core, fleet, ["dead_letter"])
    role = _role_of(ids)
    t = await fleet.push("build web@4f2c", max_attempts=1)
    agent = fleet.endpoints[2]  # the plain member's agent dead-letters it
    await todos.claim(core, agent, t["id"])
    assert (await todos.fail(core, agent, t["id"], summary="compiler crashed"))["dead_letter"]

    rows = await _outbox(core, "dead_letter")
    assert sorted(role[r["sink_id"]] for r in rows) == ["admin", "owner"]
    [todo] = await sql(core, "SELECT attempts_total, attempt FROM todos WHERE id = %s", (t["id"],))
    for r in rows:
        assert r["dedup_key"] == f"dead_letter:{t['id']}:{todo['attempts_total']}:{todo['attempt']}"
        assert r["body"] | {"at": None} == {
            "todo_id": t["id"], "title": "build web@4f2c", "queue": fleet.label, "endpoint": None,
            "team": fleet.slug, "attempts_total": 1, "reason": "failed", "last_outcome": "failed",
            "last_summary": "compiler crashed", "at": None}
    generic = sink_messages.render("generic", "dead_letter", rows[0]["body"], base_url=BASE, sink_name="owner")
    assert generic["text"].splitlines()[1] == f"Queue: {fleet.label}"
    slack = sink_messages.render("slack", "dead_letter", rows[0]["body"], base_url=BASE, sink_name="owner")
    assert f"*Queue:* {fleet.label}\n" in slack["blocks"][1]["text"]["text"]

    # An endpoint todo's dead letter is what it was: its human's sinks only, no team, the endpoint named.
    own, _ = await todos.create(core, endpoint_id=fleet.endpoints[0].endpoint_id, queue="own", title="mine",
                                max_attempts=1)
    await todos.claim(core, fleet.endpoints[0], own["id"])
    await todos.fail(core, fleet.endpoints[0], own["id"], summary="no")
    [mine] = [r for r in await _outbox(core, "dead_letter") if r["body"]["todo_id"] == own["id"]]
    assert role[mine["sink_id"]] == "owner"
    assert mine["body"] | {"at": None} == {
        "todo_id": own["id"], "title": "mine", "queue": "own", "endpoint": fleet.ep_slugs[0], "attempts_total": 1,
        "reason": "failed", "last_outcome": "failed", "last_summary": "no", "at": None}
    generic = sink_messages.render("generic", "dead_letter", mine["body"], base_url=BASE, sink_name="owner")
    assert generic["text"].splitlines()[1] == f"Queue: {fleet.ep_slugs[0]}/own"


async def test_the_roles_are_read_when_the_todo_dead_letters(core):
    fleet = await make_fleet(core, members=3)
    ids, _ = await _sinks_for_everyone(core, fleet, ["dead_letter"])
    role = _role_of(ids)
    # The admin becomes a plain member and the member an admin before the dead letter.
    await teams.set_role(core, fleet.humans[0], fleet.slug, fleet.humans[1].name, "member")
    await teams.set_role(core, fleet.humans[0], fleet.slug, fleet.humans[2].name, "admin")
    t = await fleet.push("late", max_attempts=1)
    await todos.claim(core, fleet.endpoints[0], t["id"])
    await todos.fail(core, fleet.endpoints[0], t["id"], summary="x")
    assert sorted(role[r["sink_id"]] for r in await _outbox(core, "dead_letter")) == ["member", "owner"]
    # A disabled sink and a sink not subscribed to dead letters get nothing.
    await sql(core, "DELETE FROM sink_outbox")
    await sql(core, "UPDATE notification_sinks SET enabled = false WHERE id = %s", (uuid.UUID(ids["owner"]),))
    await sql(core, "UPDATE notification_sinks SET events = ARRAY['digest'] WHERE id = %s",
              (uuid.UUID(ids["member"]),))
    t = await fleet.push("later", max_attempts=1)
    await todos.claim(core, fleet.endpoints[0], t["id"])
    await todos.fail(core, fleet.endpoints[0], t["id"], summary="x")
    assert await _outbox(core, "dead_letter") == []


# ------------------------------------------------------------------------------------ stuck queues

async def test_a_stuck_team_queue_is_reported_once_per_episode_to_the_owners_and_admins(core):
    fleet = await make_fleet(core, members=3)
    ids, _ = await _sinks_for_everyone(core, fleet, ["queue_stuck"], stuck_minutes=10)
    role = _role_of(ids)
    t = await fleet.push("waiting")
    own, _ = await todos.create(core, endpoint_id=fleet.endpoints[0].endpoint_id, queue="own", title="mine")
    assert (await sinks.tick(core))["queue_stuck"] == 0
    await sql(core, "UPDATE todos SET updated_at = now() - interval '11 minutes' WHERE id = ANY(%s)",
              ([t["id"], own["id"]],))
    assert (await sinks.tick(core))["queue_stuck"] == 3  # the team queue twice, the owner's own queue once

    team_rows = [r for r in await _outbox(core, "queue_stuck") if r["body"]["queue"] == fleet.label]
    assert sorted(role[r["sink_id"]] for r in team_rows) == ["admin", "owner"]
    [team_id] = [r["id"] for r in await sql(core, "SELECT id FROM teams WHERE slug = %s", (fleet.slug,))]
    for r in team_rows:
        assert r["body"] | {"pending_since": None} == {
            "endpoint": None, "team": fleet.slug, "queue": fleet.label, "pending": 1, "stuck_minutes": 10,
            "waiting_minutes": 11, "pending_since": None}
        assert r["dedup_key"].startswith(f"queue_stuck:{team_id}:{fleet.label}:")
    [own_row] = [r for r in await _outbox(core, "queue_stuck") if r["body"]["queue"] == "own"]
    assert role[own_row["sink_id"]] == "owner"
    assert own_row["body"] | {"pending_since": None} == {
        "endpoint": fleet.ep_slugs[0], "queue": "own", "pending": 1, "stuck_minutes": 10, "waiting_minutes": 11,
        "pending_since": None}
    body = sink_messages.render("slack", "queue_stuck", team_rows[0]["body"], base_url=BASE, sink_name="x")
    assert body["blocks"][-1]["elements"][0]["url"] == \
        f"{BASE}/todos?team={fleet.slug}&queue={quote(fleet.label, safe='')}&state=pending"
    assert body["text"].startswith(f"Queue stuck: {fleet.label} has had a todo waiting")

    # Not again while it stays stuck, however many ticks and however late.
    assert (await sinks.tick(core))["queue_stuck"] == 0
    assert (await sinks.tick(core, now=datetime.now(UTC) + timedelta(hours=5)))["queue_stuck"] == 0
    # It recovers (an agent claims the todo): forgotten, nothing sent; the endpoint queue stays stuck.
    await todos.claim(core, fleet.endpoints[1], t["id"])
    assert (await sinks.tick(core))["queue_stuck"] == 0
    remembered = await sql(core, "SELECT endpoint_id, team_id, queue FROM sink_stuck_queues")
    assert [(r["team_id"], r["queue"]) for r in remembered] == [(None, "own")]
    # Stuck again later: a second message to each.
    await todos.release(core, fleet.endpoints[1], t["id"])
    await sql(core, "UPDATE todos SET updated_at = now() - interval '30 minutes' WHERE id = %s", (t["id"],))
    assert (await sinks.tick(core))["queue_stuck"] == 2
    team_rows = [r for r in await _outbox(core, "queue_stuck") if r["body"]["queue"] == fleet.label]
    assert sorted(role[r["sink_id"]] for r in team_rows) == ["admin", "admin", "owner", "owner"]
    assert [r["body"]["waiting_minutes"] for r in team_rows[2:]] == [30, 30]
    # An admin made a plain member stops watching it: forgotten at the next tick, nothing sent.
    await teams.set_role(core, fleet.humans[0], fleet.slug, fleet.humans[1].name, "member")
    assert (await sinks.tick(core))["queue_stuck"] == 0
    watching = await sql(core, "SELECT sink_id::text AS sink_id FROM sink_stuck_queues WHERE team_id IS NOT NULL")
    assert [role[r["sink_id"]] for r in watching] == ["owner"]


# ---------------------------------------------------------------------------------------- digest

async def test_an_owners_digest_lists_the_team_queue_and_a_members_does_not(core):
    fleet = await make_fleet(core, members=3)
    now = datetime.now(UTC) + timedelta(seconds=20)  # after the activity below
    ids, _ = await _sinks_for_everyone(core, fleet, ["digest"], digest_hour=now.hour, timezone="UTC")
    role = _role_of(ids)
    agent = fleet.endpoints[2]
    done = await fleet.push("done")
    await todos.claim(core, agent, done["id"])
    await todos.complete(core, agent, done["id"], summary="ok")
    dead = await fleet.push("dead", max_attempts=1)
    await todos.claim(core, agent, dead["id"])
    await todos.fail(core, agent, dead["id"], summary="no")
    await fleet.push("waiting")
    await sql(core, "UPDATE todos SET updated_at = now() - interval '90 minutes' WHERE title = 'waiting'")
    await todos.create(core, endpoint_id=fleet.endpoints[0].endpoint_id, queue="own", title="mine")

    assert (await sinks.tick(core, now=now))["digest"] == 4
    bodies = {role[r["sink_id"]]: r["body"] for r in await _outbox(core, "digest")}
    for who in ("owner", "admin"):
        [team_queue] = [q for q in bodies[who]["queues"] if q["queue"] == fleet.label]
        assert team_queue["endpoint"] is None and team_queue["team"] == fleet.slug
        assert {k: team_queue[k] for k in ("pushed", "done", "failed", "dead_lettered")} == {
            "pushed": 3, "done": 1, "failed": 1, "dead_lettered": 1}
        assert 89 <= team_queue["oldest_pending_minutes"] <= 91
    # The owner's own endpoint queue is listed as before (no team), before the team queue.
    assert [(q["endpoint"], q["queue"]) for q in bodies["owner"]["queues"]] == [
        (fleet.ep_slugs[0], "own"), (None, fleet.label)]
    assert "team" not in bodies["owner"]["queues"][0]
    assert [q["queue"] for q in bodies["admin"]["queues"]] == [fleet.label]
    assert bodies["member"]["queues"] == [] and bodies["outsider"]["queues"] == []

    rendered = sink_messages.render("slack", "digest", bodies["owner"], base_url=BASE, sink_name="owner")
    facts = rendered["blocks"][1]["text"]["text"].splitlines()
    assert facts[0].startswith(f"*{fleet.ep_slugs[0]}/own:* pushed 1, done 0")
    assert facts[1].startswith(f"*{fleet.label}:* pushed 3, done 1, failed 1, dead-lettered 1, oldest pending 1 h ")


# ------------------------------------------------------------------------------------ the upgrade

async def test_a_stuck_episode_remembered_before_the_upgrade_is_kept(scratch_db):
    conn = await psycopg.AsyncConnection.connect(scratch_db, autocommit=True, row_factory=psycopg.rows.dict_row)
    try:
        await migrate.migrate(conn, target=29)
        human = (await (await conn.execute("INSERT INTO humans (name) VALUES ('ops') RETURNING id")).fetchone())["id"]
        agent = (await (await conn.execute("INSERT INTO agents (human_id, name) VALUES (%s, 'fixer') RETURNING id",
                                           (human,))).fetchone())["id"]
        endpoint = (await (await conn.execute("""
            INSERT INTO endpoints (agent_id, slug, credential_hash, credential_prefix, scope_verbs, scope_queues)
            VALUES (%s, 'oldslug', %s, 'sbk_old', ARRAY['claim'], ARRAY['inbox']) RETURNING id""",
                                              (agent, b"\x01" * 32))).fetchone())["id"]
        sink = (await (await conn.execute("""
            INSERT INTO notification_sinks (owner_human_id, name, kind, url, events)
            VALUES (%s, 'ops', 'generic', 'https://hooks.example.com/s', ARRAY['queue_stuck']) RETURNING id""",
                                          (human,))).fetchone())["id"]
        await conn.execute("INSERT INTO sink_stuck_queues (sink_id, endpoint_id, queue) VALUES (%s, %s, 'inbox')",
                           (sink, endpoint))
        assert "0030_team_sinks.sql" in await migrate.migrate(conn)
        cur = await conn.execute("SELECT sink_id, endpoint_id, team_id, queue FROM sink_stuck_queues")
        rows = await cur.fetchall()
        assert rows == [{"sink_id": sink, "endpoint_id": endpoint, "team_id": None, "queue": "inbox"}]
        # The same episode cannot be remembered twice, nor a row name neither an endpoint nor a team.
        for statement, params in (
                ("INSERT INTO sink_stuck_queues (sink_id, endpoint_id, queue) VALUES (%s, %s, 'inbox')",
                 (sink, endpoint)),
                ("INSERT INTO sink_stuck_queues (sink_id, queue) VALUES (%s, 'inbox')", (sink,))):
            try:
                await conn.execute(statement, params)
            except (psycopg.errors.UniqueViolation, psycopg.errors.CheckViolation):
                continue
            raise AssertionError(statement)
    finally:
        await conn.close()


# ------------------------------------------------------------------------- a team's own sinks (D60)

async def test_a_team_sink_hears_the_team_dead_letters_stuck_queues_and_digest_whoever_manages_it(core):
    fleet = await make_fleet(core, members=3)
    owner, admin, member = fleet.humans
    other = await make_fleet(core, members=1)  # another team, with a sink of its own
    now = datetime.now(UTC) + timedelta(seconds=20)
    fields = {"kind": "generic", "events": ["dead_letter", "queue_stuck", "digest"], "stuck_minutes": 10,
              "digest_hour": now.hour, "timezone": "UTC"}
    sink = await sinks.add_for_team(core, admin, fleet.slug, url="https://hooks.example.com/team", name="team",
                                    **fields)
    assert sink["owner"] == {"team": fleet.slug}
    theirs = await sinks.add_for_team(core, other.humans[0], other.slug, url="https://hooks.example.com/other",
                                      **fields)
    # The admin who added it is made a plain member: a team's sink does not depend on who manages the team.
    await teams.set_role(core, owner, fleet.slug, admin.name, "member")

    dead = await fleet.push("dead", max_attempts=1)
    await todos.claim(core, fleet.endpoints[2], dead["id"])
    await todos.fail(core, fleet.endpoints[2], dead["id"], summary="no")
    waiting = await fleet.push("waiting")
    await sql(core, "UPDATE todos SET updated_at = now() - interval '11 minutes' WHERE id = %s", (waiting["id"],))
    own, _ = await todos.create(core, endpoint_id=fleet.endpoints[0].endpoint_id, queue="own", title="mine",
                                max_attempts=1)
    await todos.claim(core, fleet.endpoints[0], own["id"])
    await todos.fail(core, fleet.endpoints[0], own["id"], summary="no")  # an endpoint todo: not the team's
    await sinks.tick(core, now=now)

    got = await sql(core, "SELECT sink_id::text AS sink_id, event, body FROM sink_outbox ORDER BY id")
    mine = [r for r in got if r["sink_id"] == sink["sink_id"]]
    assert sorted(r["event"] for r in mine) == ["dead_letter", "digest", "queue_stuck"]
    by_event = {r["event"]: r["body"] for r in mine}
    assert by_event["dead_letter"]["todo_id"] == dead["id"] and by_event["dead_letter"]["team"] == fleet.slug
    assert by_event["queue_stuck"]["queue"] == fleet.label and by_event["queue_stuck"]["team"] == fleet.slug
    assert [(q["team"], q["queue"], q["pushed"], q["dead_lettered"]) for q in by_event["digest"]["queues"]] == [
        (fleet.slug, fleet.label, 2, 1)]
    # The other team's sink heard nothing of this team (its digest lists no queue).
    assert [(r["event"], r["body"].get("queues")) for r in got if r["sink_id"] == theirs["sink_id"]] == [
        ("digest", [])]
    # Removing the team's sink takes its episode with it; the team's deletion takes the team's sinks.
    await sinks.remove_for_team(core, owner, fleet.slug, sink["sink_id"])
    assert await sql(core, "SELECT * FROM sink_stuck_queues WHERE sink_id = %s", (uuid.UUID(sink["sink_id"]),)) == []
    await teams.delete(core, other.humans[0], other.slug)
    assert await sql(core, "SELECT * FROM notification_sinks") == []


async def test_a_team_sink_is_changed_by_its_owners_and_admins_and_read_by_its_members(core):
    fleet = await make_fleet(core, members=3)
    owner, admin, member = fleet.humans
    outsider = await humans.add(core, f"out-{uuid.uuid4().hex[:6]}")
    sink = await sinks.add_for_team(core, owner, fleet.slug, kind="slack", url="https://hooks.example.com/t?k=secret")
    assert sink["url"] == "https://hooks.example.com/t?k=secret"  # shown once to who typed it
    [listed] = await sinks.list_for_team(core, member, fleet.slug)
    assert listed["url"] == "https://hooks.example.com/t?redacted" and listed["owner"] == {"team": fleet.slug}
    assert await sinks.deliveries_for_team(core, member, fleet.slug) == []
    assert await sinks.list_for_owner(core, owner) == []  # a team's sink is not its owner's own

    for change in (lambda: sinks.add_for_team(core, member, fleet.slug, kind="slack", url="https://x.example.com/"),
                   lambda: sinks.remove_for_team(core, member, fleet.slug, sink["sink_id"]),
                   lambda: sinks.enable_for_team(core, member, fleet.slug, sink["sink_id"]),
                   lambda: sinks.get_row_for_team(core, member, fleet.slug, sink["sink_id"])):
        try:
            await change()
        except Forbidden as exc:
            assert exc.argument == "team"
            continue
        raise AssertionError("a plain member changed a team's sink")
    # Outside the team: the answer for a team that does not exist, whatever the call.
    for call in (lambda t: sinks.list_for_team(core, outsider, t),
                 lambda t: sinks.remove_for_team(core, outsider, t, sink["sink_id"]),
                 lambda t: sinks.deliveries_for_team(core, outsider, t)):
        errors = []
        for team in (fleet.slug, "no-such-team"):
            try:
                await call(team)
            except NotFound as exc:
                errors.append((exc.code, exc.message, exc.argument))
        assert len(errors) == 2 and errors[0] == errors[1]
    # Another human's own-sink calls do not reach a team's sink.
    try:
        await sinks.remove(core, owner, sink["sink_id"])
        raise AssertionError("a team's sink removed as a human's own")
    except NotFound:
        pass
    # The ceiling is per team, and a bad field is named before anything is stored.
    try:
        await sinks.add_for_team(core, admin, fleet.slug, kind="slack", url="https://x.example.com/", digest_hour=24)
        raise AssertionError("digest_hour 24 accepted")
    except Invalid as exc:
        assert exc.argument == "digest_hour"
    for i in range(sinks.MAX_PER_OWNER - 1):
        await sinks.add_for_team(core, admin, fleet.slug, kind="generic", url=f"https://x.example.com/{i}")
    try:
        await sinks.add_for_team(core, admin, fleet.slug, kind="generic", url="https://x.example.com/last")
        raise AssertionError("the ceiling did not hold")
    except Conflict:
        pass
    await sinks.add(core, admin, kind="generic", url="https://x.example.com/own")  # the admin's own still can
    assert len(await sinks.list_for_team(core, member, fleet.slug)) == sinks.MAX_PER_OWNER
    await sinks.enable_for_team(core, admin, fleet.slug, sink["sink_id"])
    await sinks.remove_for_team(core, admin, fleet.slug, sink["sink_id"])
