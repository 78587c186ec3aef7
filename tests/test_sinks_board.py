"""The Board's Notifications page in a real browser: add a sink, send a test message to a real
receiver, see a disabled sink's reason and enable it, refuse bad input naming the field, remove it;
CSRF on every POST; another human's sink reads like an unknown one; axe-core finds no WCAG 2.1 A/AA
violation and the CSP reports nothing."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from board_kit import CSP, axe_violations, page_for, screenshot
from switchboard.core import producer, teams, todos


@pytest.fixture
def chat():
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers.get("content-length", "0")))))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/slack-in", got
    httpd.shutdown()
    httpd.server_close()


async def test_the_notifications_page_adds_tests_enables_and_removes_a_sink(board_server, browser, chat):
    url, got = chat
    human = await board_server.human("notify")
    async with page_for(browser, board_server, human) as page:
        response = await page.goto("/notifications")
        assert response.status == 200 and response.headers["content-security-policy"] == CSP
        assert await page.get_attribute("nav a[aria-current=page]", "href") == "/notifications"
        assert await page.is_visible("#sb-no-sinks")
        assert await axe_violations(page) == []

        # Bad input: the field is named, marked invalid, and nothing is stored.
        await page.fill("#sb-sink-url", url)
        await page.fill("#sb-sink-timezone", "Mars/Olympus_Mons")
        async with page.expect_navigation():
            await page.click("#sb-sink-add")
        assert "Timezone:" in await page.inner_text("#sb-sink-form-error")
        assert await page.get_attribute("#sb-sink-timezone", "aria-invalid") == "true"
        assert await page.input_value("#sb-sink-url") == url  # what was typed is kept
        assert await page.is_visible("#sb-no-sinks")
        assert await axe_violations(page) == []
        page.watch.expected_http_errors(422)

        await page.fill("#sb-sink-name", "ops <b>team</b>")
        await page.select_option("#sb-sink-kind", "slack")
        await page.uncheck("#sb-sink-event-digest")
        await page.fill("#sb-sink-stuck", "15")
        await page.fill("#sb-sink-hour", "7")
        await page.fill("#sb-sink-timezone", "Europe/Berlin")
        async with page.expect_navigation():
            await page.click("#sb-sink-add")
        assert await page.inner_text("#sb-sinks-notice") == "The sink is added."
        rows = page.locator("[data-sb-sink]")
        assert await rows.count() == 1
        sink_id = await rows.first.get_attribute("data-sb-sink")
        text = await rows.first.inner_text()
        assert "ops <b>team</b>" in text and "Dead letters, Stuck queues" in text and "Daily digest" not in text
        assert "stuck after 15 min; digest at 07:00 Europe/Berlin" in text
        stored = board_server.sql("SELECT kind, events, stuck_minutes, digest_hour, digest_timezone "
                                  "FROM notification_sinks")
        assert stored == [("slack", ["dead_letter", "queue_stuck"], 15, 7, "Europe/Berlin")]

        async with page.expect_navigation():
            await page.click(f"#sb-sink-test-{sink_id}")
        assert await page.inner_text("#sb-sinks-notice") == "The test message was delivered (HTTP 200)."
        assert len(got) == 1
        assert got[0]["blocks"][0]["text"]["text"] == "Test message from Switchboard: the sink ops <b>team</b> works"
        assert "&lt;b&gt;" in got[0]["text"]

        # A dead letter's message, delivered, is on the sink's page (the test message is not: it never queues).
        await page.goto(f"/notifications/{sink_id}")
        assert await page.is_visible("#sb-no-messages")
        ep, agent = await board_server.endpoint(human)
        todo, _ = await board_server.run(producer.push, human, ep["slug"], title="doomed", max_attempts=1)
        await board_server.run(todos.claim, agent, todo["id"])
        await board_server.run(todos.fail, agent, todo["id"], summary="no")
        deadline = time.monotonic() + 15
        while board_server.sql("SELECT 1 FROM sink_outbox WHERE state = 'delivered'") == []:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await page.goto(f"/notifications/{sink_id}")
        message = page.locator("[data-sb-message]")
        assert await message.count() == 1 and await message.get_attribute("data-sb-state") == "delivered"
        assert "Dead letter" in await message.inner_text() and "HTTP 200" in await message.inner_text()
        assert await axe_violations(page) == []
        await page.goto("/notifications")

        board_server.sql("UPDATE notification_sinks SET enabled = false, consecutive_failures = 10, "
                         "disabled_reason = 'disabled after 10 failed messages in a row; last: HTTP 500'")
        await page.goto("/notifications")
        assert await rows.first.get_attribute("data-sb-enabled") == "false"
        assert "last: HTTP 500" in await page.inner_text(f"#sb-sink-reason-{sink_id}")
        assert await axe_violations(page) == []
        await screenshot(page, "notifications")
        async with page.expect_navigation():
            await page.click(f"#sb-sink-enable-{sink_id}")
        assert "enabled again" in await page.inner_text("#sb-sinks-notice")
        assert await rows.first.get_attribute("data-sb-enabled") == "true"
        assert await page.locator(f"#sb-sink-enable-{sink_id}").count() == 0

        async with page.expect_navigation():
            await page.click(f"#sb-sink-remove-{sink_id}")
        assert await page.inner_text("#sb-sinks-notice") == "The sink is removed."
        assert await page.is_visible("#sb-no-sinks")
        assert board_server.sql("SELECT * FROM notification_sinks") == []
        await page.watch.assert_clean(page)


async def test_csrf_and_another_humans_sink(board_server, browser, chat):
    url, _ = chat
    owner = await board_server.human("owner")
    stranger = await board_server.human("stranger")
    async with page_for(browser, board_server, owner) as page:
        await page.goto("/notifications")
        await page.fill("#sb-sink-url", url)
        async with page.expect_navigation():
            await page.click("#sb-sink-add")
        sink_id = await page.locator("[data-sb-sink]").first.get_attribute("data-sb-sink")
        # A POST without the CSRF token is refused before anything is touched.
        for action in ("remove", "enable", "test"):
            r = await page.request.post(f"/notifications/{sink_id}/{action}", form={"x": "1"})
            assert r.status == 403, action
        r = await page.request.post("/notifications", form={"kind": "slack", "url": url})
        assert r.status == 403
        assert len(board_server.sql("SELECT * FROM notification_sinks")) == 1
    async with page_for(browser, board_server, stranger) as page:
        await page.goto("/notifications")
        token = await page.get_attribute("input[name=csrf_token]", "value")
        for action in ("remove", "enable", "test"):
            foreign = await page.request.post(f"/notifications/{sink_id}/{action}", form={"csrf_token": token})
            unknown = await page.request.post(f"/notifications/{uuid.uuid4()}/{action}", form={"csrf_token": token})
            assert foreign.status == unknown.status == 404, action
            assert await foreign.body() == await unknown.body()
        foreign = await page.request.get(f"/notifications/{sink_id}")
        unknown = await page.request.get(f"/notifications/{uuid.uuid4()}")
        assert foreign.status == unknown.status == 404 and await foreign.body() == await unknown.body()
        assert await page.is_visible("#sb-no-sinks")
    assert len(board_server.sql("SELECT * FROM notification_sinks")) == 1


async def test_a_team_sink_on_the_notifications_page(board_server, browser, chat):
    """An owner adds a sink for the team and tests it; a plain member sees it and can change nothing; a
    human outside the team gets the unknown id's 404 (D60)."""
    url, got = chat
    owner = await board_server.human("owner")
    member = await board_server.human("member")
    stranger = await board_server.human("stranger")
    slug = f"ops{uuid.uuid4().hex[:6]}"
    await board_server.run(teams.create, owner, slug)
    await board_server.run(teams.add_member, owner, slug, member.name, "member")

    async with page_for(browser, board_server, owner) as page:
        await page.goto("/notifications")
        await page.select_option("#sb-sink-owner", f"team:{slug}")
        await page.fill("#sb-sink-name", "team channel")
        await page.fill("#sb-sink-url", url)
        async with page.expect_navigation():
            await page.click("#sb-sink-add")
        assert await page.inner_text("#sb-sinks-notice") == "The sink is added."
        row = page.locator("[data-sb-sink]").first
        sink_id = await row.get_attribute("data-sb-sink")
        assert await row.locator("[data-sb-owner]").inner_text() == f"team {slug}"
        assert await axe_violations(page) == []
        async with page.expect_navigation():
            await page.click(f"#sb-sink-test-{sink_id}")
        assert "delivered (HTTP 200)" in await page.inner_text("#sb-sinks-notice")
        assert got[-1]["text"].startswith("Test message from Switchboard: the sink team channel works")
    assert board_server.sql("SELECT owner_human_id, t.slug FROM notification_sinks s "
                            "JOIN teams t ON t.id = s.owner_team_id") == [(None, slug)]

    async with page_for(browser, board_server, member) as page:
        await page.goto("/notifications")
        row = page.locator(f"#sb-sink-{sink_id}")
        assert "team owners and admins change it" in await row.inner_text()
        assert await page.locator(f"#sb-sink-remove-{sink_id}").count() == 0
        assert await page.locator("#sb-sink-owner").count() == 0  # a member manages no team: no choice
        await page.click(f"#sb-sink-log-{sink_id}")  # the team sink's messages are theirs to read
        await page.wait_for_selector("#sb-sink-facts")
        assert f"for team {slug}" in await page.inner_text("h1 + p")
        token = await page.get_attribute("input[name=csrf_token]", "value")
        for action in ("remove", "enable", "test"):
            r = await page.request.post(f"/notifications/{sink_id}/{action}", form={"csrf_token": token})
            assert r.status == 403 and "Nothing was changed" in await r.text(), action
        r = await page.request.post("/notifications", form={"csrf_token": token, "owner": f"team:{slug}",
                                                            "kind": "slack", "url": url, "events": "digest"})
        assert r.status == 403 and "For: only a team owner or admin may add notification sinks." in await r.text()
    assert len(board_server.sql("SELECT * FROM notification_sinks WHERE owner_team_id IS NOT NULL")) == 1
    assert len(got) == 1

    async with page_for(browser, board_server, stranger) as page:
        await page.goto("/notifications")
        assert await page.is_visible("#sb-no-sinks")
        token = await page.get_attribute("input[name=csrf_token]", "value")
        for action in ("remove", "enable", "test"):
            foreign = await page.request.post(f"/notifications/{sink_id}/{action}", form={"csrf_token": token})
            unknown = await page.request.post(f"/notifications/{uuid.uuid4()}/{action}", form={"csrf_token": token})
            assert foreign.status == unknown.status == 404, action
            assert await foreign.body() == await unknown.body()

    async with page_for(browser, board_server, owner) as page:
        await page.goto("/notifications")
        async with page.expect_navigation():
            await page.click(f"#sb-sink-remove-{sink_id}")
        assert board_server.sql("SELECT * FROM notification_sinks WHERE owner_team_id IS NOT NULL") == []
