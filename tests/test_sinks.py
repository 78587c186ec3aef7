"""Notification sinks (docs/notifications.md): chat webhooks for dead letters, stuck queues and a
daily digest, delivered from a durable outbox with the notify hooks' HTTP discipline.

Real PostgreSQL, a real HTTP receiver started here (the suite admits plain http to loopback with
SWITCHBOARD_HOOKS_ALLOW_PRIVATE, as the hook tests do), the real sender. Time is moved by SQL or by
the `now` the sweep tick takes, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from zoneinfo import ZoneInfo

import httpx
import pytest
from typer.testing import CliRunner

from conftest import clean_database, core_for, make_settings, run_async, start_thread_server
from core_world import make_world, sql
from sender_kit import stops_right_after_a_wake_up
from switchboard.core import api_tokens, hooks, sink_messages, sinks, todos
from switchboard.core.errors import Invalid, NotFound
from switchboard.runtime import Runtime
from switchboard.web.sinks import SinkSender, send_test

BASE = "https://board.example.com"
HOSTILE_TITLE = "deploy <!channel> @everyone & *now* [x](https://evil.example.com)"
HOSTILE_SUMMARY = "broke <@U123> @here <https://evil.example.com|click> & `rm -rf` # **bold**\nsecond line"


# ------------------------------------------------------------------------------- the receiver

@dataclass
class Receiver:
    statuses: list[int] = field(default_factory=list)  # answers in order; then 200
    got: list[tuple[str, dict, bytes]] = field(default_factory=list)  # (path, headers, body)
    port: int = 0

    def url(self, path: str = "/chat") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bodies(self, path: str) -> list[dict]:
        return [json.loads(body) for p, _, body in self.got if p == path]

    async def wait(self, n: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < n:
            assert time.monotonic() < deadline, f"received {len(self.got)} of {n}"
            await asyncio.sleep(0.02)


@pytest.fixture
def receiver():
    rec = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            rec.got.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
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


@pytest.fixture
async def sender(core):
    """The real sender on the test's core (no server: nothing else drains this outbox)."""
    core.settings = make_settings(core.settings.database_url, base_url=BASE)
    s = SinkSender(Runtime(core.settings, core=core))
    s.retry_delays = (0.05, 0.05)
    await s.start()
    yield s
    await s.stop()


async def settled(core, n: int, timeout: float = 15.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = await sql(core, "SELECT * FROM sink_outbox ORDER BY id")
        if len(rows) >= n and all(r["state"] != "pending" for r in rows):
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)


async def dead_letter(core, w, title: str = "t", summary: str | None = "gave up") -> dict:
    t = await w.todo(title, max_attempts=1)
    await todos.claim(core, w.e1, t["id"])
    out = await todos.fail(core, w.e1, t["id"], summary=summary)
    assert out["dead_letter"]
    return t


def unescaped(text: str, char: str) -> bool:
    """Whether `char` appears in `text` without a backslash before it."""
    return re.search(r"(?<!\\)" + re.escape(char), text) is not None


# ------------------------------------------------------------------------- dead-letter bodies

