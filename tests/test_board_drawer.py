"""The todo drawer in a real browser: SPEC-0034 REQ-13 (a death, inert summaries, the attempt list),
REQ-10 (a second human), live updates into an open drawer, keyboard, focus and axe-core."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from board_kit import (CSP, axe_violations, board_server, browser, open_drawer, page_for,  # noqa: F401
                       screenshot, sign_in)
from switchboard.core import sweeps, todos

SCRIPT = "<script>alert(1)</script>"


async def _death_story(server, human):  # noqa: ANN001, ANN202
    """Attempt 1 failed (with a summary, an https artifact and markup in the summary), attempt 2 heartbeat
    once and was reaped, attempt 3 is open. Returns (todo id, attempt 2's last heartbeat)."""
    ep, agent = await server.endpoint(human, queues=["builds"])
    todo, _ = await server.run(todos.create, endpoint_id=agent.endpoint_id, queue="builds",
                               title="Fix the flaky build", payload={"repo": "acme/app", "pr": 7})
    tid = todo["id"]
    await server.run(todos.claim, agent, tid, claimant="harness/box/fixer/run-1")
    await server.run(todos.fail, agent, tid, summary=f"tests still red {SCRIPT}",
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


async def test_drawer_shows_a_death_and_summary_markup_is_inert(board_server, browser):  # noqa: F811
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
        assert await hb.count() == 1 and "last heartbeat" in await reaped.inner_text()
        failed = region.locator("li[data-sb-attempt='1']")
        assert await failed.get_attribute("data-sb-died") is None  # a failure is not a death
        assert await failed.get_by_role("img", name="died: no report").count() == 0
        # The summary renders literally; no script ran, no dialog opened, no CSP violation.
        summary = failed.locator(".sb-summary")
        assert await summary.inner_text() == f"tests still red {SCRIPT}"
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
        await screenshot(page, "drawer")
