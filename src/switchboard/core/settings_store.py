"""Operator settings kept in the database (`switchboard settings get|set`)."""

from __future__ import annotations

from typing import Any

from .errors import Invalid, NotFound
from .models import Core
from .queries import Q

# key: (default, minimum, maximum)
KNOWN: dict[str, tuple[int, int, int]] = {
    "attempt_history_max_per_todo": (50, 5, 10000),
    "retention_max_age_days": (30, 1, 36500),
    "retention_max_rows": (500000, 1, 1_000_000_000),
}


def _known(key: Any) -> str:
    if not isinstance(key, str) or key not in KNOWN:
        shown = f" {key}" if isinstance(key, str) and key.isidentifier() and len(key) <= 64 else ""
        raise NotFound(f"unknown setting{shown}; known: {', '.join(sorted(KNOWN))}", argument="key")
    return key


async def get(core: Core, key: str) -> int:
    key = _known(key)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.settings.get, {"key": key})
        row = await cur.fetchone()
    default, floor, ceiling = KNOWN[key]
    value = int(row["value"]) if row else default
    return min(max(value, floor), ceiling)


async def all_settings(core: Core) -> dict[str, int]:
    return {k: await get(core, k) for k in KNOWN}


async def set_value(core: Core, key: str, value: Any) -> int:
    key = _known(key)
    _, floor, ceiling = KNOWN[key]
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and value.isascii():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{key} must be an integer", argument="value")
    number = value
    if not floor <= number <= ceiling:
        raise Invalid(f"{key} must be from {floor} to {ceiling}", argument="value")
    async with core.pool.connection() as conn:
        await conn.execute(Q.settings.set, {"key": key, "value": str(number)})
    return number
