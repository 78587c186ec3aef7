"""Statements that lock the same rows take them in one order, so none of them deadlocks another.

- A sender settling a delivery and a human removing its hook (or sink): the removal locks the hook
  and then deletes its outbox rows (ON DELETE CASCADE); the sender's `record_attempt` settles the
  outbox row and the hook's health. When the sender took the outbox row first and the hook second,
  the two waited for each other, PostgreSQL aborted one after its deadlock timeout, and the API
  answered the removal 503.
- A revocation and a batched close of the same endpoint's todos: both lock the todos in id order
  (byte order, the ids' collation). The revocation locked them in the order it found them.
- A claim over several team queues share-locks its first grant, the endpoint, then its next grants;
  an ungrant locks every grant of the endpoint in that order before it deletes one and updates the
  endpoint. It used to delete a later grant first and then wait for the endpoint.
- A claim over own and team queues share-locks the endpoint before it locks any of its own todos, as
  a revocation updates the endpoint and then locks the todos. It used to lock an own todo first.
- A transition whose trigger queues a notification for a hook (or sink) that a human is removing:
  the trigger reads the hooks it queues rows for with the lock the outbox's foreign key takes, so it
  waits for the removal and then skips the hook. It used to read the hook unlocked and fail its
  foreign-key check once the removal committed (23503), rolling back the transition itself. The
  same for the sink tick's rows and an intake's writes (docs/decisions.md D66).
- Keyed bulk pushes of one endpoint take turns; a fleet's group claim locks its grants in key order;
  a team's deletion locks its members, grants and todos before its cascades run; the sink tick locks
  the teams it watches before their sinks; sign-in counts lock their keys in key order, and their
  prune skips held rows.

Each interleaving is forced: a third transaction holds the row that both wait for (or, for a
removal, has deleted it and not yet committed), so each statement has taken whatever it takes before
that row comes free.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from core_world import make_world, sql
from switchboard.core import (
    admission,
    endpoints,
    hooks,
    humans,
    intakes,
    producer,
    secrets,
    signin_failures,
    sinks,
    teams,
    todos,
)
from switchboard.core.errors import NotFound, Unauthorized
from switchboard.core.queries import Q
from team_world import make_fleet


async def waiting_for_locks(uri: str, n: int, timeout: float = 10.0) -> None:
    """Until `n` sessions of this database wait for a lock."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
        while True:
            cur = await conn.execute("SELECT count(*) FROM pg_stat_activity"
                                     " WHERE datname = current_database() AND wait_event_type = 'Lock'")
            if (await cur.fetchone())[0] >= n:
                return
            assert time.monotonic() < deadline, f"fewer than {n} sessions wait for a lock"
            await asyncio.sleep(0.02)


async def holding(uri: str, lock_sql: str, params, *tasks_and_waits):
    """Hold `lock_sql`'s lock while each (start, waiters) step starts its task and waits until that
    many sessions wait for a lock; then release it and return the tasks' results."""
    started = []
    async with await psycopg.AsyncConnection.connect(uri) as holder:
        await holder.execute(lock_sql, params)
        for start, waiters in tasks_and_waits:
            started.append(asyncio.create_task(start()))
            await waiting_for_locks(uri, waiters)
        await holder.rollback()
    return await asyncio.wait_for(asyncio.gather(*started), 15)


async def test_a_delivery_settled_while_its_hook_is_removed_does_not_deadlock(own_core):
    core = own_core
    w = await make_world(core)
    hook, _ = await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in")
    await w.todo()
    taken = await hooks.claim_due(core, limit=1, per_hook=1, lease_seconds=30)
    assert len(taken) == 1
    row = taken[0]

    settled = []

    async def settle():
        settled.append(await hooks.record_attempt(
            core, outbox_id=row["id"], attempt=row["attempts"], started_at=datetime.now(UTC),
            duration_ms=3, status_code=None, result="network", error="refused", state="pending",
            retry_in=60))

    await holding(core.uri, "SELECT 1 FROM hook_outbox WHERE id = %s FOR UPDATE", (row["id"],),
                  (settle, 1), (lambda: hooks.remove(core, w.h1, hook["hook_id"], slug=w.slug1), 2))
    assert settled == [True]  # settled first, on the hook as it was; then the hook went
    assert await sql(core, "SELECT id FROM notify_hooks") == []
    assert await sql(core, "SELECT id FROM hook_outbox") == []


