"""Every Board screen in a real browser: the todos list (filters, paging, counts), vending with its
consent screen and one-time credential, revocation, the queue charts; axe-core finds no WCAG 2.1 A/AA
violation on any of them, and each is saved as a screenshot (under build/screens; `make screenshots`
refreshes the committed ones in docs/screens)."""

from __future__ import annotations

import json

from board_kit import axe_violations, page_for, screenshot
from switchboard.core import endpoints, todos


async def test_todos_screen_filters_pages_and_counts(board_server, browser):
    human = await board_server.human("list")
    ep1, a1 = await board_server.endpoint(human, queues=["inbox", "builds"], agent="builder")
    ep2, a2 = await board_server.endpoint(human, queues=["ops"], agent="operator-bot")
    made = []
    for i in range(27):
        t, _ = await board_server.run(todos.create, endpoint_id=a1.endpoint_id, queue="inbox",
                                      title=f"Inbox item {i:02d}")
        made.append(t["id"])
    for i in range(2):
        await board_server.run(todos.create, endpoint_id=a1.endpoint_id, queue="builds", title=f"Build {i}")
    ops, _ = await board_server.run(todos.create, endpoint_id=a2.endpoint_id, queue="ops", title="Rotate keys",
                                    max_attempts=1)
    await board_server.run(todos.claim, a2, ops["id"], claimant="ops-worker")
    await board_server.run(todos.fail, a2, ops["id"], summary="no access")
    await board_server.run(todos.claim, a1, made[0], claimant="inbox-worker")
    async with page_for(browser, board_server, human) as page:
        await page.goto("/todos")
        assert await page.get_attribute("nav a[aria-current=page]", "href") == "/todos"
        rows = page.locator("#sb-todos-body tr")
        assert await rows.count() == 25
        assert await rows.first.locator("a").inner_text() == "Rotate keys"  # newest first
        assert await page.inner_text("#sb-count-pending") == "28 pending"
        assert await page.inner_text("#sb-count-claimed") == "1 claimed"
        assert await page.inner_text("#sb-count-failed") == "1 failed"
        assert await page.inner_text("#sb-count-dead") == "1 dead letters"
        assert await axe_violations(page) == []
        await screenshot(page, "todos")
        await page.click("a[rel=next]")
        assert "page=2" in page.url and await rows.count() == 5
        assert await rows.last.locator("a").inner_text() == "Inbox item 00"
        await page.click("a[rel=prev]")
        assert await rows.count() == 25
        await page.select_option("#f-endpoint", ep2["slug"])
        await page.click("#sb-filter")
        assert await rows.count() == 1 and "Rotate keys" in await rows.first.inner_text()
        await page.goto("/todos?queue=builds")
        assert await rows.count() == 2
        await page.goto("/todos")
        await page.check("#f-dead")
        await page.click("#sb-filter")
        assert await rows.count() == 1 and "dead letter" in await rows.first.inner_text()
        await page.goto("/todos?state=claimed")
        assert await rows.count() == 1 and "Inbox item 00" in await rows.first.inner_text()
        await page.watch.assert_clean(page)
        response = await page.goto("/todos?state=sleeping")
        assert response.status == 400
        assert "state must be one of" in await page.inner_text("[role=alert]")
        page.watch.expected_http_errors(400)
        await page.goto("/todos/new")
        assert await axe_violations(page) == []
        await screenshot(page, "new-todo")
        # Another surface (the notify-hook delivery log) adds its link to the board it is given.
        slot = board_server.srv.app.state.surfaces.board.extra_nav
        slot.append(("Hook deliveries", "/hooks/deliveries"))
        try:
            await page.goto("/todos/new")
            link = page.locator("nav[aria-label=Primary] a", has_text="Hook deliveries")
            assert await link.get_attribute("href") == "/hooks/deliveries"
        finally:
            slot.remove(("Hook deliveries", "/hooks/deliveries"))
        await page.watch.assert_clean(page)


