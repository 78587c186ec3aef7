-- The todo transitions of SYSTEM.md section 6. Each is one statement: the todos update and the
-- attempt write it records sit in the same data-modifying CTE (SPEC-0034 REQ-2, REQ-3, REQ-18).

-- name: create
-- Inserts only while the endpoint is live, holding a share lock on its row until commit: a revocation
-- (endpoints.lock_for_revoke) either waits for this todo and then dead-letters it, or commits first
-- and this statement inserts nothing. No row back: a live duplicate holds the key, or the endpoint is
-- revoked, expired or gone (the caller tells which).
INSERT INTO todos (id, endpoint_id, queue, source, kind, title, payload, idempotency_key, assignee,
                   max_attempts)
SELECT %(id)s, e.id, %(queue)s, %(source)s, %(kind)s, %(title)s, %(payload)s, %(key)s,
       %(assignee)s, %(max_attempts)s
  FROM endpoints e
 WHERE e.id = %(endpoint_id)s AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())
   FOR SHARE OF e
ON CONFLICT (endpoint_id, idempotency_key)
   WHERE idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
     AND (state <> 'failed' OR next_retry_at IS NOT NULL)
DO NOTHING
RETURNING *

-- name: create_team
-- A todo on a team queue, pushed by a member of the team (any role): inserts only while the human is
-- a member, holding a share lock on the membership row until commit (a removal waits or wins). No row
-- back: a live duplicate holds the key, or the human is not a member.
INSERT INTO todos (id, team_id, queue, source, kind, title, payload, idempotency_key, assignee,
                   max_attempts)
SELECT %(id)s, m.team_id, %(queue)s, %(source)s, %(kind)s, %(title)s, %(payload)s, %(key)s,
       %(assignee)s, %(max_attempts)s
  FROM team_members m
 WHERE m.team_id = %(team_id)s AND m.human_id = %(human_id)s
   FOR SHARE OF m
ON CONFLICT (team_id, idempotency_key)
   WHERE team_id IS NOT NULL AND idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
     AND (state <> 'failed' OR next_retry_at IS NOT NULL)
DO NOTHING
RETURNING *

-- name: find_live_team_duplicate
SELECT * FROM todos
 WHERE team_id = %(team_id)s AND idempotency_key = %(key)s
   AND state NOT IN ('done', 'canceled') AND (state <> 'failed' OR next_retry_at IS NOT NULL)

-- name: endpoint_state
-- Whether an endpoint takes new todos (after `create` inserted nothing and no duplicate was found).
SELECT state = 'active' AND (expires_at IS NULL OR expires_at > now()) AS live
  FROM endpoints WHERE id = %(endpoint_id)s

-- name: find_live_duplicate
SELECT * FROM todos
 WHERE endpoint_id = %(endpoint_id)s AND idempotency_key = %(key)s
   AND state NOT IN ('done', 'canceled') AND (state <> 'failed' OR next_retry_at IS NOT NULL)

-- name: claim
-- A claim by id. On a team todo the caller's reach is share-locked until commit, as for claim_next
-- (team_targets_locked): an endpoint's grant and its own row (`scope` checks the membership), a
-- human's membership. An ungrant, a removal (which deletes the grant) or a revocation then waits for
-- the claim and hands its lease back, or commits first and the claim finds nothing.
-- Written tight: psycopg caches the parsing of a statement only up to 4,096 characters.
WITH reach AS (
SELECT 1 FROM todos x JOIN team_grants g USING (team_id, queue) JOIN endpoints e ON e.id = g.endpoint_id
AND e.state = 'active' WHERE x.id = %(id)s AND g.endpoint_id = %(endpoint_id)s FOR SHARE OF g, e
), member AS (
SELECT 1 FROM todos x JOIN team_members m USING (team_id) WHERE x.id = %(id)s AND m.human_id = %(human_id)s
FOR SHARE OF m
), t AS (
SELECT id, state AS prior_state, attempts_total AS prior_total FROM todos
WHERE id = %(id)s AND {{scope}} AND {{unpoliced_todo}}
AND (team_id IS NULL OR EXISTS (SELECT 1 FROM reach) OR EXISTS (SELECT 1 FROM member))
AND (assignee IS NULL OR assignee = %(owner)s OR %(human_id)s IS NOT NULL)
AND (state = 'pending' OR (state = 'claimed' AND lease_expires_at < now() AND attempt < max_attempts)
OR (state = 'failed' AND next_retry_at <= now() AND attempt < max_attempts))
FOR UPDATE
)
{{claim_tail}}

