"""Bearer credentials of the MCP surface: `sbk_…` resolved to an endpoint, briefly remembered.

Resolving a credential costs two database round trips (the lookup by hash and the throttled
`last_used_at` touch), more than the rest of a light tool call. A resolved endpoint is therefore
kept for `SWITCHBOARD_MCP_AUTH_CACHE_SECONDS` (2 s by default, 0 turns it off), never past the
endpoint's own expiry. A revocation committed by this process drops the entry at once (hook bus);
one committed by another process (the CLI) takes effect within that window. Unknown credentials are
never remembered. Entries are keyed by the credential's SHA-256, not by the credential itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from ..core import endpoints
from ..core.events import Event
from ..core.models import Core, EndpointCaller
from ..core.secrets import display_prefix, sha256

MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class Principal:
    """An authenticated endpoint: the core's caller and the SDK's user (which binds sessions to it)."""

    caller: EndpointCaller
    user: AuthenticatedUser
    slug: str
    agent: str


def _principal(row: dict, credential: str) -> Principal:
    caller = endpoints.caller_from_row(row)
    token = AccessToken(token=display_prefix(credential), client_id=str(row["id"]), scopes=sorted(caller.verbs),
                        claims={"queues": list(caller.queues)})
    return Principal(caller=caller, user=AuthenticatedUser(token), slug=row["slug"], agent=row["agent_name"])


class CredentialCache:
    def __init__(self, ttl_seconds: float) -> None:
        self.ttl = ttl_seconds
        self._entries: dict[bytes, tuple[float, Principal]] = {}

    async def resolve(self, core: Core, credential: str) -> Principal | None:
        if not credential.startswith("sbk_") or len(credential) > 128:
            return None
        key = sha256(credential)
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        row = await endpoints.resolve_credential(core, credential)
        if row is None:
            self._entries.pop(key, None)
            return None
        principal = _principal(row, credential)
        if self.ttl > 0:
            until = now + self.ttl
            expires: datetime | None = row.get("expires_at")
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

    def on_event(self, event: Event) -> None:
        """Hook-bus subscriber: a revoked endpoint's credential stops working at once in this process."""
        if event.verb == "endpoint_revoked":
            self.forget_endpoint(event.endpoint_id)
