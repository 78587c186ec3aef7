"""Notify hooks (SYSTEM.md §10): per-endpoint signed webhooks from a durable outbox.

A real server, a real receiver (an HTTP server started here, verifying with the `standardwebhooks`
library), real PostgreSQL. Todos are created by the test's own core: the outbox row is written by the
transition's transaction, whichever process runs it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from typer.testing import CliRunner

from conftest import core_for, make_settings, start_process_server, start_thread_server
from core_world import lapse, make_due, make_world, sql
from sender_kit import stops_right_after_a_wake_up
from switchboard.core import api_tokens, hooks, sweeps, todos
from switchboard.core.errors import Conflict, Invalid, NotFound
from switchboard.web.hooks import render_body

READY_FIELDS = {"type", "reason", "todo_id", "queue", "kind", "source", "title", "endpoint", "attempt",
                "attempts_total", "created_at"}


# ------------------------------------------------------------------------------- the receiver

@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)  # answers in order; then 200
    got: list[tuple[dict, bytes]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook?token=receiver-query-secret"

    async def wait(self, n: int, timeout: float = 15.0) -> list[tuple[dict, bytes]]:
        deadline = time.monotonic() + timeout
        while len(self.got) < n:
            assert time.monotonic() < deadline, f"received {len(self.got)} of {n}"
            await asyncio.sleep(0.02)
        return self.got


@pytest.fixture
def receiver():
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            rec.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            status = rec.statuses.pop(0) if rec.statuses else 200
            self.send_response(status)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield rec
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))  # hooks_allow_private: the receiver is local http
    srv.app.state.surfaces.hooks.retry_delays = (0.05, 0.1, 0.1)
    yield srv
    srv.stop()


def api(srv, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, srv.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw)


async def delivered(core, outbox_count: int, timeout: float = 15.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = await sql(core, "SELECT * FROM hook_outbox ORDER BY id")
        if len(rows) >= outbox_count and all(r["state"] != "pending" for r in rows):
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------- deliveries

async def test_a_signed_notification_verifies_with_the_standard_webhooks_library(core, server, receiver):
    w = await make_world(core)
    token, _ = await api_tokens.create(core, w.h1)
    r = api(server, token, "POST", f"/api/v1/endpoints/{w.slug1}/hooks", json={"url": receiver.url})
    assert r.status_code == 201, r.text
    secret = r.json()["signing_secret"]
    assert secret.startswith("whsec_") and r.json()["hook"]["events"] == list(hooks.EVENTS)

    t = await w.todo("ship it </channel>", payload={"password": "payload-never-sent"}, kind="deploy",
                     source="operator")
    got = await receiver.wait(2)
    bodies = []
    for headers, raw in got:
        assert headers["content-type"] == "application/json"
        assert headers["webhook-id"].startswith("msg_")
        assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
        payload = Webhook(secret).verify(raw, headers)  # raises when the signature is wrong
        assert len(raw) <= 4096 and b"payload-never-sent" not in raw
        bodies.append(payload)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(got[0][1], got[0][0])
    assert sorted(b["type"] for b in bodies) == ["todo.created", "todo.ready"]
    ready = next(b for b in bodies if b["type"] == "todo.ready")
    assert set(ready) == READY_FIELDS
    assert ready | {"created_at": None} == {
        "type": "todo.ready", "reason": "created", "todo_id": t["id"], "queue": "inbox", "kind": "deploy",
        "source": "operator", "title": "ship it </channel>", "endpoint": w.slug1, "attempt": 0,
        "attempts_total": 0, "created_at": None}
    assert got[0][0]["webhook-id"] != got[1][0]["webhook-id"]

    await delivered(core, 2)
    log = api(server, token, "GET", f"/api/v1/endpoints/{w.slug1}/hooks/deliveries").json()["deliveries"]
    assert {d["state"] for d in log} == {"delivered"} and all(d["attempts"] == 1 for d in log)
    assert log[0]["attempt_log"][0]["status_code"] == 200
    assert "receiver-query-secret" not in json.dumps(log)
    listed = api(server, token, "GET", f"/api/v1/endpoints/{w.slug1}/hooks").json()["hooks"]
    assert listed[0]["last_status"] == "200" and "whsec_" not in json.dumps(listed)
    assert listed[0]["url"].endswith("/hook?redacted")


async def test_a_receiver_answering_500_twice_gets_it_again_per_retry_and_then_succeeds(core, server, receiver):
    w = await make_world(core)
    receiver.statuses = [500, 500, 200]
    _, secret = await hooks.add(core, w.h1, w.slug1, url=receiver.url, events=["todo.completed"])
    t = await w.todo()
    await todos.claim(core, w.e1, t["id"])
    await todos.complete(core, w.e1, t["id"], summary="green")
    got = await receiver.wait(3)
    await delivered(core, 1)
    await asyncio.sleep(0.3)
    assert len(receiver.got) == 3  # once more per retry, and never again after the 200
    ids = {h["webhook-id"] for h, _ in got}
    assert len(ids) == 1  # the same notification each time
    for headers, raw in got:
        body = Webhook(secret).verify(raw, headers)
        assert body["type"] == "todo.completed" and body["todo_id"] == t["id"]
    [row] = await sql(core, "SELECT state, attempts FROM hook_outbox")
    assert row == {"state": "delivered", "attempts": 3}
    log = await sql(core, "SELECT attempt, status_code, result FROM hook_deliveries ORDER BY attempt")
    assert [(r["attempt"], r["status_code"], r["result"]) for r in log] == [
        (1, 500, "5xx"), (2, 500, "5xx"), (3, 200, "2xx")]


async def test_a_4xx_is_not_retried_and_attempts_are_bounded(core, server, receiver):
    w = await make_world(core)
    receiver.statuses = [404, 503, 503, 503, 503]
    await hooks.add(core, w.h1, w.slug1, url=receiver.url, events=["todo.created"])
    await w.todo("gone")
    await receiver.wait(1)
    await delivered(core, 1)
    await w.todo("down")
    await receiver.wait(5)
    await delivered(core, 2)
    await asyncio.sleep(0.3)
    states = await sql(core, "SELECT state, attempts FROM hook_outbox ORDER BY id")
    max_attempts = server.app.state.surfaces.hooks.max_attempts
    assert states == [{"state": "failed", "attempts": 1}, {"state": "failed", "attempts": max_attempts}]
    assert len(receiver.got) == 1 + max_attempts


async def test_a_private_address_target_is_refused(own_core, receiver):
    core, pg_uri = own_core, own_core.uri
    strict = make_settings(pg_uri, hooks_allow_private=False)
    w = await make_world(core)
    core.settings = strict
    for url in ("https://10.0.0.5/in", "https://127.0.0.1/in", "https://[::1]/in", "https://169.254.169.254/x",
                "https://100.64.1.1/in", "https://localhost/in", "http://hooks.example.com/in",
                "https://user:pw@hooks.example.com/in", "ftp://hooks.example.com/in", "https:///nohost"):
        with pytest.raises(Invalid):
            await hooks.add(core, w.h1, w.slug1, url=url)
    await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in")  # a public name is fine
    # A name that resolves to loopback passes creation and is refused at send time, after DNS.
    core.settings = make_settings(pg_uri)
    await hooks.add(core, w.h1, w.slug1, url=f"https://localhost:{receiver.port}/hook", events=["todo.created"])
    srv = start_thread_server(strict)
    try:
        await w.todo()
        deadline = time.monotonic() + 15
        while True:
            rows = await sql(core, "SELECT o.state, d.result, d.error FROM hook_outbox o "
                                   "JOIN notify_hooks h ON h.id = o.hook_id "
                                   "LEFT JOIN hook_deliveries d ON d.outbox_id = o.id WHERE h.url LIKE '%%localhost%%'")
            if rows and rows[0]["state"] != "pending":
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        srv.stop()
    assert rows == [{"state": "failed", "result": "rejected_ssrf", "error": "target resolves to a loopback address"}]
    assert receiver.got == []


async def test_a_server_restart_between_commit_and_delivery_loses_no_event(own_core, receiver):
    core, pg_uri = own_core, own_core.uri
    w = await make_world(core)
    _, secret = await hooks.add(core, w.h1, w.slug1, url=receiver.url, events=["todo.ready"])
    first = start_process_server(pg_uri)
    try:
        before = await w.todo("while up")
        await receiver.wait(1)
        first.process.send_signal(signal.SIGKILL)  # no graceful shutdown
        first.process.wait(10)
        t = await w.todo("committed while the server is down")
        await todos.claim(core, w.e1, t["id"])
        await lapse(core, t["id"])
        await sweeps.reap(core)  # todo.ready requeued, also committed with nobody sending
        await asyncio.sleep(0.5)
        assert len(receiver.got) == 1
    finally:
        first.stop()
    second = start_process_server(pg_uri)
    try:
        got = await receiver.wait(3)
    finally:
        second.stop()
    bodies = [Webhook(secret).verify(raw, headers) for headers, raw in got]
    assert (bodies[0]["todo_id"], bodies[0]["reason"]) == (before["id"], "created")
    # delivered concurrently after the restart: in any order, each exactly once
    assert sorted((b["todo_id"], b["reason"]) for b in bodies[1:]) == [(t["id"], "created"), (t["id"], "requeued")]
    requeued = next(b for b in bodies if b["reason"] == "requeued")
    assert requeued["attempt"] == 1 and requeued["attempts_total"] == 1
    await asyncio.sleep(0.3)
    assert len(receiver.got) == 3


# ---------------------------------------------------------------------------- what is queued

async def test_ready_reasons_and_events_written_in_the_transition(core):
    w = await make_world(core)
    await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in")
    other = await make_world(core)  # another endpoint's todos never reach this hook
    await other.todo()

    async def events_for(todo_id: str) -> list[tuple[str, str | None]]:
        rows = await sql(core, "SELECT event, body FROM hook_outbox WHERE todo_id = %s ORDER BY id", (todo_id,))
        return [(r["event"], r["body"].get("reason")) for r in rows]

    t = await w.todo()
    assert await events_for(t["id"]) == [("todo.created", None), ("todo.ready", "created")]
    await todos.claim(core, w.e1, t["id"])
    await todos.release(core, w.e1, t["id"])
    await todos.claim(core, w.e1, t["id"])
    await lapse(core, t["id"])
    await sweeps.reap(core)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"])  # parked: no event
    await make_due(core, t["id"])
    await sweeps.requeue_due(core)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], retry=False)
    await todos.retry(core, w.h1, t["id"])
    await todos.claim(core, w.e1, t["id"])
    await todos.complete(core, w.e1, t["id"], summary="finally")
    assert await events_for(t["id"]) == [
        ("todo.created", None), ("todo.ready", "created"), ("todo.ready", "released"),
        ("todo.ready", "requeued"), ("todo.ready", "requeued"), ("todo.dead_lettered", "failed"),
        ("todo.ready", "requeued"), ("todo.completed", None)]
    assert (await sql(core, "SELECT count(*) AS n FROM hook_outbox"))[0]["n"] == 8


async def test_a_batched_complete_queues_one_completed_row_per_todo_it_completed(core):
    """A batched complete queues the todo.completed rows of its todos as single completes do: one per
    completed todo of an endpoint with an enabled hook taking that event; none for an item refused,
    for a hook that does not take the event, or for a disabled hook."""
    w = await make_world(core)
    wanted, _ = await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/done",
                                events=["todo.completed"])
    await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/ready", events=["todo.ready"])
    off, _ = await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/off", events=["todo.completed"])
    await sql(core, "UPDATE notify_hooks SET enabled = false WHERE id = %s", (off["hook_id"],))
    other = await make_world(core)
    await hooks.add(core, other.h1, other.slug1, url="https://hooks.example.com/other", events=["todo.ready"])
    mine = [await w.todo(f"t{i}") for i in range(3)]
    theirs = await other.todo()
    for t in mine[:2]:
        await todos.claim(core, w.e1, t["id"])
    await todos.claim(core, other.e1, theirs["id"])
    out = await todos.complete_batch(core, w.e1, [{"id": t["id"]} for t in mine])
    assert [o["ok"] for o in out] == [True, True, False]  # the third was never claimed
    await todos.complete_batch(core, other.e1, [{"id": theirs["id"]}])
    rows = await sql(core, "SELECT hook_id, event, todo_id, body FROM hook_outbox WHERE event = 'todo.completed'"
                           " ORDER BY todo_id")
    assert [(str(r["hook_id"]), r["todo_id"]) for r in rows] == sorted(
        (wanted["hook_id"], t["id"]) for t in mine[:2])
    body = rows[0]["body"]
    assert set(body) == READY_FIELDS - {"reason"} and body["type"] == "todo.completed"
    assert body["endpoint"] == w.slug1 and body["attempt"] == 1 and body["attempts_total"] == 1


def test_bodies_stay_within_4_kib():
    body = {"type": "todo.dead_lettered", "reason": "failed", "todo_id": "td_x", "queue": "q" * 64,
            "kind": "k" * 64, "source": "s" * 32, "title": "é" * 200, "endpoint": "abcdefghijkm", "attempt": 5,
            "attempts_total": 5, "created_at": "2026-01-01T00:00:00.000000Z",
            "final_attempt": {"seq": 5, "outcome": "failed", "died": False, "summary": '"' * 2048,
                              "summary_truncated": False, "artifact": "https://a.example.com/" + "x" * 480,
                              "attempts_total": 5}}
    text = render_body(json.loads(json.dumps(body)))
    assert len(text.encode()) <= 4096
    out = json.loads(text)
    assert out["final_attempt"]["summary_truncated"] is True and out["final_attempt"]["summary"].startswith('"')
    assert list(out)[:3] == ["type", "reason", "todo_id"]
    small = render_body({"type": "todo.created", "todo_id": "td_y", "title": "t"})
    assert json.loads(small) == {"type": "todo.created", "todo_id": "td_y", "title": "t"}


# ----------------------------------------------------------------------- owner API and CLI

async def test_only_the_owner_manages_hooks_and_the_ceiling_holds(core, server):
    w = await make_world(core)
    token1, _ = await api_tokens.create(core, w.h1)
    token2, _ = await api_tokens.create(core, w.h2)
    base = f"/api/v1/endpoints/{w.slug1}/hooks"
    assert httpx.get(server.url + base).status_code == 401
    assert api(server, "sbh_wrong", "GET", base).status_code == 401
    foreign = api(server, token2, "GET", base)
    unknown = api(server, token2, "GET", "/api/v1/endpoints/nosuchslug/hooks")
    assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content
    assert api(server, token2, "POST", base, json={"url": "https://x.example.com"}).status_code == 404
    bad = api(server, token1, "POST", base, json={"url": "ftp://x.example.com"})
    assert bad.status_code == 400 and bad.json()["error"]["argument"] == "url"
    bad = api(server, token1, "POST", base, json={"url": "https://x.example.com", "events": ["todo.exploded"]})
    assert bad.status_code == 400 and bad.json()["error"]["argument"] == "events"
    assert api(server, token1, "POST", base, json={"url": "https://x.example.com", "x": 1}).status_code == 400
    ids = []
    for n in range(hooks.MAX_PER_ENDPOINT):
        r = api(server, token1, "POST", base, json={"url": f"https://h{n}.example.com/in"})
        assert r.status_code == 201
        ids.append(r.json()["hook"]["hook_id"])
    over = api(server, token1, "POST", base, json={"url": "https://one-too-many.example.com"})
    assert over.status_code == 409
    # another human cannot remove it; the owner can, once
    assert api(server, token2, "DELETE", f"/api/v1/endpoints/{w.slug2}/hooks/{ids[0]}").status_code == 404
    assert api(server, token1, "DELETE", f"{base}/{ids[0]}").status_code == 200
    assert api(server, token1, "DELETE", f"{base}/{ids[0]}").status_code == 404
    assert api(server, token1, "DELETE", f"{base}/not-a-uuid").status_code == 404
    assert len(api(server, token1, "GET", base).json()["hooks"]) == hooks.MAX_PER_ENDPOINT - 1


async def test_concurrent_adds_at_the_ceiling_admit_exactly_one(core):
    w = await make_world(core)
    for n in range(hooks.MAX_PER_ENDPOINT - 1):
        await hooks.add(core, w.h1, w.slug1, url=f"https://h{n}.example.com")
    results = await asyncio.gather(*[hooks.add(core, w.h1, w.slug1, url=f"https://race{n}.example.com")
                                     for n in range(6)], return_exceptions=True)
    assert sum(1 for r in results if not isinstance(r, Exception)) == 1
    assert all(isinstance(r, Conflict) for r in results if isinstance(r, Exception))
    with pytest.raises(NotFound):
        await hooks.list_for_endpoint(core, w.h2, w.slug1)


def test_cli_hook_add_list_remove(pg_uri):
    from conftest import clean_database, run_async
    from switchboard.cli import app

    clean_database(pg_uri)

    async def setup():
        async with core_for(pg_uri) as c:
            w = await make_world(c)
            return w.h1.name, w.h2.name, w.slug1

    owner, stranger, slug = run_async(setup())
    runner = CliRunner()
    env = {"SWITCHBOARD_DATABASE_URL": pg_uri, "SWITCHBOARD_HOOKS_ALLOW_PRIVATE": "0"}

    def cli(*args: str):
        return runner.invoke(app, list(args), env=env)

    r = cli("hook", "add", slug, "--url", "https://hooks.example.com/in?k=v", "--event", "todo.ready",
            "--event", "todo.dead_lettered", "--user", owner, "--json")
    assert r.exit_code == 0, r.output
    added = json.loads(r.stdout)
    assert added["signing_secret"].startswith("whsec_")
    assert added["hook"]["events"] == ["todo.ready", "todo.dead_lettered"]
    r = cli("hook", "list", slug, "--user", owner, "--json")
    listed = json.loads(r.stdout)["hooks"]
    assert [h["hook_id"] for h in listed] == [added["hook"]["hook_id"]] and "whsec_" not in r.stdout
    assert cli("hook", "list", slug, "--user", stranger, "--json").exit_code == 1
    assert cli("hook", "add", slug, "--url", "https://10.1.2.3/", "--user", owner).exit_code == 1
    assert cli("hook", "add", slug, "--url", "https://x.example.com", "--event", "nope", "--user", owner).exit_code == 1
    assert cli("hook", "remove", added["hook"]["hook_id"], "--user", stranger, "--json").exit_code == 1
    r = cli("hook", "remove", added["hook"]["hook_id"], "--user", owner, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["removed"]["hook_id"] == added["hook"]["hook_id"]
    r = cli("hook", "deliveries", slug, "--user", owner, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"deliveries": []}
    r = cli("hook", "list", slug, "--user", owner)
    assert r.exit_code == 0 and "no notify hooks" in r.stdout


async def test_stop_ends_the_hook_sender_even_when_a_wake_up_meets_the_cancellation(core):
    """Python 3.11's asyncio.wait_for loses a cancellation that arrives as the event it waits on is set:
    a sender stopped right after a wake-up used to keep looping, and stop() never returned."""
    from switchboard.runtime import Runtime
    from switchboard.web.hooks import HookSender

    s = HookSender(Runtime(core.settings, core=core))
    assert await stops_right_after_a_wake_up(s), "stop() did not end the sender"
