"""The todo drawer in a real browser: SPEC-0034 REQ-13 (a death, inert summaries, the attempt list),
REQ-10 (a second human), live updates into an open drawer, keyboard, focus and axe-core."""

from __future__ import annotations

import asyncio
import uuid

from board_kit import axe_violations, open_drawer, page_for, screenshot
from switchboard.core import sweeps, todos

SCRIPT = "<script>alert(1)</script>"


async def _death_story(server, human):
    """Attempt 1 failed (with a summary, an https artifact and markup in the summary), attempt 2 heartbeat
    once and was reaped, attempt 3 is open. Returns (todo id, attempt 2's last heartbeat)."""
    ep, agent = await server.endpoint(human, queues=["builds"])
    todo, _ = await server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds",
                               title="Fix the flaky build", payload={"repo": "acme/app", "pr": 7})
    tid = todo["id"]
    await server.run(todos.claim, agent, tid, claimant="harness/box/fixer/run-1")
    await server.run(todos.fail, agent, tid, summary=f"tests still red {SCRIPT} " + "x" * 3000,
                     artifact="https://ci.example/run/1", result={"error": "tests red"})
    await server.run(todos.claim, agent, tid, claimant="harness/box/fixer/run-2", lease_ttl_seconds=1)
    await server.run(todos.heartbeat, agent, tid, lease_ttl_seconds=1)
    await asyncio.sleep(1.3)
    assert await server.run(sweeps.reap) >= 1
    await server.run(todos.claim, agent, tid, claimant="harness/box/fixer/run-3", require_fence=True)
    detail = await server.run(todos.get, human, tid)
    a2 = next(a for a in detail["attempts"] if a["seq"] == 2)
    assert a2["outcome"] == "reaped" and a2["last_heartbeat_at"]
    return tid, a2["last_heartbeat_at"], agent


async def test_drawer_shows_a_death_and_summary_markup_is_inert(board_server, browser):
    """REQ-13 "drawer shows a death" and "summary markup is inert"."""
    human = await board_server.human("owner")
    tid, heartbeat, _ = await _death_story(board_server, human)
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, tid)
        dialog = page.locator("dialog[data-sb-drawer]")
        # The list sits inside the dialog, under a visible heading, in a polite live region.
        heading = dialog.get_by_role("heading", name="Attempt history")
        assert await heading.is_visible()
        region = dialog.locator(f"#sb-attempts-{tid}")
        assert await region.get_attribute("aria-live") == "polite"
        seqs = await region.locator("li[data-sb-attempt]").evaluate_all(
            "els => els.map(e => Number(e.dataset.sbAttempt))")
        assert seqs == [3, 2, 1]  # newest first
        reaped = region.locator("li[data-sb-attempt='2']")
        assert await reaped.get_attribute("data-sb-outcome") == "reaped"
        assert await reaped.get_attribute("data-sb-died") is not None
        marker = reaped.get_by_role("img", name="died: no report")
        assert await marker.is_visible()
        assert "died" in (await marker.inner_text()).lower()  # visible text, not colour alone
        assert "reaped → requeued" in await reaped.inner_text()
        hb = reaped.locator(f"time[datetime='{heartbeat}']")
        reaped_text = await reaped.inner_text()
        assert await hb.count() == 1 and reaped_text.lower().count("last heartbeat") == 1  # the label once
        failed = region.locator("li[data-sb-attempt='1']")
        assert await failed.get_attribute("data-sb-died") is None  # a failure is not a death
        assert await failed.get_by_role("img", name="died: no report").count() == 0
        # The summary renders literally; no script ran, no dialog opened, no CSP violation.
        summary = failed.locator(".sb-summary")
        shown = await summary.inner_text()
        assert shown.startswith(f"tests still red {SCRIPT} xxx") and len(shown.encode()) == 2048
        assert await failed.locator(".sb-truncated").inner_text() == "(truncated)"
        assert await failed.locator("script").count() == 0
        link = failed.locator("a.sb-artifact")
        assert await link.get_attribute("href") == "https://ci.example/run/1"
        assert await link.get_attribute("rel") == "noopener noreferrer"
        assert "harness/box/fixer/run-2" in await reaped.inner_text()
        open_one = region.locator("li[data-sb-attempt='3']")
        assert await open_one.get_attribute("data-sb-outcome") == "open"
        assert "in progress" in await open_one.inner_text()
        html = await dialog.inner_html()
        for secret in ("claimer_session", "lease_token", "mcp-session-"):
            assert secret not in html
        await page.wait_for_timeout(200)
        await page.watch.assert_clean(page)
        await heading.evaluate("h => h.scrollIntoView({block: 'start'})")
        await screenshot(page, "drawer")
        await page.mouse.click(10, 400)  # beside the drawer: it closes, focus goes back to the row
        await page.wait_for_selector("dialog[data-sb-drawer]", state="detached")
        assert await page.evaluate("document.activeElement.id") == f"sb-open-{tid}"
        # An artifact that is not an https URL is text, never a link.
        _, agent = await board_server.endpoint(human)
        other, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="cairn")
        await board_server.run(todos.claim, agent, other["id"])
        await board_server.run(todos.complete, agent, other["id"], artifact="mcp://cairn/Zz9", summary="short")
        await page.goto(f"/todos/{other['id']}")
        entry = page.locator(f"#sb-attempts-{other['id']} li[data-sb-attempt='1']")
        assert await entry.locator("code.sb-artifact").inner_text() == "mcp://cairn/Zz9"
        assert await entry.locator("a").count() == 0 and await entry.locator(".sb-truncated").count() == 0
        await page.watch.assert_clean(page)