async def test_each_kind_gets_its_own_body_for_a_dead_letter_with_the_text_inert(core, sender, receiver):
    w = await make_world(core)
    for kind in sink_messages.KINDS:
        await sinks.add(core, w.h1, kind=kind, url=receiver.url(f"/{kind}"), name=f"ops {kind}",
                        events=["dead_letter"])
    await sinks.add(core, w.h2, kind="slack", url=receiver.url("/stranger"))  # another human's sink
    t = await w.todo(HOSTILE_TITLE, max_attempts=1)
    await todos.claim(core, w.e1, t["id"])
    # The outbox rows are written by the dead-lettering transaction itself: visible at its commit.
    sender._wake.clear()
    await sender.stop()
    await todos.fail(core, w.e1, t["id"], summary=HOSTILE_SUMMARY)
    rows = await sql(core, "SELECT event, body, state FROM sink_outbox ORDER BY id")
    assert [(r["event"], r["state"]) for r in rows] == [("dead_letter", "pending")] * 4
    assert rows[0]["body"] | {"at": None} == {
        "todo_id": t["id"], "title": HOSTILE_TITLE, "queue": "inbox", "endpoint": w.slug1, "attempts_total": 1,
        "reason": "failed", "last_outcome": "failed", "last_summary": HOSTILE_SUMMARY, "at": None}
    await sender.start()
    await receiver.wait(4)
    await settled(core, 4)
    link = f"{BASE}/todos/{t['id']}"

    [slack] = receiver.bodies("/slack")
    assert slack == {
        "text": "Dead letter: deploy &lt;!channel&gt; @everyone &amp; *now* [x](https://evil.example.com)"
                "\nLast summary: broke &lt;@U123&gt; @here &lt;https://evil.example.com|click&gt; &amp; `rm -rf` "
                "# **bold** second line",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "emoji": False,
                                        "text": "Dead letter: " + HOSTILE_TITLE}},
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*Queue:* {w.slug1}/inbox\n*Attempts:* 1\n"
                                                                   "*Last attempt:* failed\n*Reason:* failed"}},
            {"type": "section", "text": {"type": "plain_text", "emoji": False,
                                         "text": "Last summary: " + HOSTILE_SUMMARY.replace("\n", " ")}},
            {"type": "actions", "elements": [{"type": "button", "url": link,
                                              "text": {"type": "plain_text", "text": "Open on the Board"}}]},
        ],
        "unfurl_links": False, "unfurl_media": False}
    for block in slack["blocks"]:
        if block.get("text", {}).get("type") == "mrkdwn":
            assert "<" not in block["text"]["text"]

    [discord] = receiver.bodies("/discord")
    assert discord["allowed_mentions"] == {"parse": []}
    assert set(discord) == {"content", "embeds", "allowed_mentions"}
    embed = discord["embeds"][0]
    assert embed["url"] == link and embed["title"].startswith("Dead letter")
    assert {f["name"] for f in embed["fields"]} == {"Queue", "Attempts", "Last attempt", "Reason"}
    for text in (discord["content"], embed["title"], embed["description"].removeprefix("Last summary: ")):
        for char in ("@", "<", "*", "[", "`", "#", ":"):
            assert not unescaped(text, char), (char, text)
    assert r"\@everyone" in discord["content"] and r"\<\@U123\>" in embed["description"]

    [teams] = receiver.bodies("/teams")
    assert teams["type"] == "message" and len(teams["attachments"]) == 1
    attachment = teams["attachments"][0]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open on the Board", "url": link}]
    assert [b["type"] for b in card["body"]] == ["TextBlock", "FactSet", "TextBlock"]
    assert card["body"][0]["text"] == r"Dead letter: deploy \<\!channel\> @everyone & \*now\* \[x\]\(https://evil.example.com\)"
    assert r"\*\*bold\*\*" in card["body"][2]["text"] and "\n" not in card["body"][2]["text"]

    [generic] = receiver.bodies("/generic")
    assert generic == {
        "type": "dead_letter",
        "text": f"Dead letter: {HOSTILE_TITLE}\nQueue: {w.slug1}/inbox\nAttempts: 1\nLast attempt: failed\n"
                f"Reason: failed\nLast summary: {HOSTILE_SUMMARY.replace(chr(10), ' ')}",
        "sink": "ops generic", "board_url": link, "data": rows[3]["body"]}
    assert receiver.bodies("/stranger") == []  # another human's endpoint, another human's sink
    for _, headers, _ in receiver.got:
        assert headers["content-type"] == "application/json"


