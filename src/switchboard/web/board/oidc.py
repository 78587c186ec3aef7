"""Board sign-in with an OpenID Connect provider and with GitHub (docs/operations.md).

`GET /login/oidc/start?provider=oidc|github` makes a fresh `state`, `nonce` and PKCE verifier (S256),
keeps them with the local `next` path in the `sb_oidc` cookie (itsdangerous-signed, 10 minutes,
HttpOnly, SameSite=Lax, path /login/oidc: bound to this browser, nothing stored on the server) and
sends the browser to the provider. `GET /login/oidc/callback` (the redirect URI of both providers)
reads and clears that cookie, shows a provider's refusal (the person declining) as such, refuses a
missing cookie or a different `state` before anything else, exchanges the code with the verifier
(Authlib's httpx client), and then:

- OpenID Connect: checks the ID token's signature against the provider's JWKS (from discovery), its
  issuer (the discovered issuer, which must be the configured one), audience (our client id; `azp`
  when there are several), expiry and `nonce`; the human is (iss, sub).
- GitHub (an OAuth app, no ID token): reads `GET /user` with the access token, which is kept for
  that one call only; the human is (`https://github.com`, the numeric user id).

Only then is the human found or created (core/identities.py) and a session started. Every failure
is a page saying what went wrong, and creates nothing. Discovery documents and key sets are cached
for an hour; an unknown key id fetches the key set again.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.oidc.core import CodeIDToken
from itsdangerous import BadSignature, URLSafeTimedSerializer
from joserfc import jwt
from joserfc.errors import ClaimError, ExpiredTokenError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...config import Settings
from ...core import identities
from .kit import NO_STORE, Board, board_of, safe_next
from .sessions import SESSION_COOKIE, SESSION_SECONDS

log = logging.getLogger("switchboard.board")

try:  # Authlib's httpx client runs on httpx2 when it is installed, else on httpx
    import httpx2
    TRANSPORT_ERRORS: tuple = (httpx.HTTPError, httpx2.HTTPError)
except ImportError:  # pragma: no cover
    TRANSPORT_ERRORS = (httpx.HTTPError,)

START_PATH = "/login/oidc/start"
CALLBACK_PATH = "/login/oidc/callback"
PENDING_COOKIE = "sb_oidc"
PENDING_SECONDS = 600
PENDING_PATH = "/login/oidc"
METADATA_SECONDS = 3600
HTTP_TIMEOUT = 10.0
ID_TOKEN_LEEWAY = 30  # seconds of clock difference allowed for exp/iat/nbf
GITHUB_AUTHORIZE = "https://github.com/login/oauth/authorize"
GITHUB_TOKEN = "https://github.com/login/oauth/access_token"
GITHUB_USER = "https://api.github.com/user"


@dataclass(frozen=True)
class Provider:
    key: str  # `oidc` or `github`, in the start URL and the pending cookie
    label: str  # "Sign in with <label>"
    issuer: str
    client_id: str
    client_secret: str
    signup: bool


def providers(settings: Settings) -> list[Provider]:
    found = []
    if settings.oidc_issuer and settings.oidc_client_id and settings.oidc_client_secret:
        from urllib.parse import urlsplit
        label = settings.oidc_name or urlsplit(settings.oidc_issuer).hostname or "OpenID Connect"
        found.append(Provider("oidc", label, settings.oidc_issuer, settings.oidc_client_id,
                              settings.oidc_client_secret, settings.oidc_signup))
    if settings.github_client_id and settings.github_client_secret:
        found.append(Provider("github", "GitHub", identities.GITHUB_ISSUER, settings.github_client_id,
                              settings.github_client_secret, settings.github_signup))
    return found


class SignInFailed(Exception):
    """A sign-in that cannot go on: the page's status and message."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason


