"""OAuth 2.1 for MCP hosts that only speak OAuth (docs/mcp.md, "Hosts that only speak OAuth").

The MCP authorization specification's pieces, from the official SDK's server auth building blocks:

- protected-resource metadata (RFC 9728) for every endpoint URL: `/mcp/<slug>` is described at
  `/.well-known/oauth-protected-resource/mcp/<slug>`, which the gateway's 401 names
  (`WWW-Authenticate: Bearer resource_metadata="…"`);
- authorization-server metadata (RFC 8414) at `/.well-known/oauth-authorization-server`, the issuer
  being the public base URL; the SDK's handlers at `/oauth/authorize`, `/oauth/token`,
  `/oauth/register` (dynamic client registration, RFC 7591) and `/oauth/revoke` (RFC 7009), over
  `SwitchboardProvider` (the SDK's `OAuthAuthorizationServerProvider`) backed by core/oauth.py;
- the consent page `/oauth/consent`: the human signs in on the Board (the usual session), picks one of
  their active endpoints (the one the host named with `resource`, RFC 8707, when it did) and allows or
  denies; CSRF-checked, served under the Board's CSP with `form-action` widened to the client's
  redirect origin only.

PKCE with S256 is required (the SDK refuses a missing challenge or `plain`); every redirect back to
the client names the issuer (RFC 9207 `iss`); the sweep tick purges expired grants. A client secret, when a
client registers for one, is stored as its SHA-256, so client authentication is `HashedClientAuthenticator`
(the SDK's compares a stored plain secret). The authorization request travels from `/oauth/authorize`
to the consent page signed (HMAC with the Board's secret, 10 minutes), so any serving process can
finish it. Access tokens last `SWITCHBOARD_OAUTH_ACCESS_TOKEN_SECONDS` (1 hour), refresh tokens
`SWITCHBOARD_OAUTH_REFRESH_TOKEN_SECONDS` (30 days), codes 60 seconds.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlsplit
from uuid import UUID

from markupsafe import Markup
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler, ProtectedResourceMetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.revoke import RevocationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken, ProtectedResourceMetadata
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route, request_response

from ..config import is_loopback
from ..core import endpoints, oauth
from ..core.models import Core
from ..runtime import Component, Runtime
from .board.kit import NO_STORE, Board, human_page, human_post
from .board.sessions import load_secret
from .security import CONTENT_SECURITY_POLICY

EXPIRED = "The request is invalid or has expired. Start again from your app."
SCOPE = "mcp"  # the one scope: act as the chosen endpoint, within the endpoint's own verbs and queues
CODE_SECONDS = 60
REQUEST_SECONDS = 600  # how long a consent page may stay open
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))  # the issuer has no trailing slash
PATHS = {"authorize": "/oauth/authorize", "token": "/oauth/token", "register": "/oauth/register",
         "revoke": "/oauth/revoke", "consent": "/oauth/consent"}


class Tokens(AccessToken):
    family: str = ""


class Refresh(RefreshToken):
    family: str = ""


def _client(row: dict) -> OAuthClientInformationFull:
    """A stored client as the SDK handlers see it. The secret is never stored: the SDK's checks that
    read it are replaced by `HashedClientAuthenticator`."""
    return OAuthClientInformationFull.model_validate({**row["metadata"], "client_id": row["client_id"]})


class SwitchboardProvider:
    """The SDK's `OAuthAuthorizationServerProvider`, over core/oauth.py."""

    def __init__(self, runtime: Runtime, signer: RequestSigner) -> None:
        self.runtime = runtime
        self.signer = signer

    @property
    def core(self) -> Core:
        return self.runtime.core

    @property
    def base(self) -> str:
        return self.runtime.settings.public_base_url

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        row = await oauth.get_client(self.core, client_id)
        return _client(row) if row is not None else None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        for uri in client_info.redirect_uris or []:
            parts = urlsplit(str(uri))
            loopback = parts.scheme == "http" and is_loopback((parts.hostname or "").lower())
            if parts.fragment or not (parts.scheme == "https" or loopback
                                      or parts.scheme not in ("http", "https", "javascript", "data", "file")):
                raise RegistrationError("invalid_redirect_uri",
                                        f"redirect_uri {str(uri)!r} must be https, http on a loopback address, "
                                        "or an app's own scheme, without a fragment")
        metadata = client_info.model_dump(mode="json", exclude_none=True,
                                          exclude={"client_id", "client_secret"})
        await oauth.register_client(self.core, client_info.client_id, metadata, client_info.client_secret)

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and self.slug_of(params.resource) is None:
            raise AuthorizeError("invalid_target", f"resource must be an endpoint URL of this server, "
                                                   f"{self.base}/mcp/<slug>")
        blob = self.signer.sign({
            "client_id": client.client_id, "redirect_uri": str(params.redirect_uri),
            "explicit": params.redirect_uri_provided_explicitly, "challenge": params.code_challenge,
            "scopes": params.scopes or [SCOPE], "state": params.state, "resource": params.resource})
        return f"{self.base}{PATHS['consent']}?request={blob}"

    def slug_of(self, resource: str | None) -> str | None:
        prefix = f"{self.base}/mcp/"
        if not resource or not resource.startswith(prefix):
            return None
        slug = resource[len(prefix):]
        return slug if slug.isascii() and slug.isalnum() and len(slug) <= 64 else None

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str
                                      ) -> AuthorizationCode | None:
        row = await oauth.load_code(self.core, client.client_id, authorization_code)
        if row is None:
            return None
        return AuthorizationCode(code=authorization_code, scopes=list(row["scopes"]), expires_at=row["expires_epoch"],
                                 client_id=row["client_id"], code_challenge=row["code_challenge"],
                                 redirect_uri=row["redirect_uri"],
                                 redirect_uri_provided_explicitly=row["redirect_uri_explicit"],
                                 resource=row["resource"], subject=str(row["human_id"]))

    def _token(self, issued: oauth.Issued) -> OAuthToken:
        return OAuthToken(access_token=issued.access_token, token_type="Bearer", expires_in=issued.expires_in,
                          scope=" ".join(issued.scopes), refresh_token=issued.refresh_token)

    def _lifetimes(self) -> dict:
        s = self.runtime.settings
        return {"access_seconds": s.oauth_access_token_seconds, "refresh_seconds": s.oauth_refresh_token_seconds}

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        issued = await oauth.exchange_code(self.core, client.client_id, authorization_code.code, **self._lifetimes())
        if issued is None:
            raise TokenError("invalid_grant", "authorization code was already used or has expired")
        return self._token(issued)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> Refresh | None:
        row = await oauth.load_refresh(self.core, client.client_id, refresh_token)
        if row is None:
            return None
        return Refresh(token=refresh_token, client_id=row["client_id"], scopes=list(row["scopes"]),
                       expires_at=int(row["expires_epoch"]), resource=row["resource"], family=str(row["family"]))

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: Refresh,
                                     scopes: list[str]) -> OAuthToken:
        issued = await oauth.rotate_refresh(self.core, client.client_id, refresh_token.token, scopes,
                                            **self._lifetimes())
        if issued is None:
            raise TokenError("invalid_grant", "refresh token was already used")
        return self._token(issued)

    async def load_access_token(self, token: str) -> Tokens | None:
        row = await oauth.find_token(self.core, token)
        if row is None or row["kind"] != "access" or row["revoked_at"] is not None:
            return None
        return Tokens(token=token, client_id=row["client_id"], scopes=list(row["scopes"]),
                      expires_at=int(row["expires_epoch"]), resource=row["resource"], family=str(row["family"]))

    async def revoke_token(self, token: Tokens | Refresh) -> None:
        await oauth.revoke_family(self.core, UUID(token.family))


