"""The owner's actions in the drawer, in a real browser: each closes or keeps the attempt as SPEC-0034
says (REQ-3, REQ-6 fence exemption, REQ-12 retry keeps history), conflicts read as a message, CSRF
guards every state change, and the new-todo form checks its JSON in place."""

from __future__ import annotations

import asyncio
from datetime import datetime

from board_kit import open_drawer, page_for
from switchboard.core import todos

ACTIONS = ("claim", "complete", "fail", "release", "extend", "retry", "cancel", "input")


async def _click(page, button_id: str) -> None:
    """Press an action button in the open drawer and wait for the drawer to show this outcome."""
    await page.evaluate("document.getElementById('sb-notice')?.setAttribute('data-sb-old', '')")
    await page.click(f"#{button_id}")
    await page.wait_for_selector("#sb-notice:not([data-sb-old])")


async def _new(server, agent, title, **kw):
    todo, _ = await server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title=title, **kw)
    return todo["id"]


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_claim_extend_complete_and_fail_by_the_owner(board_server, browser):
    human = await board_server.human("act")
    _, agent = await board_server.endpoint(human)
    tid = await _new(board_server, agent, "Owner does it all")
    other = await _new(board_server, agent, "Owner fails it")
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, tid)
        await _click(page, "sb-act-claim")
        assert "Claimed" in await page.inner_text("#sb-notice")
        assert await page.evaluate("document.activeElement.id") == "sb-notice"  # the outcome is announced
        detail = await board_server.run(todos.get, human, tid)
        assert detail["state"] == "claimed" and detail["owner"] == human.owner
        opened = detail["attempts"][0]
        assert opened["claimer_kind"] == "owner" and opened["outcome"] is None
        assert opened["claimant"] == f"board:{human.name}"
        first_expiry = detail["lease_expires_at"]

        await _click(page, "sb-act-extend")
        detail = await board_server.run(todos.get, human, tid)
        assert detail["attempts"][0]["last_heartbeat_at"] is not None
        assert _ts(detail["lease_expires_at"]) >= _ts(first_expiry)

        await page.fill("#sb-note", "checked by hand")
        await _click(page, "sb-act-complete")
        detail = await board_server.run(todos.get, human, tid)
        assert detail["state"] == "done"
        assert detail["attempts"][0]["outcome"] == "completed" and detail["attempts"][0]["disposition"] == "done"
        assert detail["attempts"][0]["summary"] == "checked by hand"
        drawer_text = await page.inner_text(f"#sb-attempts-{tid}")
        assert "completed → done" in drawer_text and "checked by hand" in drawer_text
        assert await page.locator("#sb-act-claim").count() == 0  # a done todo offers nothing

        await page.keyboard.press("Escape")
        await open_drawer(page, other)
        await _click(page, "sb-act-claim")
        await _click(page, "sb-act-fail")
        detail = await board_server.run(todos.get, human, other)
        assert detail["state"] == "failed"
        assert detail["attempts"][0]["outcome"] == "failed"
        assert detail["attempts"][0]["disposition"] == "retry_scheduled"
        await page.watch.assert_clean(page)


async def test_release_and_fail_of_a_fenced_agent_lease(board_server, browser):
    """REQ-6: the owning human is exempt from the fence and closes the attempt with the action's outcome."""
    human = await board_server.human("fence")
    _, agent = await board_server.endpoint(human)
    a = await _new(board_server, agent, "Stuck fenced A")
    b = await _new(board_server, agent, "Stuck fenced B")
    claim_a = await board_server.run(todos.claim, agent, a, require_fence=True, claimant="harness/run-1")
    claim_b = await board_server.run(todos.claim, agent, b, require_fence=True, claimant="harness/run-2")
    assert claim_a.lease_token and claim_b.lease_token
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, a)
        assert "held by agent bot" in await page.inner_text("[data-sb-lease]")
        await page.fill("#sb-note", "agent stuck, handing back")
        await _click(page, "sb-act-release")
        detail = await board_server.run(todos.get, human, a)
        assert detail["state"] == "pending" and detail["attempt"] == 1  # counter unchanged
        closed = detail["attempts"][0]
        assert (closed["outcome"], closed["disposition"]) == ("released", "requeued")
        assert closed["summary"] == "agent stuck, handing back"
        assert "released → requeued" in await page.inner_text(f"#sb-attempts-{a}")

        await page.keyboard.press("Escape")
        await open_drawer(page, b)
        await _click(page, "sb-act-fail")
        detail = await board_server.run(todos.get, human, b)
        assert detail["state"] == "failed"
        assert detail["attempts"][0]["outcome"] == "failed"
        await page.watch.assert_clean(page)