class Oidc:
    """The configured providers, the pending-state cookie's signer and the cached provider metadata."""

    def __init__(self, settings: Settings, secret: bytes) -> None:
        self.settings = settings
        self.providers = {p.key: p for p in providers(settings)}
        self._pending = URLSafeTimedSerializer(secret, salt="switchboard-oidc-pending")
        self._metadata: dict[str, tuple[float, dict]] = {}
        self._jwks: dict[str, tuple[float, Any]] = {}  # the provider's JWKS document, as JSON

    @property
    def redirect_uri(self) -> str:
        return self.settings.public_base_url + CALLBACK_PATH

    # --------------------------------------------------------------------------- pending state

    def seal(self, pending: dict) -> str:
        return self._pending.dumps(pending)

    def unseal(self, value: str | None) -> dict | None:
        if not value or len(value) > 2048:
            return None
        try:
            data = self._pending.loads(value, max_age=PENDING_SECONDS)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("p", "s", "n", "v", "next")):
            return None
        return data

    # ------------------------------------------------------------------------------ metadata

    async def _get_json(self, provider: Provider, url: str) -> dict:
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False) as client:
                resp = await client.get(url, headers={"Accept": "application/json"})
                resp.raise_for_status()
                data = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("sign-in provider unreachable", extra={"reason": "provider_down", "provider": provider.key,
                                                                "error": type(exc).__name__})
            raise SignInFailed(502, f"Could not reach {provider.label} to sign you in. "
                                    "Try again in a moment; if it keeps failing, tell the operator.",
                               "provider_down") from None
        if not isinstance(data, dict):
            raise SignInFailed(502, f"{provider.label} answered something that is not its configuration.",
                               "provider_bad")
        return data

    async def metadata(self, provider: Provider) -> dict:
        if provider.key == "github":
            return {"authorization_endpoint": GITHUB_AUTHORIZE, "token_endpoint": GITHUB_TOKEN}
        cached = self._metadata.get(provider.key)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        data = await self._get_json(provider, provider.issuer.rstrip("/") + "/.well-known/openid-configuration")
        issuer = data.get("issuer")
        if not isinstance(issuer, str) or issuer.rstrip("/") != provider.issuer.rstrip("/") \
                or not all(isinstance(data.get(k), str) for k in ("authorization_endpoint", "token_endpoint",
                                                                  "jwks_uri")):
            raise SignInFailed(502, f"{provider.label}'s discovery document does not match the configured issuer "
                                    "or lacks its endpoints; tell the operator.", "provider_bad")
        self._metadata[provider.key] = (time.monotonic() + METADATA_SECONDS, data)
        return data

    async def key_set(self, provider: Provider, *, fresh: bool = False) -> KeySet:
        cached = self._jwks.get(provider.key)
        if cached and cached[0] > time.monotonic() and not fresh:
            data = cached[1]
        else:
            data = await self._get_json(provider, (await self.metadata(provider))["jwks_uri"])
            self._jwks[provider.key] = (time.monotonic() + METADATA_SECONDS, data)
        try:
            return KeySet.import_key_set(data)
        except (JoseError, ValueError, TypeError, KeyError):
            raise SignInFailed(502, f"{provider.label}'s signing keys could not be read; tell the operator.",
                               "provider_bad") from None

    # ------------------------------------------------------------------------------- the flow

    def _client(self, provider: Provider, metadata: dict) -> AsyncOAuth2Client:
        methods = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        method = "client_secret_basic" if "client_secret_basic" in methods else "client_secret_post"
        scope = "openid email profile" if provider.key == "oidc" else "read:user"
        return AsyncOAuth2Client(client_id=provider.client_id, client_secret=provider.client_secret,
                                 token_endpoint_auth_method=method, scope=scope, redirect_uri=self.redirect_uri,
                                 code_challenge_method="S256", timeout=HTTP_TIMEOUT)

    async def authorization_url(self, provider: Provider, pending: dict) -> str:
        metadata = await self.metadata(provider)
        extra = {"nonce": pending["n"]} if provider.key == "oidc" else {}
        async with self._client(provider, metadata) as client:
            url, _ = client.create_authorization_url(metadata["authorization_endpoint"], state=pending["s"],
                                                     code_verifier=pending["v"], **extra)
        return url

    async def identity(self, provider: Provider, pending: dict, code: str) -> tuple[str, str, str | None]:
        """(issuer, subject, name hint) of the human the provider vouches for, or SignInFailed."""
        metadata = await self.metadata(provider)
        try:
            async with self._client(provider, metadata) as client:
                token = await client.fetch_token(metadata["token_endpoint"], grant_type="authorization_code",
                                                 code=code, code_verifier=pending["v"])
                if provider.key == "github":
                    return await self._github_user(provider, client)
        except TRANSPORT_ERRORS as exc:
            log.warning("sign-in provider unreachable", extra={"reason": "provider_down", "provider": provider.key,
                                                                "error": type(exc).__name__})
            raise SignInFailed(502, f"Could not reach {provider.label} to finish signing you in. "
                                    "Try again in a moment.", "provider_down") from None
        except OAuthError as exc:
            log.warning("sign-in code refused", extra={"reason": "code_refused", "provider": provider.key,
                                                        "error": str(exc.error)[:64]})
            raise SignInFailed(400, f"{provider.label} refused the sign-in code (it was used already or has "
                                    "expired). Please sign in again.", "code_refused") from None
        return await self._verify_id_token(provider, metadata, token, pending["n"])

    async def _verify_id_token(self, provider: Provider, metadata: dict, token: dict,
                               nonce: str) -> tuple[str, str, str | None]:
        raw = token.get("id_token")
        if not isinstance(raw, str) or not raw:
            raise SignInFailed(502, f"{provider.label} sent no ID token.", "id_token_missing")
        algorithms = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [a for a in algorithms if isinstance(a, str) and a != "none"]
        registry = JWSRegistry(algorithms=algorithms, strict_check_header=False)
        try:
            try:
                decoded = jwt.decode(raw, key=await self.key_set(provider), registry=registry)
            except InvalidKeyIdError:
                decoded = jwt.decode(raw, key=await self.key_set(provider, fresh=True), registry=registry)
            options = {"iss": {"essential": True, "value": metadata["issuer"]},
                       "aud": {"essential": True, "value": provider.client_id},
                       "sub": {"essential": True}, "exp": {"essential": True}}
            claims = CodeIDToken(decoded.claims, decoded.header, options,
                                 {"nonce": nonce, "client_id": provider.client_id,
                                  "access_token": token.get("access_token")})
            claims.validate(leeway=ID_TOKEN_LEEWAY)
        except ExpiredTokenError:
            raise self._rejected(provider, "it has expired") from None
        except ClaimError as exc:
            what = {"aud": "it was issued for another client (audience)", "azp": "it was issued for another client",
                    "iss": "it comes from another issuer", "nonce": "its nonce is not this sign-in's",
                    "sub": "it names no subject"}.get(exc.claim, f"its {exc.claim} claim is wrong")
            raise self._rejected(provider, what) from None
        except JoseError as exc:
            raise self._rejected(provider, "its signature does not verify" if "signature" in exc.error
                                 else "it could not be read") from None
        except (ValueError, TypeError):
            raise self._rejected(provider, "it could not be read") from None
        if not isinstance(claims.get("sub"), str):
            raise self._rejected(provider, "it names no subject")
        hint = next((claims[k] for k in ("preferred_username", "email", "nickname", "name")
                     if isinstance(claims.get(k), str) and claims[k]), None)
        return claims["iss"], claims["sub"], hint

    @staticmethod
    def _rejected(provider: Provider, what: str) -> SignInFailed:
        log.warning("ID token refused", extra={"reason": "id_token_refused", "provider": provider.key,
                                                "error": what})
        return SignInFailed(502, f"The ID token from {provider.label} was refused: {what}. "
                                 "Nothing was changed; please sign in again.", "id_token_refused")

    @staticmethod
    async def _github_user(provider: Provider, client: AsyncOAuth2Client) -> tuple[str, str, str | None]:
        resp = await client.get(GITHUB_USER, headers={"Accept": "application/vnd.github+json"})
        try:
            resp.raise_for_status()
            user = resp.json()
        except (*TRANSPORT_ERRORS, ValueError):
            raise SignInFailed(502, "GitHub did not say who you are; please sign in again.", "provider_bad") from None
        if not isinstance(user, dict) or not isinstance(user.get("id"), int) or isinstance(user.get("id"), bool):
            raise SignInFailed(502, "GitHub did not say who you are; please sign in again.", "provider_bad")
        login = user.get("login") if isinstance(user.get("login"), str) else None
        return identities.GITHUB_ISSUER, str(user["id"]), login


