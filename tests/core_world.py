"""Helpers for the core tests: two humans with one endpoint each, and direct reads of the rows.

Time is moved by SQL (a lease is lapsed, a retry made due), never by sleeping.
"""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from switchboard.core import endpoints, humans, invariants, todos
from switchboard.core.models import Core, EndpointCaller, HumanCaller


@dataclass
class World:
    core: Core
    h1: HumanCaller
    h2: HumanCaller
    e1: EndpointCaller  # h1's endpoint
    e2: EndpointCaller  # h2's endpoint
    slug1: str
    slug2: str

    async def todo(self, title: str = "t", *, caller: EndpointCaller | None = None, queue: str | None = None,
                   **kw) -> dict:
        ep = caller or self.e1
        row, created = await todos.create(self.core, endpoint_id=ep.endpoint_id, queue=queue or ep.queues[0],
                                          title=title, **kw)
        assert created
        return row


async def make_world(core: Core, *, queues=("inbox",), verbs=None) -> World:
    h1 = await humans.add(core, f"h1-{uuid.uuid4().hex[:6]}")
    h2 = await humans.add(core, f"h2-{uuid.uuid4().hex[:6]}")
    ep1, cred1 = await endpoints.vend(core, h1, agent="fixer", queues=list(queues), verbs=verbs)
    ep2, cred2 = await endpoints.vend(core, h2, agent="fixer", queues=list(queues), verbs=verbs)
    e1 = endpoints.caller_from_row(await endpoints.resolve_credential(core, cred1))
    e2 = endpoints.caller_from_row(await endpoints.resolve_credential(core, cred2))
    return World(core, h1, h2, e1, e2, ep1["slug"], ep2["slug"])


async def sql(core: Core, statement: str, params=None) -> list[dict]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(statement, params)
        return await cur.fetchall() if cur.description else []


async def todo_row(core: Core, todo_id: str) -> dict | None:
    rows = await sql(core, "SELECT * FROM todos WHERE id = %s", (todo_id,))
    return rows[0] if rows else None


async def attempt_rows(core: Core, todo_id: str) -> list[dict]:
    return await sql(core, "SELECT * FROM todo_attempts WHERE todo_id = %s ORDER BY seq", (todo_id,))


async def snapshot(core: Core, todo_id: str) -> tuple[dict | None, list[dict]]:
    return await todo_row(core, todo_id), await attempt_rows(core, todo_id)


async def lapse(core: Core, todo_id: str, ago: str = "1 minute") -> None:
    """The lease expired `ago`: on the todo and on its open attempt."""
    await sql(core, "UPDATE todos SET lease_expires_at = now() - %s::interval WHERE id = %s", (ago, todo_id))
    await sql(core, "UPDATE todo_attempts SET lease_expires_at = now() - %s::interval"
                    " WHERE todo_id = %s AND ended_at IS NULL", (ago, todo_id))


async def make_due(core: Core, todo_id: str) -> None:
    """A parked retry whose backoff has elapsed."""
    await sql(core, "UPDATE todos SET next_retry_at = now() - interval '1 second' WHERE id = %s", (todo_id,))


async def check(core: Core) -> list[str]:
    async with core.pool.connection() as conn:
        return await invariants.check(conn)


async def fail_until_dead(core: Core, caller, todo_id: str, n: int, *, summary_prefix: str = "try") -> None:
    """Claim and fail `n` times, making each retry due by SQL in between."""
    for i in range(n):
        await todos.claim(core, caller, todo_id)
        out = await todos.fail(core, caller, todo_id, summary=f"{summary_prefix} {i + 1}")
        if not out["dead_letter"]:
            await make_due(core, todo_id)


def capture_logs() -> tuple[io.StringIO, Callable[[], str]]:
    """Every record of the product's loggers, formatted by both formatters into one string buffer;
    `stop()` detaches the handlers and returns what was logged."""
    from switchboard.logs import JsonFormatter, TextFormatter

    stream = io.StringIO()
    handlers = []
    for fmt in (JsonFormatter(), TextFormatter()):
        h = logging.StreamHandler(stream)
        h.setFormatter(fmt)
        h.setLevel(logging.DEBUG)
        handlers.append(h)
    ours = logging.getLogger("switchboard")
    old_level = ours.level
    ours.setLevel(logging.DEBUG)
    for h in handlers:
        ours.addHandler(h)

    def stop() -> str:
        for h in handlers:
            ours.removeHandler(h)
        ours.setLevel(old_level)
        return stream.getvalue()

    return stream, stop


async def age_out_all_but_live(core: Core, done: dict, live: dict[str, dict]) -> None:
    """REQ-11's retention by age: every todo made 40 days old (a parked retry still due tomorrow, a
    claimed lease still live), one sweep; the terminal `done` goes with its attempts, every todo of
    `live` (pending, claimed, parked, input; by those names) stays."""
    from switchboard.core import sweeps

    await sql(core, "UPDATE todos SET updated_at = now() - interval '40 days', created_at = now() - interval '40 days'")
    await sql(core, "UPDATE todos SET next_retry_at = now() + interval '1 day' WHERE id = %s",
              (live["parked"]["id"],))
    await sql(core, "UPDATE todos SET lease_expires_at = now() + interval '1 day' WHERE id = %s",
              (live["claimed"]["id"],))
    report = await sweeps.sweep_once(core)
    assert report.retention_deleted == 1
    assert await todo_row(core, done["id"]) is None and await attempt_rows(core, done["id"]) == []
    for t in live.values():
        assert await todo_row(core, t["id"]) is not None