async def test_retry_now_of_a_dead_letter_continues_the_seq(board_server, browser):
    """REQ-12: Retry now keeps every attempt; the next claim has attempt 1 and the next seq."""
    human = await board_server.human("retry")
    _, agent = await board_server.endpoint(human)
    tid = await _new(board_server, agent, "Dies twice", max_attempts=2)
    for n in (1, 2):
        await board_server.run(todos.claim, agent, tid, claimant=f"w{n}")
        await board_server.run(todos.fail, agent, tid, summary=f"broke {n}")
    detail = await board_server.run(todos.get, human, tid)
    assert detail["dead_letter"] is True
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, tid)
        assert "dead letter" in await page.inner_text("#sb-drawer-content")
        await _click(page, "sb-act-retry")
        detail = await board_server.run(todos.get, human, tid)
        assert detail["state"] == "pending" and detail["attempt"] == 0 and detail["attempts_total"] == 2
        got = await board_server.run(todos.claim_next, agent, claimant="w3")
        assert got.todo["id"] == tid
        assert got.attempt_seq == 3 and got.todo["attempt"] == 1
        assert got.prior_attempts[0]["seq"] == 2
        # The open drawer shows the continuing seq through the live update.
        third = page.locator(f"#sb-attempts-{tid} li[data-sb-attempt='3']")
        await third.wait_for()
        assert "(counter 1)" in await third.inner_text()
        seqs = await page.locator(f"#sb-attempts-{tid} li").evaluate_all(
            "els => els.map(e => Number(e.dataset.sbAttempt))")
        assert seqs == [3, 2, 1]
        await page.watch.assert_clean(page)


async def test_cancel_and_provide_input(board_server, browser):
    human = await board_server.human("input")
    _, agent = await board_server.endpoint(human)
    asking = await _new(board_server, agent, "Needs a branch")
    doomed = await _new(board_server, agent, "Not needed")
    await board_server.run(todos.claim, agent, asking, claimant="asker")
    await board_server.run(todos.request_input, agent, asking, question="Which branch? <b>bold</b>")
    await board_server.run(todos.claim, agent, doomed, claimant="doomed")
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, asking)
        assert "Which branch? <b>bold</b>" in await page.inner_text(".sb-question")
        await page.fill("#sb-input-payload", '{"branch": "main"')  # not JSON yet: said in place
        assert await page.get_attribute("#sb-input-payload", "aria-invalid") == "true"
        assert "Not valid JSON" in await page.inner_text("#sb-input-payload-msg")
        csrf = await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")
        r = await page.request.post(f"/todos/{asking}/input", form={"csrf_token": csrf, "payload": "{oops"},
                                    headers={"HX-Request": "true"})
        assert r.status == 422 and b"payload is not valid JSON" in await r.body()
        await page.fill("#sb-input-payload", '{"branch": "main"}')
        assert await page.get_attribute("#sb-input-payload", "aria-invalid") is None
        await _click(page, "sb-act-input")
        detail = await board_server.run(todos.get, human, asking)
        assert detail["state"] == "claimed" and detail["input"] == {"branch": "main"}
        assert len(detail["attempts"]) == 1 and detail["attempts"][0]["outcome"] is None  # same open attempt

        await page.keyboard.press("Escape")
        await open_drawer(page, doomed)
        await _click(page, "sb-act-cancel")
        detail = await board_server.run(todos.get, human, doomed)
        assert detail["state"] == "canceled"
        assert (detail["attempts"][0]["outcome"], detail["attempts"][0]["disposition"]) == ("canceled", "canceled")
        await page.watch.assert_clean(page)


