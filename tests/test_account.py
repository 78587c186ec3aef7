"""Accounts (issue 12, item 4): `switchboard token list|revoke` and `user passwd` as users run them,
with revocation effective at once in every serving process; and the Board's account page in Chromium
(change the password with the current one, list and revoke your API tokens, CSRF on every POST,
axe-clean, under the CSP)."""

from __future__ import annotations

import json
import uuid

import httpx
import psycopg
import pytest

from account_kit import csrf_of, post_with_session, sign_in, signed_in_status
from board_kit import PASSWORD, axe_violations, page_for, screenshot
from board_kit import sign_in as browser_sign_in
from conftest import create_database, make_settings, start_process_server, start_thread_server
from switchboard.core import api_tokens
from test_cli import _base_env, ok_json, refused, sb


@pytest.fixture(scope="module")
def shared_db(pg_server):
    uri = create_database(pg_server)
    env = _base_env()
    env.update(SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_LOG_FORMAT="text")
    yield uri, env
    name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _new_user(env: dict, password: str = PASSWORD) -> dict:
    name = f"a{uuid.uuid4().hex[:8]}"
    made = sb(env, "user", "add", name, "--password-stdin", stdin=password + "\n")
    assert made.returncode == 0, made.stderr
    return dict(env, SWITCHBOARD_USER=name)