-- name: claim_next
-- The oldest claimable todo over the granted queues, one queue at a time so that every arm is an
-- ordered index scan at any backlog: pending by age, lapsed leases below the cap, due retries. The
-- endpoint check sits in `cand`'s own WHERE, with no column in it: PostgreSQL runs it once, as a
-- One-Time Filter above the arms, before any todo is read or locked (the same in every claim_next*).
-- The queue list reaches the planner through an InitPlan: a plan made for the values sees how many
-- queues there are, the generic plan assumes ten, so until the tables had statistics PostgreSQL
-- priced the generic plan higher and planned every claim afresh, half of the claim's PostgreSQL CPU
-- (1,720 against 860 µs per claim + complete over three queues; D47). The same in every statement
-- that walks a list of queues.
WITH cand AS (
    SELECT x.id, x.state, x.attempts_total
      FROM unnest((SELECT %(queues)s::text[])) AS q(name), LATERAL ({{claim_next_arms}}) x
     WHERE {{unpoliced}} AND {{endpoint_live}}
     ORDER BY x.created_at
     LIMIT 1
), t AS (
    SELECT id, state AS prior_state, attempts_total AS prior_total FROM cand
)
{{claim_tail}}

-- name: claim_next_one
-- claim_next over one queue (a single granted queue, or the `queue` argument). The one-row VALUES
-- in place of unnest lets PostgreSQL keep a generic plan for the prepared statement: it estimates
-- the unnest of a parameter at 10 rows, prices the generic plan at ten walks and plans every
-- execution afresh, which cost about half of the claim's time (docs/benchmarks.md).
WITH cand AS (
    SELECT x.id, x.state, x.attempts_total
      FROM (VALUES (%(queue)s::text)) AS q(name), LATERAL ({{claim_next_arms}}) x
     WHERE {{unpoliced}} AND {{endpoint_live}}
     ORDER BY x.created_at
     LIMIT 1
), t AS (
    SELECT id, state AS prior_state, attempts_total AS prior_total FROM cand
)
{{claim_tail}}

-- name: claim_next_batch
-- claim_next for up to %(max_todos)s todos in one statement: the oldest claimable over the granted
-- queues by the same three arms, each claimed under its own lease with its own attempt.
WITH cand AS (
    SELECT x.id, x.state, x.attempts_total, x.created_at
      FROM unnest((SELECT %(queues)s::text[])) AS q(name), LATERAL ({{claim_batch_arms}}) x
     WHERE {{unpoliced}} AND {{endpoint_live}}
     ORDER BY x.created_at
     LIMIT {{batch_limit}}
), t AS (
    SELECT id, state AS prior_state, attempts_total AS prior_total,
           (row_number() OVER (ORDER BY created_at, id))::int AS i
      FROM cand
)
{{claim_batch_tail}}

-- name: claim_next_batch_one
-- claim_next_batch over one queue, with the one-row VALUES for a generic plan (see claim_next_one).
WITH cand AS (
    SELECT x.id, x.state, x.attempts_total, x.created_at
      FROM (VALUES (%(queue)s::text)) AS q(name), LATERAL ({{claim_batch_arms}}) x
     WHERE {{unpoliced}} AND {{endpoint_live}}
     ORDER BY x.created_at
     LIMIT {{batch_limit}}
), t AS (
    SELECT id, state AS prior_state, attempts_total AS prior_total,
           (row_number() OVER (ORDER BY created_at, id))::int AS i
      FROM cand
)
{{claim_batch_tail}}