async def test_a_conflict_is_a_message_not_an_error_page(board_server, browser):
    human = await board_server.human("race")
    _, agent = await board_server.endpoint(human)
    tid = await _new(board_server, agent, "Raced")
    async with page_for(browser, board_server, human) as page:
        await page.route("**/events", lambda route: route.fulfill(status=204))  # keep the drawer stale
        await page.goto("/todos")
        await open_drawer(page, tid)
        await board_server.run(todos.claim, agent, tid, claimant="faster-worker")
        await page.click("#sb-act-claim")
        alert = page.locator("#sb-notice[role=alert]")
        await alert.wait_for()
        assert "changed meanwhile" in await alert.inner_text()
        assert await page.evaluate("document.activeElement.id") == "sb-notice"
        assert await page.inner_text("dialog [data-sb-state]") == "claimed"  # the drawer shows where it stands now
        assert await page.locator("dialog[data-sb-drawer]").evaluate("d => d.open")
        # Without script (a plain form post) the same conflict is a page with the message, status 409.
        csrf = await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")
        response = await page.request.post(f"/todos/{tid}/claim", form={"csrf_token": csrf}, max_redirects=0)
        assert response.status == 409 and b"changed meanwhile" in await response.body()
        # And a plain form post that applies answers with a redirect to the todo's page, which says so.
        calm = await _new(board_server, agent, "Calm")
        response = await page.request.post(f"/todos/{calm}/claim", form={"csrf_token": csrf}, max_redirects=0)
        assert response.status == 303 and response.headers["location"] == f"/todos/{calm}?done=claim"
        await page.goto(response.headers["location"])
        assert "Claimed under a lease held by you" in await page.inner_text("#sb-notice")
        assert await page.locator(f"#sb-attempts-{calm} li[data-sb-attempt='1']").count() == 1
    detail = await board_server.run(todos.get, human, tid)
    assert [a["claimant"] for a in detail["attempts"]] == ["faster-worker"]


async def test_csrf_is_checked_before_any_store_call(board_server, browser):
    """Every state-changing request without the session's token is 403 and changes nothing."""
    human = await board_server.human("csrf")
    ep, agent = await board_server.endpoint(human)
    pending = await _new(board_server, agent, "Stays pending")
    claimed = await _new(board_server, agent, "Stays claimed")
    await board_server.run(todos.claim, agent, claimed, claimant="holder")
    async with page_for(browser, board_server, human) as page:
        good = await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")
        bad_tokens = ({}, {"csrf_token": "not-the-session-token"},
                      {"csrf_token": good[:-1] + ("1" if good.endswith("0") else "0")})  # one character off
        for action in ACTIONS:
            for tid in (pending, claimed, "td_any"):
                for form in bad_tokens:
                    r = await page.request.post(f"/todos/{tid}/{action}", form={**form, "payload": "{}"},
                                                headers={"HX-Request": "true"}, max_redirects=0)
                    assert r.status == 403, (action, tid, form)
                r = await page.request.post(f"/todos/{tid}/{action}", headers={
                    "HX-Request": "true", "X-CSRF-Token": "not-the-session-token"}, max_redirects=0)
                assert r.status == 403
        others = [("/todos/new", {"endpoint": ep["slug"], "title": "sneaky"}),
                  ("/endpoints/vend/review", {"agent": "x", "queues": "inbox", "verbs": "claim"}),
                  ("/endpoints/vend", {"agent": "sneaky-agent", "queues": "inbox", "verbs": "claim"}),
                  (f"/endpoints/{ep['slug']}/revoke", {}),
                  ("/logout", {})]
        for path, form in others:
            for extra in bad_tokens:
                r = await page.request.post(path, form={**form, **extra}, max_redirects=0)
                assert r.status == 403, (path, extra)
        # Still signed in (logout was refused), and nothing changed anywhere.
        assert (await page.goto("/todos")).status == 200
    assert (await board_server.run(todos.get, human, pending))["state"] == "pending"
    detail = await board_server.run(todos.get, human, claimed)
    assert detail["state"] == "claimed" and detail["attempts"][0]["last_heartbeat_at"] is None
    listed = await board_server.run(todos.list_for_human, human)
    assert {t["title"] for t in listed} == {"Stays pending", "Stays claimed"}
    from switchboard.core import endpoints

    eps = await board_server.run(endpoints.list_for_human, human)
    assert [(e["slug"], e["state"]) for e in eps] == [(ep["slug"], "active")]


