-- Fragments spliced into the statements of the other files with {{name}}. Static text only.

-- name: endpoint_live
-- The calling endpoint is active and unexpired, checked by the statement itself: a revoked or expired
-- endpoint raises SQLSTATE 28000, which the core reports as `unauthorized` (migration 0008). Always a
-- top-level AND condition without a column of the row, so PostgreSQL runs it once per statement as a
-- One-Time Filter, before any row is read; true for a human caller (no endpoint). Once per statement,
-- not once per subquery: the claim arms leave it to the claim statement's `cand` (todos.sql), which
-- runs it once above all of them (in an arm it ran once per arm, three to six times a claim).
switchboard_endpoint_live(%(endpoint_id)s::uuid)

-- name: scope
-- The caller's read scope on a row of `todos`, checked on every call by the statement itself: an
-- endpoint sees its own todos in its granted queues and the team todos it reaches (`team_reach`),
-- and only while it is live; a human sees the todos of every endpoint of their agents and of every
-- team they belong to.
({{scope_rows}} AND {{endpoint_live}})

-- name: scope_rows
-- `scope` without the liveness check, for a subquery run once per item (`held_batch`), whose
-- statement checks `endpoint_live` once at its top instead.
(CASE WHEN %(human_id)s::uuid IS NULL
      THEN todos.queue = ANY(%(queues)s::text[])
           AND (todos.endpoint_id = %(endpoint_id)s::uuid OR {{team_reach}})
      ELSE EXISTS (SELECT 1 FROM endpoints e JOIN agents g ON g.id = e.agent_id
                    WHERE e.id = todos.endpoint_id AND g.human_id = %(human_id)s::uuid)
           OR {{member_reach}}
  END)

-- name: reach
-- `scope` without the queue grant and the liveness check: whether the todo exists for this caller at
-- all, which tells `not_found` from `forbidden` and `conflict` after a miss (REQ-19).
(CASE WHEN %(human_id)s::uuid IS NULL
      THEN todos.endpoint_id = %(endpoint_id)s::uuid OR {{team_reach}}
      ELSE EXISTS (SELECT 1 FROM endpoints e JOIN agents g ON g.id = e.agent_id
                    WHERE e.id = todos.endpoint_id AND g.human_id = %(human_id)s::uuid)
           OR {{member_reach}}
 END)

-- name: team_reach
-- A team todo the calling endpoint reaches now: an owner or admin granted its queue to the endpoint
-- and the endpoint's human is still a member (two primary-key probes; migration 0016).
(todos.team_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM team_grants g
      JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
     WHERE g.endpoint_id = %(endpoint_id)s::uuid AND g.queue = todos.queue AND g.team_id = todos.team_id))

-- name: member_reach
-- A team todo of a team the calling human belongs to (any role).
(todos.team_id IS NOT NULL AND EXISTS (
    SELECT 1 FROM team_members m WHERE m.team_id = todos.team_id AND m.human_id = %(human_id)s::uuid))

-- name: team_targets
-- The team queues among %(team_queues)s that the calling endpoint reaches now, as claim targets
-- `q(team_id, name)`.
SELECT g.team_id, g.queue AS name FROM team_grants g
  JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
 WHERE g.endpoint_id = %(endpoint_id)s::uuid AND g.queue = ANY(%(team_queues)s::text[])

-- name: team_targets_locked
-- team_targets for a claim, from an active endpoint: its grant and its own row are share-locked until
-- commit, so an ungrant or a member's removal (which delete the grant) and a revocation or an expiry
-- (which update the endpoint) wait for the claim and then hand its lease back, or commit first and the
-- claim finds no target (core/teams.py, core/endpoints.py); an endpoint expired but not yet swept is
-- refused by `endpoint_live`. Rows of the calling endpoint only: claimers of one team queue from
-- different endpoints share no lock.
SELECT g.team_id, g.queue AS name FROM team_grants g
  JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
  JOIN endpoints e ON e.id = g.endpoint_id AND e.state = 'active'
 WHERE g.endpoint_id = %(endpoint_id)s::uuid AND g.queue = ANY(%(team_queues)s::text[])
   FOR SHARE OF g, e

-- name: unpoliced
-- A claim target `q.name` of the calling endpoint without an admission policy, or any target when
-- %(admitted)s (the caller holds the policy's lock, a shard of it or the policy and all its shards,
-- and judged it first: core/admission.py, migrations 0021 and 0022). A policed
-- queue is never claimed by the statements that skip the policy lock. The flag sits inside the
-- subquery, not in an OR around it: `true OR ...` folds away when a plan is made for the values, so
-- PostgreSQL priced every such plan below the generic one and planned the admitted claim afresh on
-- each call (3 ms of planning for 0.9 ms of execution, docs/benchmarks.md). It reaches the planner
-- through an InitPlan, as `batch_limit` does, for the same reason: with `false` in sight the planner
-- expects the anti-join to drop nearly every candidate, prices the batch claims' custom plans far
-- below the generic one and, once the tables have statistics, plans each batch claim afresh (D47).
(NOT EXISTS (
    SELECT 1 FROM admission_policies p
     WHERE NOT (SELECT %(admitted)s::boolean)
       AND p.queue = q.name AND (p.endpoint_id = %(endpoint_id)s::uuid OR p.team_id IS NOT NULL)))