-- name: claim_next_mixed
-- claim_next over the endpoint's own queues %(queues)s and the team queues %(team_queues)s it reaches
-- now (granted, its human a member): the oldest claimable todo of all of them. OFFSET 0 keeps the
-- union one subquery, so the endpoint check above it stays one check (PostgreSQL would otherwise copy
-- it into both branches). The team branch runs first, so the endpoint's row is share-locked before
-- any of its own todos: a revocation locks the row and then the todos, and in the other order each
-- held what the other waited for (tests/test_lock_order.py).
WITH cand AS (
    SELECT x.id, x.state, x.attempts_total FROM (
        SELECT x.* FROM ({{team_targets_locked}}) AS q, LATERAL ({{claim_team_arms}}) x
         WHERE {{unpoliced}}
        UNION ALL
        SELECT x.* FROM unnest((SELECT %(queues)s::text[])) AS q(name), LATERAL ({{claim_next_arms}}) x
         WHERE {{unpoliced}}
        OFFSET 0
    ) x
     WHERE {{endpoint_live}}
     ORDER BY x.created_at
     LIMIT 1
), t AS (
    SELECT id, state AS prior_state, attempts_total AS prior_total FROM cand
)
{{claim_tail}}

-- name: claim_next_team_one
-- claim_next over one team queue %(queue)s (the `queue` argument, or the endpoint's only queue), the
-- target locked as team_targets_locked locks it. No unnest of a parameter: PostgreSQL keeps a generic
-- plan (with the empty unnest of claim_next_mixed it could price the generic plan above the plans made
-- for the values and plan every call afresh), and the statement stays under the 4,096 characters up
-- to which psycopg caches its parsing (docs/benchmarks.md, Team queues and admission).
WITH cand AS (
SELECT x.id, x.state, x.attempts_total FROM (
SELECT g.team_id, g.queue AS name FROM team_grants g
JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
JOIN endpoints e ON e.id = g.endpoint_id AND e.state = 'active'
WHERE g.endpoint_id = %(endpoint_id)s::uuid AND g.queue = %(queue)s FOR SHARE OF g, e
) AS q, LATERAL ({{claim_team_arms}}) x
WHERE {{unpoliced}} AND {{endpoint_live}}
ORDER BY x.created_at
LIMIT 1
), t AS (
SELECT id, state AS prior_state, attempts_total AS prior_total FROM cand
)
{{claim_tail}}

-- name: claim_next_team_group
-- claim_next of several endpoints on ONE team queue %(queue)s in one statement: the concurrent calls
-- of a fleet's endpoints (core/combine.py, docs/decisions.md D51), %(claimers)s and the arrays beside
-- it one entry per call. Each todo is claimed as claim_next_team_one claims it for its call's endpoint:
-- that endpoint's reach, lease and owner, and an attempt with its session, claimant and lease token.
-- On a queue under an admission policy it claims nothing (the calls then go alone, which finds the
-- policy; admission.sql `claim_next_team_group_admitted` is the policed form).
WITH items AS (
    SELECT * FROM {{team_group_items}}
     WHERE NOT EXISTS (SELECT 1 FROM admission_policies p WHERE p.queue = %(queue)s AND p.team_id IS NOT NULL)
){{team_group_search}}
{{claim_group_tail}}

-- name: claim_next_mixed_batch
-- claim_next_batch over own and team queues (see claim_next_mixed; the team branch first, too).
WITH cand AS (
    SELECT x.id, x.state, x.attempts_total, x.created_at FROM (
        SELECT x.* FROM ({{team_targets_locked}}) AS q, LATERAL ({{claim_team_batch_arms}}) x
         WHERE {{unpoliced}}
        UNION ALL
        SELECT x.* FROM unnest((SELECT %(queues)s::text[])) AS q(name), LATERAL ({{claim_batch_arms}}) x
         WHERE {{unpoliced}}
        OFFSET 0
    ) x
     WHERE {{endpoint_live}}
     ORDER BY x.created_at
     LIMIT {{batch_limit}}
), t AS (
    SELECT id, state AS prior_state, attempts_total AS prior_total,
           (row_number() OVER (ORDER BY created_at, id))::int AS i
      FROM cand
)
{{claim_batch_tail}}

-- name: heartbeat
-- The holder's own call is a heartbeat; the owning human extending someone else's lease is recorded
-- apart in owner_extended_at, so last_heartbeat_at stays the holder's (SPEC-0034 REQ-3). A note
-- (the holder's only; null for none) is appended to the open attempt's notes in the same UPDATE,
-- which keeps the newest %(notes_max)s (the jsonpath `last` subscripts; out of range is lax). A lapsed
-- lease on a queue with an in-flight cap is not revived (lease_kept).
{{held}}, a AS (
    UPDATE todo_attempts a
       SET last_heartbeat_at = CASE WHEN a.owner = %(owner)s THEN now() ELSE a.last_heartbeat_at END,
           owner_extended_at = CASE WHEN a.owner = %(owner)s THEN a.owner_extended_at ELSE now() END,
           notes = CASE WHEN %(note)s::text IS NULL OR a.owner <> %(owner)s THEN a.notes
                        ELSE jsonb_path_query_array(
                                 a.notes || jsonb_build_array(jsonb_build_object('at', now(), 'text', %(note)s::text)),
                                 '$[last - $k to last]', jsonb_build_object('k', %(notes_max)s::int - 1))
                   END,
           lease_expires_at = now() + make_interval(secs => %(ttl)s)
      FROM t JOIN todos ON todos.id = t.id
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL AND {{fence}}
       AND {{lease_kept}}
    RETURNING a.todo_id
)
UPDATE todos x
   SET lease_expires_at = now() + make_interval(secs => %(ttl)s), updated_at = now()
  FROM a
 WHERE x.id = a.todo_id
RETURNING x.*

-- name: complete
{{held}}, a AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'completed', disposition = 'done',
           summary = %(summary)s, summary_truncated = %(summary_truncated)s, artifact = %(artifact)s
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL AND {{fence}}
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = 'done', result = %(result)s, lease_expires_at = NULL, completed_at = now(),
           updated_at = now()
      FROM a
     WHERE x.id = a.todo_id
    RETURNING x.*
){{completed_hooks}}
SELECT u.*, {{closed_columns}} FROM u JOIN a ON a.todo_id = u.id

-- name: fail
{{held}}, a AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'failed',
           disposition = CASE WHEN %(retry)s AND t.attempt < t.max_attempts
                              THEN 'retry_scheduled' ELSE 'dead_lettered' END,
           summary = %(summary)s, summary_truncated = %(summary_truncated)s, artifact = %(artifact)s
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL AND {{fence}}
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = 'failed', result = %(result)s, lease_expires_at = NULL, updated_at = now(),
           next_retry_at = {{retry_at}}
      FROM a
     WHERE x.id = a.todo_id
    RETURNING x.*
)
SELECT u.*, {{closed_columns}} FROM u JOIN a ON a.todo_id = u.id