class HashedClientAuthenticator(ClientAuthenticator):
    """Client authentication at the token and revocation endpoints against the stored SHA-256 of the
    client secret (constant-time compare), with the SDK's error type and messages."""

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        client_id = form.get("client_id")
        header = request.headers.get("authorization", "")
        presented: str | None = None
        if header[:6].lower() == "basic ":
            try:
                basic_id, _, presented = base64.b64decode(header[6:]).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError, binascii.Error):
                raise AuthenticationError("invalid Basic authentication header") from None
            basic_id, presented = unquote(basic_id), unquote(presented)
            if client_id and basic_id != client_id:
                raise AuthenticationError("client_id in the Basic header and the body differ")
            client_id = basic_id
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("missing client_id")
        # The SDK types its provider as its protocol; this one is ours (SwitchboardProvider).
        row = await oauth.get_client(self.provider.core, client_id)  # type: ignore[attr-defined]
        if row is None:
            raise AuthenticationError(f"unknown client_id {client_id[:64]!r}")
        client = _client(row)
        method = client.token_endpoint_auth_method or "client_secret_post"
        if method == "client_secret_post":
            value = form.get("client_secret")
            presented = value if isinstance(value, str) else None
        if method != "none" and not oauth.secret_matches(row, presented):
            raise AuthenticationError("client_secret missing or wrong")
        return client