async def test_a_message_settled_while_its_sink_is_removed_does_not_deadlock(own_core):
    core = own_core
    w = await make_world(core)
    sink = (await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/a", events=["dead_letter"]))
    t = await w.todo(max_attempts=1)
    await todos.claim(core, w.e1, t["id"])
    assert (await todos.fail(core, w.e1, t["id"], summary="gave up"))["dead_letter"]
    taken = await sinks.claim_due(core, limit=1, lease_seconds=30)
    assert len(taken) == 1
    row = taken[0]

    settled = []

    async def settle():
        settled.append(await sinks.record_attempt(core, outbox_id=row["id"], status_code=500, result="5xx",
                                                  error="500", state="pending", retry_in=60))

    await holding(core.uri, "SELECT 1 FROM sink_outbox WHERE id = %s FOR UPDATE", (row["id"],),
                  (settle, 1), (lambda: sinks.remove(core, w.h1, sink["sink_id"]), 2))
    assert settled == [True]
    assert await sql(core, "SELECT id FROM notification_sinks") == []
    assert await sql(core, "SELECT id FROM sink_outbox") == []


async def test_a_revocation_during_a_batched_complete_does_not_deadlock(own_core):
    """The batch locks its todos in id order and waits for the first, held here. The revocation's
    scan met the todos in creation order (or its reverse, by index): with the todo of the lowest id
    created neither first nor last, it locked another todo first and then waited for the lowest,
    which the batch took next and then waited for the one the revocation held."""
    core = own_core
    w = await make_world(core)
    made = []
    while len(made) < 3 or min(made) in (made[0], made[-1]):
        made.append((await w.todo())["id"])
        assert len(made) < 60
    for todo_id in made:
        await todos.claim(core, w.e1, todo_id)
    lowest = min(made)
    outcome = {}

    async def close():
        outcome["batch"] = await todos.complete_batch(core, w.e1, [{"id": i, "summary": "done"} for i in made])

    async def revoke():
        outcome["revoked"] = await endpoints.revoke(core, w.h1, w.slug1)

    await holding(core.uri, "SELECT 1 FROM todos WHERE id = %s FOR UPDATE", (lowest,), (close, 1), (revoke, 2))
    assert [r["ok"] for r in outcome["batch"]] == [True] * len(made)  # the batch went first
    states = await sql(core, "SELECT state FROM todos WHERE id = ANY(%s)", (made,))
    assert {r["state"] for r in states} == {"done"}


async def test_an_ungrant_during_a_claim_over_two_team_queues_does_not_deadlock(own_core):
    """The claim (queues a and b) holds a's grant and the endpoint (share) and waits for b's grant;
    the ungrant of b held b's grant and waited to update the endpoint. A third session share-locks the
    endpoint so that the ungrant waits there while the claim, a sharer too, passes it."""
    core = own_core
    fleet = await make_fleet(core, members=1, endpoints=0, queue="a")
    label_b = fleet.label[:-1] + "b"
    caller = await fleet.vend(0, queues=[fleet.label, label_b])
    todo = await fleet.push()
    gone, got = await holding(
        core.uri, "SELECT 1 FROM endpoints WHERE id = %s FOR SHARE", (caller.endpoint_id,),
        (lambda: teams.ungrant(core, fleet.humans[0], fleet.slug, label_b, fleet.ep_slugs[0]), 1),
        (lambda: todos.claim_next(core, caller), 2))
    assert got is not None and got.todo["id"] == todo["id"]
    assert gone["granted"] is False


async def test_a_revocation_during_a_claim_over_own_and_team_queues_does_not_deadlock(own_core):
    """The revocation updates the endpoint and waits for the own todo of lowest id, held here; the
    claim took the other own todo and then waited to share-lock the endpoint."""
    core = own_core
    fleet = await make_fleet(core, members=1, endpoints=1)  # the endpoint has `own` and the team queue
    caller = fleet.endpoints[0]
    own = sorted([(await todos.create(core, endpoint_id=caller.endpoint_id, queue="own", title=f"o{i}"))[0]["id"]
                  for i in range(2)])

    async def claim():
        try:
            return await todos.claim_next(core, caller)
        except Unauthorized:  # the revocation committed first: refused, as any later call is
            return None

    revoked, got = await holding(
        core.uri, "SELECT 1 FROM todos WHERE id = %s FOR UPDATE", (own[0],),
        (lambda: endpoints.revoke(core, fleet.humans[0], fleet.ep_slugs[0]), 1),
        (claim, 2))
    assert got is None and revoked["state"] == "revoked"  # nothing claimable once revoked
    states = await sql(core, "SELECT state FROM todos WHERE id = ANY(%s)", (own,))
    assert {r["state"] for r in states} == {"failed"}


async def while_removed(uri: str, delete_sql: str, params, start):
    """Run `start` while another transaction has deleted a row (`delete_sql`) and not yet committed;
    commit the delete once `start` waits for it, and return what `start` returned."""
    async with await psycopg.AsyncConnection.connect(uri) as remover:
        await remover.execute(delete_sql, params)
        task = asyncio.create_task(start())
        await waiting_for_locks(uri, 1)
        await remover.commit()
    return await asyncio.wait_for(task, 15)


async def test_a_complete_while_its_hook_is_removed_commits_without_the_hooks_row(own_core):
    core = own_core
    w = await make_world(core)
    hook, _ = await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in")
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    done = await while_removed(core.uri, "DELETE FROM notify_hooks WHERE id = %s", (hook["hook_id"],),
                               lambda: todos.complete(core, w.e1, t["id"], summary="ok"))
    assert done["state"] == "done"
    assert await sql(core, "SELECT id FROM hook_outbox") == []
    assert [r["outcome"] for r in await sql(core, "SELECT outcome FROM todo_attempts WHERE todo_id = %s",
                                             (t["id"],))] == ["completed"]


async def test_a_push_while_its_hook_is_removed_commits_without_the_hooks_rows(own_core):
    core = own_core
    w = await make_world(core)
    hook, _ = await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in")
    t = await while_removed(core.uri, "DELETE FROM notify_hooks WHERE id = %s", (hook["hook_id"],), w.todo)
    assert t["state"] == "pending"
    assert await sql(core, "SELECT id FROM hook_outbox") == []


async def test_a_team_push_while_the_teams_hook_is_removed_commits_without_the_hooks_rows(own_core):
    core = own_core
    fleet = await make_fleet(core, members=1, endpoints=1)
    hook, _ = await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url="https://hooks.example.com/in")
    first = await fleet.push("before")
    assert len(await sql(core, "SELECT id FROM hook_outbox")) == 2  # created and ready
    await todos.claim(core, fleet.endpoints[0], first["id"])
    done = await while_removed(core.uri, "DELETE FROM notify_hooks WHERE id = %s", (hook["hook_id"],),
                               lambda: todos.complete(core, fleet.endpoints[0], first["id"]))
    assert done["state"] == "done"
    hook2, _ = await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url="https://hooks.example.com/in")
    t = await while_removed(core.uri, "DELETE FROM notify_hooks WHERE id = %s", (hook2["hook_id"],),
                            lambda: fleet.push("during"))
    assert t["state"] == "pending"
    assert await sql(core, "SELECT id FROM hook_outbox") == []