-- name: complete_batch
-- complete for a list of items in one statement; a todo not held (or wrongly fenced) is left alone
-- and missing from the rows returned, which the caller classifies per id.
{{held_batch}}{{complete_each}}

-- name: fail_batch
-- fail for a list of items in one statement, each with its own retry choice and backoff.
{{held_batch}}{{fail_each}}

-- name: complete_fleet
-- complete_batch for the concurrent completes of several endpoints of a fleet, each of its own lease
-- on the team queue %(queue)s (core/combine.py, docs/decisions.md D51): each item checked against its
-- own endpoint (fleet_held_batch); a todo not held by its item's endpoint is left alone, and that
-- call is answered alone.
{{fleet_held_batch}}{{complete_each}}

-- name: fail_fleet
-- fail_batch for a fleet's concurrent fails, as complete_fleet.
{{fleet_held_batch}}{{fail_each}}

-- name: release
{{held}}, a AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'released', disposition = 'requeued',
           summary = %(summary)s, summary_truncated = %(summary_truncated)s, artifact = %(artifact)s
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL AND {{fence}}
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = 'pending', owner = NULL, lease_expires_at = NULL, updated_at = now()
      FROM a
     WHERE x.id = a.todo_id
    RETURNING x.*
)
SELECT u.*, (SELECT to_jsonb(a) FROM a) AS closed_attempt FROM u

-- name: request_input
-- The holder parks the todo for a human's answer; the attempt stays open and the lease clock stops
-- (a parked lease counts as in flight: a lapsed one on a capped queue is not parked, see lease_kept).
{{held}}, a AS (
    SELECT a.todo_id FROM todo_attempts a JOIN t ON a.todo_id = t.id JOIN todos ON todos.id = t.id
     WHERE a.seq = t.attempts_total AND a.ended_at IS NULL AND {{fence}} AND {{lease_kept}}
)
UPDATE todos x
   SET state = 'input-required', input_request = %(question)s, lease_expires_at = NULL,
       updated_at = now()
  FROM a
 WHERE x.id = a.todo_id
RETURNING x.*

