"""The Board's Webhooks screens in a real browser (SYSTEM.md §10: "delivery log visible on the Board").

One list of the hooks a human sees (their endpoints' and their teams'); a form that adds one and
shows its signing secret once; the delivery log of a hook with every attempt, fed by a real receiver
that checks the signature with the secret the page showed; Enable and Remove for whoever manages the
hook; a plain team member reads the team's hooks and their log but changes nothing; anyone else gets
the unknown id's 404, byte for byte; CSRF on every POST; axe-core finds no WCAG 2.1 A/AA violation and
the CSP reports nothing.
"""

from __future__ import annotations

import time
import uuid

from standardwebhooks import Webhook

from board_kit import CSP, axe_violations, page_for, screenshot
from switchboard.core import producer, teams
from test_sinks import receiver  # noqa: F401  (the fixture: a real HTTP receiver recording each request)

PATH = "/hook?token=receiver-query-secret"  # the query checks that the screens redact it


def _wait(board_server, statement: str, n: int, timeout: float = 15.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        rows = board_server.sql(statement)
        if len(rows) >= n:
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.05)


async def test_a_human_adds_a_hook_sees_its_deliveries_enables_and_removes_it(board_server, browser, receiver):  # noqa: F811
    board_server.srv.app.state.surfaces.hooks.retry_delays = (0.05, 0.1, 0.1)
    human = await board_server.human("hooks")
    ep, _ = await board_server.endpoint(human)
    async with page_for(browser, board_server, human) as page:
        response = await page.goto("/hooks")
        assert response.status == 200 and response.headers["content-security-policy"] == CSP
        assert await page.get_attribute("nav a[aria-current=page]", "href") == "/hooks"
        assert await page.is_visible("#sb-no-hooks")
        assert await page.input_value("#sb-hook-owner") == f"endpoint:{ep['slug']}"
        assert await axe_violations(page) == []

        # Bad input: the field is named and marked, what was typed is kept, nothing is stored.
        await page.fill("#sb-hook-url", "ftp://example.com/in")
        async with page.expect_navigation():
            await page.click("#sb-hook-add")
        assert (await page.inner_text("#sb-hook-form-error")).startswith("Url:")
        assert await page.get_attribute("#sb-hook-url", "aria-invalid") == "true"
        assert await page.input_value("#sb-hook-url") == "ftp://example.com/in"
        for i in range(1, 5):
            await page.uncheck(f"#sb-hook-event-{i}")
        await page.fill("#sb-hook-url", receiver.url(PATH))
        async with page.expect_navigation():
            await page.click("#sb-hook-add")
        assert (await page.inner_text("#sb-hook-form-error")).startswith("Events:")
        assert await axe_violations(page) == []
        page.watch.expected_http_errors(422)
        assert board_server.sql("SELECT * FROM notify_hooks") == []

        # Added: the secret is on this page only, and the page is not kept by any cache.
        await page.check("#sb-hook-event-1")  # todo.created
        await page.check("#sb-hook-event-3")  # todo.completed
        async with page.expect_navigation() as nav:
            await page.click("#sb-hook-add")
        created = await nav.value
        assert created.status == 201 and "no-store" in created.headers["cache-control"]
        secret = await page.inner_text("#sb-hook-secret")
        assert secret.startswith("whsec_")
        assert await page.inner_text("#sb-hook-target") == receiver.url(PATH)
        assert await axe_violations(page) == []
        [(hook_id, events)] = board_server.sql("SELECT id::text, events FROM notify_hooks")
        assert events == ["todo.created", "todo.completed"]

        # A real notification, delivered after one refusal: the receiver verifies it with the secret
        # the page showed, and the log shows both attempts.
        receiver.statuses = [500]
        todo, _ = await board_server.run(producer.push, human, ep["slug"], title="ship it")
        await receiver.wait(2)
        path, headers, body = receiver.got[-1]
        assert path == PATH
        assert Webhook(secret).verify(body, headers)["todo_id"] == todo["id"]
        _wait(board_server, "SELECT 1 FROM hook_outbox WHERE state = 'delivered'", 1)

        async with page.expect_navigation():
            await page.click("#sb-hook-done")
        assert page.url.endswith(f"/hooks/{hook_id}")
        assert "/hook?redacted" in await page.inner_text("h1 + p")
        assert "receiver-query-secret" not in await page.content()
        rows = page.locator("[data-sb-delivery]")
        assert await rows.count() == 1
        assert await rows.first.get_attribute("data-sb-state") == "delivered"
        text = await rows.first.inner_text()
        assert "todo.created" in text and todo["id"] in text and "HTTP 200" in text
        await page.click("[data-sb-delivery] summary")
        attempts = page.locator("[data-sb-attempt]")
        assert await attempts.count() == 2
        assert "HTTP 500" in await attempts.nth(0).inner_text()
        assert "HTTP 200" in await attempts.nth(1).inner_text()
        assert await axe_violations(page) == []
        await screenshot(page, "hook-deliveries")

        # Disabled after failures: the reason shows; Enable clears it; Remove deletes it.
        board_server.sql("UPDATE notify_hooks SET enabled = false, consecutive_failures = 10, "
                         "disabled_reason = 'disabled after 10 failed deliveries in a row; last: HTTP 503'")
        await page.goto("/hooks")
        row = page.locator(f"#sb-hook-{hook_id}")
        assert await row.get_attribute("data-sb-enabled") == "false"
        assert "last: HTTP 503" in await page.inner_text(f"#sb-hook-reason-{hook_id}")
        assert "receiver-query-secret" not in await page.content()
        assert await axe_violations(page) == []
        await screenshot(page, "hooks")
        async with page.expect_navigation():
            await page.click(f"#sb-hook-enable-{hook_id}")
        assert "enabled again" in await page.inner_text("#sb-hooks-notice")
        assert board_server.sql("SELECT enabled, consecutive_failures, disabled_reason FROM notify_hooks") == [
            (True, 0, None)]
        assert await page.locator(f"#sb-hook-enable-{hook_id}").count() == 0

        async with page.expect_navigation():
            await page.click(f"#sb-hook-remove-{hook_id}")
        assert "is removed" in await page.inner_text("#sb-hooks-notice")
        assert await page.is_visible("#sb-no-hooks")
        assert board_server.sql("SELECT * FROM notify_hooks") == []
        assert board_server.sql("SELECT * FROM hook_outbox") == []
        await page.watch.assert_clean(page)