class RequestSigner:
    """An authorization request carried to the consent page: JSON, base64url, HMAC-SHA256, expiring."""

    def __init__(self, secret: bytes) -> None:
        self.key = hashlib.sha256(b"switchboard oauth consent\0" + secret).digest()

    def sign(self, payload: dict) -> str:
        body = base64.urlsafe_b64encode(json.dumps({**payload, "exp": int(time.time()) + REQUEST_SECONDS},
                                                   separators=(",", ":")).encode()).decode().rstrip("=")
        mac = base64.urlsafe_b64encode(hmac.new(self.key, body.encode(), "sha256").digest()).decode().rstrip("=")
        return f"{body}.{mac}"

    def read(self, value: Any) -> dict | None:
        if not isinstance(value, str) or len(value) > 8192 or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        good = base64.urlsafe_b64encode(hmac.new(self.key, body.encode(), "sha256").digest()).decode().rstrip("=")
        if not hmac.compare_digest(good, mac):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(payload, dict) or payload.get("exp", 0) < time.time():
            return None
        return payload


# ------------------------------------------------------------------------------------ the consent page

def _origin(uri: str) -> str | None:
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return None


def _csp(redirect_uri: str) -> str:
    """The Board's policy, with form submissions allowed to go on to the client's redirect origin."""
    origin = _origin(redirect_uri)
    if origin is None:
        return CONTENT_SECURITY_POLICY
    return CONTENT_SECURITY_POLICY.replace("form-action 'self'", f"form-action 'self' {origin}")


def _bad_request(board: Board, request: Request, who: Any, message: str) -> HTMLResponse:
    body = Markup('<hgroup><h1>This authorization request cannot be completed</h1>'
                  '<p id="sb-oauth-error">{}</p></hgroup>').format(message)
    return board.html_page(request, who, "Authorization refused", body, status=400)


