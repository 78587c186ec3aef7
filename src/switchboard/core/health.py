"""Is the database reachable? (`/healthz`)"""

from __future__ import annotations

from .models import Core
from .queries import Q


async def database_reachable(core: Core, *, timeout: float = 2.0) -> bool:
    try:
        async with core.pool.connection(timeout=timeout) as conn:
            await conn.execute(Q.health.ping)
        return True
    except Exception:
        return False