-- name: unpoliced_todo
-- `unpoliced` for a claim by id: the todo's own queue identity has no admission policy.
(NOT EXISTS (
    SELECT 1 FROM admission_policies p
     WHERE NOT %(admitted)s::boolean
       AND p.queue = todos.queue AND (p.endpoint_id = todos.endpoint_id OR p.team_id = todos.team_id)))

-- name: lease_kept
-- On the caller's claimed todo `todos`: a lease a heartbeat may extend or an input request may park.
-- Unexpired, or on a queue without an in-flight cap: a lapsed lease no longer counts as in flight
-- (core/admission.py), so its slot may already be another claim's, and reviving it would pass
-- max_in_flight. The holder may still complete, fail or release it.
(todos.lease_expires_at >= now() OR NOT EXISTS (
    SELECT 1 FROM admission_policies p
     WHERE p.queue = todos.queue AND p.max_in_flight IS NOT NULL
       AND (p.endpoint_id = todos.endpoint_id OR p.team_id = todos.team_id)))

-- name: holder
-- The lease holder: an agent holds what it claimed; the owning human may act on any lease.
-- On a team todo the holder is the claiming endpoint itself (two endpoints of one agent compete there).
(%(human_id)s::uuid IS NOT NULL
 OR (todos.owner = %(owner)s
     AND (todos.team_id IS NULL OR todos.claimed_by_endpoint_id = %(endpoint_id)s::uuid)))

-- name: held
-- The first CTE of every holder's lease statement: the caller's claimed todo, locked. Later CTEs key
-- the open attempt to `t.attempts_total` (docs/decisions.md D1).
WITH t AS (
    SELECT todos.id, todos.attempts_total, todos.attempt, todos.max_attempts FROM todos
     WHERE todos.id = %(id)s AND todos.state = 'claimed' AND {{scope}} AND {{holder}}
       FOR UPDATE
)

-- name: fence
-- SPEC-0034 REQ-6 on the open attempt `a`: humans are exempt; otherwise the presented token's hash
-- must equal the stored one (both null when neither side fenced).
(%(human_id)s::uuid IS NOT NULL OR a.lease_token_hash IS NOT DISTINCT FROM %(token_hash)s::bytea)

-- name: claim_next_arms
-- The three claimable arms of claim_next inside one queue `q.name`, each an ordered index scan. No
-- `endpoint_live` here: the statement around them checks it once, above every arm (todos.sql).
SELECT p.* FROM (
    SELECT id, state, attempts_total, created_at FROM todos
     WHERE endpoint_id = %(endpoint_id)s::uuid AND queue = q.name AND state = 'pending'
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) p
UNION ALL
SELECT l.* FROM (
    SELECT id, state, attempts_total, created_at FROM todos
     WHERE endpoint_id = %(endpoint_id)s::uuid AND queue = q.name AND state = 'claimed'
       AND lease_expires_at < now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED) l
UNION ALL
SELECT r.* FROM (
    SELECT id, state, attempts_total, created_at FROM todos
     WHERE endpoint_id = %(endpoint_id)s::uuid AND queue = q.name AND state = 'failed'
       AND next_retry_at <= now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY next_retry_at LIMIT 1 FOR UPDATE SKIP LOCKED) r