async def _csrf(page) -> str:
    return await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")


async def test_second_human_gets_the_same_404_as_a_random_id(board_server, browser):
    """REQ-10 "second human on the Board": drawer URL, fragment, live part and actions of another
    human's todo answer exactly like an id never minted, with no attempt data."""
    h1 = await board_server.human("first")
    h2 = await board_server.human("second")
    _, agent = await board_server.endpoint(h1)
    todo, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="H1 private")
    tid = todo["id"]
    await board_server.run(todos.claim, agent, tid, claimant="claimant-of-h1-zq", lease_ttl_seconds=1)
    await asyncio.sleep(1.2)
    await board_server.run(sweeps.reap)
    await board_server.run(todos.claim, agent, tid, claimant="claimant-of-h1-zq")
    await board_server.run(todos.fail, agent, tid, summary="summary-of-h1-zq", artifact="https://h1.example/zq")
    random_id = f"td_{uuid.uuid4()}"
    forbidden_words = ("claimant-of-h1-zq", "summary-of-h1-zq", "h1.example", "H1 private", "Attempt history",
                       "reaped", "died")
    async with page_for(browser, board_server, h2) as page:
        csrf = await _csrf(page)
        for suffix, headers in (("", {}), ("", {"HX-Request": "true"}), ("/live", {"HX-Request": "true"})):
            theirs = await page.request.get(f"/todos/{tid}{suffix}", headers=headers)
            unknown = await page.request.get(f"/todos/{random_id}{suffix}", headers=headers)
            assert theirs.status == unknown.status == 404
            body = await theirs.body()
            assert body == await unknown.body()
            for word in forbidden_words:
                assert word.encode() not in body
        for action in ("claim", "complete", "fail", "release", "extend", "retry", "cancel", "input"):
            theirs = await page.request.post(f"/todos/{tid}/{action}", form={"csrf_token": csrf, "payload": "{}"})
            unknown = await page.request.post(f"/todos/{random_id}/{action}",
                                              form={"csrf_token": csrf, "payload": "{}"})
            assert theirs.status == unknown.status == 404, action
            assert await theirs.body() == await unknown.body()
        # In the browser too: the drawer URL shows "not found" and nothing of H1's.
        response = await page.goto(f"/todos/{tid}")
        assert response.status == 404
        text = await page.content()
        assert "Not found" in text
        for word in forbidden_words:
            assert word not in text
        # H2's live stream carries nothing of H1's: H1's todo moves, H2's page stays still,
        # then H2's own todo moves and the page updates once.
        await page.goto("/todos")
        await page.wait_for_selector("body[data-sb-live-open='1']")
        detail = await board_server.run(todos.get, h1, tid)
        assert detail["state"] == "failed"
        await board_server.run(todos.retry, h1, tid)
        await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="H1 again")
        await page.wait_for_timeout(600)
        assert await page.get_attribute("body", "data-sb-live-count") is None
        _, agent2 = await board_server.endpoint(h2)
        await board_server.run(todos.create, endpoint_id=agent2.endpoint_id, queue="inbox", title="H2 own")
        await page.wait_for_selector("#sb-todos-body tr >> text=H2 own")
        assert "H1 again" not in await page.content()
    # The database still holds H1's todo exactly as H1 left it (no action of H2 applied).
    after = await board_server.run(todos.get, h1, tid)
    assert after["state"] == "pending" and [a["seq"] for a in after["attempts"]] == [2, 1]