async def test_vend_wizard_consent_credential_once_and_revoke(board_server, browser):
    human = await board_server.human("vend")
    async with page_for(browser, board_server, human, permissions=["clipboard-read", "clipboard-write"]) as page:
        await page.goto("/endpoints")
        await page.click("#sb-vend")
        assert await axe_violations(page) == []
        await screenshot(page, "vend", full_page=True)
        # Refused in place with the reason when the details are wrong.
        await page.fill("#v-agent", "")
        await page.fill("#v-queues", "in box!")
        await page.click("#sb-review")
        assert "Give the agent a name" in await page.inner_text("#e-agent")
        assert "queue" in (await page.inner_text("#e-queues")).lower()
        page.watch.expected_http_errors(422)
        await page.fill("#v-agent", "ci-fixer")
        await page.fill("#v-queues", "inbox, builds")
        for verb in ("claim", "heartbeat", "fail", "release", "request_input"):
            await page.uncheck(f"#v-verb-{verb}")
        await page.fill("#v-lease", "600")
        await page.click("#sb-review")
        # The consent screen lists every verb with a plain explanation and its grant.
        table = page.locator("#sb-consent")
        grants = {await r.get_attribute("data-sb-verb"): await r.get_attribute("data-sb-grant")
                  for r in await table.locator("tbody tr").all()}
        assert grants == {"list_todos": "granted", "get_todo": "implied", "claim": "not granted",
                          "claim_next": "granted", "heartbeat": "not granted", "complete": "granted",
                          "fail": "not granted", "release": "not granted", "request_input": "not granted",
                          "admission_status": "implied"}
        release = await table.locator("tr[data-sb-verb=release]").inner_text()
        assert "Hand back a todo" in release and "No other verb implies this one" in release
        assert "implied by list_todos" in await table.locator("tr[data-sb-verb=get_todo]").inner_text()
        assert await axe_violations(page) == []
        await screenshot(page, "consent", full_page=True)
        # Back keeps what was entered.
        await page.click("#sb-vend-back")
        assert await page.input_value("#v-agent") == "ci-fixer"
        assert await page.input_value("#v-queues") == "inbox, builds"
        assert not await page.is_checked("#v-verb-release") and await page.is_checked("#v-verb-complete")
        await page.click("#sb-review")
        await page.click("#sb-vend-confirm")
        await page.wait_for_selector("#sb-credential")
        credential = (await page.inner_text("#sb-credential")).strip()
        assert credential.startswith("sbk_")
        slug = (await page.inner_text("#sb-mcp-url")).rsplit("/", 1)[1]
        config = json.loads(await page.inner_text("#sb-client-config"))
        server_conf = next(iter(config["mcpServers"].values()))
        assert server_conf["url"] == f"{board_server.url}/mcp/{slug}"
        assert server_conf["headers"]["Authorization"] == f"Bearer {credential}"
        await page.click("#sb-copy-credential")
        await page.wait_for_selector("#sb-copy-status:has-text('Copied')")
        assert await page.evaluate("navigator.clipboard.readText()") == credential
        assert await axe_violations(page) == []
        await screenshot(page, "credential", full_page=True)
        row = await board_server.run(endpoints.resolve_credential, credential)
        assert row is not None and row["slug"] == slug
        assert list(row["scope_verbs"]) == ["list_todos", "claim_next", "complete"]
        assert row["default_lease_ttl_seconds"] == 600
        # Shown once: the same page again no longer has it.
        await page.watch.assert_clean(page)
        response = await page.reload()
        assert response.status == 410 and credential not in await page.content()
        page.watch.expected_http_errors(410)
        # The list shows it; revoke asks first, and "keep it" keeps it.
        await page.goto("/endpoints")
        listed = await page.inner_text(f"#sb-ep-{slug}")
        assert "ci-fixer" in listed and "inbox, builds" in listed and "UTC" in listed  # last use: the check above
        assert await axe_violations(page) == []
        await screenshot(page, "endpoints")
        agent = endpoints.caller_from_row(row)
        live, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="In flight")
        await page.click(f"#sb-revoke-{slug}")
        assert "1 live todo becomes" in await page.inner_text("main")
        assert await axe_violations(page) == []
        await screenshot(page, "revoke")
        await page.click("text=Keep it")
        assert await board_server.run(endpoints.resolve_credential, credential) is not None
        await page.click(f"#sb-revoke-{slug}")
        await page.click("#sb-revoke-confirm")
        assert f"Endpoint {slug} was revoked." in await page.inner_text("[role=status].sb-notice")
        assert "revoked" in await page.inner_text(f"#sb-ep-{slug}")
        assert await board_server.run(endpoints.resolve_credential, credential) is None
        detail = await board_server.run(todos.get, human, live["id"])
        assert detail["dead_letter"] is True
        await page.watch.assert_clean(page)
    # Another human cannot see or revoke it: the same not-found as an unknown slug.
    other = await board_server.human("nosy")
    async with page_for(browser, board_server, other) as page:
        theirs = await page.request.get(f"/endpoints/{slug}/revoke")
        unknown = await page.request.get("/endpoints/nosuchslug123/revoke")
        assert theirs.status == unknown.status == 404
        assert await theirs.body() == await unknown.body()


async def test_queue_charts_show_attempt_outcomes(board_server, browser):
    human = await board_server.human("chart")
    _, agent = await board_server.endpoint(human, queues=["builds", "docs"])
    for i in range(4):
        t, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds", title=f"b{i}")
        await board_server.run(todos.claim, agent, t["id"])
        if i % 2:
            await board_server.run(todos.fail, agent, t["id"], summary="red")
        else:
            await board_server.run(todos.complete, agent, t["id"])
    t, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="docs", title="d")
    await board_server.run(todos.claim, agent, t["id"])
    await board_server.run(todos.release, agent, t["id"])
    await board_server.run(todos.claim, agent, t["id"])
    # Another human's attempts never show up in this human's charts.
    stranger = await board_server.human("stranger")
    _, other_agent = await board_server.endpoint(stranger, queues=["builds"])
    s, _ = await board_server.run(todos.create, endpoint_id=other_agent.endpoint_id, queue="builds", title="s")
    await board_server.run(todos.claim, other_agent, s["id"])
    await board_server.run(todos.complete, other_agent, s["id"])
    async with page_for(browser, board_server, human) as page:
        await page.goto("/queues")
        sections = page.locator("section.sb-queue")
        assert await sections.count() == 2
        builds = sections.nth(0)
        assert "4 attempts closed" in await builds.inner_text()
        chart = builds.get_by_role("img", name="Attempt outcomes per day for queue builds")
        assert await chart.count() == 1
        assert await builds.locator("svg rect").count() == 2  # today's bar: completed + failed
        titles = await builds.locator("svg rect title").all_text_contents()
        assert sorted(t.split(": ")[1] for t in titles) == ["2 completed", "2 failed"]
        await builds.locator("summary").click()
        numbers = await builds.locator("table tbody").inner_text()
        assert "completed\t2" in numbers and "failed\t2" in numbers
        docs = sections.nth(1)
        assert "1 attempt closed" in await docs.inner_text() and "1 in progress" in await docs.inner_text()
        assert await page.locator("svg script").count() == 0
        assert await axe_violations(page) == []
        await screenshot(page, "queues")
        await page.watch.assert_clean(page)
        response = await page.goto("/queues?days=1000")
        assert response.status == 400 and "days must be one of" in await page.inner_text("[role=alert]")