async def test_a_dead_letter_while_its_sink_is_removed_commits_without_the_sinks_message(own_core):
    core = own_core
    w = await make_world(core)
    mine = await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/a", events=["dead_letter"])
    kept = await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/b", events=["dead_letter"])
    t = await w.todo(max_attempts=1)
    await todos.claim(core, w.e1, t["id"])
    failed = await while_removed(core.uri, "DELETE FROM notification_sinks WHERE id = %s", (mine["sink_id"],),
                                 lambda: todos.fail(core, w.e1, t["id"], summary="gave up"))
    assert failed["dead_letter"]
    queued = await sql(core, "SELECT sink_id FROM sink_outbox")
    assert [str(r["sink_id"]) for r in queued] == [str(kept["sink_id"])]  # the other sink still hears


async def test_a_sink_tick_while_a_sink_is_removed_queues_for_the_others(own_core):
    """The tick locks the sinks it may write for before it reads them; it used to queue the stuck
    queue's row for the sink being removed and fail its foreign-key check when the removal committed."""
    core = own_core
    w = await make_world(core)
    going = await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/a", events=["queue_stuck"])
    kept = await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/b", events=["queue_stuck"])
    await w.todo()
    later = datetime.now(UTC) + timedelta(hours=2)
    queued = await while_removed(core.uri, "DELETE FROM notification_sinks WHERE id = %s", (going["sink_id"],),
                                 lambda: sinks.tick(core, now=later))
    assert queued["queue_stuck"] == 1
    rows = await sql(core, "SELECT sink_id FROM sink_outbox UNION ALL SELECT sink_id FROM sink_stuck_queues")
    assert {str(r["sink_id"]) for r in rows} == {str(kept["sink_id"])}


