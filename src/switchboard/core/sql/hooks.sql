-- Notify hooks: subscriptions of one endpoint or of one team (migration 0032), the outbox the
-- transition trigger fills (migrations 0003 and 0032) and the delivery log.

-- name: lock_endpoint
SELECT id FROM endpoints WHERE id = %(endpoint_id)s AND state = 'active' FOR UPDATE

-- name: count_for_endpoint
SELECT count(*)::int AS n FROM notify_hooks WHERE endpoint_id = %(endpoint_id)s

-- name: lock_team
-- The team's row, locked while the human still manages it (an owner or admin): concurrent adds to
-- one team are serialised, so its ceiling holds under races.
SELECT tm.id FROM teams tm JOIN team_members m ON m.team_id = tm.id
 WHERE tm.id = %(team_id)s AND m.human_id = %(human_id)s AND {{manages}}
   FOR UPDATE OF tm

-- name: count_for_team
SELECT count(*)::int AS n FROM notify_hooks WHERE team_id = %(team_id)s

-- name: insert
-- An endpoint's hook (endpoint_id and its slug) or a team's (team_id and its slug); the other pair null.
INSERT INTO notify_hooks (endpoint_id, endpoint_slug, team_id, team_slug, url, events, secret, created_by)
VALUES (%(endpoint_id)s, %(endpoint_slug)s, %(team_id)s, %(team_slug)s, %(url)s, %(events)s, %(secret)s,
        %(human_id)s)
RETURNING *

-- name: for_endpoint
SELECT * FROM notify_hooks WHERE endpoint_id = %(endpoint_id)s ORDER BY created_at, id

-- name: for_team
SELECT * FROM notify_hooks WHERE team_id = %(team_id)s ORDER BY created_at, id

-- name: visible_to_human
-- The hooks a human sees (only hook %(id)s when given): those of the human's endpoints, which the
-- human manages, and those of every team the human belongs to, which its owners and admins manage
-- (`manage`). Anything else is not there: another human's hook reads like an unknown id.
SELECT h.*, true AS manage
  FROM notify_hooks h
  JOIN endpoints e ON e.id = h.endpoint_id
  JOIN agents g ON g.id = e.agent_id
 WHERE g.human_id = %(human_id)s AND (%(id)s::uuid IS NULL OR h.id = %(id)s::uuid)
UNION ALL
SELECT h.*, {{manages}} AS manage
  FROM notify_hooks h
  JOIN team_members m ON m.team_id = h.team_id
 WHERE m.human_id = %(human_id)s AND (%(id)s::uuid IS NULL OR h.id = %(id)s::uuid)
 ORDER BY created_at, id

-- name: remove_for_human
-- Only a hook of one of the human's endpoints (and of the named endpoint when a slug is given);
-- anything else matches nothing (not_found).
DELETE FROM notify_hooks h
 USING endpoints e, agents g
 WHERE h.id = %(id)s AND e.id = h.endpoint_id AND g.id = e.agent_id AND g.human_id = %(human_id)s
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
RETURNING h.*

-- name: enable_for_human
-- Re-enable a hook of one of the human's endpoints; anything else matches nothing (not_found).
UPDATE notify_hooks h
   SET enabled = true, consecutive_failures = 0, disabled_reason = NULL, disabled_at = NULL
  FROM endpoints e, agents g
 WHERE h.id = %(id)s AND e.id = h.endpoint_id AND g.id = e.agent_id AND g.human_id = %(human_id)s
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
RETURNING h.*

-- name: remove_for_team
-- Only a hook of that team, and only while the human manages the team (an owner or admin); anything
-- else matches nothing (not_found).
DELETE FROM notify_hooks h
 USING team_members m
 WHERE h.id = %(id)s AND h.team_id = %(team_id)s
   AND m.team_id = h.team_id AND m.human_id = %(human_id)s AND {{manages}}
RETURNING h.*

-- name: enable_for_team
-- Re-enable a hook of that team while the human manages it; anything else matches nothing (not_found).
UPDATE notify_hooks h
   SET enabled = true, consecutive_failures = 0, disabled_reason = NULL, disabled_at = NULL
  FROM team_members m
 WHERE h.id = %(id)s AND h.team_id = %(team_id)s
   AND m.team_id = h.team_id AND m.human_id = %(human_id)s AND {{manages}}
RETURNING h.*

-- name: deliveries_for_human
-- The delivery log: the newest notifications of the human's hooks with their latest attempt.
SELECT o.id, o.message_id, o.hook_id, o.event, o.todo_id, o.state, o.attempts, o.created_at,
       o.next_attempt_at, o.finished_at, h.url, h.endpoint_slug,
       d.started_at AS last_attempt_at, d.status_code AS last_status_code, d.result AS last_result,
       d.error AS last_error, d.duration_ms AS last_duration_ms
  FROM hook_outbox o
  JOIN notify_hooks h ON h.id = o.hook_id
  JOIN endpoints e ON e.id = h.endpoint_id
  JOIN agents g ON g.id = e.agent_id
  LEFT JOIN LATERAL (SELECT * FROM hook_deliveries x WHERE x.outbox_id = o.id
                      ORDER BY x.attempt DESC LIMIT 1) d ON true
 WHERE g.human_id = %(human_id)s
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
   AND (%(hook_id)s::uuid IS NULL OR o.hook_id = %(hook_id)s::uuid)
 ORDER BY o.id DESC
 LIMIT %(limit)s

