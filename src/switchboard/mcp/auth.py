"""Bearer credentials of the MCP surface: `sbk_…` resolved to an endpoint, briefly remembered.

Resolving a credential costs two database round trips (the lookup by hash and the throttled
`last_used_at` touch), more than the rest of a light tool call. A resolved endpoint is therefore
kept for `SWITCHBOARD_MCP_AUTH_CACHE_SECONDS` (2 s by default, 0 turns it off), never past the
endpoint's own expiry. Correctness does not rest on the cache:

- every statement an endpoint sends checks, in the same statement, that the endpoint is active and
  unexpired (the `endpoint_live` fragment), so a call that passed a stale cache entry is refused by
  the core (`unauthorized`);
- a revocation, rotation, rescope or deletion committed by any process (a server, the CLI, the
  expiry sweep) is announced on the `switchboard_credentials` channel (migration 0008); the MCP
  surface then drops the endpoint's entries here (`forget_endpoint`) and ends its open sessions;
  after a lost LISTEN connection the whole cache is dropped (`clear`).

An open session of a revoked endpoint is listed in `refused_sessions`: its next POST, sent with the
credential that opened it, is let through to the surface, which answers a tool call with the
`unauthorized` tool error (other requests with a JSON-RPC error) instead of a bare 401, then ends the
session.

An OAuth access token (`sbo_`, core/oauth.py; given to hosts that only speak OAuth) is a second kind
of credential resolving to the same endpoint caller, remembered no longer than its own expiry;
revoking it announces its endpoint on the same channel. Unknown credentials are never remembered.
Entries are keyed by the credential's SHA-256, not by the credential itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from ..core import endpoints, oauth
from ..core.events import Event
from ..core.models import Core, EndpointCaller
from ..core.secrets import display_prefix, sha256

MAX_ENTRIES = 10_000
MAX_REFUSED_SESSIONS = 10_000


@dataclass(frozen=True)
class Principal:
    """An authenticated endpoint: the core's caller and the SDK's user (which binds sessions to it)."""

    caller: EndpointCaller
    user: AuthenticatedUser
    slug: str
    agent: str
    refused: bool = False  # an open session of a revoked endpoint, let through to be told so


def _principal(row: dict, credential: str) -> Principal:
    caller = endpoints.caller_from_row(row)
    token = AccessToken(token=display_prefix(credential), client_id=str(row["id"]), scopes=sorted(caller.verbs),
                        claims={"queues": list(caller.queues)})
    return Principal(caller=caller, user=AuthenticatedUser(token), slug=row["slug"], agent=row["agent_name"])


async def _lookup(core: Core, credential: str) -> dict | None:
    """The live endpoint row of either credential kind: the static `sbk_` bearer, or an OAuth access
    token (`sbo_`, core/oauth.py) bound to the endpoint, which carries its own expiry."""
    if credential.startswith(oauth.ACCESS_PREFIX):
        return await oauth.resolve_access(core, credential)
    return await endpoints.resolve_credential(core, credential)


class CredentialCache:
    def __init__(self, ttl_seconds: float) -> None:
        self.ttl = ttl_seconds
        self._entries: dict[bytes, tuple[float, Principal]] = {}
        self.refused_sessions: dict[str, str] = {}  # session id -> endpoint id, sessions being ended
        # The endpoint id owning a live session of this process (set by the MCP surface), or None.
        self.session_owner: Callable[[str], str | None] | None = None

    async def resolve(self, core: Core, credential: str, session_id: str | None = None) -> Principal | None:
        """The endpoint of a live credential. `session_id`: the session a POST names; when the
        credential is no longer live but opened that session, which is being ended for it, a
        `refused` principal comes back so the session can be told why."""
        if not credential.startswith(("sbk_", oauth.ACCESS_PREFIX)) or len(credential) > 128:
            return None
        key = sha256(credential)
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        row = await _lookup(core, credential)
        if row is None:
            self._entries.pop(key, None)
            owner = None
            if session_id:
                owner = self.refused_sessions.get(session_id)
                if owner is None and self.session_owner is not None:
                    owner = self.session_owner(session_id)  # revoked, and this process not told yet
            if owner is not None and session_id:
                row = await endpoints.credential_owner(core, credential)
                if row is not None and str(row["id"]) == owner:
                    self.refuse_session(session_id, owner)
                    principal = _principal(row, credential)
                    return Principal(caller=principal.caller, user=principal.user, slug=principal.slug,
                                     agent=principal.agent, refused=True)
            return None
        principal = _principal(row, credential)
        if self.ttl > 0:
            until = now + self.ttl
            for expires in (row.get("expires_at"), row.get("oauth_expires_at")):
                if expires is not None:
                    until = min(until, now + (expires.timestamp() - time.time()))
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = (until, principal)
        return principal

    def forget_endpoint(self, endpoint_id: str) -> None:
        for key, (_, principal) in list(self._entries.items()):
            if str(principal.caller.endpoint_id) == endpoint_id:
                del self._entries[key]

    def clear(self) -> None:
        """Forget every credential (after a lost LISTEN connection: changes may have been missed)."""
        self._entries.clear()

    def refuse_session(self, session_id: str, endpoint_id: str) -> None:
        if len(self.refused_sessions) >= MAX_REFUSED_SESSIONS:
            self.refused_sessions.clear()
        self.refused_sessions[session_id] = endpoint_id

    def session_ended(self, session_id: str) -> None:
        self.refused_sessions.pop(session_id, None)

    def on_event(self, event: Event) -> None:
        self.on_events((event,))

    def on_events(self, events: Sequence[Event]) -> None:
        """Hook-bus subscriber (batch form): a revoked endpoint's credential stops working at once in
        this process."""
        for event in events:
            if event.verb == "endpoint_revoked":
                self.forget_endpoint(event.endpoint_id)
