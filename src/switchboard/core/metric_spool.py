"""The metric spool: counts committed by processes that serve no /metrics (SPEC-0034 REQ-14).

A serving process counts its own transitions in memory after commit (the hook bus). The local CLI
opens its connections with the session setting `switchboard.origin=cli` (`open_runtime(origin=...)`),
and for those sessions the triggers of migration 0012 append one `metric_spool` row per counted fact
in the transition's own transaction. Serving processes call `take` (on every sweep tick and before
every scrape); each row is deleted by exactly one of them, and counted by that one after the delete
committed. Facts: `created` (label: source), `claimed`, `closed` (label: the attempt's outcome).
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import Core
from .queries import Q

ORIGIN_SETTING = "switchboard.origin"
UNCOUNTED_ORIGIN = "cli"  # a process that serves no /metrics
TAKE_BATCH = 1000


@dataclass(frozen=True)
class Fact:
    kind: str  # created | claimed | closed
    queue: str
    label: str
    n: int


def session_options(origin: str | None) -> str:
    """The libpq `-c` option that marks a process's sessions (empty for a serving process)."""
    if origin is None:
        return ""
    if origin != UNCOUNTED_ORIGIN:
        raise ValueError(f"origin must be {UNCOUNTED_ORIGIN!r} or None")
    return f"-c {ORIGIN_SETTING}={origin}"


async def take(core: Core, *, limit: int = TAKE_BATCH, rounds: int = 10) -> list[Fact]:
    """Take what is spooled (up to `limit` rows a round, at most `rounds` rounds): every fact
    returned is deleted, committed and this caller's to count, once."""
    out: list[Fact] = []
    for _ in range(rounds):
        async with core.pool.connection() as conn:
            cur = await conn.execute(Q.metric_spool.take, {"limit": limit})
            rows = await cur.fetchall()
        got = 0
        for r in rows:
            out.append(Fact(r["kind"], r["queue"], r["label"], r["n"]))
            got += r["n"]
        if got < limit:
            break
    return out