async def test_new_todo_form_checks_json_in_place(board_server, browser):
    human = await board_server.human("new")
    ep, agent = await board_server.endpoint(human, queues=["inbox", "builds"])
    async with page_for(browser, board_server, human) as page:
        await page.goto("/todos/new")
        await page.select_option("#n-endpoint", ep["slug"])
        await page.fill("#n-queue", "builds")
        await page.fill("#n-title", "Made on the Board")
        await page.fill("#n-payload", '{"pr": 7,')
        assert await page.get_attribute("#n-payload", "aria-invalid") == "true"
        assert "Not valid JSON" in await page.inner_text("#n-payload-msg")
        await page.click("#sb-push")  # refused in place: no request, focus on the field
        assert page.url.endswith("/todos/new")
        assert await page.evaluate("document.activeElement.id") == "n-payload"
        # The server says the same when the script is bypassed, naming the field, and keeps the values.
        csrf = await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")
        r = await page.request.post("/todos/new", form={"csrf_token": csrf, "endpoint": ep["slug"],
                                                        "queue": "builds", "title": "x", "payload": "{nope"})
        assert r.status == 422 and b"Payload is not valid JSON" in await r.body()
        r = await page.request.post("/todos/new", form={"csrf_token": csrf, "endpoint": ep["slug"],
                                                        "queue": "nowhere", "title": "x"})
        assert r.status == 422 and b"not one of this endpoint" in await r.body()
        await page.fill("#n-payload", '{"pr": 7, "note": "<i>x</i>"}')
        async with page.expect_navigation():
            await page.click("#sb-push")
        assert "/todos/td_" in page.url
        assert await page.inner_text("#sb-drawer-title") == "Made on the Board"
        listed = await board_server.run(todos.list_for_human, human)
        assert len(listed) == 1
        detail = await board_server.run(todos.get, human, listed[0]["id"])
        assert detail["queue"] == "builds" and detail["payload"] == {"pr": 7, "note": "<i>x</i>"}
        assert detail["source"] == "board"
        await page.watch.assert_clean(page)


async def test_a_live_refresh_answered_after_an_action_does_not_undo_it(board_server, browser):
    """The drawer refreshes itself on live events. A refresh that read the todo before an action
    committed, but is answered after the action and the refresh its own event brings, must not bring
    the old state back: here the first refresh's answer is read at once and held until then."""
    human = await board_server.human("race")
    _, agent = await board_server.endpoint(human)
    tid = await _new(board_server, agent, "Raced by a refresh")
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, tid)
        await _click(page, "sb-act-claim")
        stale_read, fresh_sent, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def hold_the_first(route) -> None:
            if stale_read.is_set():
                await route.continue_()
                fresh_sent.set()
                return
            answer = await route.fetch()  # read now: the attempt still in progress
            stale_read.set()
            await release.wait()
            await route.fulfill(response=answer)

        await page.route("**/todos/*/live", hold_the_first)
        await board_server.run(todos.heartbeat, human, tid)  # a live event: the drawer refreshes
        await asyncio.wait_for(stale_read.wait(), 10)
        await _click(page, "sb-act-complete")
        await asyncio.wait_for(fresh_sent.wait(), 10)  # the completion's own live refresh
        await page.wait_for_timeout(300)
        assert "completed → done" in await page.inner_text(f"#sb-attempts-{tid}")
        release.set()
        # The held, older answer reaches the page now; give it the time a swap takes, then look again.
        await page.wait_for_timeout(500)
        assert "completed → done" in await page.inner_text(f"#sb-attempts-{tid}")
