"""Board sign-in with OpenID Connect and GitHub (issue 14), against a real provider process:
`oidc-provider-mock` (Authlib's authorization server in a thread, with its own authorization form).

The GitHub path is tested where it needs no GitHub: its settings, its button, the redirect it
starts (PKCE S256, state, our callback) and the callback refusing a wrong state; the code exchange
and `GET /user` run only against github.com itself.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from contextlib import ExitStack
from datetime import timedelta
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import oidc_provider_mock
import pytest

from board_kit import axe_violations, page_for, start_board_server, stop_board_server
from conftest import free_port, make_settings
from switchboard.config import ConfigError
from switchboard.web.board import oidc
from test_cli import _base_env, ok_json, refused

CLIENT_ID = "switchboard-board"
CLIENT_SECRET = "provider-client-secret-1234"
TABLES = ("humans", "human_identities", "board_sessions")


def _provider(stack: ExitStack, **options) -> str:
    server = stack.enter_context(oidc_provider_mock.run_server_in_thread(**options))
    return f"http://127.0.0.1:{server.server_port}"


def _board(pg_server, stack: ExitStack, issuer: str, **overrides):
    server = start_board_server(pg_server, oidc_issuer=issuer, oidc_client_id=CLIENT_ID,
                                oidc_client_secret=CLIENT_SECRET, oidc_name="Test ID", **overrides)
    stack.callback(stop_board_server, server, pg_server)
    return server


@pytest.fixture(scope="module")
def provider():
    with ExitStack() as stack:
        yield _provider(stack)


@pytest.fixture(scope="module")
def board_server(pg_server, provider):  # the name board_kit's `browser` fixture expects
    with ExitStack() as stack:
        yield _board(pg_server, stack, provider, github_client_id="gh-client-id",
                     github_client_secret="gh-client-secret-1234")


def fingerprint(server) -> list:
    parts = " UNION ALL ".join(
        f"SELECT '{t}' AS t, count(*) AS n, md5(coalesce(string_agg(to_jsonb(x)::text, ',' "
        f"ORDER BY to_jsonb(x)::text), '')) AS h FROM {t} x" for t in TABLES)
    return server.sql(parts)


def put_user(provider: str, sub: str, **claims) -> None:
    resp = httpx.put(f"{provider}/users/{quote(sub, safe='')}", json=claims, timeout=10)
    assert resp.status_code == 204, resp.text


async def start(client: httpx.AsyncClient, key: str = "oidc", next_path: str = "/endpoints") -> str:
    """Start a sign-in at the Board; returns the provider's authorization URL."""
    resp = await client.get(f"/login/oidc/start?provider={key}&next={quote(next_path)}")
    assert resp.status_code == 303, resp.text
    assert oidc.PENDING_COOKIE in resp.cookies
    return resp.headers["location"]


def authorize(url: str, sub: str) -> str:
    """Answer the provider's authorization form as `sub`; returns the callback URL it redirects to."""
    resp = httpx.post(url, data={"sub": sub}, timeout=10)
    assert resp.status_code == 302, resp.text
    return resp.headers["location"]


def callback_path(url: str) -> str:
    parts = urlsplit(url)
    assert parts.path == oidc.CALLBACK_PATH
    return f"{parts.path}?{parts.query}"


def client_for(server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=server.url, timeout=30)


def identity_rows(server, sub: str) -> list:
    return server.sql("SELECT i.issuer, i.subject, h.name, h.id FROM human_identities i JOIN humans h "
                      "ON h.id = i.human_id WHERE i.subject = %(s)s", {"s": sub})


# ------------------------------------------------------------------------------------------ config