def buttons(board: Board) -> list[Provider]:
    """The providers the sign-in page offers, in a fixed order."""
    return list(board.oidc.providers.values())


# ---------------------------------------------------------------------------------------- routes

def _failed(board: Board, request: Request, error: SignInFailed) -> Response:
    response = board.page(request, None, "signin_failed.html", status=error.status, title="Sign-in failed",
                          message=error.message)
    response.delete_cookie(PENDING_COOKIE, **_cookie_args(board))
    return response


def _cookie_args(board: Board) -> dict:
    return {**board.sessions.cookie_args(), "path": PENDING_PATH}


async def start(request: Request) -> Response:
    board = board_of(request)
    oidc = board.oidc
    provider = oidc.providers.get(request.query_params.get("provider", ""))
    if provider is None:
        return _failed(board, request, SignInFailed(404, "That sign-in provider is not configured here.",
                                                    "unknown_provider"))
    next_path = safe_next(request.query_params.get("next"))
    if await board.signed_in(request):
        return RedirectResponse(next_path, status_code=303, headers=NO_STORE)
    pending = {"p": provider.key, "s": secrets.token_urlsafe(32), "n": secrets.token_urlsafe(32),
               "v": secrets.token_urlsafe(48), "next": next_path}
    try:
        url = await oidc.authorization_url(provider, pending)
    except SignInFailed as error:
        return _failed(board, request, error)
    response = RedirectResponse(url, status_code=303, headers=NO_STORE)
    response.set_cookie(PENDING_COOKIE, oidc.seal(pending), max_age=PENDING_SECONDS, **_cookie_args(board))
    return response


