"""Sign-in, sessions, the dev login, redirects and headers of the Board, against real servers, in a real
browser where a person would be (SYSTEM.md section 9, SPEC-0034 security section)."""

from __future__ import annotations

import os
import re
import stat
import time
import uuid

import httpx
import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer

from board_kit import (
    CSP,
    PASSWORD,
    axe_violations,
    page_for,
    screenshot,
    sign_in,
    start_board_server,
    stop_board_server,
)
from conftest import make_settings
from switchboard.core import todos
from switchboard.web.board.sessions import SECRET_FILE, Session, load_secret


@pytest.fixture(scope="module")
def dev_server(pg_server):
    """A second server: dev login on, and an https base URL (so cookies are Secure)."""
    server = start_board_server(pg_server, dev_login=True, base_url="https://board.example")
    yield server
    stop_board_server(server, pg_server)


def _cookie(response: httpx.Response, name: str) -> str | None:
    for header in response.headers.get_list("set-cookie"):
        if header.startswith(f"{name}="):
            return header
    return None


async def _login_token(client: httpx.AsyncClient) -> str:
    """The sign-in form's token; its cookie is set by hand, since a Secure cookie (https base URL)
    is not sent back over these tests' plain http."""
    page = await client.get("/login")
    token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
    client.cookies.set("sb_login", token)
    return token


async def test_sign_in_form_cookie_and_lifetime(board_server, browser):
    human = await board_server.human("cookie")
    async with page_for(browser, board_server) as page:
        response = await page.goto("/todos")
        assert page.url.endswith("/login?next=%2Ftodos")  # a data route without a session asks to sign in
        assert response.headers["cache-control"] == "no-store"
        assert await page.evaluate("document.activeElement.id") == "sb-name"  # the first control has focus
        assert await axe_violations(page) == []
        await screenshot(page, "login")
        await page.fill("#sb-name", human.name)
        await page.fill("#sb-password", "wrong-password")
        await page.click("#sb-sign-in")
        alert = page.locator("#sb-login-error[role=alert]")
        assert "do not match" in await alert.inner_text()
        assert await page.evaluate("document.activeElement.id") == "sb-login-error"  # errors take focus
        assert await axe_violations(page) == []
        page.watch.expected_http_errors(401)
        await page.fill("#sb-password", PASSWORD)
        async with page.expect_navigation():
            await page.click("#sb-sign-in")
        assert page.url == board_server.url + "/todos"
        cookies = {c["name"]: c for c in await page.context.cookies()}
        session = cookies["sb_session"]
        assert session["httpOnly"] is True and session["sameSite"] == "Lax" and session["secure"] is False
        assert session["path"] == "/"
        assert 11.9 * 3600 < session["expires"] - time.time() <= 12 * 3600
        assert "sb_login" not in cookies  # the sign-in form token is spent
        await page.watch.assert_clean(page)
    secret = board_server.srv.settings.secret_key.encode()
    sid = URLSafeTimedSerializer(secret, salt="switchboard-board-session").loads(session["value"])["s"]

    # The signature carries the 12-hour limit: an older cookie is refused, a younger one works (for a
    # session that is live in the database; a well-signed cookie for an unknown session is refused).

    def signed(age_seconds: int) -> str:
        class Then(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(time.time()) - age_seconds

        s = URLSafeTimedSerializer(secret, salt="switchboard-board-session", signer=Then)
        return s.dumps({"h": str(human.human_id), "s": sid})

    async with httpx.AsyncClient(base_url=board_server.url) as client:
        ok = await client.get("/todos", cookies={"sb_session": signed(11 * 3600)})
        assert ok.status_code == 200
        old = await client.get("/todos", cookies={"sb_session": signed(12 * 3600 + 60)})
        assert old.status_code == 303 and old.headers["location"].startswith("/login")
        unknown = URLSafeTimedSerializer(secret, salt="switchboard-board-session").dumps(
            {"h": str(human.human_id), "s": uuid.uuid4().hex})
        assert (await client.get("/todos", cookies={"sb_session": unknown})).status_code == 303
        forged = signed(60)[:-2] + "xx"
        bad = await client.get("/todos", cookies={"sb_session": forged})
        assert bad.status_code == 303


async def test_logout_ends_the_session(board_server, browser):
    human = await board_server.human("bye")
    async with page_for(browser, board_server, human) as page:
        old = next(c["value"] for c in await page.context.cookies() if c["name"] == "sb_session")
        async with page.expect_navigation():
            await page.click("#sb-logout")
        assert page.url.endswith("/login")
        assert "sb_session" not in {c["name"] for c in await page.context.cookies()}
        await page.watch.assert_clean(page)
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        replay = await client.get("/todos", cookies={"sb_session": old})
        assert replay.status_code == 303 and replay.headers["location"] == "/login?next=%2Ftodos"


async def test_anonymous_requests_go_to_sign_in_and_change_nothing(board_server):
    human = await board_server.human("anon")
    _, agent = await board_server.endpoint(human)
    todo, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="untouched")
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        r = await client.post(f"/todos/{todo['id']}/claim", data={"csrf_token": "x"})
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        r = await client.get(f"/todos/{todo['id']}", headers={"HX-Request": "true"})
        assert r.status_code == 401 and r.headers["hx-redirect"].startswith("/login?next=")
        r = await client.get("/events")
        assert r.status_code == 401
    assert (await board_server.run(todos.get, human, todo["id"]))["state"] == "pending"