async def test_a_below_the_cap_failure_and_an_unsubscribed_sink_queue_nothing(core):
    w = await make_world(core)
    await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/a", events=["digest"])
    t = await w.todo(max_attempts=3)
    await todos.claim(core, w.e1, t["id"])
    await todos.fail(core, w.e1, t["id"], summary="again")  # parked retry
    await dead_letter(core, w)
    assert await sql(core, "SELECT * FROM sink_outbox") == []


# ---------------------------------------------------------------------------------- stuck queues

async def test_a_stuck_queue_is_reported_once_and_again_only_after_it_recovers(core):
    w = await make_world(core, queues=("inbox", "builds"))
    sink = await sinks.add(core, w.h1, kind="generic", url="https://hooks.example.com/s", events=["queue_stuck"],
                           stuck_minutes=10)
    stuck_rows = "SELECT body FROM sink_outbox WHERE event = 'queue_stuck' AND body->>'queue' = 'inbox' ORDER BY id"
    t = await w.todo("waiting")
    await w.todo("fresh", queue="builds")
    other = await w.todo("also waiting", caller=w.e2)  # another human's queue: not this sink's
    assert await sinks.tick(core) == {"queue_stuck": 0, "digest": 0}
    await sql(core, "UPDATE todos SET updated_at = now() - interval '11 minutes' WHERE id = ANY(%s)",
              ([t["id"], other["id"]],))
    assert (await sinks.tick(core))["queue_stuck"] == 1
    [row] = await sql(core, stuck_rows)
    assert row["body"] | {"pending_since": None} == {
        "endpoint": w.slug1, "queue": "inbox", "pending": 1, "stuck_minutes": 10, "waiting_minutes": 11,
        "pending_since": None}
    # Not again while it stays stuck, however many ticks and however late.
    assert (await sinks.tick(core))["queue_stuck"] == 0
    later = datetime.now(UTC) + timedelta(hours=5)  # by then the builds queue is stuck too
    assert (await sinks.tick(core, now=later))["queue_stuck"] == 1
    assert (await sinks.tick(core, now=later))["queue_stuck"] == 0
    assert len(await sql(core, stuck_rows)) == 1
    # It recovers (the todo is claimed): forgotten, nothing sent.
    await todos.claim(core, w.e1, t["id"])
    assert (await sinks.tick(core))["queue_stuck"] == 0
    assert await sql(core, "SELECT * FROM sink_stuck_queues") == []
    # Stuck again later: a second message.
    await todos.release(core, w.e1, t["id"])
    await sql(core, "UPDATE todos SET updated_at = now() - interval '30 minutes' WHERE id = %s", (t["id"],))
    assert (await sinks.tick(core))["queue_stuck"] == 1
    rows = await sql(core, stuck_rows)
    assert len(rows) == 2 and rows[1]["body"]["waiting_minutes"] == 30
    text = sink_messages.render("slack", "queue_stuck", rows[1]["body"], base_url=BASE, sink_name="x")
    assert text["blocks"][-1]["elements"][0]["url"] == f"{BASE}/todos?endpoint={w.slug1}&queue=inbox&state=pending"
    assert "no claim" in text["text"]
    # A disabled sink reports nothing and forgets what it saw.
    await sql(core, "UPDATE notification_sinks SET enabled = false WHERE id = %s", (uuid.UUID(sink["sink_id"]),))
    assert (await sinks.tick(core))["queue_stuck"] == 0
    assert await sql(core, "SELECT * FROM sink_stuck_queues") == []


# ---------------------------------------------------------------------------------------- digest