-- name: deliveries_for_team
-- The delivery log of a team's hooks (membership is checked by the caller): as deliveries_for_human.
SELECT o.id, o.message_id, o.hook_id, o.event, o.todo_id, o.state, o.attempts, o.created_at,
       o.next_attempt_at, o.finished_at, h.url, h.endpoint_slug, h.team_slug,
       d.started_at AS last_attempt_at, d.status_code AS last_status_code, d.result AS last_result,
       d.error AS last_error, d.duration_ms AS last_duration_ms
  FROM hook_outbox o
  JOIN notify_hooks h ON h.id = o.hook_id
  LEFT JOIN LATERAL (SELECT * FROM hook_deliveries x WHERE x.outbox_id = o.id
                      ORDER BY x.attempt DESC LIMIT 1) d ON true
 WHERE h.team_id = %(team_id)s
   AND (%(hook_id)s::uuid IS NULL OR o.hook_id = %(hook_id)s::uuid)
 ORDER BY o.id DESC
 LIMIT %(limit)s

-- name: attempts_for_outbox
SELECT attempt, started_at, duration_ms, status_code, result, error
  FROM hook_deliveries WHERE outbox_id = %(outbox_id)s ORDER BY attempt

-- name: claim_due
-- The sender takes due notifications under a short lease (so a crashed sender's rows come back),
-- at most `per_hook` per hook and none of the hooks it is still busy with. The locking scan repeats
-- the due conditions: READ COMMITTED rechecks only them on a row another sender took or settled
-- after this statement's snapshot (sinks.sql's claim_due says more).
WITH due AS (
    SELECT o.id, o.hook_id, o.next_attempt_at FROM hook_outbox o
     WHERE o.state = 'pending' AND o.next_attempt_at <= now()
       AND (o.locked_until IS NULL OR o.locked_until < now())
       AND NOT (o.hook_id = ANY(%(busy)s::uuid[]))
     ORDER BY o.next_attempt_at
     LIMIT 1000
), ranked AS (
    SELECT d.id, row_number() OVER (PARTITION BY d.hook_id ORDER BY d.next_attempt_at, d.id) AS rn
      FROM due d JOIN notify_hooks h ON h.id = d.hook_id AND h.enabled
), picked AS (
    SELECT o.id FROM hook_outbox o
     WHERE o.id IN (SELECT id FROM ranked WHERE rn <= %(per_hook)s)
       AND o.state = 'pending' AND o.next_attempt_at <= now()
       AND (o.locked_until IS NULL OR o.locked_until < now())
     ORDER BY o.next_attempt_at, o.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE hook_outbox o
   SET locked_until = now() + make_interval(secs => %(lease)s), attempts = o.attempts + 1
  FROM picked p, notify_hooks h
 WHERE o.id = p.id AND h.id = o.hook_id
RETURNING o.id, o.message_id, o.hook_id, o.event, o.todo_id, o.body, o.attempts, h.url, h.secret

-- name: record_attempt
-- One attempt's outcome: the log row, the outbox row (delivered, failed, or due again later) and
-- the hook's health, in one statement. A hook removed meanwhile matches nothing. The hook's row is
-- locked before its outbox row, the order in which removing the hook (or its endpoint) locks them:
-- the cascade deletes the outbox rows after the hook. Taken the other way round, a removal during a
-- delivery deadlocked (tests/test_lock_order.py).
WITH h AS (
    SELECT h.id FROM notify_hooks h
     WHERE h.id = (SELECT o.hook_id FROM hook_outbox o WHERE o.id = %(outbox_id)s)
       FOR NO KEY UPDATE
), o AS (
    UPDATE hook_outbox o
       SET state = %(state)s, locked_until = NULL,
           next_attempt_at = now() + make_interval(secs => %(retry_in)s),
           finished_at = CASE WHEN %(state)s <> 'pending' THEN now() END
      FROM h
     WHERE o.id = %(outbox_id)s AND o.hook_id = h.id
    RETURNING o.id, o.hook_id
), d AS (
    INSERT INTO hook_deliveries (outbox_id, hook_id, attempt, started_at, duration_ms, status_code, result, error)
    SELECT o.id, o.hook_id, %(attempt)s, %(started_at)s, %(duration_ms)s, %(status_code)s, %(result)s, %(error)s
      FROM o
)
UPDATE notify_hooks h
   SET last_attempt_at = now(), last_status = coalesce(%(status_code)s::text, %(result)s),
       last_error = %(error)s,
       consecutive_failures = CASE WHEN %(state)s = 'delivered' THEN 0
                                   WHEN %(state)s = 'failed' THEN h.consecutive_failures + 1
                                   ELSE h.consecutive_failures END,
       enabled = h.enabled AND NOT (%(state)s = 'failed' AND h.consecutive_failures + 1 >= %(disable_after)s),
       disabled_reason = CASE WHEN h.enabled AND %(state)s = 'failed'
                                   AND h.consecutive_failures + 1 >= %(disable_after)s
                              THEN 'consecutive_failures' ELSE h.disabled_reason END,
       disabled_at = CASE WHEN h.enabled AND %(state)s = 'failed'
                               AND h.consecutive_failures + 1 >= %(disable_after)s
                          THEN now() ELSE h.disabled_at END
  FROM o
 WHERE h.id = o.hook_id
RETURNING h.enabled

-- name: fail_pending_of_disabled
UPDATE hook_outbox o SET state = 'failed', finished_at = now(), locked_until = NULL
  FROM notify_hooks h
 WHERE h.id = o.hook_id AND NOT h.enabled AND o.state = 'pending'

-- name: prune_finished
DELETE FROM hook_outbox
 WHERE id IN (SELECT id FROM hook_outbox
               WHERE state <> 'pending' AND finished_at < now() - make_interval(days => %(days)s)
               LIMIT 5000)

-- name: next_due_in
-- Seconds until the earliest pending notification is due (null when none).
SELECT extract(epoch FROM min(next_attempt_at) - now())::float AS seconds
  FROM hook_outbox WHERE state = 'pending'
