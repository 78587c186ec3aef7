"""A revoked endpoint's claim is refused by the claim statement whatever plan PostgreSQL picks for it
(docs/decisions.md D39). The endpoint check sits in the candidate search `t`; the claim tail reads
`t` before anything else. Before that, a plan that joined `t` to an empty side first (the todos the
claim updates, the open attempts a takeover closes) never read `t`: with nested loops disabled, as a
merge join with an empty outer side, a revoked endpoint's claim_next found nothing instead of being
refused (the state machine met it once, with statistics that picked such a plan).

Each statement runs as the core runs it (`queries.execute`): the ones longer than psycopg's parse
cache go in PostgreSQL's `$n` form through a raw cursor, whose refusal must be reported the same way
(the state machine met a raw psycopg error there once)."""

from __future__ import annotations

import pytest

from core_world import make_world
from switchboard.core import endpoints, queries, todos
from switchboard.core.errors import Unauthorized
from switchboard.core.queries import Q

PLANNER = ([], ["enable_nestloop = off"], ["enable_nestloop = off", "enable_mergejoin = off"],
           ["enable_nestloop = off", "enable_hashjoin = off"])


@pytest.mark.parametrize("name", ["claim_next_one", "claim_next", "claim_next_batch", "claim_next_batch_one",
                                  "claim_next_mixed", "claim_next_mixed_batch"])
async def test_a_revoked_endpoints_claim_is_refused_under_any_join_order(core, name):
    w = await make_world(core)  # no todo at all: every join with the todos table has an empty side
    await endpoints.revoke(core, w.h1, w.slug1)
    params, _ = todos._claim_params(core, w.e1, None, None, None)
    params = {**params, "queues": ["inbox"], "queue": "inbox", "admitted": False, "max_todos": 3,
              "new_token_hashes": [None, None, None], "team_queues": [], "owners": [w.e1.owner] * 3}
    for settings in PLANNER:
        async with core.pool.connection() as conn:
            with pytest.raises(Unauthorized):  # SQLSTATE 28000, as the core's pool reports it
                async with conn.transaction(force_rollback=True):
                    for setting in settings:
                        await conn.execute("SET LOCAL " + setting)
                    await queries.execute(conn, getattr(Q.todos, name), params)