@pytest.mark.parametrize("owner", ["endpoint", "team"])
async def test_keyed_bulk_pushes_naming_keys_in_other_orders_do_not_deadlock(own_core, owner):
    """Batch a inserts k1 and waits for k0, held here by an uncommitted todo; batch b names k2 then
    k1. Without turns, b inserted k2 and waited for a's k1, and a, once k0 came free, waited for b's
    k2. Keyed batches of one endpoint (or one team) now take turns, so b waits for a to finish."""
    core = own_core

    def items(*keys):
        return [{"title": k, "key": k, "queue": "work"} for k in keys]

    if owner == "endpoint":
        w = await make_world(core, queues=("work",))
        held = ("INSERT INTO todos (id, endpoint_id, queue, title, idempotency_key)"
                " VALUES ('td_held', %s, 'work', 'held', 'k0')", (w.e1.endpoint_id,))

        def push(*keys):
            return lambda: producer.push_many(core, w.h1, w.slug1, items(*keys))
    else:
        fleet = await make_fleet(core, members=1, endpoints=0)
        team_id = (await sql(core, "SELECT id FROM teams"))[0]["id"]
        held = ("INSERT INTO todos (id, team_id, queue, title, idempotency_key)"
                " VALUES ('td_held', %s, %s, 'held', 'k0')", (team_id, fleet.label))

        def push(*keys):
            return lambda: producer.push_team_many(core, fleet.humans[0], fleet.slug, items(*keys))

    a, b = await holding(core.uri, held[0], held[1], (push("k1", "k0", "k2"), 1), (push("k2", "k1"), 2))
    assert [created for _, created in a] == [True, True, True]
    assert [created for _, created in b] == [False, False]
    assert [t["id"] for t, _ in b] == [a[2][0]["id"], a[0][0]["id"]]


async def test_a_member_removed_during_a_group_claim_of_their_two_endpoints_does_not_deadlock(own_core):
    """A fleet's group claim of the member's endpoints b then a (a's id the lower) share-locked b's grant
    and b's endpoint, held here, then a's grant; the removal locks the member's grants in key order, a's
    and then b's. The group now locks the grants in key order too."""
    core = own_core
    fleet = await make_fleet(core, members=2, endpoints=0)
    one = await fleet.vend(1, agent="one", queues=[fleet.label])
    two = await fleet.vend(1, agent="two", queues=[fleet.label])
    a, b = sorted([one, two], key=lambda c: c.endpoint_id)
    for n in range(2):
        await fleet.push(f"t{n}")
    claims = [todos.FleetClaim(c, fleet.label, {"ttl": 60, "claimant": None}, None) for c in (b, a)]
    got, removed = await holding(
        core.uri, "SELECT 1 FROM endpoints WHERE id = %s FOR UPDATE", (b.endpoint_id,),
        (lambda: todos._claim_fleet(core, fleet.label, claims, False), 1),
        (lambda: teams.remove_member(core, fleet.humans[0], fleet.slug, fleet.humans[1].name), 2))
    assert got is not None and len(got[1]) == 2  # the group claimed first, one todo each
    assert removed["leases_handed_back"] == 2  # then the removal handed both back
    rows = await sql(core, "SELECT state FROM todos")
    assert [r["state"] for r in rows] == ["pending", "pending"]


async def test_a_team_deleted_while_an_agent_completes_its_todo_does_not_deadlock(own_core):
    """The complete holds its todo and waits for its open attempt, held here; the delete's cascade
    deleted the team's hook and then waited for the todo, and the complete's trigger, once the attempt
    came free, waited for that hook. The delete now locks the team's members, grants and todos first."""
    core = own_core
    fleet = await make_fleet(core, members=1, endpoints=1)
    await hooks.add_for_team(core, fleet.humans[0], fleet.slug, url="https://hooks.example.com/in",
                             events=["todo.completed"])
    t = await fleet.push()
    await todos.claim(core, fleet.endpoints[0], t["id"])
    done, deleted = await holding(
        core.uri, "SELECT 1 FROM todo_attempts WHERE todo_id = %s FOR UPDATE", (t["id"],),
        (lambda: todos.complete(core, fleet.endpoints[0], t["id"]), 1),
        (lambda: teams.delete(core, fleet.humans[0], fleet.slug), 2))
    assert done["state"] == "done"  # the complete first, with its hook's row; then the team went
    assert deleted["deleted"] is True
    assert await sql(core, "SELECT id FROM todos UNION ALL SELECT id::text FROM notify_hooks") == []