async def test_live_update_appends_an_attempt_to_an_open_drawer(board_server, browser):
    """REQ-13 accessibility: a live update appends an attempt to an open drawer, inside the polite
    region, without moving focus; the todos list follows without a reload."""
    human = await board_server.human("live")
    _, agent = await board_server.endpoint(human)
    todo, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="Watch me")
    tid = todo["id"]
    await board_server.run(todos.claim, agent, tid, claimant="worker-a")
    async with page_for(browser, board_server, human) as page:
        await page.wait_for_selector("body[data-sb-live-open='1']")
        await open_drawer(page, tid)
        region = page.locator(f"#sb-attempts-{tid}")
        assert await region.locator("li[data-sb-attempt]").count() == 1
        await page.focus("#sb-drawer-close")
        await board_server.run(todos.fail, agent, tid, summary="first try broke")
        await board_server.run(todos.claim, agent, tid, claimant="worker-b")
        second = region.locator("li[data-sb-attempt='2']")
        await second.wait_for()
        assert await second.get_attribute("data-sb-outcome") == "open"
        first = region.locator("li[data-sb-attempt='1']")
        await page.wait_for_function(
            f"document.querySelector(\"#sb-attempts-{tid} li[data-sb-attempt='1']\").dataset.sbOutcome === 'failed'")
        assert "first try broke" in await first.inner_text()
        assert await region.get_attribute("aria-live") == "polite"
        assert await page.evaluate("document.activeElement.id") == "sb-drawer-close"
        assert await page.locator("dialog[data-sb-drawer]").evaluate("d => d.open")
        # A new todo shows up in the list behind the drawer, without a reload.
        await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="Brand new")
        await page.wait_for_selector("#sb-todos-body tr >> text=Brand new")
        # A state change shows in the row and the counts too.
        await board_server.run(todos.complete, agent, tid, summary="done at last")
        await page.wait_for_selector(f"#sb-tr-{tid} [data-sb-state='done']")
        await page.wait_for_selector("#sb-count-done >> text=1 done")
        await page.wait_for_selector(f"#sb-attempts-{tid} li[data-sb-attempt='2'][data-sb-outcome='completed']")
        assert await page.evaluate("document.activeElement.id") == "sb-drawer-close"
        await page.watch.assert_clean(page)


async def _tab_walk(page, steps: int = 40) -> list[dict]:
    """Press Tab `steps` times; what had focus after each press."""
    seen = []
    for _ in range(steps):
        await page.keyboard.press("Tab")
        seen.append(await page.evaluate("""() => { const e = document.activeElement;
            return {tag: e.tagName, id: e.id, text: (e.innerText || e.value || '').trim().slice(0, 80),
                    href: e.getAttribute('href'), inDialog: !!e.closest('dialog[open]')}; }"""))
    return seen


async def _keyboard_open(page, tid: str) -> None:
    """Reach the todo's link with Tab alone and open it with Enter."""
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(60):
        await page.keyboard.press("Tab")
        if await page.evaluate("document.activeElement.id") == f"sb-open-{tid}":
            break
    else:
        raise AssertionError("the todo link is not in the tab order")
    await page.keyboard.press("Enter")
    await page.wait_for_selector(f"dialog[data-sb-drawer][data-sb-todo='{tid}'][open]")