-- name: provide_input
-- The owning human answers; the lease restarts with the same open attempt.
WITH t AS (
    SELECT todos.id, todos.attempts_total FROM todos
     WHERE todos.id = %(id)s AND todos.state = 'input-required' AND {{scope}}
       FOR UPDATE
), a AS (
    UPDATE todo_attempts a SET lease_expires_at = now() + make_interval(secs => %(ttl)s)
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
    RETURNING a.todo_id
)
UPDATE todos x
   SET state = 'claimed', input = %(input)s, lease_expires_at = now() + make_interval(secs => %(ttl)s),
       updated_at = now()
  FROM t
 WHERE x.id = t.id
RETURNING x.*

-- name: lock_for_cancel
-- First statement of a cancel's transaction: waits for a claim holding the todo, so that `cancel`, a
-- later statement, sees the attempt that claim opened (a statement's snapshot predates its lock
-- waits: in one statement the todo would be canceled with that attempt left open).
SELECT todos.id FROM todos WHERE todos.id = %(id)s AND {{scope}} FOR UPDATE

-- name: cancel
-- After lock_for_cancel. Never before the claim: one that committed while the lock waited for it has
-- a later transaction time than ours.
WITH t AS (
    SELECT todos.id, todos.attempts_total FROM todos
     WHERE todos.id = %(id)s AND todos.state IN ('pending', 'claimed', 'input-required') AND {{scope}}
       FOR UPDATE
), a AS (
    UPDATE todo_attempts a
       SET ended_at = greatest(now(), a.claimed_at), outcome = 'canceled', disposition = 'canceled'
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = 'canceled', lease_expires_at = NULL, next_retry_at = NULL,
           completed_at = greatest(now(), x.claimed_at), updated_at = greatest(now(), x.claimed_at)
      FROM t
     WHERE x.id = t.id
    RETURNING x.*
)
SELECT u.*, (SELECT to_jsonb(a) FROM a) AS closed_attempt FROM u

-- name: retry
-- Manual retry (REQ-12): a dead letter or a parked retry goes back to pending with a fresh budget.
-- No attempt opens or closes; history and attempts_total stay, so the next seq continues.
UPDATE todos
   SET state = 'pending', owner = NULL, lease_expires_at = NULL, attempt = 0, result = NULL,
       claimed_at = NULL, completed_at = NULL, next_retry_at = NULL,
       updated_at = greatest(now(), todos.updated_at),
       last_ringed_at = NULL, ring_attempts = 0
 WHERE todos.id = %(id)s AND todos.state = 'failed' AND {{scope}}
RETURNING todos.*

-- name: classify_miss
-- After a transition matched no row: is the todo there for this caller at all? (REQ-19) And does an
-- admission policy govern its queue (a claim by id then takes core/admission.py's locked path)?
SELECT todos.state, todos.queue, todos.owner,
       (todos.queue = ANY(%(queues)s::text[])) AS queue_granted,
       EXISTS (SELECT 1 FROM admission_policies p
                WHERE p.queue = todos.queue
                  AND (p.endpoint_id = todos.endpoint_id OR p.team_id = todos.team_id)) AS policed,
       todos.endpoint_id, todos.team_id
  FROM todos
 WHERE todos.id = %(id)s AND {{reach}}

-- name: classify_miss_batch
-- classify_miss for the ids a batch transition did not match: which of them this caller may see.
SELECT todos.id, (todos.queue = ANY(%(queues)s::text[])) AS queue_granted
  FROM todos
 WHERE todos.id = ANY(%(ids)s::text[]) AND {{reach}}

-- name: get
SELECT todos.*,
       (SELECT coalesce(jsonb_agg(to_jsonb(p) ORDER BY p.seq DESC), '[]'::jsonb)
          FROM (SELECT a.* FROM todo_attempts a WHERE a.todo_id = todos.id
                 ORDER BY a.seq DESC LIMIT %(attempts_limit)s) p) AS attempts,
       e.slug AS endpoint_slug, tm.slug AS team_slug
  FROM todos LEFT JOIN endpoints e ON e.id = todos.endpoint_id
  LEFT JOIN teams tm ON tm.id = todos.team_id
 WHERE todos.id = %(id)s AND {{scope}}

-- name: list_for_endpoint
-- The endpoint's own todos in its queues, while it is live (a revoked endpoint reads nothing, whatever
-- a credential cache still believed).
SELECT todos.* FROM todos
 WHERE todos.endpoint_id = %(endpoint_id)s::uuid AND todos.queue = ANY(%(queues)s::text[])
   AND (%(state)s::text IS NULL OR todos.state = %(state)s::text) AND {{endpoint_live}}
 ORDER BY todos.created_at DESC
 LIMIT %(limit)s