async def test_deliveries_while_their_intake_is_removed_do_not_fail_on_its_foreign_key(own_core):
    """A delivery routed while its intake's removal was in flight wrote its seen id (or its quarantined
    copy), waited for the removal and failed its foreign-key check. It now locks the intake first: a
    todo it made stands, and a delivery it would have quarantined is not_found, as the URL is now."""
    core = own_core
    w = await make_world(core)
    rule = {"name": "all", "filter": "event == 'ping'", "title": "'pinged'"}
    _, token, _ = await intakes.create(core, w.h1, name="in", endpoint=w.slug1, source="bearer", rules=[rule])
    intake = await intakes.by_token(core, token)

    def delivery(event: str, n: int) -> dict:
        return {"event": event, "delivery": f"d-{n}", "headers": {}, "body": {}}

    gone = "DELETE FROM intakes WHERE id = %s"
    out = await while_removed(core.uri, gone, (intake["id"],),
                              lambda: intakes.deliver(core, intake, delivery("ping", 1)))
    assert out["status"] == "accepted"
    assert [r["title"] for r in await sql(core, "SELECT title FROM todos")] == ["pinged"]

    _, token, _ = await intakes.create(core, w.h1, name="in2", endpoint=w.slug1, source="bearer", rules=[rule])
    intake = await intakes.by_token(core, token)
    with pytest.raises(NotFound):
        await while_removed(core.uri, gone, (intake["id"],),
                            lambda: intakes.deliver(core, intake, delivery("pong", 2)))  # no rule: quarantine
    assert await sql(core, "SELECT id FROM intake_quarantine UNION ALL SELECT 0 FROM intake_seen") == []


async def test_the_sign_in_prune_skips_rows_a_sign_in_holds(own_core):
    """A sign-in's success deletes its (account, address) row and updates its address row; the prune
    deleted long-quiet rows in the order it met them, so the two could each hold one of a pair and
    wait for the other. The prune now skips a held row (it goes another time), and a success locks
    its two rows in key order, as the judging of an attempt does."""
    core = own_core
    pair, address = ("acct|10.0.0.1", 3), ("10.0.0.1", 10)
    assert await signin_failures.attempt(core, [pair, address], max_wait=60, forget=3600) == 0
    await sql(core, "UPDATE signin_failures SET last_at = now() - interval '2 hours' RETURNING 1")
    held = secrets.sha256(address[0])
    async with await psycopg.AsyncConnection.connect(core.uri) as holder:
        await holder.execute("SELECT 1 FROM signin_failures WHERE key_hash = %s FOR UPDATE", (held,))
        async with core.pool.connection() as conn:  # would wait for the held row before
            await asyncio.wait_for(conn.execute(Q.signin_failures.prune, {"forget": 3600}), 5)
        await holder.rollback()
    left = await sql(core, "SELECT key_hash FROM signin_failures")
    assert [bytes(r["key_hash"]) for r in left] == [held]
    await signin_failures.succeed(core, pair, address)  # its two rows locked in key order, one of them gone
    left = await sql(core, "SELECT key_hash, failures FROM signin_failures")
    assert [(bytes(r["key_hash"]), r["failures"]) for r in left] == [(held, 0)]  # the count taken back


async def test_a_sink_tick_while_a_team_is_deleted_does_not_deadlock(own_core):
    """The tick waits to record the team's stuck queue, behind an uncommitted copy of that row held here
    (written without foreign-key checks, so it holds neither the team nor the sink). It held the team's
    sink and waited for the team through the row's foreign key, while the deletion held the team and
    waited for the sink. The tick now locks the teams it watches before their sinks."""
    core = own_core
    fleet = await make_fleet(core, members=1, endpoints=1)
    sink = await sinks.add_for_team(core, fleet.humans[0], fleet.slug, kind="slack",
                                    url="https://hooks.example.com/t", events=["queue_stuck"])
    await fleet.push()
    team_id = (await sql(core, "SELECT id FROM teams"))[0]["id"]
    later = datetime.now(UTC) + timedelta(hours=2)
    async with await psycopg.AsyncConnection.connect(core.uri) as holder:
        await holder.execute("SET LOCAL session_replication_role = replica")
        await holder.execute("INSERT INTO sink_stuck_queues (sink_id, team_id, queue, since)"
                             " VALUES (%s, %s, %s, now())", (sink["sink_id"], team_id, fleet.label))
        tick = asyncio.create_task(sinks.tick(core, now=later))
        await waiting_for_locks(core.uri, 1)
        delete = asyncio.create_task(teams.delete(core, fleet.humans[0], fleet.slug))
        await waiting_for_locks(core.uri, 2)
        await holder.rollback()
    queued, deleted = await asyncio.wait_for(asyncio.gather(tick, delete), 15)
    assert queued["queue_stuck"] == 1 and deleted["deleted"] is True  # the tick first, then the team went
    assert await sql(core, "SELECT 1 FROM notification_sinks UNION ALL SELECT 1 FROM sink_stuck_queues") == []