def test_bad_provider_settings_stop_start_up_naming_the_variable(pg_uri):
    with pytest.raises(ConfigError, match="SWITCHBOARD_OIDC_ISSUER: .*https"):
        make_settings(pg_uri, oidc_issuer="http://id.example.com", oidc_client_id="a", oidc_client_secret="b")
    with pytest.raises(ConfigError, match="SWITCHBOARD_OIDC_ISSUER: .*issuer URL"):
        make_settings(pg_uri, oidc_issuer="https://id.example.com/?x=1", oidc_client_id="a", oidc_client_secret="b")
    with pytest.raises(ConfigError, match="SWITCHBOARD_OIDC_CLIENT_SECRET: .*missing SWITCHBOARD_OIDC_CLIENT_SECRET"):
        make_settings(pg_uri, oidc_issuer="https://id.example.com", oidc_client_id="a")
    with pytest.raises(ConfigError, match="missing SWITCHBOARD_GITHUB_CLIENT_ID"):
        make_settings(pg_uri, github_client_secret="s")
    ok = make_settings(pg_uri, oidc_issuer="https://id.example.com", oidc_client_id="a", oidc_client_secret="b",
                       github_client_id="c", github_client_secret="d")
    assert [(p.key, p.label, p.signup) for p in oidc.providers(ok)] == [
        ("oidc", "id.example.com", True), ("github", "GitHub", False)]
    assert oidc.providers(make_settings(pg_uri)) == []


# ------------------------------------------------------------------------------- sign-in, browser

async def test_sign_in_through_the_board_in_chromium(board_server, browser, provider):
    sub = f"alice-{secrets.token_hex(4)}@example.com"
    put_user(provider, sub, preferred_username="alice", email=sub)
    before = len(board_server.sql("SELECT id FROM humans"))
    async with page_for(browser, board_server) as page:
        await page.goto("/login?next=/endpoints")
        oidc_button = page.get_by_role("button", name="Sign in with Test ID")
        github_button = page.get_by_role("button", name="Sign in with GitHub")
        assert await oidc_button.count() == 1 and await github_button.count() == 1
        assert await axe_violations(page) == []
        await page.watch.assert_clean(page)
        await oidc_button.click()
        await page.wait_for_url(f"{provider}/oauth2/authorize*")
        await page.wait_for_load_state("networkidle")
        page.watch.console_errors.clear()  # the provider's own page (its assets are not ours to judge)
        await page.get_by_placeholder("sub").fill(sub)
        await page.get_by_role("button", name="Authorize").click()
        await page.wait_for_url(f"{board_server.url}/endpoints")
        assert "alice" in await page.content()
        await page.watch.assert_clean(page)
    async with page_for(browser, board_server) as page:  # a refused sign-in's page: focused, announced, clean
        await page.goto(f"{oidc.CALLBACK_PATH}?state=forged&code=forged")
        alert = page.get_by_role("alert")
        assert "not started in this browser" in await alert.inner_text()
        assert await page.evaluate("document.activeElement.id") == "sb-signin-error"
        assert await axe_violations(page) == []
        page.watch.expected_http_errors(400)
        await page.watch.assert_clean(page)
    [(issuer, subject, name, human_id)] = identity_rows(board_server, sub)
    assert (issuer, subject) == (provider, sub) and name.startswith("alice")
    assert len(board_server.sql("SELECT id FROM humans")) == before + 1
    assert board_server.sql("SELECT password_hash FROM humans WHERE id = %(i)s", {"i": human_id}) == [(None,)]

    # Signing in again finds the same human; nothing new is created.
    async with client_for(board_server) as client:
        done = await client.get(callback_path(authorize(await start(client), sub)))
        assert done.status_code == 303 and done.headers["location"] == "/endpoints"
        assert (await client.get("/endpoints")).status_code == 200
    assert [r[3] for r in identity_rows(board_server, sub)] == [human_id]
    assert len(board_server.sql("SELECT id FROM humans")) == before + 1