def _api_status(base: str, token: str) -> int:
    return httpx.get(base + "/api/v1/endpoints", headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code


def test_token_list_and_revoke_take_effect_at_once_in_every_process(shared_db):
    uri, env = shared_db
    env = _new_user(env)
    other = _new_user(shared_db[1])
    first, second = ok_json(env, "token", "create"), ok_json(env, "token", "create")
    foreign = ok_json(other, "token", "create")
    listed = ok_json(env, "token", "list")["tokens"]
    assert [t["id"] for t in listed] == [second["id"], first["id"]]  # newest first
    assert [t["prefix"] for t in listed] == [second["prefix"], first["prefix"]]
    assert all(set(t) == {"id", "prefix", "created_at", "revoked_at"} and t["revoked_at"] is None for t in listed)
    text = sb(env, "token", "list")
    assert text.returncode == 0 and first["prefix"] in text.stdout
    for shown in (json.dumps(listed), text.stdout):  # the token itself is never shown again
        assert first["token"] not in shown and second["token"] not in shown

    process = start_process_server(uri)
    thread = start_thread_server(make_settings(uri))
    try:
        for base in (process.url, thread.url):
            assert _api_status(base, first["token"]) == 200 and _api_status(base, second["token"]) == 200
        # Revoke by prefix: both processes refuse it on the next request; the other token still works.
        out = ok_json(env, "token", "revoke", first["prefix"])
        assert out["revoked"] is True and out["token"]["id"] == first["id"] and out["token"]["revoked_at"]
        for base in (process.url, thread.url):
            assert _api_status(base, first["token"]) == 401 and _api_status(base, second["token"]) == 200
        # Revoke by id; again is harmless and says so.
        assert ok_json(env, "token", "revoke", second["id"])["revoked"] is True
        assert ok_json(env, "token", "revoke", second["id"])["revoked"] is False
        assert "already revoked" in sb(env, "token", "revoke", second["id"]).stdout
        for base in (process.url, thread.url):
            assert _api_status(base, second["token"]) == 401
    finally:
        process.stop()
        thread.stop()
    assert all(t["revoked_at"] for t in ok_json(env, "token", "list")["tokens"])
    # Another user's token, by id or prefix, is not found exactly like an unknown one.
    unknown = refused(env, "token", "revoke", str(uuid.uuid4()), contains="not_found")
    assert refused(env, "token", "revoke", foreign["id"]) == unknown
    assert refused(env, "token", "revoke", foreign["prefix"]) == unknown
    assert ok_json(other, "token", "list")["tokens"][0]["revoked_at"] is None


async def test_user_passwd_ends_every_board_session(shared_db):
    uri, env = shared_db
    env = _new_user(env)
    name = env["SWITCHBOARD_USER"]
    srv = start_thread_server(make_settings(uri))
    try:
        cookies = [await sign_in(srv.url, name), await sign_in(srv.url, name)]
        assert [await signed_in_status(srv.url, c) for c in cookies] == [200, 200]
        refused(env, "user", "passwd", name, "--password-stdin", code=2, contains="no password", stdin="\n")
        refused(env, "user", "passwd", name, "--password-stdin", contains="at least 8", stdin="short\n")
        refused(env, "user", "passwd", "nobody-by-this-name", "--password-stdin", contains="not_found",
                stdin="a-good-new-password\n")
        assert [await signed_in_status(srv.url, c) for c in cookies] == [200, 200]  # refusals changed nothing
        changed = ok_json(env, "user", "passwd", name, "--password-stdin", stdin="a-good-new-password\n")
        assert changed == {"user": name, "sessions_ended": 2}
        assert [await signed_in_status(srv.url, c) for c in cookies] == [303, 303]
        await sign_in(srv.url, name, "a-good-new-password")
        from account_kit import client_from, try_sign_in

        async with client_from(srv.url, "127.0.0.9") as client:
            assert (await try_sign_in(client, name, PASSWORD)).status_code == 401
    finally:
        srv.stop()


def test_user_disable_and_enable(shared_db):
    env = _new_user(shared_db[1])
    name = env["SWITCHBOARD_USER"]
    token = ok_json(env, "token", "create")["token"]
    assert ok_json(env, "user", "disable", name) == {"user": name, "disabled": True, "sessions_ended": 0}
    assert ok_json(env, "user", "enable", name) == {"user": name, "disabled": False}
    assert token.startswith("sbh_")
    refused(env, "user", "disable", "nobody-by-this-name", contains="not_found")


# ------------------------------------------------------------------------------ the account page

async def test_account_page_changes_the_password_and_revokes_tokens(board_server, browser):
    human = await board_server.human("acct")
    stranger = await board_server.human("stranger")
    kept, _ = await board_server.run(api_tokens.create, human)
    doomed, doomed_row = await board_server.run(api_tokens.create, human)
    _, foreign_row = await board_server.run(api_tokens.create, stranger)
    elsewhere = await sign_in(board_server.url, human.name)  # another browser, signed in earlier

    async with page_for(browser, board_server, human) as page:
        await page.click("nav a[href='/account']")
        await page.wait_for_url("**/account")
        assert await page.locator("a[href='/account'][aria-current=page]").count() == 1
        rows = page.locator("tbody tr")
        assert await rows.count() == 2
        assert doomed_row["prefix"] in await page.inner_text(f"#sb-token-{doomed_row['id']}")
        assert await axe_violations(page) == []
        await screenshot(page, "account", full_page=True)

        # Revoke one token: the API refuses it at once, the other still works.
        async with page.expect_navigation():
            await page.click(f"#sb-token-revoke-{doomed_row['id']}")
        assert "is revoked" in await page.inner_text("#sb-account-notice")
        assert "revoked" in await page.inner_text(f"#sb-token-{doomed_row['id']}")
        assert await page.locator(f"#sb-token-revoke-{doomed_row['id']}").count() == 0
        assert _api_status(board_server.url, doomed) == 401 and _api_status(board_server.url, kept) == 200

        # A wrong current password, then two new ones that differ: refused, nothing changes.
        await page.fill("#sb-current-password", "not-my-password")
        await page.fill("#sb-new-password", "another-long-password")
        await page.fill("#sb-new-password-again", "another-long-password")
        async with page.expect_navigation():
            await page.click("#sb-change-password")
        assert "not right" in await page.inner_text("#sb-password-error[role=alert]")
        assert await page.evaluate("document.activeElement.id") == "sb-password-error"
        assert await axe_violations(page) == []
        await page.fill("#sb-current-password", PASSWORD)
        await page.fill("#sb-new-password", "another-long-password")
        await page.fill("#sb-new-password-again", "a-different-password")
        async with page.expect_navigation():
            await page.click("#sb-change-password")
        assert "differ" in await page.inner_text("#sb-password-error")
        page.watch.expected_http_errors(400, 422)
        assert await signed_in_status(board_server.url, elsewhere) == 200

        # The right one: this browser stays signed in, every other session of the human ends.
        await page.fill("#sb-current-password", PASSWORD)
        await page.fill("#sb-new-password", "another-long-password")
        await page.fill("#sb-new-password-again", "another-long-password")
        async with page.expect_navigation():
            await page.click("#sb-change-password")
        assert "password is changed" in await page.inner_text("#sb-account-notice")
        assert await signed_in_status(board_server.url, elsewhere) == 303
        await page.goto("/todos")
        assert page.url.endswith("/todos")
        await page.watch.assert_clean(page)

    async with page_for(browser, board_server) as page:
        await browser_sign_in(page, human.name, "another-long-password")
        assert page.url.endswith("/todos")

    # CSRF on every POST, and another human's token reads like an unknown one.
    cookie = await sign_in(board_server.url, human.name, "another-long-password")
    kept_id = await _token_id(board_server, human, kept)
    async with httpx.AsyncClient(base_url=board_server.url, cookies={"sb_session": cookie}) as client:
        for path, data in (("/account/password", {"current": "another-long-password", "new": "x" * 12,
                                                  "again": "x" * 12}),
                           (f"/account/tokens/{kept_id}/revoke", {})):
            r = await client.post(path, data=data)
            assert r.status_code == 403
            r = await client.post(path, data={**data, "csrf_token": "forged"})
            assert r.status_code == 403
        assert _api_status(board_server.url, kept) == 200
        csrf = csrf_of((await client.get("/account")).text)
        foreign = await client.post(f"/account/tokens/{foreign_row['id']}/revoke", data={"csrf_token": csrf})
        unknown = await client.post(f"/account/tokens/{uuid.uuid4()}/revoke", data={"csrf_token": csrf})
        assert foreign.status_code == unknown.status_code == 404 and foreign.content == unknown.content
    assert (await board_server.run(api_tokens.list_for, stranger))[0]["revoked_at"] is None
    await sign_in(board_server.url, human.name, "another-long-password")


async def _token_id(server, human, token: str) -> str:
    from switchboard.core.secrets import display_prefix

    rows = await server.run(api_tokens.list_for, human)
    return next(r["id"] for r in rows if r["prefix"] == display_prefix(token))


async def test_account_page_is_signed_in_only(board_server):
    async with httpx.AsyncClient(base_url=board_server.url) as client:
        r = await client.get("/account")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Faccount"
        r = await client.post("/account/password", data={"current": "x", "new": "y" * 9, "again": "y" * 9})
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    human = await board_server.human("acct2")
    cookie = await sign_in(board_server.url, human.name)
    r = await post_with_session(board_server.url, cookie, "/account/password",
                                {"current": PASSWORD, "new": "short", "again": "short"}, page="/account")
    assert r.status_code == 422 and "at least 8 characters" in r.text
    assert await signed_in_status(board_server.url, cookie) == 200
