"""An endpoint's terms its owner may change while it is active: when it expires and its default
lease. A change of expiry reaches every serving process through migration 0008's notification, like
a revocation; past the new expiry the sweep revokes the endpoint with its cascade."""

from __future__ import annotations

from typing import Any

from . import inputs
from .endpoints import (
    EXPIRES_MAX_SECONDS,
    EXPIRES_MIN_SECONDS,
    LEASE_MAX_SECONDS,
    LEASE_MIN_SECONDS,
    get_for_human,
    public,
)
from .errors import Conflict
from .models import Core, HumanCaller
from .queries import Q, one

UNSET = object()


async def change(core: Core, human: HumanCaller, slug: Any, *, expires_in_seconds: Any = UNSET,
                 default_lease_ttl_seconds: Any = UNSET) -> dict[str, Any]:
    """Set (or clear, with None) the expiry, `expires_in_seconds` from now, and the default lease of
    one of the human's active endpoints; a field left out stays as it is. A revoked endpoint is a
    conflict; another human's is not_found."""
    set_expiry, set_lease = expires_in_seconds is not UNSET, default_lease_ttl_seconds is not UNSET
    expires = inputs.seconds_or_none(expires_in_seconds, "expires_in_seconds", EXPIRES_MIN_SECONDS,
                       EXPIRES_MAX_SECONDS) if set_expiry else None
    lease = inputs.seconds_or_none(default_lease_ttl_seconds, "default_lease_ttl_seconds", LEASE_MIN_SECONDS,
                     LEASE_MAX_SECONDS) if set_lease else None
    row = await get_for_human(core, human, slug)
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.endpoint_terms.update, {
            "id": row["id"], "set_expiry": set_expiry, "expires_in": expires, "set_lease": set_lease,
            "lease": lease})
        if await cur.fetchone() is None:
            raise Conflict("endpoint is revoked", argument="slug")
        cur = await conn.execute(Q.endpoints.by_id, {"id": row["id"]})
        fresh = await one(cur)
    return public(fresh)
