-- Admission control: policies per queue identity (migration 0017) and their charges, kept on the
-- policy's shard rows (migration 0021): a window's usage is the sum over the shards.

-- name: verdicts
-- First statement of a policed claim's transaction: locks the policies of %(queues)s that apply to the
-- endpoint %(endpoint_id)s (its own queues, and team labels) and their shards, and judges each exactly
-- (the function's own statements read after the locks; migrations 0017 and 0021). For claim_next
-- %(claimer_id)s is the calling endpoint: refused before any verdict is read once revoked or expired
-- (`endpoint_live`), and `reached` is false for a team queue it does not reach now (no grant, or its
-- human left the team): its claim finds nothing, and its verdict is not reported to it (a deferral
-- would tell it about a queue outside its reach: its backlog, its pause). A claim by id passes no claimer: the todo's reach
-- was checked before, and the claim statement checks the caller itself.
SELECT v.*,
       (%(claimer_id)s::uuid IS NULL OR NOT starts_with(v.queue, 'team:') OR EXISTS (
            SELECT 1 FROM team_grants g
              JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
             WHERE g.endpoint_id = %(claimer_id)s::uuid AND g.queue = v.queue)) AS reached
  FROM switchboard_admission_verdicts(%(endpoint_id)s::uuid, %(queues)s::text[]) v
 WHERE switchboard_endpoint_live(%(claimer_id)s::uuid)

-- name: admit
-- The fast path of a claim on ONE policed queue %(queue)s (migration 0020, `switchboard_admission_admit`):
-- judge its policy and, when it admits %(want)s claims, charge them in this statement (on a shard of the
-- policy while the usage leaves room for every shard holder, else with the policy and its shards
-- locked; migration 0021); a refusal is the error SQLSTATE SBA01, so the claim sent behind this
-- statement in the same pipeline does not run. The caller commits only when the claim took %(want)s
-- todos, charges back the difference when it took fewer, and rolls back when it took none
-- (core/todos.py). The claimer is refused first when no longer live, as in `verdicts`; the claim
-- checks its reach itself.
SELECT v.*, true AS reached
  FROM switchboard_admission_admit(%(endpoint_id)s::uuid, %(queue)s::text, %(want)s::int) v
 WHERE switchboard_endpoint_live(%(claimer_id)s::uuid)

-- name: claim_next_team_admitted
-- The fast path of claim_next on ONE policed team queue %(queue)s as ONE autocommit statement (no
-- BEGIN, no pipeline; docs/decisions.md D40, migration 0022):
--   1. `adm` calls `switchboard_admission_hold` (after `endpoint_live`, a One-Time Filter above it):
--      it locks a free shard of the policy (or the policy and its shards near a cap), judges with a
--      snapshot of its own taken after that lock, refuses with SQLSTATE SBA01 (the statement fails,
--      nothing changes; the caller judges again on the locked path, which reports why) and charges
--      nothing. No row: the queue has no policy, nothing to charge.
--   2. `t` claims at most the one todo admitted (`LIMIT 1`); its scan sits below a One-Time
--      Filter on `adm` (an InitPlan), so the admission runs before any todo or grant is read
--      (EXPLAIN: tests/test_admission_onestatement.py). The team reach is checked as in todos.sql
--      (`claim_next_team_one`): the grant and the endpoint share-locked, the endpoint live.
--   3. `charge` adds to the shard `adm` holds exactly the todos `t` took (0 or 1), in the policy's
--      window; the claim tail updates every row of `t` (each locked by `t`), so this is the claim.
--   `adm` is read three times and calls a VOLATILE function: PostgreSQL runs it once. The last row
--   (id null) is the verdict, in `closed_attempt`, for the claim's `admission` object. Kept under the
--   4,096 characters up to which psycopg caches a statement's parsing.
-- Snapshots: the statement's snapshot is taken before the shard lock. The claim is safe under READ
-- COMMITTED: FOR UPDATE SKIP LOCKED locks the latest version of a todo and rechecks it (a todo another
-- claimer took meanwhile is skipped); the verdict's counts come from the VOLATILE function's own later
-- snapshot; and `charge` updates a shard row this statement already locked: if another claim changed
-- it between our snapshot and our lock, the UPDATE follows its latest version (which our lock now
-- keeps) and adds to the latest count. Every committed claim is charged exactly once, in the
-- statement (and transaction) that claims it; the locks are held until it commits (migration 0021's
-- proof holds unchanged).
WITH adm AS ({{admitted_hold}}), t AS (
SELECT x.id, x.state AS prior_state, x.attempts_total AS prior_total FROM (
SELECT g.team_id, g.queue AS name FROM team_grants g JOIN team_members m USING (team_id, human_id)
JOIN endpoints e ON e.id = g.endpoint_id AND e.state = 'active'
WHERE g.endpoint_id = %(endpoint_id)s::uuid AND g.queue = %(queue)s FOR SHARE OF g, e
) q, LATERAL ({{claim_team_arms}}) x
WHERE (SELECT count(*) FROM adm) < 2
ORDER BY x.created_at LIMIT 1
){{admitted_charge}}

-- name: claim_next_own_admitted
-- claim_next_team_admitted on ONE policed queue %(queue)s of the calling endpoint (todos.sql
-- `claim_next_one`'s claim).
WITH adm AS ({{admitted_hold}}), t AS (
SELECT x.id, x.state AS prior_state, x.attempts_total AS prior_total
FROM (VALUES (%(queue)s::text)) AS q(name), LATERAL ({{claim_next_arms}}) x
WHERE (SELECT count(*) FROM adm) < 2
ORDER BY x.created_at LIMIT 1
){{admitted_charge}}

-- name: claim_next_team_group_admitted
-- todos.sql `claim_next_team_group` on a policed team queue, as claim_next_team_admitted is for one
-- call: `adm` holds a shard for %(max_todos)s claims (the calls of the group) and judges, refusing
-- with SBA01 (the calls then go alone); `items` sits below a One-Time Filter on it, so the admission
-- runs before any grant or todo is read; `charge` adds to the shard held exactly the todos `t` took.
-- The endpoint of %(endpoint_id)s only names the policy (a team's, whoever calls); each call's endpoint
-- is checked in `reach`. The last row (id null) is the verdict, as in claim_next_team_admitted, with
-- `take`: the most claims one such statement may ask of this policy (B), for the next group's size.
WITH adm AS (
    SELECT v.* FROM switchboard_admission_hold(%(endpoint_id)s::uuid, %(queue)s::text, %(max_todos)s::int) v
), items AS (
    SELECT * FROM {{team_group_items}} WHERE (SELECT count(*) FROM adm) < 2
){{team_group_search}}, charge AS (
    UPDATE admission_shards s
       SET charged = CASE WHEN charged_window = window_starts THEN charged + (SELECT count(*) FROM t)
                          WHEN charged_window > window_starts THEN charged ELSE (SELECT count(*) FROM t) END,
           charged_window = greatest(charged_window, window_starts)
      FROM adm a
     WHERE s.policy_id = a.policy_id AND s.shard = a.shard AND EXISTS (SELECT FROM t)
)
{{claim_group_tail}}
UNION ALL SELECT (NULL::todos).*, NULL, NULL, NULL,
       to_jsonb(a) || jsonb_build_object('take', switchboard_admission_stripe_take(a.max_in_flight,
                                                                                   a.max_claims_per_window)),
       NULL
  FROM adm a

-- name: stripe_take
-- B of the policy of the team queue %(queue)s (migration 0021): the most claims one fast-path statement
-- may ask of it; a fleet's group that asked for more was refused and asks at most this many next.
SELECT max(switchboard_admission_stripe_take(p.max_in_flight, p.max_claims_per_window)) AS take
  FROM admission_policies p WHERE p.queue = %(queue)s AND p.team_id IS NOT NULL

-- name: any_policy
-- Whether any of %(queues)s of the endpoint has a policy (after an unpoliced claim found nothing).
SELECT EXISTS (SELECT 1 FROM admission_policies p
                WHERE p.queue = ANY(%(queues)s::text[])
                  AND (p.endpoint_id = %(endpoint_id)s::uuid OR p.team_id IS NOT NULL)) AS policed

-- name: charge
-- Units charged to the shard %(shards)s of each policy (migration 0021), in the policy's current window
-- %(windows)s (a shard that still counts an earlier window starts this one at the units; one that
-- already counts a later window is left as it is: the charge belongs to a window that has ended). The
-- caller holds that shard: the locked path holds shard 0 of every policy it judged (`verdicts`), the
-- fast path the shard `admit` charged. After `admit` a negative %(ns)s gives back the units it charged
-- for claims the claim statement did not make (same transaction, same shard, same window).
UPDATE admission_shards s
   SET charged = CASE WHEN s.charged_window = c.ws THEN s.charged + c.n
                      WHEN s.charged_window > c.ws THEN s.charged
                      ELSE c.n END,
       charged_window = greatest(s.charged_window, c.ws)
  FROM unnest(%(ids)s::uuid[], %(shards)s::int[], %(ns)s::int[], %(windows)s::timestamptz[]) AS c(id, shard, n, ws)
 WHERE s.policy_id = c.id AND s.shard = c.shard

-- name: zone_known
-- PostgreSQL evaluates the windows, so a window's time zone must be one its own time zone database
-- knows; names Python's accepts and PostgreSQL's does not (`right/UTC`, `posix/...`, `localtime`)
-- fail here (SQLSTATE 22023) rather than in every later claim, read and ring of the queue.
SELECT now() AT TIME ZONE %(tz)s::text AS local

-- name: upsert_endpoint
-- Set the policy of an endpoint's queue (a new one, or new limits for an old one; its charges stay).
INSERT INTO admission_policies (endpoint_id, queue, max_in_flight, max_claims_per_window, window_period,
                                window_tz, window_start_minute, window_weekday, paused)
VALUES (%(endpoint_id)s, %(queue)s, %(max_in_flight)s, %(max_claims_per_window)s, %(period)s, %(tz)s,
        %(start_minute)s, %(weekday)s, coalesce(%(paused)s, false))
ON CONFLICT (endpoint_id, queue) WHERE endpoint_id IS NOT NULL
DO UPDATE SET max_in_flight = EXCLUDED.max_in_flight, max_claims_per_window = EXCLUDED.max_claims_per_window,
              window_period = EXCLUDED.window_period, window_tz = EXCLUDED.window_tz,
              window_start_minute = EXCLUDED.window_start_minute, window_weekday = EXCLUDED.window_weekday,
              paused = coalesce(%(paused)s, admission_policies.paused), updated_at = now()
RETURNING *

-- name: upsert_team
-- Written only while %(human_id)s manages the team (`manager`, fragments.sql managed_team): a deletion
-- of the team in flight is waited for and then nothing is written, where the insert's foreign-key
-- check used to fail (23503), and so is a change of the human's role. Nothing returned: the team is
-- gone, or no longer the human's to manage.
WITH manager AS ({{managed_team}})
INSERT INTO admission_policies (team_id, queue, max_in_flight, max_claims_per_window, window_period,
                                window_tz, window_start_minute, window_weekday, paused)
SELECT id, %(queue)s, %(max_in_flight)s, %(max_claims_per_window)s, %(period)s, %(tz)s,
       %(start_minute)s, %(weekday)s, coalesce(%(paused)s, false)
  FROM manager
ON CONFLICT (team_id, queue) WHERE team_id IS NOT NULL
DO UPDATE SET max_in_flight = EXCLUDED.max_in_flight, max_claims_per_window = EXCLUDED.max_claims_per_window,
              window_period = EXCLUDED.window_period, window_tz = EXCLUDED.window_tz,
              window_start_minute = EXCLUDED.window_start_minute, window_weekday = EXCLUDED.window_weekday,
              paused = coalesce(%(paused)s, admission_policies.paused), updated_at = now()
RETURNING *

-- name: set_paused_endpoint
-- Pause or resume an endpoint's queue; pausing a queue without a policy creates one that only pauses.
INSERT INTO admission_policies (endpoint_id, queue, paused) VALUES (%(endpoint_id)s, %(queue)s, %(paused)s)
ON CONFLICT (endpoint_id, queue) WHERE endpoint_id IS NOT NULL
DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
RETURNING *

-- name: set_paused_team
-- As upsert_team: only while %(human_id)s manages the team.
WITH manager AS ({{managed_team}})
INSERT INTO admission_policies (team_id, queue, paused) SELECT id, %(queue)s, %(paused)s FROM manager
ON CONFLICT (team_id, queue) WHERE team_id IS NOT NULL
DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
RETURNING *

-- name: clear
DELETE FROM admission_policies
 WHERE queue = %(queue)s AND (endpoint_id = %(endpoint_id)s::uuid OR team_id = %(team_id)s::uuid)
RETURNING id

-- name: status
-- The policies and usage of the given queue identities, unlocked (a read for people and agents):
-- `used` is the current window's charges summed over the policy's shards; `status` is the policy's
-- state now (`switchboard_admission_state`, migration 0029), the same judgement as the doorbell's.
SELECT s.*, switchboard_admission_state(s.paused, s.max_in_flight, s.max_claims_per_window, s.used, s.in_flight)
           AS status
  FROM (
    SELECT p.*, w.ws, switchboard_window_end(p.window_period, p.window_tz, w.ws) AS resets,
           switchboard_admission_used(p.id, w.ws) AS used,
           (SELECT count(*)::int FROM todos t
             WHERE t.queue = p.queue
               AND (CASE WHEN p.team_id IS NULL THEN t.endpoint_id = p.endpoint_id ELSE t.team_id = p.team_id END)
               AND (t.state = 'input-required' OR (t.state = 'claimed' AND t.lease_expires_at >= now())))
               AS in_flight,
           (SELECT count(*)::int FROM (SELECT 1 FROM todos t
             WHERE t.queue = p.queue
               AND (CASE WHEN p.team_id IS NULL THEN t.endpoint_id = p.endpoint_id ELSE t.team_id = p.team_id END)
               AND t.state = 'pending' LIMIT 100000) z) AS pending,
           e.slug AS endpoint_slug
      FROM admission_policies p
     CROSS JOIN LATERAL (SELECT switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                                         p.window_weekday, now()) AS ws) w
      LEFT JOIN endpoints e ON e.id = p.endpoint_id
     WHERE p.queue = ANY(%(queues)s::text[])
       AND (p.endpoint_id = ANY(%(endpoint_ids)s::uuid[]) OR p.team_id = ANY(%(team_ids)s::uuid[]))
       OFFSET 0) s
 ORDER BY s.queue, s.endpoint_slug

-- name: for_human
-- Every policy of the human's own endpoints and of their teams.
SELECT p.queue, p.endpoint_id, p.team_id FROM admission_policies p
  LEFT JOIN endpoints e ON e.id = p.endpoint_id
  LEFT JOIN agents g ON g.id = e.agent_id
 WHERE g.human_id = %(human_id)s
    OR EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = p.team_id AND m.human_id = %(human_id)s)

-- name: held_back
-- Which of the queue identities given as parallel arrays (%(endpoint_ids)s or %(team_ids)s, the other
-- null in each entry, and %(queues)s) admission control holds back now (the fragment held_back).
SELECT t.endpoint_id, t.team_id, t.queue
  FROM unnest(%(endpoint_ids)s::uuid[], %(team_ids)s::uuid[], %(queues)s::text[]) AS t(endpoint_id, team_id, queue)
 WHERE {{held_back}}
