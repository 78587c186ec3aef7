"""The invariant checker shared by the tests and the soak (SYSTEM.md section 17).

Returns a list of violations (empty when the database is consistent):
- at most one open attempt per todo;
- seqs contiguous above the pruned prefix, and attempts_total = max(seq);
- an open attempt exactly when the todo holds a lease (claimed or input-required);
- every closed attempt's disposition agrees with the todo's state when it is the newest one;
- died attempts carry no summary or artifact;
- the open attempt carries the todo's owner and attempt counter;
- owner and lease agree with the state (a claimed todo holds both, an interrupted one keeps its owner
  with the lease clock stopped, a pending or finished one holds no lease);
- counters agree: a parked retry is below the cap, attempts_pruned <= attempts_total (attempt may pass
  max_attempts: a todo released at the cap is claimable again and dead-letters on its next end);
- no attempt ends before it was claimed, and none is claimed before the one before it ended (one
  holder at a time, in the recorded times too: docs/decisions.md D53);
- an owner's lease extension is recorded only on an agent's attempt (the owner's own extension of
  their own lease is a heartbeat), or on a team todo on another member's (a todo has one owning human,
  a team many), never before the claim;
- an attempt keeps at most NOTES_MAX_PER_ATTEMPT progress notes, none written before its claim or
  after it closed.

Teams and admission control (issue 13):
- a todo is owned by exactly one of an endpoint or a team (the CHECK holds it; asserted anyway), and a
  team todo sits on a label of its own team;
- no todo, holder or attempt names a row that does not exist: its endpoint, its team, the endpoint
  that holds it, the todo of an attempt (the statements that write them prove the row, and
  statement-level triggers delete or clear what pointed at a deleted row: migration 0025);
- no holder outside reach: a team todo held (claimed or input-required) by an endpoint is held by a
  live (not revoked) endpoint that holds a grant of the queue and whose human is a member of the team;
  one held by a human (a Board claim) by a member; and an agent's lease names its endpoint;
- in flight never above max_in_flight: the live leases and parked interrupts of a policy's queue
  identity that were claimed since the policy last changed (a lowered cap does not evict what was
  admitted before it) number at most max_in_flight;
- charged units equal committed claims in the current window: the units charged to the current
  window (summed over the policy's shard rows, migration 0021) equal the attempts opened on the
  queue identity since the later of the window's start and the policy's creation. Exact on the
  assumptions that nothing pruned or deleted an attempt of the window (history cap, retention) and
  that the window's definition was not changed inside it (a new definition starts its window at zero).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncConnection

from .inputs import NOTES_MAX_PER_ATTEMPT
from .states import DIED_OUTCOMES, HELD_STATES, sql_list
from .states import Disposition as D
from .states import TodoState as S

_HELD = sql_list(HELD_STATES)
_DIED = sql_list(DIED_OUTCOMES)

# A todo of the queue identity of admission policy `p`: its queue, and its endpoint or its team.
_POLICY_TODO = """t.queue = p.queue AND t.endpoint_id IS NOT DISTINCT FROM p.endpoint_id
                  AND t.team_id IS NOT DISTINCT FROM p.team_id"""

CHECKS = {
    "more than one open attempt": """
        SELECT todo_id FROM todo_attempts WHERE ended_at IS NULL GROUP BY todo_id HAVING count(*) > 1""",
    "seqs not contiguous above the pruned prefix or attempts_total != max(seq)": """
        SELECT t.id FROM todos t LEFT JOIN todo_attempts a ON a.todo_id = t.id
         GROUP BY t.id, t.attempts_total, t.attempts_pruned
        HAVING count(a.seq) <> t.attempts_total - t.attempts_pruned
            OR coalesce(max(a.seq), t.attempts_pruned) <> t.attempts_total
            OR coalesce(min(a.seq), t.attempts_pruned + 1) <> t.attempts_pruned + 1""",
    "lease held without an open attempt, or an open attempt without a lease": f"""
        SELECT t.id FROM todos t
         WHERE (t.state IN ({_HELD}))
               <> EXISTS (SELECT 1 FROM todo_attempts a WHERE a.todo_id = t.id AND a.ended_at IS NULL)""",
    "newest closed attempt disagrees with the todo's state": f"""
        SELECT t.id FROM todos t
          JOIN LATERAL (SELECT * FROM todo_attempts a WHERE a.todo_id = t.id
                         ORDER BY a.seq DESC LIMIT 1) a ON a.ended_at IS NOT NULL
         WHERE t.updated_at <= a.ended_at AND NOT (
               (a.disposition = '{D.DONE}' AND t.state = '{S.DONE}')
            OR (a.disposition = '{D.RETRY_SCHEDULED}' AND t.state = '{S.FAILED}' AND t.next_retry_at IS NOT NULL)
            OR (a.disposition = '{D.DEAD_LETTERED}' AND t.state = '{S.FAILED}' AND t.next_retry_at IS NULL)
            OR (a.disposition = '{D.REQUEUED}' AND t.state = '{S.PENDING}')
            OR (a.disposition = '{D.CANCELED}' AND t.state = '{S.CANCELED}'))""",
    "died attempt with a summary or artifact": f"""
        SELECT todo_id FROM todo_attempts
         WHERE outcome IN ({_DIED}) AND (summary IS NOT NULL OR artifact IS NOT NULL)""",
    "open attempt disagrees with the todo's owner or attempt counter": """
        SELECT t.id FROM todos t JOIN todo_attempts a ON a.todo_id = t.id AND a.ended_at IS NULL
         WHERE a.owner IS DISTINCT FROM t.owner OR a.attempt <> t.attempt OR a.seq <> t.attempts_total""",
    "owner or lease disagrees with the state": f"""
        SELECT id FROM todos
         WHERE (state = '{S.CLAIMED}' AND (owner IS NULL OR lease_expires_at IS NULL))
            OR (state = '{S.INPUT_REQUIRED}' AND (owner IS NULL OR lease_expires_at IS NOT NULL))
            OR (state = '{S.PENDING}' AND (owner IS NOT NULL OR lease_expires_at IS NOT NULL))
            OR (state IN ('{S.DONE}', '{S.FAILED}', '{S.CANCELED}') AND lease_expires_at IS NOT NULL)""",
    "counters out of range": f"""
        SELECT id FROM todos
         WHERE attempts_pruned > attempts_total
            OR (state = '{S.FAILED}' AND next_retry_at IS NOT NULL AND attempt >= max_attempts)
            OR (state <> '{S.FAILED}' AND next_retry_at IS NOT NULL)""",
    "attempt ended before it was claimed": """
        SELECT todo_id FROM todo_attempts WHERE ended_at < claimed_at""",
    "attempt claimed before the one before it ended": """
        SELECT b.todo_id FROM todo_attempts a JOIN todo_attempts b ON b.todo_id = a.todo_id AND b.seq = a.seq + 1
         WHERE a.ended_at IS NULL OR a.ended_at > b.claimed_at""",
    "owner extension on the owner's own attempt, or before its claim": """
        SELECT a.todo_id FROM todo_attempts a JOIN todos t ON t.id = a.todo_id
         WHERE a.owner_extended_at IS NOT NULL
           AND ((a.claimer_kind = 'owner' AND t.team_id IS NULL) OR a.owner_extended_at < a.claimed_at)""",
    "attempt notes over the bound, or written outside the attempt": f"""
        SELECT todo_id FROM todo_attempts
         WHERE jsonb_array_length(notes) > {NOTES_MAX_PER_ATTEMPT}
            OR (notes <> '[]'::jsonb AND ((notes->0->>'at')::timestamptz < claimed_at
                                          OR (notes->-1->>'at')::timestamptz > ended_at))""",
    "todo owned by both or neither of an endpoint and a team, or on another team's queue": """
        SELECT t.id FROM todos t LEFT JOIN teams tm ON tm.id = t.team_id
         WHERE (t.endpoint_id IS NULL) = (t.team_id IS NULL)
            OR (t.team_id IS NOT NULL AND t.queue NOT LIKE 'team:' || tm.slug || '/%')
            OR (t.team_id IS NULL AND t.queue LIKE 'team:%')""",
    "todo, holder or attempt naming a row that does not exist": """
        SELECT t.id FROM todos t
         WHERE (t.endpoint_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = t.endpoint_id))
            OR (t.team_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM teams tm WHERE tm.id = t.team_id))
            OR (t.claimed_by_endpoint_id IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = t.claimed_by_endpoint_id))
        UNION ALL
        SELECT a.todo_id FROM todo_attempts a WHERE NOT EXISTS (SELECT 1 FROM todos t WHERE t.id = a.todo_id)""",
    "team todo held outside reach": f"""
        SELECT t.id FROM todos t
         WHERE t.team_id IS NOT NULL AND t.state IN ({_HELD})
           AND CASE WHEN t.claimed_by_endpoint_id IS NOT NULL THEN NOT EXISTS (
                        SELECT 1 FROM team_grants g
                          JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
                          JOIN endpoints e ON e.id = g.endpoint_id
                          JOIN agents ag ON ag.id = e.agent_id
                         WHERE g.endpoint_id = t.claimed_by_endpoint_id AND g.queue = t.queue
                           AND g.team_id = t.team_id AND e.state = 'active'
                           AND t.owner = 'agent:' || ag.id::text)
                    ELSE NOT EXISTS (
                        SELECT 1 FROM team_members m
                         WHERE m.team_id = t.team_id AND t.owner = 'op:' || m.human_id::text)
               END""",
    # A claim committed under the policy as it stands found at most max_in_flight leases in flight with
    # it. A lease in flight now was in flight ever since it was claimed (or since the policy last changed:
    # a lapsed lease on a capped queue is not revived), so the latest such claim, L, saw at least every
    # lease in flight now that was claimed no later than L (one claimed as late, one of its batch). Leases
    # handed out before a tighter policy may exceed the cap; they are counted only behind such a claim.
    "more leases in flight than the admission policy's max_in_flight": f"""
        SELECT p.id FROM admission_policies p
         CROSS JOIN LATERAL (
               SELECT array_agg(a.claimed_at) AS at FROM todos t
                 JOIN todo_attempts a ON a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
                WHERE {_POLICY_TODO}
                  AND (t.state = '{S.INPUT_REQUIRED}' OR (t.state = '{S.CLAIMED}' AND t.lease_expires_at >= now()))
               ) live
         WHERE p.max_in_flight IS NOT NULL AND p.max_in_flight < (
               SELECT count(*) FROM unnest(live.at) c
                WHERE c <= (SELECT max(d) FROM unnest(live.at) d WHERE d >= p.updated_at))""",
    "units charged in the current window differ from the claims committed in it": f"""
        SELECT p.id FROM admission_policies p
         CROSS JOIN LATERAL (SELECT switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                                             p.window_weekday, now()) AS ws) w
         WHERE switchboard_admission_used(p.id, w.ws) <> (
               SELECT count(*) FROM todos t JOIN todo_attempts a ON a.todo_id = t.id
                WHERE {_POLICY_TODO} AND a.claimed_at >= greatest(w.ws, p.created_at))""",
}


async def check(conn: AsyncConnection[Any]) -> list[str]:
    problems: list[str] = []
    for name, sql in CHECKS.items():
        cur = await conn.execute(sql)
        rows = await cur.fetchall()
        for row in rows[:5]:
            value = next(iter(row.values())) if isinstance(row, dict) else row[0]
            problems.append(f"{name}: {value}")
    return problems
