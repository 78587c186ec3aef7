"""Teams and admission control on the Board, in a real browser (issue 13): the Teams screen and a team's
page (members and roles, queues with counts, grants), the pause switch and the policy form of a team
queue and of an endpoint's queue, a member's drawer on a team todo with its attempt history, team todos
in the list with a team filter, a team queue in the new-todo form, and a non-member's 404 that is the
same as an unknown team's. axe-core finds no WCAG 2.1 A/AA violation on these pages and the CSP reports
nothing."""

from __future__ import annotations

import uuid

from board_kit import CSP, axe_violations, open_drawer, page_for, screenshot
from switchboard.core import admission, producer, teams, todos


def _slug(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


async def _crew(server, slug: str):
    """A team `slug`: owner, admin and member, each with an endpoint on team:<slug>/inbox granted by
    the owner. Returns (owner, admin, member, {name: (endpoint, agent caller)})."""
    owner = await server.human("own")
    admin = await server.human("adm")
    member = await server.human("mem")
    await server.run(teams.create, owner, slug, f"Team {slug}")
    await server.run(teams.add_member, owner, slug, admin.name, "admin")
    await server.run(teams.add_member, owner, slug, member.name, "member")
    label = f"team:{slug}/inbox"
    eps = {}
    for who in (owner, admin, member):
        ep, agent = await server.endpoint(who, queues=[label], agent=f"{who.name}-bot")
        await server.run(teams.grant, owner, slug, label, ep["slug"])
        eps[who.name] = (ep, agent)
    return owner, admin, member, eps


async def test_teams_screen_create_members_roles_and_grants(board_server, browser):
    owner = await board_server.human("own")
    admin = await board_server.human("adm")
    helper = await board_server.human("mem")
    slug = _slug()
    async with page_for(browser, board_server, owner) as page:
        response = await page.goto("/teams")
        assert response.status == 200 and response.headers["content-security-policy"] == CSP
        assert await page.get_attribute("nav a[aria-current=page]", "href") == "/teams"
        assert await page.is_visible("#sb-no-teams")
        assert await axe_violations(page) == []

        # A bad slug is refused naming the field, and nothing is made.
        await page.fill("#sb-team-slug", "Not A Slug")
        async with page.expect_navigation():
            await page.click("#sb-team-create")
        assert (await page.inner_text("#sb-team-error")).startswith("Slug:")
        assert await page.get_attribute("#sb-team-slug", "aria-invalid") == "true"
        assert await axe_violations(page) == []
        page.watch.expected_http_errors(422)

        await page.fill("#sb-team-slug", slug)
        await page.fill("#sb-team-name", "Night shift")
        async with page.expect_navigation():
            await page.click("#sb-team-create")
        assert page.url.endswith(f"/teams/{slug}?done=created")
        assert await page.inner_text("#sb-my-role") == "owner"
        assert "Team Night shift" in await page.inner_text("h1")

        # Add an admin and a member, through the form.
        for name, role in ((admin.name, "admin"), (helper.name, "member")):
            await page.fill("#sb-member-name", name)
            await page.select_option("#sb-member-role", role)
            async with page.expect_navigation():
                await page.click("#sb-member-add")
            assert await page.inner_text("#sb-team-notice") == "The member is added."
        rows = page.locator("#sb-members-table tbody tr")
        assert await rows.count() == 3
        assert await page.inner_text(f"[data-sb-member='{admin.name}'] [data-sb-role]") == "admin"
        assert await page.inner_text(f"[data-sb-member='{helper.name}'] [data-sb-role]") == "member"
        # An unknown account is named in the message; nothing changes.
        await page.fill("#sb-member-name", "nobody-" + uuid.uuid4().hex[:6])
        async with page.expect_navigation():
            await page.click("#sb-member-add")
        assert "Member: there is no account named nobody-" in await page.inner_text("#sb-page-error")
        assert await page.get_attribute("#sb-member-name", "aria-invalid") == "true"
        assert await rows.count() == 3
        page.watch.expected_http_errors(422)

        # Change a role and back.
        row = page.locator(f"[data-sb-member='{helper.name}']")
        await row.locator("select").select_option("admin")
        async with page.expect_navigation():
            await row.locator("button", has_text="Change role").click()
        assert await page.inner_text(f"[data-sb-member='{helper.name}'] [data-sb-role]") == "admin"
        row = page.locator(f"[data-sb-member='{helper.name}']")
        await row.locator("select").select_option("member")
        async with page.expect_navigation():
            await row.locator("button", has_text="Change role").click()
        assert await page.inner_text(f"[data-sb-member='{helper.name}'] [data-sb-role]") == "member"

        # The member vends an endpoint naming the team queue; it waits for a grant, given here.
        label = f"team:{slug}/inbox"
        ep, agent = await board_server.endpoint(helper, queues=[label], agent="night-worker")
        assert await board_server.run(todos.claim_next, agent) is None  # not granted yet
        await page.fill("#sb-grant-queue", "inbox")
        await page.fill("#sb-grant-endpoint", ep["slug"])
        async with page.expect_navigation():
            await page.click("#sb-grant-add")
        assert await page.inner_text("#sb-team-notice") == "The queue is granted to the endpoint."
        grant = page.locator(f"[data-sb-grant='{label} {ep['slug']}']")
        assert "night-worker" in await grant.inner_text() and helper.name in await grant.inner_text()
        assert "yes" in await grant.inner_text()
        # An endpoint of nobody on the team cannot be granted.
        stranger_ep, _ = await board_server.endpoint(await board_server.human("out"), queues=["inbox"])
        await page.fill("#sb-grant-queue", "inbox")
        await page.fill("#sb-grant-endpoint", stranger_ep["slug"])
        async with page.expect_navigation():
            await page.click("#sb-grant-add")
        assert "Endpoint: no endpoint of a member of this team has that slug" in await page.inner_text(
            "#sb-page-error")
        page.watch.expected_http_errors(422)

        # Queues with counts: two pushed, one claimed by the member's endpoint.
        for title in ("Sort the mail", "Answer the phone"):
            await board_server.run(producer.push_team, owner, label, title=title)
        claimed = await board_server.run(todos.claim_next, agent)
        assert claimed is not None
        await page.goto(f"/teams/{slug}")
        queue = page.locator(f"#sb-team-queues tr[data-sb-queue='{label}']")
        cells = await queue.locator("td").all_inner_texts()
        assert cells[:4] == ["1", "1", "0", "0"]  # pending, in flight, parked, dead
        assert await axe_violations(page) == []
        await screenshot(page, "team", full_page=True)

        # Taking the grant back hands the lease back: the todo is pending again.
        async with page.expect_navigation():
            await grant.locator("button", has_text="Take back").click()
        assert await page.is_visible("#sb-no-grants")
        cells = await page.locator(f"#sb-team-queues tr[data-sb-queue='{label}'] td").all_inner_texts()
        assert cells[:2] == ["2", "0"]
        detail = await board_server.run(todos.get, owner, claimed.todo["id"])
        assert detail["state"] == "pending" and detail["attempts"][0]["outcome"] == "released"

        # Remove a member.
        async with page.expect_navigation():
            await page.locator(f"[data-sb-member='{admin.name}'] button", has_text="Remove").click()
        assert await rows.count() == 2
        assert await page.locator(f"[data-sb-member='{admin.name}']").count() == 0

        await page.goto("/teams")
        assert await page.inner_text(f"[data-sb-team='{slug}'] [data-sb-role]") == "owner"
        await screenshot(page, "teams")
        await page.watch.assert_clean(page)

    # The helper sees the team read-only and may leave it.
    async with page_for(browser, board_server, helper) as page:
        await page.goto(f"/teams/{slug}")
        assert await page.inner_text("#sb-my-role") == "member"
        for control in ("#sb-add-member", "#sb-grant", "#sb-team-delete", "#sb-pause-q0",
                        "#sb-members-table button", "details.sb-policy"):
            assert await page.locator(control).count() == 0, control
        assert await page.inner_text(f"[data-sb-queue='team:{slug}/inbox'] [data-sb-paused]") == "not paused"
        assert await axe_violations(page) == []
        async with page.expect_navigation():
            await page.click("#sb-team-leave")
        assert page.url.endswith("/teams?done=left")
        assert await page.is_visible("#sb-no-teams")
        response = await page.goto(f"/teams/{slug}")
        assert response.status == 404
        page.watch.expected_http_errors(404)
        await page.watch.assert_clean(page)

    # The owner deletes the team after a confirmation.
    async with page_for(browser, board_server, owner) as page:
        await page.goto(f"/teams/{slug}")
        await page.click("#sb-team-delete")
        assert "2 live todos" in await page.inner_text("main")
        assert await axe_violations(page) == []
        async with page.expect_navigation():
            await page.click("#sb-team-delete-confirm")
        assert page.url.endswith("/teams?done=deleted")
        assert board_server.sql("SELECT 1 FROM teams WHERE slug = %(s)s", {"s": slug}) == []
        await page.watch.assert_clean(page)


async def test_pause_switch_and_policy_on_a_team_queue(board_server, browser):
    slug = _slug()
    owner, admin, member, eps = await _crew(board_server, slug)
    label = f"team:{slug}/inbox"
    await board_server.run(producer.push_team, owner, label, title="Waiting work")
    _, worker = eps[member.name]
    async with page_for(browser, board_server, admin) as page:  # an admin manages policies
        await page.goto(f"/teams/{slug}")
        switch = page.locator("#sb-pause-q0")
        assert await switch.get_attribute("role") == "switch"
        assert await switch.get_attribute("aria-checked") == "false"
        async with page.expect_navigation():
            await switch.click()
        assert await page.inner_text("#sb-team-notice") == (
            "The queue is paused: no claim is admitted until it is resumed.")
        assert await page.get_attribute("#sb-pause-q0", "aria-checked") == "true"
        assert await page.get_attribute(f"[data-sb-queue='{label}'] [data-sb-status]", "data-sb-status") == "paused"
        assert board_server.sql("SELECT paused FROM admission_policies WHERE queue = %(q)s", {"q": label}) == [
            (True,)]
        assert await board_server.run(todos.claim_next, worker) is None  # paused: nothing is admitted
        assert await axe_violations(page) == []
        await screenshot(page, "team-paused")

        async with page.expect_navigation():
            await page.click("#sb-pause-q0")
        assert await page.inner_text("#sb-team-notice") == "The queue is resumed."
        assert await page.get_attribute("#sb-pause-q0", "aria-checked") == "false"
        assert await page.get_attribute(f"[data-sb-queue='{label}'] [data-sb-status]", "data-sb-status") == "open"

        # A policy: used of max and in flight of max, with the window's reset.
        await page.click("#sb-policy-q0 summary")
        await page.fill("#sb-mif-q0", "3")
        await page.fill("#sb-mcw-q0", "10")
        await page.select_option("#sb-period-q0", "day")
        await page.fill("#sb-tz-q0", "Europe/Paris")
        async with page.expect_navigation():
            await page.click("#sb-policy-save-q0")
        assert await page.inner_text("#sb-team-notice") == "The admission policy is saved."
        claim = await board_server.run(todos.claim_next, worker)
        assert claim is not None
        await page.reload()
        queue = page.locator(f"[data-sb-queue='{label}']")
        assert (await queue.locator("[data-sb-claims]").inner_text()).startswith("1 of 10")
        assert await queue.locator("[data-sb-in-flight]").inner_text() == "1 of 3"
        assert await queue.locator("time").count() == 1  # resets at

        # A bad value: 422, the field named and marked, the form kept open with what was typed.
        await page.click("#sb-policy-q0 summary")
        await page.fill("#sb-mif-q0", "20000")
        async with page.expect_navigation():
            await page.click("#sb-policy-save-q0")
        assert (await page.inner_text("#sb-policy-error")).startswith("Max in flight: max_in_flight must be")
        assert await page.get_attribute("#sb-mif-q0", "aria-invalid") == "true"
        assert await page.input_value("#sb-mif-q0") == "20000"
        assert await page.get_attribute("#sb-policy-q0", "open") is not None
        assert await axe_violations(page) == []
        page.watch.expected_http_errors(422)
        await page.fill("#sb-tz-q0", "Mars/Base")
        await page.fill("#sb-mif-q0", "3")
        async with page.expect_navigation():
            await page.click("#sb-policy-save-q0")
        assert (await page.inner_text("#sb-policy-error")).startswith("Time zone:")
        page.watch.expected_http_errors(422)
        got = await board_server.run(admission.show, admin, label)
        assert got["max_in_flight"] == 3 and got["window"]["tz"] == "Europe/Paris"

        await page.goto(f"/teams/{slug}")
        await page.click("#sb-policy-q0 summary")
        async with page.expect_navigation():
            await page.click("#sb-policy-clear-q0")
        assert await page.inner_text("#sb-team-notice") == (
            "The admission policy is cleared: the queue has no limit now.")
        assert await page.inner_text(f"[data-sb-queue='{label}'] [data-sb-claims]") == "no policy"
        await page.watch.assert_clean(page)


async def test_pause_switch_and_policy_on_an_endpoint_queue(board_server, browser):
    human = await board_server.human("epq")
    ep, agent = await board_server.endpoint(human, queues=["inbox", "builds"], agent="runner")
    await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds", title="Build it")
    async with page_for(browser, board_server, human) as page:
        await page.goto("/queues")
        row = page.locator(f"[data-sb-queue='{ep['slug']} builds']")
        key = (await row.locator("button[role=switch]").get_attribute("id")).removeprefix("sb-pause-")
        assert await row.locator("[data-sb-claims]").inner_text() == "no policy"
        async with page.expect_navigation():
            await row.locator("button[role=switch]").click()
        assert page.url.endswith("/queues?done=paused#sb-queues")
        assert await row.locator("button[role=switch]").get_attribute("aria-checked") == "true"
        assert await board_server.run(todos.claim_next, agent, queue="builds") is None
        assert await axe_violations(page) == []
        await screenshot(page, "queues-admission")
        async with page.expect_navigation():
            await row.locator("button[role=switch]").click()
        assert await row.locator("button[role=switch]").get_attribute("aria-checked") == "false"

        await page.click(f"#sb-policy-{key} summary")
        await page.fill(f"#sb-mcw-{key}", "5")
        async with page.expect_navigation():
            await page.click(f"#sb-policy-save-{key}")
        assert await board_server.run(todos.claim_next, agent, queue="builds") is not None
        await page.reload()
        assert (await row.locator("[data-sb-claims]").inner_text()).startswith("1 of 5")
        assert await row.locator("[data-sb-in-flight]").inner_text() == "1, no cap"
        await page.watch.assert_clean(page)


async def test_a_members_drawer_on_a_team_todo_and_the_team_filter(board_server, browser):
    slug = _slug()
    owner, admin, member, eps = await _crew(board_server, slug)
    label = f"team:{slug}/inbox"
    todo, _ = await board_server.run(producer.push_team, owner, label, title="Reconcile the ledger",
                                     payload={"month": "2026-03"})
    tid = todo["id"]
    _, admin_agent = eps[admin.name]
    _, member_agent = eps[member.name]
    await board_server.run(todos.claim, admin_agent, tid, claimant="admin-fleet/worker-1")
    await board_server.run(todos.fail, admin_agent, tid, summary="ledger locked <b>by</b> audit")
    await board_server.run(todos.claim, member_agent, tid, claimant="member-fleet/worker-7")
    ep_own, own_agent = await board_server.endpoint(member, queues=["personal"], agent="mine")
    await board_server.run(todos.create, endpoint_id=own_agent.endpoint_id, queue="personal", title="My own")
    async with page_for(browser, board_server, member) as page:
        await page.goto("/todos")
        row = page.locator(f"#sb-tr-{tid}")
        assert await row.locator(f"[data-sb-team='{slug}']").inner_text() == f"team {slug}"
        assert await page.locator("#sb-todos-body tr").count() == 2
        await page.select_option("#f-team", slug)
        async with page.expect_navigation():
            await page.click("#sb-filter")
        assert f"team={slug}" in page.url
        assert await page.locator("#sb-todos-body tr").count() == 1
        assert await axe_violations(page) == []

        await open_drawer(page, tid)
        dialog = page.locator("dialog[data-sb-drawer]")
        assert f"team {slug}" in await dialog.locator(".sb-facts").inner_text()
        region = dialog.locator(f"#sb-attempts-{tid}")
        seqs = await region.locator("li[data-sb-attempt]").evaluate_all(
            "els => els.map(e => Number(e.dataset.sbAttempt))")
        assert seqs == [2, 1]
        first = region.locator("li[data-sb-attempt='1']")
        assert await first.get_attribute("data-sb-outcome") == "failed"
        assert "admin-fleet/worker-1" in await first.inner_text()
        assert "ledger locked <b>by</b> audit" in await first.inner_text()  # text, not markup
        assert await first.locator("b").count() == 0
        assert "member-fleet/worker-7" in await region.locator("li[data-sb-attempt='2']").inner_text()
        assert await axe_violations(page) == []
        await screenshot(page, "team-drawer")
        # The member acts on the team's todo as on their own (any lease, fence-exempt).
        await dialog.locator("#sb-note").fill("finished by hand")
        await dialog.locator("#sb-act-complete").click()
        await page.wait_for_selector(f"#sb-attempts-{tid} li[data-sb-attempt='2'][data-sb-outcome='completed']")
        detail = await board_server.run(todos.get, owner, tid)
        assert detail["state"] == "done" and detail["attempts"][0]["summary"] == "finished by hand"
        await page.watch.assert_clean(page)


async def test_new_todo_on_a_team_queue(board_server, browser):
    slug = _slug()
    owner, admin, member, eps = await _crew(board_server, slug)
    async with page_for(browser, board_server, member) as page:
        await page.goto("/todos/new")
        await page.select_option("#n-endpoint", f"team:{slug}")
        await page.fill("#n-queue", "")
        await page.fill("#n-title", "Shared chore")
        async with page.expect_navigation():
            await page.click("#sb-push")
        assert "Name the team queue" in await page.inner_text("#e-queue")
        page.watch.expected_http_errors(422)
        assert await axe_violations(page) == []
        await page.fill("#n-queue", "inbox")
        async with page.expect_navigation():
            await page.click("#sb-push")
        tid = page.url.rsplit("/", 1)[1]
        detail = await board_server.run(todos.get, owner, tid)  # the team owns it: every member sees it
        assert detail["queue"] == f"team:{slug}/inbox" and detail["title"] == "Shared chore"
        await page.watch.assert_clean(page)


async def test_a_non_member_gets_the_same_404_as_an_unknown_team(board_server, browser):
    slug = _slug()
    owner, admin, member, eps = await _crew(board_server, slug)
    todo, _ = await board_server.run(producer.push_team, owner, f"team:{slug}/inbox", title="Private")
    stranger = await board_server.human("out")
    async with page_for(browser, board_server, stranger) as page:
        foreign = await page.goto(f"/teams/{slug}")
        foreign_body = await foreign.body()
        unknown = await page.goto(f"/teams/{_slug()}")
        assert foreign.status == unknown.status == 404
        assert foreign_body == await unknown.body()
        assert slug not in foreign_body.decode()
        assert await axe_violations(page) == []
        # The delete page, the todo and its drawer too.
        a = await page.request.get(f"/teams/{slug}/delete")
        b = await page.request.get(f"/teams/{_slug()}/delete")
        assert a.status == b.status == 404 and await a.body() == await b.body()
        a = await page.request.get(f"/todos/{todo['id']}")
        b = await page.request.get(f"/todos/td_{uuid.uuid4()}")
        assert a.status == b.status == 404 and await a.body() == await b.body()
        await page.goto("/todos")
        assert await page.locator(f"#sb-tr-{todo['id']}").count() == 0
        page.watch.expected_http_errors(404)
        await page.watch.assert_clean(page)


async def test_a_member_vends_an_endpoint_for_a_team_queue(board_server, browser):
    slug = _slug()
    owner, admin, member, eps = await _crew(board_server, slug)
    other = _slug()
    await board_server.run(teams.create, await board_server.human("else"), other)
    async with page_for(browser, board_server, member) as page:
        await page.goto("/endpoints/vend")
        await page.fill("#v-agent", "fleet-7")
        # A team the member does not belong to reads like one that does not exist.
        for label in (f"team:{other}/inbox", f"team:{_slug()}/inbox"):
            await page.fill("#v-queues", label)
            await page.click("#sb-review")
            assert await page.inner_text("#e-queues") == f"{label} is not a queue of one of your teams."
        page.watch.expected_http_errors(422)
        await page.fill("#v-queues", f"team:{slug}/inbox")
        await page.click("#sb-review")
        await page.click("#sb-vend-confirm")
        await page.wait_for_selector("#sb-credential")
        waiting = await page.inner_text("#sb-awaiting-grant")
        assert f"team:{slug}/inbox" in waiting and "a team owner or admin grants it" in waiting
        new_slug = (await page.inner_text("#sb-mcp-url")).rsplit("/", 1)[1]
        assert new_slug in waiting
        assert await axe_violations(page) == []
        await page.watch.assert_clean(page)
    shown = await board_server.run(teams.show, owner, slug)
    assert not any(g["endpoint"] == new_slug for g in shown["grants"])  # a member's vend waits for a grant


async def test_team_todos_update_live_for_members_only(board_server, browser):
    slug = _slug()
    owner, admin, member, eps = await _crew(board_server, slug)
    label = f"team:{slug}/inbox"
    stranger = await board_server.human("out")
    _, worker = eps[admin.name]
    async with page_for(browser, board_server, member) as page, page_for(browser, board_server, stranger) as other:
        for p in (page, other):
            await p.goto("/todos")
            await p.wait_for_selector("body[data-sb-live-open='1']")
        todo, _ = await board_server.run(producer.push_team, owner, label, title="Arrives live")
        await page.wait_for_selector("#sb-todos-body tr >> text=Arrives live")
        await board_server.run(todos.claim, worker, todo["id"])
        await page.wait_for_selector(f"#sb-tr-{todo['id']} [data-sb-state='claimed']")
        await other.wait_for_timeout(500)
        assert await other.get_attribute("body", "data-sb-live-count") is None  # no frame reached a non-member
        assert await other.locator(f"#sb-tr-{todo['id']}").count() == 0
        await page.watch.assert_clean(page)
        await other.watch.assert_clean(other)