async def test_a_team_policy_set_while_the_team_is_deleted_is_not_found(own_core):
    """The policy's insert checked its foreign key on the team being deleted, waited, and failed (23503)
    when the deletion committed: an internal error. The write now reads the team (and the human's
    manager role) with that lock first, so it waits and then writes nothing: not_found, as for a team
    that does not exist."""
    core = own_core
    fleet = await make_fleet(core, members=1, endpoints=0)
    team_id = (await sql(core, "SELECT id FROM teams"))[0]["id"]
    gone = "DELETE FROM teams WHERE id = %s"
    with pytest.raises(NotFound) as raised:
        await while_removed(core.uri, gone, (team_id,), lambda: admission.set_policy(
            core, fleet.humans[0], fleet.label, max_in_flight=3))
    assert (raised.value.message, raised.value.argument) == ("team not found", "team")
    fleet = await make_fleet(core, members=1, endpoints=0)
    team_id = (await sql(core, "SELECT id FROM teams"))[0]["id"]
    with pytest.raises(NotFound):
        await while_removed(core.uri, gone, (team_id,), lambda: admission.set_paused(
            core, fleet.humans[0], fleet.label, True))
    assert await sql(core, "SELECT id FROM admission_policies") == []


async def test_member_and_grant_changes_while_the_team_is_deleted_are_not_found(own_core):
    """Adding a member or granting a queue inserted a row whose foreign key waited for the team's
    deletion and failed when it committed (23503). Every change of a team's members, roles and grants
    now locks the team's row first, as the deletion does, and a team gone meanwhile is not_found."""
    core = own_core
    await humans.add(core, "newcomer")
    fleet = await make_fleet(core, members=1, endpoints=1, queue="a")
    team_id = (await sql(core, "SELECT id FROM teams"))[0]["id"]
    gone = "DELETE FROM teams WHERE id = %s"
    with pytest.raises(NotFound) as raised:
        await while_removed(core.uri, gone, (team_id,),
                            lambda: teams.add_member(core, fleet.humans[0], fleet.slug, "newcomer"))
    assert (raised.value.message, raised.value.argument) == ("team not found", "team")
    fleet = await make_fleet(core, members=1, endpoints=1, queue="a")
    team_id = (await sql(core, "SELECT id FROM teams"))[0]["id"]
    label_b = fleet.label[:-1] + "b"
    with pytest.raises(NotFound):
        await while_removed(core.uri, gone, (team_id,),
                            lambda: teams.grant(core, fleet.humans[0], fleet.slug, label_b, fleet.ep_slugs[0]))
    assert await sql(core, "SELECT 1 FROM team_members UNION ALL SELECT 1 FROM team_grants") == []


async def test_a_team_policy_set_by_a_manager_demoted_meanwhile_is_not_found(own_core):
    """The role was checked before the write; a demotion committed between the two let a member write
    the team's policy. The write now reads the human's membership with a share lock: it waits for the
    demotion held here, reads its outcome, and writes nothing."""
    core = own_core
    fleet = await make_fleet(core, members=2, endpoints=0)  # humans[1] is an admin
    demote = ("UPDATE team_members SET role = 'member' WHERE human_id = %s",
              (fleet.humans[1].human_id,))
    async with await psycopg.AsyncConnection.connect(core.uri) as holder:
        await holder.execute(*demote)
        setting = asyncio.create_task(admission.set_policy(core, fleet.humans[1], fleet.label, max_in_flight=3))
        await waiting_for_locks(core.uri, 1)
        await holder.commit()
    with pytest.raises(NotFound):
        await asyncio.wait_for(setting, 15)
    assert await sql(core, "SELECT id FROM admission_policies") == []