-- name: claim_team_arms
-- claim_next_arms inside one team queue `q(team_id, name)` (the team's indexes of migration 0016).
SELECT p.* FROM (
    SELECT id, state, attempts_total, created_at FROM todos
     WHERE team_id = q.team_id AND queue = q.name AND state = 'pending'
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) p
UNION ALL
SELECT l.* FROM (
    SELECT id, state, attempts_total, created_at FROM todos
     WHERE team_id = q.team_id AND queue = q.name AND state = 'claimed'
       AND lease_expires_at < now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED) l
UNION ALL
SELECT r.* FROM (
    SELECT id, state, attempts_total, created_at FROM todos
     WHERE team_id = q.team_id AND queue = q.name AND state = 'failed'
       AND next_retry_at <= now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY next_retry_at LIMIT 1 FOR UPDATE SKIP LOCKED) r

-- name: claim_tail
-- Shared by claim and claim_next: `t(id, prior_state, prior_total)` is the locked todo. A first attempt
-- skips the prior-attempts read (it has none), and none is NULL, not an empty array, so that Python
-- does not parse `[]` for most claims (todos._result reads NULL as none). Written tight: the claim statements stay under the 4,096
-- characters up to which psycopg caches a statement's parsing.
-- The claim's time is never before the todo's last change, `greatest(now(), x.updated_at)`, and
-- every transition that closes an attempt sets updated_at to its ended_at: now() is the start of
-- the claim's transaction, which can precede the commit of a release or a reap the claim then sees
-- (a round's complete runs first; a statement is planned after its transaction began), and a todo's
-- attempts must not overlap (docs/decisions.md D53).
, cap AS (
SELECT greatest(5, coalesce((SELECT value::int FROM settings WHERE key = 'attempt_history_max_per_todo'),
50)) AS n
), closed AS (
UPDATE todo_attempts a SET ended_at = now(), outcome = 'lease_expired', disposition = 'requeued'
FROM t
WHERE t.prior_state = 'claimed' AND a.todo_id = t.id AND a.seq = t.prior_total AND a.ended_at IS NULL
RETURNING a.*
), claimed AS (
UPDATE todos x
SET state = 'claimed', owner = %(owner)s, lease_expires_at = now() + make_interval(secs => %(ttl)s),
attempt = x.attempt + 1, attempts_total = x.attempts_total + 1,
attempts_pruned = greatest(x.attempts_pruned, x.attempts_total + 1 - (SELECT n FROM cap)),
claimed_at = greatest(now(), x.updated_at), next_retry_at = NULL, updated_at = greatest(now(), x.updated_at),
claimed_by_endpoint_id = %(claimer_endpoint_id)s::uuid
FROM t
WHERE x.id = t.id
RETURNING x.*, t.prior_state
), opened AS (
INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, claimer_endpoint_id, claimer_session, owner,
claimant, claimed_at, lease_expires_at, lease_token_hash)
SELECT c.id, c.attempts_total, c.attempt, %(claimer_kind)s, %(claimer_endpoint_id)s::uuid, %(session)s,
c.owner, %(claimant)s, c.claimed_at, c.lease_expires_at, %(new_token_hash)s::bytea
FROM claimed c
RETURNING seq
), pruned AS (
DELETE FROM todo_attempts a USING claimed c
WHERE a.todo_id = c.id AND a.seq <= c.attempts_pruned AND a.ended_at IS NOT NULL
RETURNING a.seq
)
SELECT c.*, (SELECT seq FROM opened) AS attempt_seq, (SELECT to_jsonb(cl) FROM closed cl) AS closed_attempt,
CASE WHEN c.attempts_total > 1 THEN
(SELECT jsonb_agg(to_jsonb(p) || {{last_note_only}} ORDER BY p.seq DESC)
FROM (SELECT z.* FROM (SELECT a.* FROM todo_attempts a
WHERE a.todo_id = c.id AND a.ended_at IS NOT NULL AND a.seq > c.attempts_pruned
UNION ALL SELECT * FROM closed) z
ORDER BY z.seq DESC LIMIT 5) p) END AS prior_attempts
FROM claimed c
-- `t` read here, before anything else (a One-Time Filter on an InitPlan): its search holds the
-- endpoint check, and a join whose other side is empty (the todos of `claimed`, the open attempts of
-- `closed`) would otherwise never read it, so a revoked endpoint would find nothing, not be refused.
WHERE (SELECT count(*) FROM t) >= 0

-- name: batch_limit
-- A batch claim's size, %(max_todos)s, as the planner sees it: through an InitPlan, so that a plan made
-- for the call's values estimates the LIMIT as the cached generic plan does (a tenth of the rows). With
-- the value in sight a custom plan of LIMIT 4 always looks far cheaper than the generic plan, so once
-- the tables had statistics PostgreSQL planned every batch claim afresh, about 0.5 to 0.9 ms of its CPU
-- per statement (bench/group_bench.py --analyze; docs/decisions.md D47). Either way the arms are the
-- same ordered index scans, stopped after the LIMIT's rows.
(SELECT %(max_todos)s::int)

-- name: claim_batch_arms
-- claim_next_arms with up to %(max_todos)s rows per arm, for a batched claim_next.
SELECT p.* FROM (
    SELECT id, state, attempts_total, created_at, assignee FROM todos
     WHERE endpoint_id = %(endpoint_id)s::uuid AND queue = q.name AND state = 'pending'
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY created_at LIMIT {{batch_limit}} FOR UPDATE SKIP LOCKED) p
UNION ALL
SELECT l.* FROM (
    SELECT id, state, attempts_total, created_at, assignee FROM todos
     WHERE endpoint_id = %(endpoint_id)s::uuid AND queue = q.name AND state = 'claimed'
       AND lease_expires_at < now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY lease_expires_at LIMIT {{batch_limit}} FOR UPDATE SKIP LOCKED) l
UNION ALL
SELECT r.* FROM (
    SELECT id, state, attempts_total, created_at, assignee FROM todos
     WHERE endpoint_id = %(endpoint_id)s::uuid AND queue = q.name AND state = 'failed'
       AND next_retry_at <= now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = %(owner)s)
     ORDER BY next_retry_at LIMIT {{batch_limit}} FOR UPDATE SKIP LOCKED) r

-- name: claim_team_batch_arms
-- claim_team_arms with up to %(max_todos)s rows per arm, for a batched claim_next.
SELECT p.* FROM (
    SELECT id, state, attempts_total, created_at, assignee FROM todos
     WHERE team_id = q.team_id AND queue = q.name AND state = 'pending'
       AND (assignee IS NULL OR assignee = ANY(%(owners)s::text[]))
     ORDER BY created_at LIMIT {{batch_limit}} FOR UPDATE SKIP LOCKED) p
UNION ALL
SELECT l.* FROM (
    SELECT id, state, attempts_total, created_at, assignee FROM todos
     WHERE team_id = q.team_id AND queue = q.name AND state = 'claimed'
       AND lease_expires_at < now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = ANY(%(owners)s::text[]))
     ORDER BY lease_expires_at LIMIT {{batch_limit}} FOR UPDATE SKIP LOCKED) l
UNION ALL
SELECT r.* FROM (
    SELECT id, state, attempts_total, created_at, assignee FROM todos
     WHERE team_id = q.team_id AND queue = q.name AND state = 'failed'
       AND next_retry_at <= now() AND attempt < max_attempts
       AND (assignee IS NULL OR assignee = ANY(%(owners)s::text[]))
     ORDER BY next_retry_at LIMIT {{batch_limit}} FOR UPDATE SKIP LOCKED) r