async def test_a_digest_comes_once_a_day_at_the_chosen_hour_in_the_chosen_time_zone(core):
    w = await make_world(core, queues=("inbox", "builds"))
    now = datetime.now(UTC) + timedelta(seconds=20)  # after the activity below
    zone = "Asia/Kathmandu"  # UTC+05:45: its hour never equals UTC's
    local_hour = now.astimezone(ZoneInfo(zone)).hour
    sink = await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/d", events=["digest"],
                           digest_hour=local_hour, timezone=zone, name="daily")
    await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/utc", events=["digest"],
                    digest_hour=local_hour, timezone="UTC")  # the same hour in UTC: not now
    done = await w.todo("done")
    await todos.claim(core, w.e1, done["id"])
    await todos.complete(core, w.e1, done["id"], summary="ok")
    await dead_letter(core, w, "dead")
    await w.todo("waiting")
    await sql(core, "UPDATE todos SET updated_at = now() - interval '90 minutes' WHERE title = 'waiting'")
    await w.todo("another", queue="builds", caller=w.e1)
    await w.todo("not mine", caller=w.e2)

    assert (await sinks.tick(core, now=now - timedelta(hours=1)))["digest"] == 0  # the hour before
    assert (await sinks.tick(core, now=now))["digest"] == 1
    assert (await sinks.tick(core, now=now + timedelta(minutes=30)))["digest"] == 0  # once that day
    [row] = await sql(core, "SELECT sink_id, dedup_key, body FROM sink_outbox WHERE event = 'digest'")
    assert str(row["sink_id"]) == sink["sink_id"]
    local_day = now.astimezone(ZoneInfo(zone)).date().isoformat()
    assert row["dedup_key"] == f"digest:{local_day}"
    queues = {(q["endpoint"], q["queue"]): q for q in row["body"]["queues"]}
    assert set(queues) == {(w.slug1, "inbox"), (w.slug1, "builds")}
    inbox = queues[(w.slug1, "inbox")]
    assert {k: inbox[k] for k in ("pushed", "done", "failed", "dead_lettered")} == {
        "pushed": 3, "done": 1, "failed": 1, "dead_lettered": 1}
    assert 89 <= inbox["oldest_pending_minutes"] <= 91
    body = sink_messages.render("slack", "digest", row["body"], base_url=BASE, sink_name="daily")
    assert "pushed 3, done 1, failed 1, dead-lettered 1, oldest pending 1 h " in body["blocks"][1]["text"]["text"]
    # The next local day, at that hour, another one.
    assert (await sinks.tick(core, now=now + timedelta(days=1)))["digest"] == 1
    assert len(await sql(core, "SELECT * FROM sink_outbox WHERE event = 'digest'")) == 2


# ------------------------------------------------------------------------ failures and enabling

async def test_a_failing_sink_is_disabled_with_its_reason_and_enabled_again(core, sender, receiver):
    w = await make_world(core)
    sender.disable_after = 2
    sender.retry_delays = (0.05,)  # two attempts per message
    receiver.statuses = [500, 500, 500, 500]  # two messages, each tried twice (one retry)
    sink = await sinks.add(core, w.h1, kind="slack", url=receiver.url(), events=["dead_letter"])
    await dead_letter(core, w, "one")
    await receiver.wait(2)
    await settled(core, 1)
    await dead_letter(core, w, "two")
    await receiver.wait(4)
    await settled(core, 2)
    [listed] = await sinks.list_for_owner(core, w.h1)
    assert listed["enabled"] is False and listed["consecutive_failures"] == 2
    assert listed["disabled_reason"] == "disabled after 2 failed messages in a row; last: HTTP 500"
    assert listed["last_status"] == "500" and listed["disabled_at"] is not None
    await dead_letter(core, w, "while disabled")  # queued for nobody
    assert len(await sql(core, "SELECT * FROM sink_outbox")) == 2
    with pytest.raises(NotFound):
        await sinks.enable(core, w.h2, sink["sink_id"])  # another human's sink
    enabled = await sinks.enable(core, w.h1, sink["sink_id"])
    assert (enabled["enabled"], enabled["consecutive_failures"], enabled["disabled_reason"]) == (True, 0, None)
    await dead_letter(core, w, "after")
    await receiver.wait(5)
    rows = await settled(core, 3)
    assert [r["state"] for r in rows] == ["failed", "failed", "delivered"]
    assert receiver.bodies("/chat")[-1]["blocks"][0]["text"]["text"] == "Dead letter: after"


