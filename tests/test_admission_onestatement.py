"""claim_next of one todo on one policed queue as ONE autocommit statement (migrations 0022 and 0023,
docs/decisions.md D40): `switchboard_admission_hold` locks a shard and judges before any todo is read,
the claim takes at most the one todo admitted, and the statement charges exactly what it took on the
shard it holds. One statement and one round trip: no BEGIN, no pipeline, no COMMIT."""

from __future__ import annotations

import os
import tempfile

import psycopg
import pytest

from core_world import check, make_world, sql
from switchboard.core import admission, todos
from switchboard.core.errors import Deferred
from switchboard.core.queries import Q
from team_world import make_fleet


class Traced:
    """The frontend messages of every connection the core checks out, from libpq's trace."""

    def __init__(self, core, monkeypatch) -> None:
        self.core = core
        self.fd, self.path = tempfile.mkstemp(prefix="pgtrace-")
        getconn, putconn = core.pool.getconn, core.pool.putconn

        async def traced_get(*a, **kw):
            conn = await getconn(*a, **kw)
            conn.pgconn.trace(self.fd)
            return conn

        async def traced_put(conn, *a, **kw):
            conn.pgconn.untrace()
            return await putconn(conn, *a, **kw)

        monkeypatch.setattr(core.pool, "getconn", traced_get)
        monkeypatch.setattr(core.pool, "putconn", traced_put)

    def sent(self) -> list[str]:
        """The message types the client sent (Parse, Bind, Execute, Sync, Query...)."""
        os.fsync(self.fd)
        with open(self.path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            parts = line.split("\t")
            i = next((k for k, p in enumerate(parts) if p == "F"), None)
            if i is not None and len(parts) > i + 2:
                out.append(parts[i + 2].split(" ")[0])
        return out

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


async def sent_during(core, monkeypatch, call):
    """What `call()` returns, and the message types the core's connections sent meanwhile."""
    trace = Traced(core, monkeypatch)
    try:
        got = await call()
        return got, trace.sent()
    finally:
        trace.close()


async def charged(core, policy_queue: str) -> int:
    rows = await sql(core, "SELECT switchboard_admission_used(p.id, switchboard_window_start(p.window_period,"
                           " p.window_tz, p.window_start_minute, p.window_weekday, now())) AS n"
                           " FROM admission_policies p WHERE queue = %s", (policy_queue,))
    return sum(r["n"] for r in rows)


async def test_a_policed_claim_next_is_one_statement_in_one_round_trip(core, monkeypatch):
    """Before migration 0022 the fast path sent BEGIN, `admit`, the claim and COMMIT (four statements,
    two round trips); now one statement, charged exactly."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=100, max_claims_per_window=1000)
    await w.todo()
    assert await todos.claim_next(core, w.e1) is not None  # marks the endpoint policed
    t = await w.todo()
    got, sent = await sent_during(core, monkeypatch, lambda: todos.claim_next(core, w.e1))
    assert got is not None and got.todo["id"] == t["id"]
    assert (got.admission["used"], got.admission["in_flight"]) == (2, 2)
    statements = [m for m in sent if m in ("Bind", "Query")]
    assert len(statements) == 1, sent
    assert sent.count("Sync") + sent.count("Query") == 1, sent  # one round trip
    assert await charged(core, "inbox") == 2
    assert await todos.claim_next(core, w.e1) is None  # admitted, nothing to take: nothing charged
    assert await charged(core, "inbox") == 2
    assert await check(core) == []


async def test_the_team_claim_is_one_statement_and_charges_once(core, monkeypatch):
    f = await make_fleet(core, endpoints=2)
    await admission.set_policy(core, f.humans[0], f.label, max_in_flight=100, max_claims_per_window=1000)
    for _ in range(3):
        await f.push()
    ep = f.endpoints[1]
    assert await todos.claim_next(core, ep, queue=f.label) is not None
    got, sent = await sent_during(core, monkeypatch, lambda: todos.claim_next(core, ep, queue=f.label))
    assert got is not None and got.admission["used"] == 2
    assert len([m for m in sent if m in ("Bind", "Query")]) == 1, sent
    assert await charged(core, f.label) == 2
    assert await check(core) == []


async def test_the_admission_runs_before_any_todo_is_read(core):
    """EXPLAIN: the claim's scans sit below a One-Time Filter on the InitPlan that reads `adm` (the
    admission function), so the shard is locked and judged before the candidate search starts."""
    f = await make_fleet(core, endpoints=1)
    await admission.set_policy(core, f.humans[0], f.label, max_in_flight=100)
    ep = f.endpoints[0]
    params, _ = todos._claim_params(core, ep, None, None, None)
    for sql_text in (Q.admission.claim_next_team_admitted, Q.admission.claim_next_own_admitted):
        async with core.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("EXPLAIN (COSTS OFF) " + sql_text, {**params, "admitted": True, "queue": f.label})
            plan = "\n".join(r["QUERY PLAN"] for r in await cur.fetchall())
        lines = plan.splitlines()
        gate = next(i for i, ln in enumerate(lines) if "One-Time Filter" in ln and "InitPlan" in ln)
        depth = len(lines[gate - 1]) - len(lines[gate - 1].lstrip())
        below = []
        for ln in lines[gate + 1:]:
            if ln.strip() and len(ln) - len(ln.lstrip()) <= depth and "->" in ln:
                break
            below.append(ln)
        assert any("todos" in ln for ln in below), plan  # every todo scan is under the gate
        scans = [i for i, ln in enumerate(lines) if " on todos" in ln and "Scan" in ln]
        first_claim_scan = min(i for i in scans if i > gate) if any(i > gate for i in scans) else None
        assert first_claim_scan is not None, plan
        assert "switchboard_admission_hold" in plan


async def test_a_refusal_still_reports_why_and_changes_nothing(core):
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_claims_per_window=1,
                               window_spec=admission.window("day"))
    a, b = await w.todo(), await w.todo()
    assert await todos.claim_next(core, w.e1) is not None
    core.policed.note(w.e1.endpoint_id, "inbox", False)  # the one statement first, as after an admission
    claimed, deferred = await todos.take_next(core, w.e1)
    assert claimed == [] and deferred[0]["reason"] == "window_exhausted"
    assert await charged(core, "inbox") == 1
    pending = {r["id"] for r in await sql(core, "SELECT id FROM todos WHERE state = 'pending'")}
    assert pending & {a["id"], b["id"]}
    with pytest.raises(Deferred):
        await todos.claim(core, w.e1, next(iter(pending & {a["id"], b["id"]})))
    assert await check(core) == []


async def test_the_hold_charges_nothing_itself(core):
    """`switchboard_admission_hold` locks and judges only: rolled back or not, no shard is charged."""
    w = await make_world(core)
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=10)
    conn = await core.pool.getconn()
    try:
        cur = await conn.execute("SELECT * FROM switchboard_admission_hold(%s, 'inbox', 1)", (w.e1.endpoint_id,))
        (row,) = await cur.fetchall()
        assert row["verdict"] == "admitted"
        with pytest.raises(psycopg.DatabaseError) as err:  # more than the cap: refused
            await conn.execute("SELECT * FROM switchboard_admission_hold(%s, 'inbox', 11)", (w.e1.endpoint_id,))
        assert err.value.sqlstate == admission.REFUSED_SQLSTATE
    finally:
        await core.pool.putconn(conn)
    assert await charged(core, "inbox") == 0


async def test_near_a_cap_the_hold_refuses_and_the_locked_path_claims(core, monkeypatch):
    """Migration 0023: the hold judges exactly no more. Near a cap (in_flight + S·B above it) it fails
    with SBA01, which rolls its statement back (shard released, nothing claimed or charged), and
    claim_next judges again on the locked path, which admits while the cap has room. Migration 0022's
    hold judged exactly in the same statement, in a subtransaction, and answered `admitted`."""
    w = await make_world(core)
    # max_in_flight 8: S = 2 shards, B = 1, so the fast path admits while in_flight + 2 <= 8.
    await admission.set_policy(core, w.h1, "inbox", endpoint=w.slug1, max_in_flight=8)
    for _ in range(9):
        await w.todo()
    for _ in range(7):
        assert await todos.claim_next(core, w.e1) is not None
    conn = await core.pool.getconn()
    try:
        with pytest.raises(psycopg.DatabaseError) as err:
            await conn.execute("SELECT * FROM switchboard_admission_hold(%s, 'inbox', 1)", (w.e1.endpoint_id,))
        assert err.value.sqlstate == admission.REFUSED_SQLSTATE
        await conn.rollback()
        locked = await conn.execute("SELECT count(*) AS n FROM admission_shards s JOIN admission_policies p"
                                    " ON p.id = s.policy_id WHERE p.queue = 'inbox'")
        assert (await locked.fetchone())["n"] == 8
    finally:
        await core.pool.putconn(conn)
    assert await charged(core, "inbox") == 7
    core.policed.note(w.e1.endpoint_id, "inbox", False)  # the one statement first, as after an admission
    got, sent = await sent_during(core, monkeypatch, lambda: todos.claim_next(core, w.e1))
    assert got is not None and got.admission["in_flight"] == 8
    assert sent.count("Sync") + sent.count("Query") >= 2, sent  # the failed statement, then the locked path
    claimed, deferred = await todos.take_next(core, w.e1)
    assert claimed == [] and deferred[0]["reason"] == "in_flight_full"
    assert await charged(core, "inbox") == 8
    assert await check(core) == []
