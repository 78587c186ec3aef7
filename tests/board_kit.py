"""Shared by the Board's browser tests (tests/test_board_*.py): one real server and one Debian Chromium
per module, data made through the server's own core on the server's event loop (so its hook bus, and
with it the live updates, sees every transition), page watchers for script errors, dialogs and CSP
violations, sign-in through the real form, axe-core checks and screenshots.
"""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import pytest
from playwright.async_api import Browser, Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

from conftest import ROOT, chromium_path, create_database, make_settings, start_thread_server
from switchboard.core import endpoints, humans

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Screenshots go to an ignored folder; `make screenshots` points this at docs/screens to refresh the
# committed ones (so `make test` never rewrites tracked files).
SCREENS = Path(os.environ.get("SWITCHBOARD_SCREENS_DIR") or ROOT / "build" / "screens")
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
PASSWORD = "correct-horse-battery"
CSP = ("default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; script-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class BoardServer:
    """A running app (uvicorn in a thread) on its own database, and a way to call its core."""

    def __init__(self, srv, uri: str) -> None:
        self.srv = srv
        self.uri = uri
        self.url = srv.url
        self.board = srv.app.state.surfaces.board

    @property
    def core(self):
        return self.board.core

    async def run(self, fn, *args, **kwargs):
        """`await server.run(todos.claim, caller, id)`: runs `fn(core, ...)` on the server's loop."""
        future = asyncio.run_coroutine_threadsafe(fn(self.core, *args, **kwargs), self.board.loop)
        return await asyncio.wrap_future(future)

    async def human(self, prefix: str = "h"):
        name = f"{prefix}{uuid.uuid4().hex[:8]}"
        return await self.run(humans.add, name, PASSWORD)

    async def endpoint(self, human, queues=("inbox",), verbs=None, agent: str = "bot"):
        """Vend an endpoint for `human`; returns (public endpoint, agent caller)."""
        ep, credential = await self.run(endpoints.vend, human, agent=agent, queues=list(queues), verbs=verbs)
        row = await self.run(endpoints.resolve_credential, credential)
        return ep, endpoints.caller_from_row(row, session_id=f"mcp-session-{uuid.uuid4().hex[:6]}")

    def sql(self, statement: str, params: dict | None = None) -> list:
        with psycopg.connect(self.uri, autocommit=True) as conn:
            cur = conn.execute(statement, params or {})
            return cur.fetchall() if cur.description else []


def start_board_server(pg_server: str, **overrides) -> BoardServer:
    uri = create_database(pg_server)
    settings = make_settings(uri, **overrides)
    return BoardServer(start_thread_server(settings), uri)


def stop_board_server(server: BoardServer, pg_server: str) -> None:
    server.srv.stop()
    name = psycopg.conninfo.conninfo_to_dict(server.uri)["dbname"]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def board_server(pg_server):
    """One server per module; backoff 0 so a failed todo is claimable again at once."""
    server = start_board_server(pg_server, retry_backoff_base_seconds=0, retry_backoff_max_seconds=0)
    yield server
    stop_board_server(server, pg_server)


@pytest.fixture(scope="module")
async def browser(board_server):  # the server outlives the browser: no page holds a stream at stop
    path = chromium_path()
    if path is None:
        pytest.skip("Debian's chromium is not installed (`make test` installs it as root)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        yield b
        await b.close()


class Watch:
    """What a page did that it must not: script errors, console errors, dialogs, CSP violations."""

    def __init__(self) -> None:
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []

    def attach(self, page: Page) -> None:
        page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))

        async def on_dialog(d) -> None:
            self.dialogs.append(d.message)
            await d.dismiss()

        page.on("dialog", on_dialog)

    def expected_http_errors(self, *codes: int) -> None:
        """The page was meant to get these error statuses (Chromium logs each): forget exactly those."""
        marks = tuple(f"status of {c} " for c in codes)
        self.console_errors = [e for e in self.console_errors if not any(m in e for m in marks)]

    async def violations(self, page: Page) -> list[str]:
        return await page.evaluate("window.__sbViolations || []")

    async def assert_clean(self, page: Page) -> None:
        violations = await self.violations(page)
        assert self.dialogs == [], f"dialogs opened: {self.dialogs}"
        assert self.page_errors == [], f"script errors: {self.page_errors}"
        assert self.console_errors == [], f"console errors: {self.console_errors}"
        assert violations == [], f"CSP violations: {violations}"


VIOLATION_LISTENER = """
window.__sbViolations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__sbViolations.push(e.violatedDirective + ' ' + e.blockedURI);
});
"""


@asynccontextmanager
async def page_for(browser: Browser, server: BoardServer, human=None, **context_args):
    """A fresh browser context (its own cookies), signed in through the form when `human` is given."""
    context = await browser.new_context(base_url=server.url, **context_args)
    await context.add_init_script(VIOLATION_LISTENER)
    page = await context.new_page()
    watch = Watch()
    watch.attach(page)
    page.watch = watch
    try:
        if human is not None:
            await sign_in(page, human.name)
        yield page
    finally:
        await context.close()


async def sign_in(page: Page, name: str, password: str = PASSWORD, next_path: str | None = None) -> None:
    await page.goto("/login" + (f"?{urlencode({'next': next_path})}" if next_path is not None else ""))
    await page.fill("#sb-name", name)
    await page.fill("#sb-password", password)
    async with page.expect_navigation():
        await page.click("#sb-sign-in")


async def axe_violations(page: Page) -> list[dict]:
    from axe_playwright_python.async_playwright import Axe

    results = await Axe().run(page, options={"runOnly": {"type": "tag", "values": WCAG_TAGS}})
    return [{"id": v["id"], "impact": v.get("impact"), "help": v.get("help"),
             "nodes": [n.get("target") for n in v.get("nodes", [])][:5]}
            for v in results.response.get("violations", [])]


async def screenshot(page: Page, name: str, *, full_page: bool = False) -> Path:
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / f"board-{name}.png"
    await page.screenshot(path=str(path), full_page=full_page)
    return path


async def open_drawer(page: Page, todo_id: str) -> None:
    """Open a todo's drawer from the todos screen, as a person would: the row's link."""
    opened = f"dialog[data-sb-drawer][data-sb-todo='{todo_id}'][open]"
    for _ in range(2):  # a click that opened nothing within 10 s (seen once, in a loaded full run) is repeated
        await page.click(f"#sb-open-{todo_id}")
        try:
            await page.wait_for_selector(opened, timeout=10_000)
            return
        except PlaywrightTimeout:
            continue
    await page.wait_for_selector(opened)


def text_without_tags(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)