async def test_the_ssrf_guard_refuses_private_targets(core, receiver):
    strict = make_settings(core.settings.database_url, hooks_allow_private=False, base_url=BASE)
    w = await make_world(core)
    core.settings = strict
    for url in ("https://10.0.0.5/x", "https://127.0.0.1/x", "https://[::1]/x", "https://169.254.169.254/x",
                "https://localhost/x", f"http://127.0.0.1:{receiver.port}/chat", "https://[2002:7f00:1::]/x"):
        with pytest.raises(Invalid) as exc:
            await sinks.add(core, w.h1, kind="slack", url=url)
        assert exc.value.argument == "url", url
    assert await sinks.list_for_owner(core, w.h1) == []
    # A host name resolving to loopback passes registration; the sender refuses it after resolving.
    core.settings = make_settings(core.settings.database_url, base_url=BASE)
    sink = await sinks.add(core, w.h1, kind="slack", url=f"https://localhost:{receiver.port}/chat")
    core.settings = strict
    test = await send_test(core, w.h1, sink["sink_id"])
    assert test == {"sink_id": sink["sink_id"], "delivered": False, "result": "rejected_ssrf", "status_code": None,
                    "error": "target resolves to a loopback address"}
    s = SinkSender(Runtime(strict, core=core))
    await s.start()
    try:
        await dead_letter(core, w)
        [row] = await settled(core, 1)
    finally:
        await s.stop()
    assert (row["state"], row["last_result"], row["attempts"]) == ("failed", "rejected_ssrf", 1)
    assert receiver.got == []


# ------------------------------------------------------------------------------------ notify hooks

async def test_a_disabled_notify_hook_is_enabled_again_by_its_owner_only(core, pg_uri):
    w = await make_world(core)
    hook, _ = await hooks.add(core, w.h1, w.slug1, url="https://hooks.example.com/in", events=["todo.created"])
    hid = uuid.UUID(hook["hook_id"])
    await sql(core, "UPDATE notify_hooks SET enabled = false, consecutive_failures = 10, "
                    "disabled_reason = 'consecutive_failures', disabled_at = now() WHERE id = %s", (hid,))
    await w.todo("while disabled")
    assert await sql(core, "SELECT * FROM hook_outbox") == []
    with pytest.raises(NotFound):
        await hooks.enable(core, w.h2, hook["hook_id"])
    with pytest.raises(NotFound):
        await hooks.enable(core, w.h2, hook["hook_id"], slug=w.slug1)
    token1, _ = await api_tokens.create(core, w.h1)
    token2, _ = await api_tokens.create(core, w.h2)
    srv = start_thread_server(make_settings(pg_uri))
    try:
        path = f"/api/v1/endpoints/{{}}/hooks/{hook['hook_id']}/enable"
        foreign = httpx.post(srv.url + path.format(w.slug2), headers={"Authorization": f"Bearer {token2}"})
        unknown = httpx.post(srv.url + f"/api/v1/endpoints/{w.slug2}/hooks/{uuid.uuid4()}/enable",
                             headers={"Authorization": f"Bearer {token2}"})
        assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content
        r = httpx.post(srv.url + path.format(w.slug1), headers={"Authorization": f"Bearer {token1}"})
        assert r.status_code == 200, r.text
    finally:
        srv.stop()
    got = r.json()["hook"]
    assert (got["enabled"], got["consecutive_failures"], got["disabled_reason"]) == (True, 0, None)
    await w.todo("after")
    assert [r["event"] for r in await sql(core, "SELECT event FROM hook_outbox")] == ["todo.created"]


