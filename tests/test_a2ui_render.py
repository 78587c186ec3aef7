"""The todo document rendered by the official A2UI web renderer (`@a2ui/lit`, v0.9 basic catalog) in
headless Chromium.

The renderer is the npm package bundled once into tests/fixtures/a2ui-renderer/dist (see the README
there); the page loads it from that file and makes no network request. The screenshot is written to
a2ui-todo.png beside the Board's (build/screens; `make screenshots` refreshes docs/screens).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from board_kit import SCREENS
from conftest import ROOT, chromium_path
from core_world import make_world
from switchboard.core import todos
from switchboard.mcp import a2ui
from switchboard.mcp import a2ui_documents as documents
from test_a2ui import SCRIPT, SESSION, history_todo

BUNDLE = ROOT / "tests" / "fixtures" / "a2ui-renderer" / "dist" / "a2ui-renderer.js"
SCREEN = SCREENS / "a2ui-todo.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>A2UI todo</title>
<style>body { margin: 0; padding: 16px; font-family: sans-serif; background: #fff; }</style></head>
<body><main id="app"></main></body></html>"""


@pytest.fixture
async def page():
    if chromium_path() is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    if not BUNDLE.exists():
        pytest.skip("the A2UI renderer bundle is missing; build it: cd tests/fixtures/a2ui-renderer && "
                    "npm ci && npm run build")
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield await browser.new_page(viewport={"width": 760, "height": 900})
        finally:
            await browser.close()


async def test_the_official_renderer_shows_the_attempt_list(core, page, tmp_path: Path):
    w = await make_world(core)
    t, beat = await history_todo(core, w)
    await todos.claim(core, w.e1.with_session(SESSION), t["id"], claimant="box-3/fixer")
    await todos.complete(core, w.e1, t["id"], result={"pr": 12}, summary="flake pinned; retried twice green",
                         artifact="https://ci.example.com/run/43")
    messages = await a2ui.read_todo(core, w.e1, t["id"])

    requests, dialogs, errors = [], [], []

    async def offline(route) -> None:
        requests.append(route.request.url)
        await route.abort()

    async def dialog(d) -> None:
        dialogs.append(d.message)
        await d.dismiss()

    await page.route("**/*", offline)
    page.on("dialog", dialog)
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.set_content(PAGE)
    await page.add_script_tag(path=str(BUNDLE))
    out = await page.evaluate("(m) => window.renderA2ui(m, document.getElementById('app'))", messages)
    assert out["surfaces"] == [f"switchboard-todo-{t['id']}"]

    await page.get_by_text("died: no report", exact=False).wait_for(state="visible", timeout=10_000)
    headers = await page.get_by_text(re.compile(r"^Attempt \d+ \(seq \d+\)")).all_inner_texts()
    assert headers == ["Attempt 3 (seq 3) · completed",
                       "Attempt 2 (seq 2) · reaped · died: no report",
                       "Attempt 1 (seq 1) · failed"]
    assert await page.get_by_text(f"last heartbeat: {documents.when(beat)}", exact=True).is_visible()
    assert await page.get_by_text("claimant: box-9/fixer (endpoint)", exact=True).is_visible()
    # The summary is shown as the characters it is: no element made of it, nothing run.
    assert await page.get_by_text(SCRIPT, exact=True).is_visible()
    assert await page.locator("script").count() == 1  # the renderer bundle itself
    assert await page.evaluate("() => document.querySelectorAll('a2ui-surface').length") == 1
    link = page.get_by_role("button", name="https://ci.example.com/run/43")
    assert await link.is_visible()
    assert await page.get_by_text(SESSION).count() == 0
    assert dialogs == [] and errors == [] and requests == []

    shot = tmp_path / "a2ui-todo.png"
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    SCREEN.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, SCREEN)