-- name: claim_batch_tail
-- claim_tail for many rows: `t(id, prior_state, prior_total, i)` are the locked todos, `i` their
-- 1-based rank, which picks each one's lease token hash from %(new_token_hashes)s (null unfenced).
-- Every todo gets its own takeover close, counters, attempt and prior attempts, as claim_tail does;
-- the history reads and the prune are skipped for the todos that cannot have any (first attempts,
-- nothing to prune), which most of a batch are; no prior attempts is NULL, as in claim_tail.
{{claim_batch_head}}, claimed AS (
    UPDATE todos x
       SET state = 'claimed', owner = %(owner)s,
           lease_expires_at = now() + make_interval(secs => %(ttl)s),
           attempt = x.attempt + 1,
           attempts_total = x.attempts_total + 1,
           attempts_pruned = greatest(x.attempts_pruned, x.attempts_total + 1 - (SELECT n FROM cap)),
           claimed_at = greatest(now(), x.updated_at), next_retry_at = NULL,
           updated_at = greatest(now(), x.updated_at),
           claimed_by_endpoint_id = %(claimer_endpoint_id)s::uuid
      FROM t
     WHERE x.id = t.id
    RETURNING x.*, t.prior_state, t.i
), opened AS (
    INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, claimer_endpoint_id, claimer_session,
                               owner, claimant, claimed_at, lease_expires_at, lease_token_hash)
    SELECT c.id, c.attempts_total, c.attempt, %(claimer_kind)s, %(claimer_endpoint_id)s::uuid,
           %(session)s, c.owner, %(claimant)s, c.claimed_at, c.lease_expires_at,
           (%(new_token_hashes)s::bytea[])[c.i]
      FROM claimed c
    RETURNING seq
){{claim_batch_end}}

-- name: claim_group_tail
-- claim_batch_tail for the claims of several endpoints in one statement (todos.sql
-- `claim_next_team_group`): `t` also names, for each todo, the claim it goes to (`i`, the claim's
-- place in the group) and that claim's endpoint (`claimer`), owner, session, claimant and lease token
-- hash, which the todo's lease and attempt take instead of the statement's parameters.
{{claim_batch_head}}, claimed AS (
    UPDATE todos x
       SET state = 'claimed', owner = t.owner,
           lease_expires_at = now() + make_interval(secs => %(ttl)s),
           attempt = x.attempt + 1,
           attempts_total = x.attempts_total + 1,
           attempts_pruned = greatest(x.attempts_pruned, x.attempts_total + 1 - (SELECT n FROM cap)),
           claimed_at = greatest(now(), x.updated_at), next_retry_at = NULL,
           updated_at = greatest(now(), x.updated_at),
           claimed_by_endpoint_id = t.claimer
      FROM t
     WHERE x.id = t.id
    RETURNING x.*, t.prior_state, t.i
), opened AS (
    INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, claimer_endpoint_id, claimer_session,
                               owner, claimant, claimed_at, lease_expires_at, lease_token_hash)
    SELECT c.id, c.attempts_total, c.attempt, 'endpoint', t.claimer, t.session, c.owner, t.claimant, c.claimed_at,
           c.lease_expires_at, t.token_hash
      FROM claimed c JOIN t ON t.id = c.id
    RETURNING seq
){{claim_batch_rows}}

-- name: claim_batch_head
-- The start of claim_batch_tail and claim_group_tail: the history cap, and the takeover closes of the
-- lapsed leases among `t`.
, cap AS (
    SELECT greatest(5, coalesce((SELECT value::int FROM settings
                                   WHERE key = 'attempt_history_max_per_todo'), 50)) AS n
), closed AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'lease_expired', disposition = 'requeued'
      FROM t
     WHERE a.todo_id = ANY(ARRAY(SELECT id FROM t WHERE prior_state = 'claimed'))  -- primary key probes only
       AND t.prior_state = 'claimed' AND a.todo_id = t.id AND a.seq = t.prior_total
       AND a.ended_at IS NULL
    RETURNING a.*
)

-- name: claim_batch_end
-- The end of claim_batch_tail: claim_batch_rows in the order of `i`.
{{claim_batch_rows}}
 ORDER BY c.i

-- name: claim_batch_rows
-- The end of claim_batch_tail and claim_group_tail: the prune, and each claimed todo with its attempt
-- number, the attempt its takeover closed and its prior attempts.
, pruned AS (
    DELETE FROM todo_attempts a USING claimed c
     WHERE c.attempts_pruned > 0 AND a.todo_id = c.id AND a.seq <= c.attempts_pruned
       AND a.ended_at IS NOT NULL
    RETURNING a.seq
)
SELECT c.*,
       c.attempts_total AS attempt_seq,
       (SELECT to_jsonb(cl) FROM closed cl WHERE cl.todo_id = c.id) AS closed_attempt,
       CASE WHEN c.attempts_total > 1 THEN  -- a first attempt has none to read
       (SELECT jsonb_agg(to_jsonb(p) || {{last_note_only}} ORDER BY p.seq DESC)
          FROM (SELECT z.* FROM (SELECT a.* FROM todo_attempts a
                                  WHERE a.todo_id = c.id AND a.ended_at IS NOT NULL
                                    AND a.seq > c.attempts_pruned
                                 UNION ALL
                                 SELECT cl.* FROM closed cl WHERE cl.todo_id = c.id) z
                 ORDER BY z.seq DESC LIMIT 5) p) END AS prior_attempts
  FROM claimed c