async def test_sign_in_form_is_protected_against_login_csrf(board_server):
    human = await board_server.human("lcsrf")
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        r = await client.post("/login", data={"name": human.name, "password": PASSWORD})
        assert r.status_code == 403 and _cookie(r, "sb_session") is None
        token = await _login_token(client)
        r = await client.post("/login", data={"name": human.name, "password": PASSWORD, "login_token": token + "x"})
        assert r.status_code == 403 and _cookie(r, "sb_session") is None
        r = await client.post("/login", data={"name": human.name, "password": PASSWORD, "login_token": token})
        assert r.status_code == 303 and _cookie(r, "sb_session") is not None


async def test_failed_sign_ins_are_slowed_per_account(board_server, browser):
    target = await board_server.human("target")
    bystander = await board_server.human("bystander")
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        token = await _login_token(client)
        for _ in range(5):
            r = await client.post("/login", data={"name": target.name, "password": "nope-nope", "login_token": token})
            assert r.status_code == 401
        # Even the right password waits now, and the page says for how long.
        r = await client.post("/login", data={"name": target.name, "password": PASSWORD, "login_token": token})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "Too many failed sign-ins" in r.text and _cookie(r, "sb_session") is None
    # Another account from the same address is not held up by it.
    async with page_for(browser, board_server, bystander) as page:
        assert page.url.endswith("/todos")


async def test_failed_sign_ins_are_slowed_per_address(dev_server):
    victim = await dev_server.human("victim")
    async with httpx.AsyncClient(base_url=dev_server.url) as client:
        token = await _login_token(client)
        for i in range(20):
            r = await client.post("/login", data={"name": f"guess{i}", "password": "x" * 9, "login_token": token})
            assert r.status_code == 401
        r = await client.post("/login", data={"name": victim.name, "password": PASSWORD, "login_token": token})
        assert r.status_code == 429
    dev_server.board.throttle = type(dev_server.board.throttle)()  # let the next test of this server in


async def test_dev_login_exists_only_with_the_flag(board_server, dev_server, browser):
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        for method in ("GET", "POST"):
            r = await client.request(method, "/auth/dev-login")
            assert r.status_code == 404 and _cookie(r, "sb_session") is None
        assert "sb-dev-login" not in (await client.get("/login")).text
    async with httpx.AsyncClient(base_url=dev_server.url) as client:
        token = await _login_token(client)
        r = await client.post("/auth/dev-login", data={"login_token": token})
        assert r.status_code == 303
        cookie = _cookie(r, "sb_session")
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")
        r = await client.post("/auth/dev-login", data={})
        assert r.status_code == 403  # the sign-in form token is still required
    async with page_for(browser, dev_server) as page:
        await page.goto("/login")
        assert "Dev only" in await page.inner_text("[role=status]")
        async with page.expect_navigation():
            await page.click("#sb-dev-login")
        assert page.url.endswith("/todos")
        assert await page.inner_text("#sb-logout") == "Sign out dev"
        await page.watch.assert_clean(page)


async def test_next_accepts_only_local_paths(board_server, browser):
    human = await board_server.human("redir")
    hostile = ["https://evil.example/x", "//evil.example/x", "/\\evil.example", "javascript:alert(1)",
               "/\r\nLocation: https://evil.example", "http:/evil.example", " //evil.example", "///evil.example",
               "/\t/evil.example"]
    async with page_for(browser, board_server) as page:
        for target in hostile:
            await page.context.clear_cookies()
            await sign_in(page, human.name, next_path=target)
            assert page.url == board_server.url + "/todos", target
        await page.context.clear_cookies()
        await sign_in(page, human.name, next_path="/endpoints?x=1")
        assert page.url == board_server.url + "/endpoints?x=1"
        for target in hostile:
            r = await page.request.get("/login", params={"next": target}, max_redirects=0)
            assert r.status == 303 and r.headers["location"] == "/todos", target
        page.watch.expected_http_errors(401)  # the live stream, reconnecting after the cookies were cleared
        await page.watch.assert_clean(page)


