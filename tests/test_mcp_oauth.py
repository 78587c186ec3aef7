"""OAuth for MCP hosts that only speak OAuth, end to end: the official SDK client's OAuth flow
(`OAuthClientProvider`: discovery from the 401, dynamic registration, authorization code with PKCE,
refresh) against the real app, with the human's consent given in Debian Chromium on the Board; then a
tool call, refresh with rotation, revocation (RFC 7009 and by revoking the endpoint), a token refused
at another endpoint, and the static bearer still working. Bad input on the new routes is refused with
a clear error and leaves the OAuth tables as they were."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from playwright.async_api import async_playwright

from board_kit import CHROMIUM_ARGS, PASSWORD, axe_violations, page_for, start_board_server, stop_board_server
from conftest import chromium_path, free_port
from mcp_support import ACCEPT
from switchboard.core import endpoints, oauth
from switchboard.core.secrets import sha256

ACCESS_SECONDS = 8  # short, so the test sees a refresh; long enough that a slow machine does not expire it early


@pytest.fixture(scope="module")
def server(pg_server):
    # A long credential cache: a revocation seen within it was seen through the NOTIFY, not the TTL.
    srv = start_board_server(pg_server, oauth_access_token_seconds=ACCESS_SECONDS, mcp_auth_cache_seconds=30)
    yield srv
    stop_board_server(srv, pg_server)


@pytest.fixture(scope="module")
async def browser(server):
    path = chromium_path()
    if path is None:
        pytest.skip("Debian's chromium is not installed")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        yield b
        await b.close()


class Memory:
    """The SDK's `TokenStorage`, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Host:
    """An OAuth-only MCP host: the SDK's provider, whose redirect is followed by a person in Chromium."""

    def __init__(self, server, browser, human, *, pick: str | None = None, check_page: bool = False) -> None:
        self.server, self.browser, self.human, self.pick, self.check_page = server, browser, human, pick, check_page
        self.callback = f"http://127.0.0.1:{free_port()}/callback"
        self.storage = Memory()
        self.result: AuthorizationCodeResult | None = None
        self.consents = 0

    def provider(self, url: str) -> OAuthClientProvider:
        metadata = OAuthClientMetadata(redirect_uris=[self.callback], client_name="Test host <b>",
                                       grant_types=["authorization_code", "refresh_token"])
        return OAuthClientProvider(url, metadata, self.storage, redirect_handler=self.consent,
                                   callback_handler=self.code)

    async def consent(self, authorization_url: str) -> None:
        self.consents += 1
        # The main flow signs in on the way (the host's redirect lands on the sign-in form first).
        async with page_for(self.browser, self.server, None if self.check_page else self.human) as page:
            landed: asyncio.Future = asyncio.get_running_loop().create_future()

            async def capture(route) -> None:
                if not landed.done():
                    landed.set_result(route.request.url)
                await route.fulfill(status=200, body="done", content_type="text/plain")

            await page.route(f"{self.callback}**", capture)
            await page.goto(authorization_url)
            if self.check_page:
                assert urlsplit(page.url).path == "/login"
                await page.fill("#sb-name", self.human.name)
                await page.fill("#sb-password", PASSWORD)
                async with page.expect_navigation():
                    await page.click("#sb-sign-in")
            assert urlsplit(page.url).path == "/oauth/consent"
            assert await page.text_content("#sb-oauth-client") == "Test host <b>"  # escaped, shown as text
            if self.check_page:
                assert await axe_violations(page) == []
                await page.watch.assert_clean(page)
            if self.pick:
                await page.check(f"input[name=slug][value='{self.pick}']")
            await page.click("#sb-oauth-allow")
            query = parse_qs(urlsplit(await asyncio.wait_for(landed, 15)).query)
        self.result = AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                              iss=query["iss"][0])  # RFC 9207, checked by the SDK

    async def code(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


def raw_call(base: str, slug: str, token: str) -> httpx.Response:
    """One stateless tools/call (protocol 2026-era headers are not needed for a status code)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}
    return httpx.post(f"{base}/mcp/{slug}", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {token}", "Accept": ACCEPT})


async def claim_next(base: str, slug: str, provider: OAuthClientProvider) -> dict:
    async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(f"{base}/mcp/{slug}", http_client=http)) as client:
            result = await client.call_tool("claim_next", {})
            assert not result.is_error, result
            return result.structured_content


def oauth_rows(server) -> tuple:
    return tuple(tuple(server.sql(f"SELECT * FROM {t} ORDER BY 1")) for t in
                 ("oauth_clients", "oauth_codes", "oauth_tokens"))


async def eventually_status(base: str, slug: str, token: str, status: int, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        got = (await asyncio.to_thread(raw_call, base, slug, token)).status_code
        if got == status:
            return
        assert asyncio.get_running_loop().time() < deadline, f"still {got}, wanted {status}"
        await asyncio.sleep(0.05)


async def test_discovery_from_the_401(server):
    human = await server.human("disc")
    ep, _ = await server.run(endpoints.vend, human, agent="bot", queues=["inbox"])
    base = server.url
    denied = httpx.post(f"{base}/mcp/{ep['slug']}", json={}, headers={"Accept": ACCEPT})
    assert denied.status_code == 401
    challenge = denied.headers["www-authenticate"]
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp/{ep["slug"]}"' in challenge
    prm = httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp/{ep['slug']}").json()
    assert prm["resource"] == f"{base}/mcp/{ep['slug']}"
    assert prm["authorization_servers"] == [base]
    asm = httpx.get(f"{base}/.well-known/oauth-authorization-server").json()
    assert asm["issuer"] == base
    assert asm["code_challenge_methods_supported"] == ["S256"]
    assert asm["registration_endpoint"] == f"{base}/oauth/register"
    assert asm["revocation_endpoint"] == f"{base}/oauth/revoke"
    assert asm["token_endpoint"] == f"{base}/oauth/token"
    assert asm["authorization_response_iss_parameter_supported"] is True


async def test_the_sdk_oauth_flow_end_to_end(server, browser):
    base = server.url
    human = await server.human("oa")
    ep_a, static_a = await server.run(endpoints.vend, human, agent="alpha", queues=["inbox"])
    ep_b, _ = await server.run(endpoints.vend, human, agent="beta", queues=["other"])
    host = Host(server, browser, human, pick=ep_a["slug"], check_page=True)
    provider = host.provider(f"{base}/mcp/{ep_a['slug']}")

    # Registration, consent in the browser, token exchange, then a tool call that succeeds.
    assert await claim_next(base, ep_a["slug"], provider) == {"empty": True}
    assert host.consents == 1
    first = host.storage.tokens
    assert first.access_token.startswith("sbo_") and first.refresh_token.startswith("sbr_")
    assert first.expires_in == ACCESS_SECONDS and first.scope == "mcp"
    # Stored hashed only: the token's digest is there, its text is nowhere.
    assert server.sql("SELECT kind FROM oauth_tokens WHERE token_hash = %(h)s", {"h": sha256(first.access_token)})
    secret = host.storage.client.client_secret
    assert secret and server.sql("SELECT 1 FROM oauth_clients WHERE secret_hash = %(h)s", {"h": sha256(secret)})
    dump = str(server.sql("SELECT * FROM oauth_clients")) + str(server.sql("SELECT * FROM oauth_tokens"))
    assert first.access_token not in dump and secret not in dump

    # The token is bound to endpoint A: endpoint B refuses it.
    assert raw_call(base, ep_b["slug"], first.access_token).status_code == 403

    # Refresh: the access token lapses, the SDK rotates the refresh token, the call goes through.
    await asyncio.sleep(ACCESS_SECONDS + 1)
    assert raw_call(base, ep_a["slug"], first.access_token).status_code == 401  # expired
    assert await claim_next(base, ep_a["slug"], provider) == {"empty": True}
    assert host.consents == 1  # no new consent
    second = host.storage.tokens
    assert second.access_token != first.access_token and second.refresh_token != first.refresh_token
    assert raw_call(base, ep_a["slug"], second.access_token).status_code == 200

    # The static bearer of the same endpoint keeps working beside it.
    assert raw_call(base, ep_a["slug"], static_a).status_code == 200

    # Revocation (RFC 7009): the token stops working at once (well within the 30 s credential cache).
    client = host.storage.client
    revoked = httpx.post(f"{base}/oauth/revoke", data={"token": second.access_token, "client_id": client.client_id,
                                                        "client_secret": client.client_secret})
    assert revoked.status_code == 200
    assert server.sql("SELECT kind, revoked_at IS NOT NULL FROM oauth_tokens WHERE token_hash = %(h)s",
                      {"h": sha256(second.access_token)}) == [("access", True)]
    await eventually_status(base, ep_a["slug"], second.access_token, 401, timeout=2)
    refused = httpx.post(f"{base}/oauth/token", data={
        "grant_type": "refresh_token", "refresh_token": second.refresh_token, "client_id": client.client_id,
        "client_secret": client.client_secret})
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"  # its family went with it
    assert raw_call(base, ep_a["slug"], static_a).status_code == 200


async def test_revoking_the_endpoint_ends_its_oauth_tokens(server, browser):
    base = server.url
    human = await server.human("ob")
    ep, _ = await server.run(endpoints.vend, human, agent="gamma", queues=["inbox"])
    host = Host(server, browser, human)
    provider = host.provider(f"{base}/mcp/{ep['slug']}")
    assert await claim_next(base, ep["slug"], provider) == {"empty": True}
    tokens = host.storage.tokens
    assert raw_call(base, ep["slug"], tokens.access_token).status_code == 200
    await server.run(endpoints.revoke, human, ep["slug"])
    await eventually_status(base, ep["slug"], tokens.access_token, 401, timeout=2)
    client = host.storage.client
    refreshed = httpx.post(f"{base}/oauth/token", data={
        "grant_type": "refresh_token", "refresh_token": tokens.refresh_token, "client_id": client.client_id,
        "client_secret": client.client_secret})
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def test_bad_input_is_refused_and_changes_nothing(server):
    base = server.url
    human = await server.human("obad")
    ep, _ = await server.run(endpoints.vend, human, agent="delta", queues=["inbox"])
    callback = "http://127.0.0.1:9/cb"
    reg = httpx.post(f"{base}/oauth/register", json={"redirect_uris": [callback], "client_name": "bad-input",
                                                     "token_endpoint_auth_method": "none"})
    assert reg.status_code == 201, reg.text
    client_id = reg.json()["client_id"]
    assert "client_secret" not in reg.json() or reg.json()["client_secret"] is None
    verifier, challenge = _pkce()
    good = {"client_id": client_id, "redirect_uri": callback, "response_type": "code", "code_challenge": challenge,
            "code_challenge_method": "S256", "state": "s1", "resource": f"{base}/mcp/{ep['slug']}"}

    before = oauth_rows(server)

    def authorize(**changes) -> httpx.Response:
        params = {k: v for k, v in {**good, **changes}.items() if v is not None}
        return httpx.get(f"{base}/oauth/authorize?{urlencode(params)}", follow_redirects=False)

    unknown = authorize(client_id="no-such-client")
    assert unknown.status_code == 400 and "no-such-client" in unknown.json()["error_description"]
    wrong_redirect = authorize(redirect_uri="http://127.0.0.1:9/elsewhere")
    assert wrong_redirect.status_code == 400 and wrong_redirect.json()["error"] == "invalid_request"
    assert "redirect" in wrong_redirect.json()["error_description"].lower()
    for changes, named in (({"code_challenge": None}, "code_challenge"),
                           ({"code_challenge_method": "plain"}, "code_challenge_method")):
        refused = authorize(**changes)
        assert refused.status_code == 302
        query = parse_qs(urlsplit(refused.headers["location"]).query)
        assert query["error"] == ["invalid_request"] and named in query["error_description"][0]
        assert query["state"] == ["s1"] and query["iss"] == [base]
    other = authorize(resource="https://elsewhere.example/mcp/x")
    assert parse_qs(urlsplit(other.headers["location"]).query)["error"] == ["invalid_target"]
    bad_reg = httpx.post(f"{base}/oauth/register", json={"redirect_uris": ["http://evil.example/cb"]})
    assert bad_reg.status_code == 400 and bad_reg.json()["error"] == "invalid_redirect_uri"
    unknown_token = httpx.post(f"{base}/oauth/token", data={"grant_type": "authorization_code", "code": "sbc_x",
                                                           "code_verifier": verifier, "client_id": "nobody"})
    assert unknown_token.status_code == 401 and unknown_token.json()["error"] == "invalid_client"
    tampered = httpx.get(f"{base}/oauth/consent?request=abc.def", follow_redirects=False)
    assert tampered.status_code in (303, 400)
    assert oauth_rows(server) == before

    # A code is single use: the second exchange is refused, creates nothing, and revokes what the first issued.
    code = await server.run(oauth.create_code, human, client_id=client_id, endpoint_id=ep["endpoint_id"],
                            redirect_uri=callback, redirect_uri_explicit=True, code_challenge=challenge,
                            scopes=["mcp"], resource=f"{base}/mcp/{ep['slug']}", seconds=60)
    exchange = {"grant_type": "authorization_code", "code": code, "redirect_uri": callback,
                "code_verifier": verifier, "client_id": client_id}
    wrong_verifier = httpx.post(f"{base}/oauth/token", data={**exchange, "code_verifier": "x" * 50})
    assert wrong_verifier.status_code == 400 and "code_verifier" in wrong_verifier.json()["error_description"]
    first = httpx.post(f"{base}/oauth/token", data=exchange)
    assert first.status_code == 200, first.text
    token = first.json()["access_token"]
    assert raw_call(base, ep["slug"], token).status_code == 200
    tokens_before = server.sql("SELECT count(*) FROM oauth_tokens")
    again = httpx.post(f"{base}/oauth/token", data=exchange)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert server.sql("SELECT count(*) FROM oauth_tokens") == tokens_before
    await eventually_status(base, ep["slug"], token, 401, timeout=2)


async def test_a_spent_refresh_token_presented_again_revokes_the_chain(server):
    base = server.url
    human = await server.human("orot")
    ep, _ = await server.run(endpoints.vend, human, agent="eps", queues=["inbox"])
    callback = "http://127.0.0.1:9/cb"
    client_id = httpx.post(f"{base}/oauth/register", json={"redirect_uris": [callback],
                                                           "token_endpoint_auth_method": "none"}).json()["client_id"]
    verifier, challenge = _pkce()
    code = await server.run(oauth.create_code, human, client_id=client_id, endpoint_id=ep["endpoint_id"],
                            redirect_uri=callback, redirect_uri_explicit=True, code_challenge=challenge,
                            scopes=["mcp"], resource=f"{base}/mcp/{ep['slug']}", seconds=60)
    first = httpx.post(f"{base}/oauth/token", data={"grant_type": "authorization_code", "code": code,
                                                    "redirect_uri": callback, "code_verifier": verifier,
                                                    "client_id": client_id}).json()
    refresh = {"grant_type": "refresh_token", "client_id": client_id}
    second = httpx.post(f"{base}/oauth/token", data={**refresh, "refresh_token": first["refresh_token"]}).json()
    assert second["refresh_token"] != first["refresh_token"]
    assert raw_call(base, ep["slug"], second["access_token"]).status_code == 200
    replayed = httpx.post(f"{base}/oauth/token", data={**refresh, "refresh_token": first["refresh_token"]})
    assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"
    await eventually_status(base, ep["slug"], second["access_token"], 401, timeout=2)
    after = httpx.post(f"{base}/oauth/token", data={**refresh, "refresh_token": second["refresh_token"]})
    assert after.status_code == 400 and after.json()["error"] == "invalid_grant"


async def test_consent_deny_foreign_endpoint_and_csrf(server, browser):
    base = server.url
    human = await server.human("oden")
    other = await server.human("oth")
    ep, _ = await server.run(endpoints.vend, human, agent="zeta", queues=["inbox"])
    foreign, _ = await server.run(endpoints.vend, other, agent="eta", queues=["inbox"])
    callback = f"http://127.0.0.1:{free_port()}/cb"
    client_id = httpx.post(f"{base}/oauth/register", json={"redirect_uris": [callback], "client_name": "denied",
                                                           "token_endpoint_auth_method": "none"}).json()["client_id"]
    _, challenge = _pkce()

    def authorize_url(slug: str) -> str:
        return f"{base}/oauth/authorize?" + urlencode({
            "client_id": client_id, "redirect_uri": callback, "response_type": "code", "code_challenge": challenge,
            "code_challenge_method": "S256", "state": "st", "resource": f"{base}/mcp/{slug}"})

    before = oauth_rows(server)
    async with page_for(browser, server, await server.human("onone")) as page:
        # A human with no endpoint is sent to vend one.
        await page.goto(authorize_url("x").replace("&resource=", "&unused="))
        assert await page.get_attribute("#sb-oauth-vend", "href") == "/endpoints/vend"
        assert await axe_violations(page) == []
    async with page_for(browser, server, human) as page:
        # Another human's endpoint looks like one that does not exist, and nothing is offered.
        await page.goto(authorize_url(foreign["slug"]))
        assert "does not exist, is not yours" in await page.text_content("#sb-oauth-error")
        assert await page.locator("#sb-oauth-allow").count() == 0
        page.watch.expected_http_errors(400)
        # A consent posted without the CSRF token is refused.
        await page.goto(authorize_url(ep["slug"]))
        blob = await page.get_attribute("input[name=request]", "value")
        forged = await page.request.post(f"{base}/oauth/consent", form={"request": blob, "decision": "allow",
                                                                         "slug": ep["slug"]})
        assert forged.status == 403
        # Deny: back to the host with access_denied and its state; no code made.
        landed: asyncio.Future = asyncio.get_running_loop().create_future()

        async def capture(route) -> None:
            if not landed.done():
                landed.set_result(route.request.url)
            await route.fulfill(status=200, body="done", content_type="text/plain")

        await page.route(f"{callback}**", capture)
        page.watch.expected_http_errors(403)
        await page.watch.assert_clean(page)
        await page.click("#sb-oauth-deny")  # reaching the host proves the page's CSP lets the form go there
        query = parse_qs(urlsplit(await asyncio.wait_for(landed, 15)).query)
        assert query["error"] == ["access_denied"] and query["state"] == ["st"] and query["iss"] == [base]
    assert oauth_rows(server) == before


async def test_the_sweep_purges_expired_codes_tokens_and_abandoned_clients(server):
    base = server.url
    human = await server.human("opur")
    ep, _ = await server.run(endpoints.vend, human, agent="theta", queues=["inbox"])
    callback = "http://127.0.0.1:9/cb"

    def register() -> str:
        return httpx.post(f"{base}/oauth/register", json={"redirect_uris": [callback],
                                                          "token_endpoint_auth_method": "none"}).json()["client_id"]

    abandoned, used, fresh = register(), register(), register()
    verifier, challenge = _pkce()
    code = await server.run(oauth.create_code, human, client_id=used, endpoint_id=ep["endpoint_id"],
                            redirect_uri=callback, redirect_uri_explicit=True, code_challenge=challenge,
                            scopes=["mcp"], resource=f"{base}/mcp/{ep['slug']}", seconds=60)
    tokens = httpx.post(f"{base}/oauth/token", data={"grant_type": "authorization_code", "code": code,
                                                     "redirect_uri": callback, "code_verifier": verifier,
                                                     "client_id": used}).json()
    server.sql("UPDATE oauth_clients SET created_at = now() - interval '2 days' WHERE client_id IN (%(a)s, %(u)s)",
               {"a": abandoned, "u": used})
    server.sql("UPDATE oauth_codes SET expires_at = now() - interval '2 hours' WHERE client_id = %(u)s", {"u": used})
    server.sql("UPDATE oauth_tokens SET expires_at = now() - interval '2 days' WHERE client_id = %(u)s "
               "AND kind = 'access'", {"u": used})
    await server.run(oauth.purge)
    left = {r[0] for r in server.sql("SELECT client_id FROM oauth_clients")}
    assert abandoned not in left and used in left and fresh in left  # `used` still holds a refresh token
    assert server.sql("SELECT kind FROM oauth_tokens WHERE client_id = %(u)s", {"u": used}) == [("refresh",)]
    assert server.sql("SELECT 1 FROM oauth_codes WHERE client_id = %(u)s", {"u": used}) == []
    assert raw_call(base, ep["slug"], tokens["access_token"]).status_code == 401