-- `t` read first, as in claim_tail: its search holds the endpoint check.
 WHERE (SELECT count(*) FROM t) >= 0

-- name: team_group_items
-- The claims of a group (todos.sql `claim_next_team_group`), `i` their place in the group, each with its
-- endpoint (`claimer`), owner, session, claimant and lease token hash.
unnest(%(claimers)s::uuid[], %(owners)s::text[], %(sessions)s::text[], %(claimants)s::text[],
       %(new_token_hashes)s::bytea[]) WITH ORDINALITY AS i(claimer, owner, session, claimant, token_hash, i)

-- name: team_group_search
-- After `items` (team_group_items, under the statement's admission guard): the todos of the team
-- queue %(queue)s the claims take. `reach`: the claims whose endpoint reaches the queue now, checked
-- and locked as team_targets_locked checks and locks one endpoint's, and live; a claim whose endpoint
-- does not is left out here and answered alone (core/todos.py), which reports what a claim alone
-- reports (nothing, or the endpoint's refusal). `cand`: the oldest claimable todos, at most one per
-- claim that reaches the queue, each unassigned or assigned to one of their owners. `mine`: each
-- assigned todo paired with a claim of its assignee (the k-th todo of an owner with the k-th claim of
-- that owner). `t`: those pairs, then the unassigned todos, oldest first (`free`), paired with the
-- claims left in their order: the k-th claim takes the k-th element of free's arrays. A todo paired
-- with no claim stays as it was; a claim paired with no todo is answered alone.
-- Every step is done once, whatever the planner expects: it takes `reach` for one row (its estimate
-- of a locked join of an unnest) and so joins by nested loops, and with the numbering inlined and the
-- pairs joined back to `cand` and `reach` it sorted and numbered all the candidates once per claim
-- and compared every pair: 2.3 of a 20-claim statement's 3.2 ms, 209,328 rows for 40 claims
-- (tests/test_plan_cache.py; docs/benchmarks.md, "Team queues and admission"). `assigned` and
-- `free` are MATERIALIZED for that, and `free` is one row of arrays read by position, not joined.
, reach AS (
    -- Locked in the grants' key order (the endpoint's id, the queue being one), not in the calls'
    -- order: a member's removal locks their grants in key order (teams.sql lock_member_grants), and a
    -- group holding one of them while it waited for another locked by the removal deadlocked (D65).
    SELECT i.*, g.team_id FROM items i
      JOIN team_grants g ON g.endpoint_id = i.claimer AND g.queue = %(queue)s
      JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
      JOIN endpoints e ON e.id = g.endpoint_id AND e.state = 'active'
                      AND (e.expires_at IS NULL OR e.expires_at > now())
     ORDER BY g.endpoint_id
       FOR SHARE OF g, e
), cand AS (
    SELECT x.id, x.state, x.attempts_total, x.created_at, x.assignee
      FROM (SELECT DISTINCT r.team_id, %(queue)s::text AS name FROM reach r) AS q,
           LATERAL ({{claim_team_batch_arms}}) x
     ORDER BY x.created_at
     LIMIT (SELECT count(*) FROM reach)
), assigned AS MATERIALIZED (
    SELECT id, assignee, row_number() OVER (PARTITION BY assignee ORDER BY created_at, id) AS k
      FROM cand WHERE assignee IS NOT NULL
), mine AS (
    SELECT c.id, r.i
      FROM assigned c
      JOIN (SELECT i, owner, row_number() OVER (PARTITION BY owner ORDER BY i) AS k FROM reach) r
        ON r.owner = c.assignee AND r.k = c.k
), free AS MATERIALIZED (
    SELECT array_agg(id ORDER BY created_at, id) AS ids, array_agg(state ORDER BY created_at, id) AS states,
           array_agg(attempts_total ORDER BY created_at, id) AS totals
      FROM cand WHERE assignee IS NULL
), t AS (
    SELECT c.id, c.state AS prior_state, c.attempts_total AS prior_total, r.i::int AS i, r.claimer, r.owner,
           r.session, r.claimant, r.token_hash
      FROM mine p JOIN cand c ON c.id = p.id JOIN reach r ON r.i = p.i
    UNION ALL
    SELECT f.ids[w.k], f.states[w.k], f.totals[w.k], w.i::int, w.claimer, w.owner, w.session, w.claimant,
           w.token_hash
      FROM (SELECT r.*, row_number() OVER (ORDER BY r.i) AS k FROM reach r
             WHERE r.i NOT IN (SELECT i FROM mine)) w, free f
     WHERE w.k <= cardinality(f.ids)
)

-- name: held_batch
-- `held` for a list of items: the caller's claimed todos among %(ids)s, locked in id order, byte by
-- byte as the ids compare (D49), the order of every statement that locks several todos (two batches,
-- or a batch and a revocation, naming the same todos cannot deadlock), each beside its own item: the presented token's
-- hash, the report, the result (null or JSON null for none) and, for fail, whether to retry. An array
-- other than %(ids)s may be NULL when no item has that value (unnest pads it with NULLs).
-- The shape is fixed whatever the planner estimates: the items sorted by id (a sorted subquery is
-- not flattened), each looked up by primary key in a LATERAL subquery that locks it (FOR UPDATE keeps
-- it a subquery), so the work grows with the items alone. The state test is written so that no
-- partial index's predicate follows from it: the primary key is the only index the lookup can use
-- (with `state = 'claimed'` in sight the planner may walk the queue's claimed todos for each item
-- instead, which it prices the same while that index is small). The LIMIT is the number of items, so
-- it never cuts one; it makes the planner expect a tenth of its guess of ten rows, so a plan made for
-- the values and the cached generic plan price the per-item lookups alike and the generic one is kept
-- (D48). Joined as a plain join, the generic plan
-- (which sees neither the array's length nor the table's) scanned the queue's claimed todos and
-- compared each with every item, rescanning the items for each: 100 x 100 comparisons per batch of
-- 100 (docs/benchmarks.md, "Batched closes in linear time").
WITH t AS (
    SELECT x.id, x.attempts_total, x.attempt, x.max_attempts, i.token_hash, i.summary,
           coalesce(i.summary_truncated, false) AS summary_truncated, i.artifact,
           nullif(i.result, 'null'::jsonb) AS result, i.retry
      FROM (SELECT * FROM unnest((SELECT %(ids)s::text[]), (SELECT %(token_hashes)s::bytea[]),
                                 (SELECT %(summaries)s::text[]), (SELECT %(summaries_truncated)s::boolean[]),
                                 (SELECT %(artifacts)s::text[]), (SELECT %(results)s::jsonb[]),
                                 (SELECT %(retries)s::boolean[]))
                    AS i(id, token_hash, summary, summary_truncated, artifact, result, retry)
             ORDER BY i.id COLLATE "C" LIMIT (SELECT cardinality(%(ids)s::text[]))) i
     CROSS JOIN LATERAL (
           SELECT todos.id, todos.attempts_total, todos.attempt, todos.max_attempts FROM todos
            WHERE todos.id = i.id AND coalesce(todos.state, '') = 'claimed' AND {{scope_rows}} AND {{holder}}
              FOR UPDATE OF todos) x
     WHERE {{endpoint_live}}
)

-- name: complete_each
-- The rest of complete_batch after `t` (held_batch or fleet_held_batch): each held todo done, its
-- open attempt closed `completed` with the item's report, and its hooks' todo.completed queued. Each
-- CTE passes on what the next needs (RETURNING may name the FROM items), so no step joins back to `t`
-- or `a` by scanning it.
, a AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'completed', disposition = 'done',
           summary = t.summary, summary_truncated = t.summary_truncated, artifact = t.artifact
      FROM t
     WHERE {{held_attempt_each}}
    RETURNING a.*, t.result AS item_result
)
, u AS (
    UPDATE todos x
       SET state = 'done', result = a.item_result, lease_expires_at = NULL, completed_at = now(),
           updated_at = now()
      FROM a
     WHERE x.id = a.todo_id
    RETURNING x.*, {{closed_columns}}
){{completed_hooks}}
SELECT * FROM u