def test_cli_hook_enable(pg_uri):
    from switchboard.cli import app

    clean_database(pg_uri)

    async def setup():
        async with core_for(pg_uri) as c:
            w = await make_world(c)
            hook, _ = await hooks.add(c, w.h1, w.slug1, url="https://hooks.example.com/in")
            await sql(c, "UPDATE notify_hooks SET enabled = false, disabled_reason = 'consecutive_failures'")
            return w.h1.name, w.h2.name, hook["hook_id"]

    owner, stranger, hook_id = run_async(setup())
    runner = CliRunner()
    env = {"SWITCHBOARD_DATABASE_URL": pg_uri}
    assert runner.invoke(app, ["hook", "enable", hook_id, "--user", stranger], env=env).exit_code == 1
    r = runner.invoke(app, ["hook", "enable", hook_id, "--user", owner, "--json"], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hook"]["enabled"] is True
    r = runner.invoke(app, ["hook", "list", "--user", owner, "--json", json.loads(r.stdout)["hook"]["endpoint"]],
                      env=env)
    assert json.loads(r.stdout)["hooks"][0]["disabled_reason"] is None


# ---------------------------------------------------------------------------------- API and CLI

@pytest.fixture
def api_server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, base_url=BASE))
    yield srv
    srv.stop()


def call(srv, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, srv.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30, **kw)


async def test_the_api_adds_lists_tests_enables_and_removes_a_sink(core, api_server, receiver):
    w = await make_world(core)
    token, _ = await api_tokens.create(core, w.h1)
    assert httpx.get(api_server.url + "/api/v1/sinks").status_code == 401
    r = call(api_server, token, "POST", "/api/v1/sinks", json={
        "kind": "discord", "url": receiver.url("/chat?token=receiver-secret"), "name": "ops",
        "events": ["dead_letter", "digest"], "digest_hour": 17, "timezone": "Europe/Berlin"})
    assert r.status_code == 201, r.text
    sink = r.json()["sink"]
    assert (sink["kind"], sink["events"], sink["digest_hour"], sink["timezone"], sink["stuck_minutes"]) == (
        "discord", ["dead_letter", "digest"], 17, "Europe/Berlin", 30)
    listed = call(api_server, token, "GET", "/api/v1/sinks").json()["sinks"]
    assert [s["sink_id"] for s in listed] == [sink["sink_id"]]
    assert listed[0]["url"].endswith("/chat?redacted") and "receiver-secret" not in json.dumps(listed)
    r = call(api_server, token, "POST", f"/api/v1/sinks/{sink['sink_id']}/test")
    assert r.status_code == 200 and r.json()["test"]["delivered"] is True and r.json()["test"]["status_code"] == 200
    [test_body] = receiver.bodies("/chat?token=receiver-secret")
    assert test_body["allowed_mentions"] == {"parse": []} and test_body["embeds"][0]["url"] == f"{BASE}/notifications"
    assert call(api_server, token, "GET", "/api/v1/sinks").json()["sinks"][0]["last_status"] == "200"
    receiver.statuses = [404]
    r = call(api_server, token, "POST", f"/api/v1/sinks/{sink['sink_id']}/test")
    assert r.json()["test"] == {"sink_id": sink["sink_id"], "delivered": False, "result": "4xx", "status_code": 404,
                                "error": "HTTP 404"}
    await sql(core, "UPDATE notification_sinks SET enabled = false, disabled_reason = 'x'")
    r = call(api_server, token, "POST", f"/api/v1/sinks/{sink['sink_id']}/enable")
    assert r.status_code == 200 and r.json()["sink"]["enabled"] is True
    assert call(api_server, token, "GET", "/api/v1/sinks/deliveries").json() == {"deliveries": []}
    r = call(api_server, token, "DELETE", f"/api/v1/sinks/{sink['sink_id']}")
    assert r.status_code == 200 and r.json()["removed"]["sink_id"] == sink["sink_id"]
    assert call(api_server, token, "GET", "/api/v1/sinks").json() == {"sinks": []}