async def test_security_headers_on_every_route(board_server, browser):
    human = await board_server.human("hdr")
    ep, agent = await board_server.endpoint(human)
    todo, _ = await board_server.run(todos.create, endpoint_id=agent.endpoint_id, queue="inbox", title="h")
    tid = todo["id"]
    data_pages = ["/todos", "/todos?state=pending", f"/todos/{tid}", f"/todos/{tid}/live", "/todos/new",
                  "/endpoints", "/endpoints/vend", f"/endpoints/{ep['slug']}/revoke", "/queues",
                  f"/todos/td_{uuid.uuid4()}", "/login"]
    other = ["/", "/healthz", "/static/board.js", "/static/board.css", "/static/vendor/htmx.min.js",
             "/static/vendor/pico.min.css", "/static/favicon.svg", "/static/missing.js", "/no/such/page",
             "/auth/dev-login", f"/mcp/{ep['slug']}", "/metrics"]
    async with page_for(browser, board_server, human) as page:
        csrf = await page.locator("form.sb-logout input[name=csrf_token]").get_attribute("value")
        responses = []
        for path in data_pages + other:
            r = await page.request.get(path, max_redirects=0)
            responses.append((path, r))
            if path in data_pages:
                assert r.headers.get("cache-control") == "no-store", path
            if r.headers.get("content-type", "").startswith("text/html") and r.status < 500:
                html = await r.text()
                assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), f"inline script on {path}"
                assert not re.search(r"\son[a-z]+\s*=", html), f"inline event handler on {path}"
                assert "http://" not in re.sub(r"http://127\.0\.0\.1:\d+", "", html.replace(
                    "http://www.w3.org/2000/svg", "")), f"an external origin on {path}"
        for path in ("/static/board.js", "/static/vendor/pico.min.css"):
            assert "no-store" not in (dict(responses)[path].headers.get("cache-control") or "")
        posts = [(f"/todos/{tid}/claim", {"csrf_token": csrf}), (f"/todos/{tid}/claim", {}),
                 ("/todos/new", {"csrf_token": csrf}), ("/login", {}), ("/logout", {}),
                 (f"/mcp/{ep['slug']}", {})]
        for path, form in posts:
            responses.append((f"POST {path}", await page.request.post(path, form=form, max_redirects=0)))
        for path, r in responses:
            assert r.headers.get("content-security-policy") == CSP, path
            assert r.headers.get("x-content-type-options") == "nosniff", path
            assert r.headers.get("referrer-policy") == "no-referrer", path
            assert r.headers.get("x-frame-options") == "DENY", path
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        async with client.stream("GET", "/events") as r:  # the live stream too (here: not signed in)
            assert r.headers["content-security-policy"] == CSP and r.headers["x-frame-options"] == "DENY"


async def test_live_stream_headers_and_first_frame(board_server, browser):
    human = await board_server.human("sse")
    async with page_for(browser, board_server, human) as page:
        value = next(c["value"] for c in await page.context.cookies() if c["name"] == "sb_session")
    async with httpx.AsyncClient(base_url=board_server.url, cookies={"sb_session": value}, timeout=10) as client:
        async with client.stream("GET", "/events") as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-store"
            assert r.headers["content-security-policy"] == CSP
            chunks = r.aiter_text()  # kept: dropping the iterator would close this stream
            first = await chunks.__anext__()
            assert first.startswith("retry: ")
            streams = [client.stream("GET", "/events") for _ in range(3)]
            opened = [await s.__aenter__() for s in streams]
            assert [o.status_code for o in opened] == [200, 200, 200]
            fifth = await client.get("/events")
            assert fifth.status_code == 429  # at most four streams per session
            for s in streams:
                await s.__aexit__(None, None, None)
            await chunks.aclose()


def test_secret_is_kept_per_data_dir_with_mode_0600(tmp_path, pg_uri):
    first = load_secret(None, tmp_path / "a")
    path = tmp_path / "a" / SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(first) == 64
    assert load_secret(None, tmp_path / "a") == first
    assert load_secret(None, tmp_path / "b") != first
    os.chmod(path, 0o644)
    assert load_secret(None, tmp_path / "a") == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_secret("configured-secret-" + "x" * 20, tmp_path / "c") == b"configured-secret-" + b"x" * 20
    assert not (tmp_path / "c" / SECRET_FILE).exists()
    # The app uses the data directory's secret when none is configured.
    from switchboard.web.app import create_app

    app = create_app(make_settings(pg_uri, secret_key=None, data_dir=tmp_path / "d"))
    assert (tmp_path / "d" / SECRET_FILE).exists()
    sessions = app.state.surfaces.board.sessions
    session = Session(uuid.uuid4(), "a-session-id")
    assert sessions.read(sessions.seal(session)) == session
    assert load_secret(None, tmp_path / "a") != load_secret(None, tmp_path / "d")