async def test_names_are_made_unique_and_the_subject_is_per_issuer(board_server, provider):
    first, second = f"u1-{secrets.token_hex(4)}", f"u2-{secrets.token_hex(4)}"
    nick = f"sam{secrets.token_hex(3)}"
    for sub in (first, second):
        put_user(provider, sub, preferred_username=nick)
        async with client_for(board_server) as client:
            assert (await client.get(callback_path(authorize(await start(client), sub)))).status_code == 303
    assert identity_rows(board_server, first)[0][2] == nick
    assert identity_rows(board_server, second)[0][2] == f"{nick}-2"
    # The same subject at another issuer is another human.
    from switchboard.core import identities
    other = await board_server.run(identities.sign_in, "https://other.example.com", first, hint=nick)
    assert other.created and other.human.name == f"{nick}-3"
    assert len({r[3] for r in identity_rows(board_server, first)}) == 2


async def test_a_disabled_human_is_refused(board_server, provider):
    sub = f"dis-{secrets.token_hex(4)}"
    async with client_for(board_server) as client:
        assert (await client.get(callback_path(authorize(await start(client), sub)))).status_code == 303
    board_server.sql("UPDATE humans SET disabled_at = now() WHERE id = (SELECT human_id FROM human_identities "
                     "WHERE subject = %(s)s)", {"s": sub})
    before = fingerprint(board_server)
    async with client_for(board_server) as client:
        refused_page = await client.get(callback_path(authorize(await start(client), sub)))
    assert refused_page.status_code == 403 and "This account is disabled." in refused_page.text
    assert fingerprint(board_server) == before


# ------------------------------------------------------------------------------------ refusals

async def test_a_wrong_state_is_refused_and_creates_nothing(board_server, provider):
    sub = f"state-{secrets.token_hex(4)}"
    before = fingerprint(board_server)
    async with client_for(board_server) as client:
        url = callback_path(authorize(await start(client), sub))
        wrong = url.replace("state=", "state=x", 1)
        page = await client.get(wrong)
        assert page.status_code == 400 and "state mismatch" in page.text
        assert 'role="alert"' in page.text and "Content-Security-Policy" in page.headers
        assert oidc.PENDING_COOKIE not in client.cookies  # the pending sign-in is gone
        again = await client.get(url)  # the right state, but the sign-in was refused already
        assert again.status_code == 400 and "Please sign in again." in again.text
    async with client_for(board_server) as stranger:  # a callback this browser never started
        alien = await stranger.get(url)
        assert alien.status_code == 400 and "not started in this browser" in alien.text
    assert fingerprint(board_server) == before
    assert identity_rows(board_server, sub) == []


async def test_declining_at_the_provider_creates_nothing(board_server, provider):
    before = fingerprint(board_server)
    async with client_for(board_server) as client:
        declined = httpx.post(await start(client), data={"action": "deny"}, timeout=10)
        assert declined.status_code == 302
        page = await client.get(callback_path(declined.headers["location"]))
    assert page.status_code == 403 and "did not sign you in (access_denied)" in page.text
    assert fingerprint(board_server) == before


async def test_a_replayed_code_is_refused(board_server, provider):
    sub = f"replay-{secrets.token_hex(4)}"
    async with client_for(board_server) as client:
        authorization = await start(client)
        pending = client.cookies[oidc.PENDING_COOKIE]
        url = callback_path(authorize(authorization, sub))
        assert (await client.get(url)).status_code == 303
        after_first = fingerprint(board_server)
        # The same browser again: its pending sign-in was used up.
        replay = await client.get(url)
        assert replay.status_code == 400 and "finished already" in replay.text
    # An attacker holding both the callback URL and the pending cookie: the provider refuses the code.
    async with client_for(board_server) as thief:
        thief.cookies.set(oidc.PENDING_COOKIE, pending, path=oidc.PENDING_PATH)
        stolen = await thief.get(url)
        assert stolen.status_code == 400 and "refused the sign-in code" in stolen.text
        assert "sb_session" not in stolen.cookies
    assert fingerprint(board_server) == after_first


