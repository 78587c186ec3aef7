"""The Board's Intake page in Debian's Chromium: create an intake (URL and secret shown once), edit the
rules with server-side checks, a GitHub delivery quarantined by a rule error, replayed after the fix,
another dropped; CSRF on every POST, the CSP kept, axe-clean; another human gets the same not-found."""

from __future__ import annotations

import json
import uuid

import httpx

from board_kit import axe_violations, page_for, screenshot
from switchboard.core import todos
from switchboard.web import intake_hook

ISSUE = {"action": "labeled", "label": {"name": "agent"},
         "issue": {"number": 12, "title": "Flaky login test", "html_url": "https://github.com/o/r/issues/12",
                   "body": "It fails one run in ten."},
         "repository": {"full_name": "o/r"}}


def deliver(url: str, secret: str, payload: dict, delivery: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    return httpx.post(url, content=body, timeout=30, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "issues", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": intake_hook.github_signature(secret, body)})


async def test_intake_page_create_rules_quarantine_replay_and_drop(board_server, browser):
    human = await board_server.human("intake")
    await board_server.endpoint(human, queues=("triage",), agent="triager")
    async with page_for(browser, board_server, human, permissions=["clipboard-read", "clipboard-write"]) as page:
        await page.goto("/todos")
        await page.click("nav a[href='/intakes']")
        assert await page.get_attribute("nav a[href='/intakes']", "aria-current") == "page"
        assert await axe_violations(page) == []
        await screenshot(page, "intake", full_page=True)

        # A bad rule is refused in place, naming the rule and field; nothing is made.
        await page.fill("#i-name", "github issues")
        await page.check("#i-source-github")
        await page.fill("#i-rules", json.dumps([{"title": "'ok'"}, {"title": "body.issue.["}]))
        await page.click("#sb-create-intake")
        assert "rules[1].title" in await page.inner_text("#e-rules")
        assert await page.get_attribute("#i-rules", "aria-invalid") == "true"
        page.watch.expected_http_errors(422)
        assert await axe_violations(page) == []
        assert board_server.sql("SELECT id FROM intakes") == []

        # A rule whose title meets a number: created now, failing on the first delivery.
        broken = [{"filter": "event == 'issues'", "title": "join(' ', ['#', body.issue.number])", "kind": "'issue'"}]
        await page.fill("#i-rules", json.dumps(broken))
        await page.click("#sb-create-intake")
        await page.wait_for_selector("#sb-intake-secret")
        url = (await page.inner_text("#sb-intake-url")).strip()
        secret = (await page.inner_text("#sb-intake-secret")).strip()
        assert "/webhooks/w/sbi_" in url and len(secret) == 64
        await page.click("#sb-copy-secret")
        await page.wait_for_selector("#sb-copy-status:has-text('Copied')")
        assert await page.evaluate("navigator.clipboard.readText()") == secret
        assert await axe_violations(page) == []
        await screenshot(page, "intake-created", full_page=True)
        # Shown once.
        response = await page.reload()
        assert response.status == 410 and secret not in await page.content()
        page.watch.expected_http_errors(410)

        delivery = str(uuid.uuid4())
        r = deliver(url, secret, ISSUE, delivery)
        assert r.status_code == 202 and r.json()["status"] == "quarantined"
        await page.goto("/intakes")
        await page.click("text=github issues")
        held = page.locator("li[id^=sb-held-]")
        assert await held.count() == 1
        text = await held.inner_text()
        assert "rules[0].title failed" in text and delivery in text
        assert secret not in await page.content()
        assert await axe_violations(page) == []
        await screenshot(page, "intake-quarantine", full_page=True)
        item = (await held.get_attribute("id")).removeprefix("sb-held-")

        # Replay before the fix: still held, with the reason.
        await page.click(f"#sb-replay-{item}")
        assert "Still quarantined: rules[0].title failed" in await page.inner_text("#sb-intake-error")
        page.watch.expected_http_errors(409)
        # A bad edit is refused and keeps what was typed.
        await page.fill("#i-rules", "[{\"title\": 3}]")
        await page.click("#sb-save-rules")
        assert "rules[0].title" in await page.inner_text("#e-rules")
        assert await page.input_value("#i-rules") == "[{\"title\": 3}]"
        page.watch.expected_http_errors(422)
        fixed = [{"filter": "event == 'issues' && body.action == 'labeled'",
                  "title": "join(' ', ['#', to_string(body.issue.number), body.issue.title])",
                  "kind": "'issue'"}]
        await page.fill("#i-rules", json.dumps(fixed))
        await page.click("#sb-save-rules")
        assert "Rules saved." in await page.inner_text("[role=status].sb-notice")
        await page.click(f"#sb-replay-{item}")
        assert "became a todo" in await page.inner_text("[role=status].sb-notice")
        assert await page.locator("li[id^=sb-held-]").count() == 0
        todo_id = (await page.get_attribute("[role=status].sb-notice a", "href")).rsplit("/", 1)[1]
        todo = await board_server.run(todos.get, human, todo_id)
        assert (todo["title"], todo["kind"], todo["source"], todo["queue"]) == (
            "# 12 Flaky login test", "issue", "intake-github", "triage")

        # Another delivery no rule matches, dropped from the page.
        deliver(url, secret, {**ISSUE, "action": "closed"}, str(uuid.uuid4()))
        other = deliver(url, secret, ISSUE, str(uuid.uuid4()))  # a second issue delivery: a todo
        assert other.json()["status"] == "accepted"
        await page.reload()
        [row] = await page.locator("li[id^=sb-held-]").all()
        dropped = (await row.get_attribute("id")).removeprefix("sb-held-")
        assert dropped != item
        await page.click(f"#sb-drop-{dropped}")
        assert "dropped" in await page.inner_text("[role=status].sb-notice")
        assert await page.locator("li[id^=sb-held-]").count() == 0
        await page.watch.assert_clean(page)

        # CSRF: a POST without the token changes nothing.
        ref = board_server.sql("SELECT id FROM intakes")[0][0]
        forged = await page.request.post(f"/intakes/{ref}/rules", form={"rules": "[]"})
        assert forged.status == 403
        assert board_server.sql("SELECT jsonb_array_length(rules) FROM intakes")[0][0] == 1

    # Another human: the same not-found as an intake that never existed.
    nosy = await board_server.human("nosy")
    async with page_for(browser, board_server, nosy) as page:
        theirs = await page.request.get(f"/intakes/{ref}")
        never = await page.request.get(f"/intakes/{uuid.uuid4()}")
        assert theirs.status == never.status == 404
        assert await theirs.body() == await never.body()

    # Pausing refuses deliveries until enabled again; removal asks first, then the URL stops working.
    async with page_for(browser, board_server, human) as page:
        await page.goto(f"/intakes/{ref}")
        await page.click("#sb-toggle-intake")
        assert "paused" in await page.inner_text("[role=status].sb-notice")
        assert deliver(url, secret, ISSUE, str(uuid.uuid4())).status_code == 401
        assert await axe_violations(page) == []
        await page.click("#sb-toggle-intake")
        assert "enabled again" in await page.inner_text("[role=status].sb-notice")
        assert deliver(url, secret, ISSUE, str(uuid.uuid4())).status_code == 202
        await page.click("#sb-remove-intake")
        assert await axe_violations(page) == []
        await page.click("#sb-remove-confirm")
        assert "removed" in await page.inner_text("[role=status].sb-notice")
        assert deliver(url, secret, ISSUE, str(uuid.uuid4())).status_code == 401
        await page.watch.assert_clean(page)