-- name: completed_hooks
-- After `u`, the todos a statement completed: todo.completed queued for each enabled hook of their
-- endpoint (or team) that subscribes to it, as the transition trigger queues the other events, with
-- the same body (migration 0037: a completion no longer runs that trigger row by row). The hooks are
-- read with the lock the outbox's foreign key takes, so a hook being removed is waited for and then
-- skipped (migration 0036). Two inserts, each looked up by its own index: a lock cannot be taken
-- through UNION ALL.
, endpoint_hooks AS (
    INSERT INTO hook_outbox (hook_id, event, todo_id, body)
    SELECT h.id, 'todo.completed', u.id,
           switchboard_hook_body(u.id, u.queue, u.kind, u.source, u.title, u.attempt, u.attempts_total,
                                 h.endpoint_slug, NULL, '{"type": "todo.completed"}'::jsonb)
      FROM u JOIN notify_hooks h ON h.endpoint_id = u.endpoint_id
     WHERE h.enabled AND 'todo.completed' = ANY(h.events)
       FOR KEY SHARE OF h
), team_hooks AS (
    INSERT INTO hook_outbox (hook_id, event, todo_id, body)
    SELECT h.id, 'todo.completed', u.id,
           switchboard_hook_body(u.id, u.queue, u.kind, u.source, u.title, u.attempt, u.attempts_total,
                                 NULL, h.team_slug, '{"type": "todo.completed"}'::jsonb)
      FROM u JOIN notify_hooks h ON h.team_id = u.team_id
     WHERE h.enabled AND 'todo.completed' = ANY(h.events)
       FOR KEY SHARE OF h
)

-- name: fail_each
-- The rest of fail_batch after `t`: each held todo failed with its own retry choice and backoff.
, a AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'failed',
           disposition = CASE WHEN t.retry AND t.attempt < t.max_attempts
                              THEN 'retry_scheduled' ELSE 'dead_lettered' END,
           summary = t.summary, summary_truncated = t.summary_truncated, artifact = t.artifact
      FROM t
     WHERE {{held_attempt_each}}
    RETURNING a.*, t.result AS item_result
)
UPDATE todos x
   SET state = 'failed', result = a.item_result, lease_expires_at = NULL, updated_at = now(),
       next_retry_at = {{retry_at}}
  FROM a
 WHERE x.id = a.todo_id
RETURNING x.*, {{closed_columns}}