-- name: list_for_endpoint_teams
-- list_for_endpoint for an endpoint with team queues in its scope: its own todos and the team todos
-- it reaches now (granted, its human a member, and the endpoint live).
SELECT * FROM (
    SELECT todos.* FROM todos
     WHERE todos.endpoint_id = %(endpoint_id)s::uuid AND todos.queue = ANY(%(queues)s::text[])
       AND (%(state)s::text IS NULL OR todos.state = %(state)s::text) AND {{endpoint_live}}
     ORDER BY todos.created_at DESC LIMIT %(limit)s) own
UNION ALL
SELECT * FROM (
    SELECT todos.* FROM ({{team_targets}}) AS q
      JOIN todos ON todos.team_id = q.team_id AND todos.queue = q.name
     WHERE (%(state)s::text IS NULL OR todos.state = %(state)s::text) AND {{endpoint_live}}
     ORDER BY todos.created_at DESC LIMIT %(limit)s) team
 ORDER BY created_at DESC
 LIMIT %(limit)s

-- name: list_for_human
-- The todos of the human's own endpoints and of their teams; %(team)s narrows to one team's (by
-- slug), %(slug)s to one endpoint's. `held`: a pending todo whose queue admission control holds back
-- now (the fragment held_back), judged for the page's rows only.
SELECT t.*, (t.state = 'pending' AND {{held_back}}) AS held FROM (
SELECT todos.*, e.slug AS endpoint_slug, tm.slug AS team_slug FROM todos
  LEFT JOIN endpoints e ON e.id = todos.endpoint_id
  LEFT JOIN agents g ON g.id = e.agent_id
  LEFT JOIN teams tm ON tm.id = todos.team_id
 WHERE (g.human_id = %(human_id)s::uuid
        OR EXISTS (SELECT 1 FROM team_members m
                    WHERE m.team_id = todos.team_id AND m.human_id = %(human_id)s::uuid))
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
   AND (%(team)s::text IS NULL OR tm.slug = %(team)s::text)
   AND (%(queue)s::text IS NULL OR todos.queue = %(queue)s::text)
   AND (%(state)s::text IS NULL OR todos.state = %(state)s::text)
   AND (NOT %(dead_letter)s OR (todos.state = 'failed' AND todos.next_retry_at IS NULL))
 ORDER BY todos.created_at DESC, todos.id DESC
 LIMIT %(limit)s OFFSET %(offset)s) t
 ORDER BY t.created_at DESC, t.id DESC

-- name: counts_for_human
SELECT todos.state, count(*) AS n,
       count(*) FILTER (WHERE todos.state = 'failed' AND todos.next_retry_at IS NULL) AS dead
  FROM todos
  LEFT JOIN endpoints e ON e.id = todos.endpoint_id
  LEFT JOIN agents g ON g.id = e.agent_id
  LEFT JOIN teams tm ON tm.id = todos.team_id
 WHERE (g.human_id = %(human_id)s::uuid
        OR EXISTS (SELECT 1 FROM team_members m
                    WHERE m.team_id = todos.team_id AND m.human_id = %(human_id)s::uuid))
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
   AND (%(team)s::text IS NULL OR tm.slug = %(team)s::text)
   AND (%(queue)s::text IS NULL OR todos.queue = %(queue)s::text)
 GROUP BY todos.state

-- name: queue_counts_for_endpoint
-- Live todos of one endpoint's queue by state: the summary behind the queue resource. A team queue
-- counts only while the endpoint reaches it; a revoked endpoint counts nothing.
SELECT todos.state, (todos.next_retry_at IS NOT NULL) AS parked, count(*)::int AS n
  FROM todos
 WHERE todos.queue = %(queue)s::text
   AND (todos.endpoint_id = %(endpoint_id)s::uuid OR {{team_reach}}) AND {{endpoint_live}}
   AND (todos.state IN ('pending', 'claimed', 'input-required')
        OR (todos.state = 'failed' AND todos.next_retry_at IS NOT NULL))
 GROUP BY todos.state, (todos.next_retry_at IS NOT NULL)