async def test_the_start_uses_pkce_s256_state_and_nonce(board_server):
    async with client_for(board_server) as client:
        url = await start(client)
        pending = board_server.board.oidc.unseal(client.cookies[oidc.PENDING_COOKIE])
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    challenge = base64.urlsafe_b64encode(hashlib.sha256(pending["v"].encode()).digest()).rstrip(b"=").decode()
    assert query["code_challenge_method"] == "S256" and query["code_challenge"] == challenge
    assert query["state"] == pending["s"] and query["nonce"] == pending["n"]
    assert query["redirect_uri"] == board_server.url + oidc.CALLBACK_PATH and query["client_id"] == CLIENT_ID
    assert "openid" in query["scope"].split()
    assert len({pending["s"], pending["n"], pending["v"]}) == 3 and len(pending["v"]) >= 43


async def test_an_expired_id_token_is_refused(pg_server):
    """The provider issues ID tokens that expired five minutes before they were issued (its token
    lifetime set to -300 s), well past the Board's 30 s leeway."""
    with ExitStack() as stack:
        issuer = _provider(stack, access_token_max_age=timedelta(seconds=-300))
        server = _board(pg_server, stack, issuer)
        before = fingerprint(server)
        async with client_for(server) as client:
            page = await client.get(callback_path(authorize(await start(client), "late-user")))
        assert page.status_code == 502 and "has expired" in page.text
        assert fingerprint(server) == before


async def test_a_token_for_another_audience_is_refused(board_server, provider):
    """The provider issues an ID token for a second client id; the Board's verification (the one the
    callback runs) refuses it for its audience, and accepts the same provider's token for its own id.
    (The provider itself will not exchange another client's code for ours, so the callback cannot be
    fed such a token end to end.)"""
    board_oidc = board_server.board.oidc
    ours = board_oidc.providers["oidc"]
    metadata = await board_oidc.metadata(ours)

    async def token_for(client_id: str, nonce: str) -> dict:
        params = {"client_id": client_id, "response_type": "code", "scope": "openid",
                  "redirect_uri": "http://127.0.0.1/cb", "state": "s", "nonce": nonce}
        async with httpx.AsyncClient(timeout=10) as http:
            auth = await http.post(metadata["authorization_endpoint"], params=params, data={"sub": "aud-user"})
            code = parse_qs(urlsplit(auth.headers["location"]).query)["code"][0]
            token = await http.post(metadata["token_endpoint"], data={
                "grant_type": "authorization_code", "code": code, "redirect_uri": "http://127.0.0.1/cb"},
                auth=(client_id, "other-secret"))
        return token.json()

    foreign = await token_for("another-client", "n1")
    with pytest.raises(oidc.SignInFailed, match="another client") as refused_token:
        await board_oidc._verify_id_token(ours, metadata, foreign, "n1")
    assert refused_token.value.status == 502
    own = await token_for(CLIENT_ID, "n2")
    assert (await board_oidc._verify_id_token(ours, metadata, own, "n2"))[1] == "aud-user"
    with pytest.raises(oidc.SignInFailed, match="nonce"):
        await board_oidc._verify_id_token(ours, metadata, own, "not-this-sign-in")


async def test_a_provider_that_is_down(pg_server):
    with ExitStack() as stack:
        # Down from the start: discovery fails; a clear page, no pending cookie, nothing stored.
        server = _board(pg_server, stack, f"http://127.0.0.1:{free_port()}")
        before = fingerprint(server)
        async with client_for(server) as client:
            page = await client.get("/login/oidc/start?provider=oidc")
        assert page.status_code == 502 and "Could not reach Test ID" in page.text
        assert oidc.PENDING_COOKIE not in page.cookies
        assert fingerprint(server) == before

    with ExitStack() as stack:
        # Down between the authorization and the code exchange.
        provider_stack = stack.enter_context(ExitStack())
        issuer = _provider(provider_stack)
        server = _board(pg_server, stack, issuer)
        before = fingerprint(server)
        async with client_for(server) as client:
            url = callback_path(authorize(await start(client), "gone-user"))
            provider_stack.close()
            page = await client.get(url)
        assert page.status_code == 502 and "Could not reach Test ID" in page.text
        assert fingerprint(server) == before