-- name: retry_at
-- When the todo `x` whose attempt `a` a fail closed is due again: after the backoff of SYSTEM.md section
-- 6, min(base * 2^(attempt - 1), cap), when the attempt's disposition is retry_scheduled; never else.
CASE WHEN a.disposition = 'retry_scheduled'
     THEN now() + make_interval(secs => least(%(backoff_base)s * power(2, greatest(x.attempt, 1) - 1),
                                              %(backoff_max)s))
END

-- name: fleet_held_batch
-- held_batch for the items of several endpoints of a fleet on ONE team queue %(queue)s: each item's
-- todo is checked against the item's own endpoint %(claimers)s[k] and owner %(owners)s[k] as
-- `scope_rows` and `holder` check one endpoint's (the team queue granted to it, its human a member,
-- the lease its own), and that endpoint must be live; an item that fails any of it is left out (its
-- call is answered alone, which says why). Same shape as held_batch (D48): the items sorted by id, each
-- todo found by its primary key and locked.
WITH t AS (
    SELECT x.id, x.attempts_total, x.attempt, x.max_attempts, i.token_hash, i.summary,
           coalesce(i.summary_truncated, false) AS summary_truncated, i.artifact,
           nullif(i.result, 'null'::jsonb) AS result, i.retry
      FROM (SELECT * FROM unnest((SELECT %(ids)s::text[]), (SELECT %(claimers)s::uuid[]), (SELECT %(owners)s::text[]),
                                 (SELECT %(token_hashes)s::bytea[]), (SELECT %(summaries)s::text[]),
                                 (SELECT %(summaries_truncated)s::boolean[]), (SELECT %(artifacts)s::text[]),
                                 (SELECT %(results)s::jsonb[]), (SELECT %(retries)s::boolean[]))
                    AS i(id, claimer, owner, token_hash, summary, summary_truncated, artifact, result, retry)
             ORDER BY i.id COLLATE "C" LIMIT (SELECT cardinality(%(ids)s::text[]))) i
     CROSS JOIN LATERAL (
           SELECT todos.id, todos.attempts_total, todos.attempt, todos.max_attempts FROM todos
            WHERE todos.id = i.id AND coalesce(todos.state, '') = 'claimed' AND todos.queue = %(queue)s
              AND todos.team_id IS NOT NULL AND todos.owner = i.owner AND todos.claimed_by_endpoint_id = i.claimer
              AND EXISTS (SELECT 1 FROM team_grants g
                            JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
                           WHERE g.endpoint_id = i.claimer AND g.queue = todos.queue AND g.team_id = todos.team_id)
              AND EXISTS (SELECT 1 FROM endpoints e WHERE e.id = i.claimer AND e.state = 'active'
                             AND (e.expires_at IS NULL OR e.expires_at > now()))
              FOR UPDATE OF todos) x
)

-- name: held_attempt_each
-- For a batched close: the open attempt `a` of each locked todo in `t`, found by its primary key and
-- checked against the item's fence. It is open when it has no outcome (the table's
-- attempt_open_or_closed makes that the same as `ended_at IS NULL`), written so because
-- `ended_at IS NULL` lets the planner walk the index of every open attempt in the installation and
-- compare each with every item (held_batch expects few items), where the key probe grows with the
-- items alone (D48).
a.todo_id = t.id AND a.seq = t.attempts_total AND a.outcome IS NULL AND {{fence_each}}

-- name: fence_each
-- `fence` for a batch: each open attempt `a` against the token hash of its own item in `t`.
(%(human_id)s::uuid IS NOT NULL OR a.lease_token_hash IS NOT DISTINCT FROM t.token_hash)

-- name: last_note_only
-- A prior attempt `p` as a claim returns it: its notes cut to the newest one (shapes.attempt reads it
-- as last_note), so a claim does not carry up to 20 notes per prior attempt (issue 16).
jsonb_build_object('notes', jsonb_path_query_array(p.notes, '$[last]'))

-- name: admitted_hold
-- The first CTE of a one-statement policed claim (admission.sql `claim_next_*_admitted`): the shard
-- held and the verdict, as an InitPlan above every todo scan (migration 0022).
SELECT v.* FROM switchboard_admission_hold(%(endpoint_id)s::uuid, %(queue)s::text, 1) v WHERE {{endpoint_live}}

-- name: admitted_charge
-- The end of a one-statement policed claim: charge the held shard with what the claim `t` took, then
-- the claim's rows and, last, the verdict row `adm` (id null, the verdict in `closed_attempt`).
, charge AS (
UPDATE admission_shards s SET charged = CASE WHEN charged_window = window_starts THEN charged + 1
WHEN charged_window > window_starts THEN charged ELSE 1 END, charged_window = greatest(charged_window, window_starts)
FROM adm a WHERE s.policy_id = a.policy_id AND s.shard = a.shard AND EXISTS (SELECT FROM t)
)
{{claim_tail}}
UNION ALL SELECT (NULL::todos).*, NULL, NULL, to_jsonb(a), NULL FROM adm a

-- name: batch_items
-- The items of a bulk push (producer.sql), one JSON array per column zipped by position, in input order.
ROWS FROM (jsonb_array_elements_text(%(ids)s::jsonb), jsonb_array_elements_text(%(queues)s::jsonb),
           jsonb_array_elements_text(%(kinds)s::jsonb), jsonb_array_elements_text(%(titles)s::jsonb),
           jsonb_array_elements(%(payloads)s::jsonb), jsonb_array_elements_text(%(assignees)s::jsonb),
           jsonb_array_elements_text(%(max_attempts)s::jsonb))
     WITH ORDINALITY AS i(id, queue, kind, title, payload, assignee, max_attempts, ord)