async def test_keyboard_reaches_every_action_and_artifact_link_without_a_trap(board_server, browser):
    """REQ-13 keyboard and focus: a keyboard-only walk reaches every action and artifact link; the
    drawer takes focus on open, Escape closes it, focus goes back to the row; no trap; axe is clean."""
    human = await board_server.human("keys")
    tid, _, agent = await _death_story(board_server, human)
    await board_server.run(todos.release, human, tid)  # Release by the owner, fence-exempt
    await board_server.run(todos.claim, agent, tid, claimant="run-4")
    pending, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds", title="Waiting")
    dead, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds", title="Dead one",
                                     max_attempts=1)
    await board_server.run(todos.claim, agent, dead["id"])
    await board_server.run(todos.fail, agent, dead["id"], artifact="https://ci.example/dead")
    asking, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds", title="Asks")
    await board_server.run(todos.claim, agent, asking["id"])
    await board_server.run(todos.request_input, agent, asking["id"], question="Which branch?")
    expectations = {
        tid: {"buttons": {"Complete", "Fail", "Release", "Extend lease", "Cancel"},
              "links": {"https://ci.example/run/1"}},
        pending["id"]: {"buttons": {"Claim", "Cancel"}, "links": set()},
        dead["id"]: {"buttons": {"Retry now"}, "links": {"https://ci.example/dead"}},
        asking["id"]: {"buttons": {"Provide input", "Cancel"}, "links": set()},
    }
    async with page_for(browser, board_server, human) as page:
        for todo_id, want in expectations.items():
            await _keyboard_open(page, todo_id)
            assert await page.evaluate("document.activeElement.id") == "sb-drawer-title"
            if todo_id == tid:
                assert await axe_violations(page) == []
            walk = await _tab_walk(page)
            focused = [w for w in walk if w["tag"] != "BODY"]
            assert all(w["inDialog"] for w in focused), "focus left the open modal drawer"
            buttons = {w["text"] for w in focused if w["tag"] == "BUTTON"}
            links = {w["href"] for w in focused if w["tag"] == "A"}
            assert want["buttons"] <= buttons, (todo_id, buttons)
            assert want["links"] <= links, (todo_id, links)
            assert "Close" in {await page.locator(f"#{w['id']}").get_attribute("aria-label")
                               for w in focused if w["id"] == "sb-drawer-close"}
            await page.keyboard.press("Escape")
            await page.wait_for_selector("dialog[data-sb-drawer]", state="detached")
            assert await page.evaluate("document.activeElement.id") == f"sb-open-{todo_id}"
            # No trap: Tab goes on through the page after the drawer closed.
            await page.keyboard.press("Tab")
            assert await page.evaluate("document.activeElement.id") != f"sb-open-{todo_id}"
        await page.watch.assert_clean(page)


async def test_an_owner_extension_is_shown_apart_from_the_holders_heartbeat(board_server, browser):
    """SPEC-0034 REQ-3: the owner extending an agent's lease leaves the agent's last heartbeat alone and
    the drawer says which it was; one claim reads "1 claim in all"."""
    human = await board_server.human("extend")
    _, agent = await board_server.endpoint(human)
    todo, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="Long job")
    tid = todo["id"]
    await board_server.run(todos.claim, agent, tid, claimant="worker-7")
    await board_server.run(todos.heartbeat, agent, tid)
    beat = (await board_server.run(todos.get, human, tid))["attempts"][0]["last_heartbeat_at"]
    async with page_for(browser, board_server, human) as page:
        await open_drawer(page, tid)
        assert "(1 claim in all)" in await page.inner_text("[data-sb-part=facts]")
        await page.evaluate("document.getElementById('sb-notice')?.setAttribute('data-sb-old', '')")
        await page.click("#sb-act-extend")
        await page.wait_for_selector("#sb-notice:not([data-sb-old])")
        detail = await board_server.run(todos.get, human, tid)
        attempt = detail["attempts"][0]
        assert attempt["last_heartbeat_at"] == beat and attempt["owner_extended_at"] is not None
        item = page.locator(f"#sb-attempts-{tid} li[data-sb-attempt='1']")
        assert await item.locator(f"[data-sb-heartbeat] time[datetime='{beat}']").count() == 1
        extended = item.locator("[data-sb-owner-extended]")
        assert "by the owner" in await extended.inner_text()
        assert await extended.locator(f"time[datetime='{attempt['owner_extended_at']}']").count() == 1
        await page.watch.assert_clean(page)