class Consent:
    def __init__(self, provider: SwitchboardProvider, signer: RequestSigner) -> None:
        self.provider = provider
        self.signer = signer

    async def _live_endpoints(self, board: Board, who: Any, pending: dict) -> tuple[list[dict], str | None]:
        """The human's endpoints the host may be given: all active ones, or just the one it named."""
        now = datetime.now(UTC)
        live = [e for e in await endpoints.list_for_human(board.core, who[0]) if e["state"] == "active"
                and (e["expires_at"] is None or datetime.fromisoformat(e["expires_at"]) > now)]
        if pending.get("resource") is not None:
            slug = self.provider.slug_of(pending["resource"])
            live = [e for e in live if e["slug"] == slug]
            if not live:
                return [], "The app asked for an endpoint that does not exist, is not yours, or is no longer active."
        if not live:
            return [], Markup('You have no active endpoint to connect. <a href="/endpoints/vend" id="sb-oauth-vend">'
                              'Vend one</a>, then connect again from your app.')
        return live, None

    async def page(self, board: Board, request: Request, who: Any) -> Response:
        pending = self.signer.read(request.query_params.get("request"))
        if pending is None:
            return _bad_request(board, request, who, EXPIRED)
        row = await oauth.get_client(board.core, pending["client_id"])
        if row is None:
            return _bad_request(board, request, who, "The app is not registered. Start again from your app.")
        client = _client(row)
        choices, problem = await self._live_endpoints(board, who, pending)
        if problem:
            return _bad_request(board, request, who, problem)
        csrf = board.sessions.csrf_token(who[1])
        options = Markup("").join(
            Markup('<label><input type="radio" name="slug" value="{slug}"{checked}> <code>{slug}</code>: agent '
                   '<strong>{agent}</strong>, queues {queues}, verbs {verbs}</label>').format(
                slug=e["slug"], agent=e["agent"], queues=", ".join(e["queues"]), verbs=", ".join(e["verbs"]),
                checked=Markup(" checked") if i == 0 else "")
            for i, e in enumerate(choices))
        name = client.client_name or "An unnamed app"
        body = Markup(
            '<hgroup><h1>Connect an app to an endpoint</h1>'
            '<p><strong id="sb-oauth-client">{name}</strong> asks to act as one of your endpoints over MCP. '
            'It will be sent back to <code id="sb-oauth-redirect">{redirect}</code>.</p></hgroup>'
            '<p>Whatever the app does, it does as the endpoint you pick: with its verbs, on its queues, and '
            'only until you revoke the endpoint or the app\'s access.</p>'
            '<form method="post" action="{action}">'
            '<input type="hidden" name="csrf_token" value="{csrf}">'
            '<input type="hidden" name="request" value="{blob}">'
            '<fieldset><legend>Endpoint</legend>{options}</fieldset>'
            '<div class="sb-row"><button type="submit" name="decision" value="allow" id="sb-oauth-allow">Allow</button>'
            '<button type="submit" name="decision" value="deny" class="secondary outline" id="sb-oauth-deny">Deny'
            '</button></div></form>').format(
            name=name, redirect=pending["redirect_uri"], action=PATHS["consent"], csrf=csrf,
            blob=request.query_params.get("request"), options=options)
        response = board.html_page(request, who, "Connect an app", body)
        response.headers["content-security-policy"] = _csp(pending["redirect_uri"])
        return response

    async def decide(self, board: Board, request: Request, who: Any, form: Any) -> Response:
        pending = self.signer.read(form.get("request"))
        if pending is None:
            return _bad_request(board, request, who, EXPIRED)
        if await oauth.get_client(board.core, pending["client_id"]) is None:
            return _bad_request(board, request, who, "The app is not registered. Start again from your app.")
        redirect = pending["redirect_uri"]
        if form.get("decision") != "allow":
            url = construct_redirect_uri(redirect, error="access_denied", error_description="the human denied access",
                                         state=pending.get("state"), iss=self.provider.base)
            return RedirectResponse(url, status_code=303, headers=NO_STORE)
        choices, problem = await self._live_endpoints(board, who, pending)
        if problem:
            return _bad_request(board, request, who, problem)
        chosen = next((e for e in choices if e["slug"] == form.get("slug")), None)
        if chosen is None:
            return _bad_request(board, request, who, "Pick one of the endpoints listed.")
        code = await oauth.create_code(
            board.core, who[0], client_id=pending["client_id"], endpoint_id=UUID(chosen["endpoint_id"]),
            redirect_uri=redirect, redirect_uri_explicit=bool(pending["explicit"]),
            code_challenge=pending["challenge"], scopes=list(pending["scopes"]),
            resource=f"{self.provider.base}/mcp/{chosen['slug']}", seconds=CODE_SECONDS)
        url = construct_redirect_uri(redirect, code=code, state=pending.get("state"), iss=self.provider.base)
        return RedirectResponse(url, status_code=303, headers=NO_STORE)