-- name: batch_items_keyed
-- batch_items with each item's idempotency key.
ROWS FROM (jsonb_array_elements_text(%(ids)s::jsonb), jsonb_array_elements_text(%(queues)s::jsonb),
           jsonb_array_elements_text(%(kinds)s::jsonb), jsonb_array_elements_text(%(titles)s::jsonb),
           jsonb_array_elements(%(payloads)s::jsonb), jsonb_array_elements_text(%(keys)s::jsonb),
           jsonb_array_elements_text(%(assignees)s::jsonb), jsonb_array_elements_text(%(max_attempts)s::jsonb))
     WITH ORDINALITY AS i(id, queue, kind, title, payload, key, assignee, max_attempts, ord)

-- name: batch_head
-- The first row of a keyed bulk push's answer: how many items `made` inserted, and now(); the
-- columns of the live duplicates that follow it, null.
SELECT 0 AS batch_ord, count(*)::int AS batch_made, now() AS created_at, NULL::text AS id, NULL::uuid AS endpoint_id,
       NULL::text AS queue, NULL::text AS source, NULL::text AS kind, NULL::text AS title, NULL::text AS state,
       NULL::text AS owner, NULL::text AS assignee, NULL::int AS attempt, NULL::int AS max_attempts,
       NULL::timestamptz AS lease_expires_at, NULL::timestamptz AS next_retry_at, NULL::jsonb AS payload
  FROM made

-- name: closed_columns
-- The attempt `a` a complete or fail closed, as columns named `closed.<field>` (todos.py folds them
-- into the row's `closed_attempt`): the fields of its REQ-7 entry and nothing else. Building it as
-- to_jsonb(a) cost PostgreSQL the JSON of every column, the lease token's hash and the session
-- included, and Python its parse, for every todo closed. No notes is NULL rather than `[]`, which
-- Python would parse for nearly every close (shapes reads NULL as none).
a.seq AS "closed.seq", a.attempt AS "closed.attempt", a.claimer_kind AS "closed.claimer_kind",
a.claimant AS "closed.claimant", a.claimed_at AS "closed.claimed_at",
a.last_heartbeat_at AS "closed.last_heartbeat_at", a.ended_at AS "closed.ended_at",
a.outcome AS "closed.outcome", a.disposition AS "closed.disposition", a.summary AS "closed.summary",
a.summary_truncated AS "closed.summary_truncated", a.artifact AS "closed.artifact", nullif(a.notes, '[]'::jsonb) AS "closed.notes"

-- name: policy_in_flight
-- The leases in flight on the queue identity of policy `p` (claimed and live, or parked for input),
-- counted no further than its cap: enough to say whether the cap is reached.
(SELECT count(*) FROM (SELECT 1 FROM todos f
                        WHERE f.queue = p.queue
                          AND (CASE WHEN p.team_id IS NULL THEN f.endpoint_id = p.endpoint_id
                                    ELSE f.team_id = p.team_id END)
                          AND (f.state = 'input-required' OR (f.state = 'claimed' AND f.lease_expires_at >= now()))
                        LIMIT p.max_in_flight) z)

-- name: held_back
-- Whether admission control holds the queue identity of todo `t` back now, as `admission_status`
-- judges it (`switchboard_admission_state`, migration 0029: paused, a limit of 0, the window's budget
-- spent, or the in-flight cap reached, leases counted no further than the cap). Unlocked: the
-- doorbell's hint for pushes (no push for a deferred queue), never a claim's verdict.
EXISTS (
    SELECT 1 FROM admission_policies p
     CROSS JOIN LATERAL (SELECT switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                                         p.window_weekday, now()) AS ws) w
     WHERE p.queue = t.queue AND (p.endpoint_id = t.endpoint_id OR p.team_id = t.team_id)
       AND switchboard_admission_state(
               p.paused, p.max_in_flight, p.max_claims_per_window, switchboard_admission_used(p.id, w.ws),
               {{policy_in_flight}}) <> 'open')

-- name: scope_todos
-- The todos of scope `s`: an endpoint's (`s.endpoint_id`) or a team's (`s.team_id`), the other id
-- null. A branch per kind, so that each is an index probe and no todo is compared with every scope.
(SELECT x.* FROM todos x WHERE x.endpoint_id = s.endpoint_id
 UNION ALL
 SELECT x.* FROM todos x WHERE x.team_id = s.team_id AND x.team_id IS NOT NULL)

-- name: managed_team
-- For a write on a team's behalf (admission.sql): the team %(team_id)s while %(human_id)s manages it,
-- its row read with the lock a foreign key to it takes (D66: a deletion in flight is waited for, then
-- nothing matches) and the membership row share-locked, so that a role change in flight is waited
-- for and its outcome read (PostgreSQL rechecks a row it had to wait to lock, not the rows joined to it).
SELECT tm.id FROM teams tm JOIN team_members m ON m.team_id = tm.id
 WHERE tm.id = %(team_id)s AND m.human_id = %(human_id)s AND {{manages}}
   FOR KEY SHARE OF tm FOR SHARE OF m

-- name: manages
-- Team membership `m` is a manager's: an owner or an admin (core/teams.py MANAGERS), who grants,
-- sets policies and runs the team's hooks, and whose sinks hear about its queues.
m.role IN ('owner', 'admin')
