"""Operator settings kept in the database (`switchboard settings get|set`)."""

from __future__ import annotations

from typing import Any

from .errors import Invalid, NotFound
from .models import Core
from .queries import Q

# key: (default, minimum)
KNOWN: dict[str, tuple[int, int]] = {
    "attempt_history_max_per_todo": (50, 5),
    "retention_max_age_days": (30, 1),
    "retention_max_rows": (500000, 1),
}


async def get(core: Core, key: str) -> int:
    if key not in KNOWN:
        raise NotFound(f"unknown setting {key}; known: {', '.join(sorted(KNOWN))}", argument="key")
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.settings.get, {"key": key})
        row = await cur.fetchone()
    default, floor = KNOWN[key]
    value = int(row["value"]) if row else default
    return max(value, floor)


async def all_settings(core: Core) -> dict[str, int]:
    return {k: await get(core, k) for k in KNOWN}


async def set_value(core: Core, key: str, value: Any) -> int:
    if key not in KNOWN:
        raise NotFound(f"unknown setting {key}; known: {', '.join(sorted(KNOWN))}", argument="key")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise Invalid(f"{key} must be an integer", argument="value") from None
    floor = KNOWN[key][1]
    if number < floor:
        raise Invalid(f"{key} must be at least {floor}", argument="value")
    async with core.pool.connection() as conn:
        await conn.execute(Q.settings.set, {"key": key, "value": str(number)})
    return number