# ---------------------------------------------------------------------------------------- the routes

def _limited(handler: Any) -> Any:
    return RequestBodyLimitMiddleware(request_response(handler), DEFAULT_MAX_REQUEST_BODY_SIZE)


def _cors(app: Any, methods: list[str]) -> Any:
    return CORSMiddleware(app=app, allow_origins="*", allow_methods=methods, allow_headers=["mcp-protocol-version"])


def component(runtime: Runtime) -> Component:
    settings = runtime.settings
    signer = RequestSigner(load_secret(settings.secret_key, Path(settings.data_dir)))
    provider = SwitchboardProvider(runtime, signer)
    base = settings.public_base_url
    registration = ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE])
    metadata = build_metadata(_URL.validate_python(base), None, registration, RevocationOptions(enabled=True))
    metadata.authorization_endpoint = _URL.validate_python(base + PATHS["authorize"])
    metadata.token_endpoint = _URL.validate_python(base + PATHS["token"])
    metadata.registration_endpoint = _URL.validate_python(base + PATHS["register"])
    metadata.revocation_endpoint = _URL.validate_python(base + PATHS["revoke"])
    metadata.token_endpoint_auth_methods_supported = ["none", "client_secret_post", "client_secret_basic"]
    metadata.authorization_response_iss_parameter_supported = True  # the consent's redirects name the issuer
    # The SDK's provider protocol also lists exchange_identity_assertion, a grant not offered here.
    sdk_provider = cast("OAuthAuthorizationServerProvider[Any, Any, Any]", provider)
    authenticator = HashedClientAuthenticator(sdk_provider)
    consent = Consent(provider, signer)

    async def resource_metadata(request: Request) -> Response:
        slug = request.path_params["slug"]
        document = ProtectedResourceMetadata(
            resource=_URL.validate_python(f"{base}/mcp/{slug}"), authorization_servers=[_URL.validate_python(base)],
            scopes_supported=[SCOPE], resource_name="Switchboard endpoint")
        return await ProtectedResourceMetadataHandler(document).handle(request)

    authorization = AuthorizationHandler(sdk_provider)
    consent_prefix = f"{base}{PATHS['consent']}?"

    async def authorize(request: Request) -> Response:
        """The SDK's handler; its error redirects to the client gain the issuer too (RFC 9207)."""
        response = await authorization.handle(request)
        location = response.headers.get("location")
        if response.status_code == 302 and location and not location.startswith(consent_prefix):
            response.headers["location"] = construct_redirect_uri(location, iss=base)
        return response

    @human_page
    async def consent_page(board: Board, request: Request, who: Any) -> Response:
        return await consent.page(board, request, who)

    @human_post
    async def consent_post(board: Board, request: Request, who: Any, form: Any) -> Response:
        return await consent.decide(board, request, who, form)

    routes: list[BaseRoute] = [
        Route("/.well-known/oauth-protected-resource/mcp/{slug:str}",
              cors_middleware(resource_metadata, ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"]),
        Route("/.well-known/oauth-authorization-server",
              cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"]),
        Route(PATHS["authorize"], _limited(authorize), methods=["GET", "POST"]),
        Route(PATHS["token"], _cors(_limited(TokenHandler(sdk_provider, authenticator).handle),
                                    ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route(PATHS["register"], _cors(_limited(RegistrationHandler(sdk_provider, registration).handle),
                                       ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route(PATHS["revoke"], _cors(_limited(RevocationHandler(sdk_provider, authenticator).handle),
                                     ["POST", "OPTIONS"]), methods=["POST", "OPTIONS"]),
        Route(PATHS["consent"], consent_page, methods=["GET"]),
        Route(PATHS["consent"], consent_post, methods=["POST"]),
    ]
    async def tick(core: Core) -> None:
        await oauth.purge(core)

    return Component(name="oauth", routes=routes, on_tick=tick)