async def callback(request: Request) -> Response:
    board = board_of(request)
    try:
        return await _callback(board, request)
    except SignInFailed as error:
        log.info("sign-in failed", extra={"reason": error.reason})
        return _failed(board, request, error)


async def _callback(board: Board, request: Request) -> Response:
    oidc = board.oidc
    pending = oidc.unseal(request.cookies.get(PENDING_COOKIE))
    provider = oidc.providers.get(pending["p"]) if pending else None
    if pending is None or provider is None:
        raise SignInFailed(400, "This sign-in was not started in this browser, took longer than 10 minutes, "
                                "or was finished already. Please sign in again.", "no_pending")
    query = request.query_params
    if query.get("error"):  # a refusal acts on nothing, so it is shown even without a state (some omit it)
        raise SignInFailed(403, f"{provider.label} did not sign you in ({query.get('error', '')[:64]}).",
                           "provider_refused")
    state = query.get("state", "")
    if len(state) > 256 or not hmac.compare_digest(state.encode("utf-8", "replace"), pending["s"].encode()):
        raise SignInFailed(400, "The answer from the provider does not belong to the sign-in this browser "
                                "started (state mismatch). Nothing was changed; please sign in again.",
                           "state_mismatch")
    code = query.get("code", "")
    if not code or len(code) > 2048:
        raise SignInFailed(400, f"{provider.label} sent no sign-in code. Please sign in again.", "no_code")
    issuer, subject, hint = await oidc.identity(provider, pending, code)
    try:
        result = await identities.sign_in(board.core, issuer, subject, hint=hint, create=provider.signup)
    except identities.Refused as refused:
        if refused.reason == "disabled":
            raise SignInFailed(403, "This account is disabled.", "disabled") from None
        raise SignInFailed(403, f"No Switchboard user is linked to this {provider.label} account "
                                f"(issuer {issuer}, subject {subject}). An operator can link it with "
                                f"`switchboard user link NAME --issuer {issuer} --subject {subject}`.",
                           "not_enrolled") from None
    log.info("signed in", extra={"human": result.human.name, "provider": provider.key, "new_user": result.created})
    value, _ = await board.sessions.start(board.core, result.human.human_id)
    response = RedirectResponse(pending["next"], status_code=303, headers=NO_STORE)
    response.set_cookie(SESSION_COOKIE, value, max_age=SESSION_SECONDS, **board.sessions.cookie_args())
    response.delete_cookie(PENDING_COOKIE, **_cookie_args(board))
    return response


def routes() -> list[Route]:
    return [Route(START_PATH, start, methods=["GET"]), Route(CALLBACK_PATH, callback, methods=["GET"])]