async def test_another_humans_sink_is_the_same_not_found_as_an_unknown_one(core, api_server):
    w = await make_world(core)
    sink = await sinks.add(core, w.h1, kind="slack", url="https://hooks.example.com/mine")
    token2, _ = await api_tokens.create(core, w.h2)
    for method, suffix in (("DELETE", ""), ("POST", "/enable"), ("POST", "/test")):
        foreign = call(api_server, token2, method, f"/api/v1/sinks/{sink['sink_id']}{suffix}")
        unknown = call(api_server, token2, method, f"/api/v1/sinks/{uuid.uuid4()}{suffix}")
        garbage = call(api_server, token2, method, f"/api/v1/sinks/not-a-uuid{suffix}")
        assert foreign.status_code == unknown.status_code == garbage.status_code == 404
        assert foreign.content == unknown.content == garbage.content
    assert call(api_server, token2, "GET", "/api/v1/sinks").json() == {"sinks": []}
    assert len(await sinks.list_for_owner(core, w.h1)) == 1


async def test_bad_input_is_refused_naming_the_field_and_nothing_changes(core, api_server):
    w = await make_world(core)
    token, _ = await api_tokens.create(core, w.h1)
    good = {"kind": "slack", "url": "https://hooks.example.com/in"}
    cases = [
        ({"kind": "irc"}, "kind"), ({"kind": None}, "kind"),
        ({"url": "ftp://hooks.example.com/in"}, "url"), ({"url": "not a url"}, "url"),
        ({"url": "https://hooks.example.com/in\r\nX: 1"}, "url"),
        ({"digest_hour": 24}, "digest_hour"), ({"digest_hour": -1}, "digest_hour"),
        ({"digest_hour": "9am"}, "digest_hour"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"), ({"timezone": "../../etc/passwd"}, "timezone"),
        ({"events": ["todo.exploded"]}, "events"), ({"stuck_minutes": 0}, "stuck_minutes"),
        ({"name": "x" * 65}, "name"), ({"colour": "red"}, "colour"),
    ]
    for change, argument in cases:
        r = call(api_server, token, "POST", "/api/v1/sinks", json={**good, **change})
        assert r.status_code == 400, (change, r.text)
        error = r.json()["error"]
        assert error["code"] == "invalid" and error["argument"] == argument, (change, error)
    assert await sinks.list_for_owner(core, w.h1) == []
    assert await sql(core, "SELECT * FROM notification_sinks") == []
    for _ in range(sinks.MAX_PER_OWNER):
        assert call(api_server, token, "POST", "/api/v1/sinks", json=good).status_code == 201
    assert call(api_server, token, "POST", "/api/v1/sinks", json=good).status_code == 409


def test_cli_sink_add_list_test_enable_remove(pg_uri, receiver):
    from switchboard.cli import app

    clean_database(pg_uri)

    async def setup():
        async with core_for(pg_uri) as c:
            w = await make_world(c)
            return w.h1.name, w.h2.name

    owner, stranger = run_async(setup())
    runner = CliRunner()
    env = {"SWITCHBOARD_DATABASE_URL": pg_uri, "SWITCHBOARD_HOOKS_ALLOW_PRIVATE": "1",
           "SWITCHBOARD_BASE_URL": BASE}

    def cli(*args: str):
        return runner.invoke(app, list(args), env=env)

    r = cli("sink", "add", "teams", receiver.url(), "--name", "oncall", "--event", "dead_letter", "--digest-hour",
            "25", "--user", owner, "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["argument"] == "digest_hour"
    r = cli("sink", "add", "teams", receiver.url(), "--timezone", "Nowhere/City", "--user", owner)
    assert r.exit_code == 1 and "timezone" in r.output
    r = cli("sink", "add", "teams", receiver.url(), "--name", "oncall", "--event", "dead_letter", "--user", owner,
            "--json")
    assert r.exit_code == 0, r.output
    sink_id = json.loads(r.stdout)["sink"]["sink_id"]
    r = cli("sink", "list", "--user", owner)
    assert r.exit_code == 0 and "oncall [teams]" in r.stdout and "enabled" in r.stdout
    assert json.loads(cli("sink", "list", "--user", stranger, "--json").stdout) == {"sinks": []}
    r = cli("sink", "test", sink_id, "--user", owner)
    assert r.exit_code == 0 and "delivered (HTTP 200)" in r.stdout, r.output
    [(path, _, raw)] = receiver.got
    body = json.loads(raw)
    assert body["type"] == "message" and "oncall" in body["attachments"][0]["content"]["body"][0]["text"]
    assert cli("sink", "test", sink_id, "--user", stranger).exit_code == 1
    assert cli("sink", "enable", sink_id, "--user", stranger).exit_code == 1
    r = cli("sink", "enable", sink_id, "--user", owner, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["sink"]["enabled"] is True
    assert cli("sink", "remove", sink_id, "--user", stranger).exit_code == 1
    r = cli("sink", "remove", sink_id, "--user", owner)
    assert r.exit_code == 0 and sink_id in r.stdout
    assert "no notification sinks" in cli("sink", "list", "--user", owner).stdout


async def test_the_serving_process_queues_and_sends_on_its_sweep_tick(core, pg_uri, receiver):
    w = await make_world(core)
    await sinks.add(core, w.h1, kind="generic", url=receiver.url("/stuck"), events=["queue_stuck"],
                    stuck_minutes=5, name="ops")
    t = await w.todo("nobody takes me")
    await sql(core, "UPDATE todos SET updated_at = now() - interval '6 minutes' WHERE id = %s", (t["id"],))
    srv = start_thread_server(make_settings(pg_uri, base_url=BASE, sweep_interval_seconds=0.2))
    try:
        await receiver.wait(1)
        [row] = await settled(core, 1)
    finally:
        srv.stop()
    [body] = receiver.bodies("/stuck")
    assert body["type"] == "queue_stuck" and body["sink"] == "ops"
    assert body["data"]["queue"] == "inbox" and body["data"]["waiting_minutes"] == 6
    assert body["board_url"] == f"{BASE}/todos?endpoint={w.slug1}&queue=inbox&state=pending"
    assert (row["event"], row["state"], row["attempts"]) == ("queue_stuck", "delivered", 1)


async def test_two_senders_on_one_outbox_send_each_message_once(core, receiver):
    core.settings = make_settings(core.settings.database_url, base_url=BASE)
    w = await make_world(core)
    for n in range(3):
        await sinks.add(core, w.h1, kind="generic", url=receiver.url(f"/s{n}"), events=["dead_letter"])
    for n in range(4):
        await dead_letter(core, w, f"dead {n}")
    senders = [SinkSender(Runtime(core.settings, core=core)) for _ in range(2)]
    for s in senders:
        await s.start()
    try:
        await receiver.wait(12)
        rows = await settled(core, 12)
        await asyncio.sleep(0.5)
    finally:
        for s in senders:
            await s.stop()
    assert len(receiver.got) == 12 and {r["state"] for r in rows} == {"delivered"}
    sent = sorted((path, json.loads(body)["data"]["title"]) for path, _, body in receiver.got)
    assert sent == sorted((f"/s{n}", f"dead {m}") for n in range(3) for m in range(4))


async def test_stop_ends_the_sender_even_when_a_wake_up_meets_the_cancellation(core):
    """Python 3.11's asyncio.wait_for loses a cancellation that arrives as the event it waits on is set:
    a sender stopped right after a wake-up used to keep looping, and stop() never returned."""
    core.settings = make_settings(core.settings.database_url, base_url=BASE)
    s = SinkSender(Runtime(core.settings, core=core))
    assert await stops_right_after_a_wake_up(s), "stop() did not end the sender"
