"""The human API's reference page in real Chromium: served under the Board's CSP with nothing
refused, nothing fetched from elsewhere, every operation present, and no axe violations."""

from __future__ import annotations

import pytest
from playwright.async_api import async_playwright

from board_kit import CHROMIUM_ARGS, axe_violations
from conftest import chromium_path, make_settings, start_thread_server
from switchboard.web.api import OPERATIONS


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


async def test_the_reference_page_renders_under_the_csp_and_passes_axe(server):
    path = chromium_path()
    if path is None:
        pytest.skip("Debian's chromium is not installed")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            page = await browser.new_page(base_url=server.url)
            console: list[str] = []
            requested: list[str] = []
            page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
            page.on("request", lambda r: requested.append(r.url))
            response = await page.goto("/api/v1/docs")
            assert response is not None and response.status == 200
            await page.wait_for_load_state("load")
            assert console == [], console  # a CSP refusal would be reported here
            assert all(url.startswith(server.url) for url in requested), requested
            assert await page.evaluate("getComputedStyle(document.querySelector('main')).maxWidth") != "none"
            headings = await page.locator("h3").all_inner_texts()
            assert sorted(headings) == sorted(f"{op.method} {op.path}" for op in OPERATIONS)
            assert await axe_violations(page) == []
        finally:
            await browser.close()