async def test_a_team_hook_on_the_board_for_its_owner_a_member_and_a_stranger(board_server, browser, receiver):  # noqa: F811
    owner = await board_server.human("owner")
    member = await board_server.human("member")
    stranger = await board_server.human("stranger")
    slug = f"ops{uuid.uuid4().hex[:6]}"
    await board_server.run(teams.create, owner, slug)
    await board_server.run(teams.add_member, owner, slug, member.name, "member")
    await board_server.endpoint(member)  # a member's own endpoint: its hooks are theirs to add

    async with page_for(browser, board_server, owner) as page:
        await page.goto("/hooks")
        await page.select_option("#sb-hook-owner", f"team:{slug}")
        await page.fill("#sb-hook-url", receiver.url(PATH))
        async with page.expect_navigation():
            await page.click("#sb-hook-add")
        assert f"team {slug}" in await page.inner_text("dl.sb-facts")
    [(hook_id, team_slug)] = board_server.sql("SELECT id::text, team_slug FROM notify_hooks")
    assert team_slug == slug

    todo, _ = await board_server.run(producer.push_team, owner, f"team:{slug}/inbox", title="team work")
    await receiver.wait(1)

    async with page_for(browser, board_server, member) as page:
        await page.goto("/hooks")
        row = page.locator(f"#sb-hook-{hook_id}")
        assert f"team {slug}" in await row.inner_text()
        assert "team owners and admins change it" in await row.inner_text()
        assert await page.locator(f"#sb-hook-remove-{hook_id}").count() == 0
        # The add form offers the member's endpoint, not the team they do not manage.
        offered = await page.locator("#sb-hook-owner option").evaluate_all("os => os.map(o => o.value)")
        assert offered and all(v.startswith("endpoint:") for v in offered)
        assert await axe_violations(page) == []
        # The log is theirs to read.
        await page.click(f"#sb-hook-log-{hook_id}")
        await page.wait_for_selector("[data-sb-delivery]")
        assert todo["id"] in await page.inner_text("#sb-deliveries")
        # Changing it is refused, and nothing changes.
        token = await _token(page)
        for action in ("remove", "enable"):
            r = await page.request.post(f"/hooks/{hook_id}/{action}", form={"csrf_token": token})
            assert r.status == 403, action
            assert "Nothing was changed" in await r.text()
        r = await page.request.post("/hooks", form={"csrf_token": token, "owner": f"team:{slug}",
                                                    "url": receiver.url(PATH), "events": "todo.created"})
        assert r.status == 403 and "Owner: only a team owner or admin may add notify hooks." in await r.text()
        page.watch.expected_http_errors(403)
        # Reach is read on every request: out of the team, the hook is gone from their view.
        await board_server.run(teams.remove_member, owner, slug, member.name)
        gone = await page.request.get(f"/hooks/{hook_id}")
        unknown = await page.request.get(f"/hooks/{uuid.uuid4()}")
        assert gone.status == 404 and await gone.body() == await unknown.body()
        await page.goto("/hooks")
        assert await page.locator(f"#sb-hook-{hook_id}").count() == 0
    assert len(board_server.sql("SELECT * FROM notify_hooks")) == 1

    async with page_for(browser, board_server, stranger) as page:
        await page.goto("/hooks")
        assert await page.is_visible("#sb-no-hooks")
        assert await page.is_visible("#sb-no-owners")
        token = await _token(page)
        for path in (hook_id, str(uuid.uuid4())):
            assert (await page.request.get(f"/hooks/{path}")).status == 404
        foreign = await page.request.get(f"/hooks/{hook_id}")
        unknown = await page.request.get(f"/hooks/{uuid.uuid4()}")
        garbage = await page.request.get("/hooks/not-a-hook")
        assert await foreign.body() == await unknown.body() == await garbage.body()
        for action in ("remove", "enable"):
            foreign = await page.request.post(f"/hooks/{hook_id}/{action}", form={"csrf_token": token})
            unknown = await page.request.post(f"/hooks/{uuid.uuid4()}/{action}", form={"csrf_token": token})
            assert foreign.status == unknown.status == 404, action
            assert await foreign.body() == await unknown.body()
        r = await page.request.post("/hooks", form={"csrf_token": token, "owner": f"team:{slug}",
                                                    "url": receiver.url(PATH), "events": "todo.created"})
        assert r.status == 422 and "Owner: choose one of your active endpoints" in await r.text()
    assert len(board_server.sql("SELECT * FROM notify_hooks")) == 1

    # CSRF: without the token every POST is refused before anything is touched.
    async with page_for(browser, board_server, owner) as page:
        await page.goto("/hooks")
        for action in ("remove", "enable"):
            assert (await page.request.post(f"/hooks/{hook_id}/{action}", form={"x": "1"})).status == 403
        r = await page.request.post("/hooks", form={"owner": f"team:{slug}", "url": receiver.url(PATH)})
        assert r.status == 403
        assert len(board_server.sql("SELECT * FROM notify_hooks")) == 1
        # The owner removes it.
        async with page.expect_navigation():
            await page.click(f"#sb-hook-remove-{hook_id}")
        assert board_server.sql("SELECT * FROM notify_hooks") == []


async def _token(page) -> str:
    """The CSRF token of the signed-in human, from a page that has a form (the sign-out form)."""
    return await page.locator("input[name=csrf_token]").first.get_attribute("value")