async def test_without_signup_only_linked_identities_sign_in(pg_server):
    with ExitStack() as stack:
        issuer = _provider(stack)
        server = _board(pg_server, stack, issuer, oidc_signup=False)
        env = {**_base_env(), "SWITCHBOARD_DATABASE_URL": server.uri, "SWITCHBOARD_LOG_FORMAT": "text"}
        sub = "linked-user"
        before = fingerprint(server)
        async with client_for(server) as client:
            page = await client.get(callback_path(authorize(await start(client), sub)))
        assert page.status_code == 403 and f"--issuer {issuer} --subject {sub}" in page.text
        assert fingerprint(server) == before

        ok_json(env, "user", "add", "carol", "--password-stdin", stdin="carol-password-1\n")
        linked = ok_json(env, "user", "link", "carol", "--issuer", issuer, "--subject", sub)
        assert (linked["user"], linked["issuer"], linked["subject"]) == ("carol", issuer, sub)
        refused(env, "user", "link", "carol", "--issuer", issuer, "--subject", sub, contains="conflict")
        refused(env, "user", "link", "nobody-here", "--issuer", issuer, "--subject", "x", contains="not_found")
        refused(env, "user", "link", "carol", "--issuer", "", "--subject", "x", contains="issuer")
        async with client_for(server) as client:
            done = await client.get(callback_path(authorize(await start(client), sub)))
            assert done.status_code == 303
            assert (await client.get("/account")).status_code == 200
        assert [r[2] for r in identity_rows(server, sub)] == ["carol"]

        # Password sign-in off for carol: the password no longer signs in, the identity still does.
        cleared = ok_json(env, "user", "passwd", "carol", "--clear")
        assert cleared["password"] is False and cleared["sessions_ended"] == 1
        from account_kit import client_from, try_sign_in
        async with client_from(server.url) as client:
            assert (await try_sign_in(client, "carol", "carol-password-1")).status_code == 401
        async with client_for(server) as client:
            assert (await client.get(callback_path(authorize(await start(client), sub)))).status_code == 303

        # Unlinked again: the identity no longer signs in (sign-up is off), and carol is untouched.
        assert ok_json(env, "user", "unlink", "carol", "--issuer", issuer, "--subject", sub)["unlinked"] is True
        refused(env, "user", "unlink", "carol", "--issuer", issuer, "--subject", sub, contains="not_found")
        async with client_for(server) as client:
            assert (await client.get(callback_path(authorize(await start(client), sub)))).status_code == 403
        assert server.sql("SELECT count(*) FROM humans WHERE name = 'carol'") == [(1,)]


# -------------------------------------------------------------------------------------------- GitHub

async def test_github_start_and_a_wrong_state(board_server):
    before = fingerprint(board_server)
    async with client_for(board_server) as client:
        url = await start(client, "github")
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert url.startswith(oidc.GITHUB_AUTHORIZE + "?")
        assert query["client_id"] == "gh-client-id" and query["code_challenge_method"] == "S256"
        assert query["redirect_uri"] == board_server.url + oidc.CALLBACK_PATH and "nonce" not in query
        page = await client.get(f"{oidc.CALLBACK_PATH}?code=anything&state=not-{query['state']}")
        assert page.status_code == 400 and "state mismatch" in page.text
    async with client_for(board_server) as client:
        unknown = await client.get("/login/oidc/start?provider=gitlab")
        assert unknown.status_code == 404 and "not configured" in unknown.text
    assert fingerprint(board_server) == before
