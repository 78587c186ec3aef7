-- Background sweeps (SYSTEM.md section 11). System-wide, no caller scope; they read nothing out.

-- name: reap
-- Lapsed leases: below the cap back to pending, at the cap a dead letter. The open attempt closes
-- `reaped` in the same statement (REQ-3, REQ-4).
WITH t AS (
    SELECT id, attempts_total, attempt, max_attempts FROM todos
     WHERE state = 'claimed' AND lease_expires_at < now()
     ORDER BY lease_expires_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
), a AS (
    UPDATE todo_attempts a
       SET ended_at = now(), outcome = 'reaped',
           disposition = CASE WHEN t.attempt < t.max_attempts THEN 'requeued' ELSE 'dead_lettered' END
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = CASE WHEN x.attempt < x.max_attempts THEN 'pending' ELSE 'failed' END,
           owner = NULL, lease_expires_at = NULL, next_retry_at = NULL, updated_at = now(),
           last_ringed_at = NULL, ring_attempts = 0
      FROM t
     WHERE x.id = t.id
    RETURNING x.*
)
SELECT u.*, (SELECT to_jsonb(a) FROM a WHERE a.todo_id = u.id) AS closed_attempt FROM u

-- name: requeue_due
-- Parked retries whose backoff elapsed go back to pending. No attempt opens or closes (REQ-3).
UPDATE todos x
   SET state = 'pending', owner = NULL, lease_expires_at = NULL, next_retry_at = NULL,
       updated_at = now(), last_ringed_at = NULL, ring_attempts = 0
 WHERE x.id IN (SELECT id FROM todos
                 WHERE state = 'failed' AND next_retry_at IS NOT NULL AND next_retry_at <= now()
                 ORDER BY next_retry_at
                 LIMIT %(batch)s
                   FOR UPDATE SKIP LOCKED)
RETURNING x.*

-- name: expired_endpoints
SELECT id FROM endpoints WHERE state = 'active' AND expires_at IS NOT NULL AND expires_at <= now()

-- name: retention_by_age
-- Terminal todos (done, canceled, dead letters) older than the age bound. Attempts go by cascade.
DELETE FROM todos
 WHERE id IN (SELECT id FROM todos
               WHERE (state IN ('done', 'canceled') OR (state = 'failed' AND next_retry_at IS NULL))
                 AND updated_at < now() - make_interval(days => %(max_age_days)s)
               LIMIT %(batch)s)

-- name: retention_by_rows
-- Beyond the newest `max_rows` terminal todos, the oldest go. Never a live todo.
DELETE FROM todos
 WHERE id IN (SELECT id FROM todos
               WHERE (state IN ('done', 'canceled') OR (state = 'failed' AND next_retry_at IS NULL))
               ORDER BY updated_at DESC
              OFFSET %(max_rows)s
               LIMIT %(batch)s)

-- name: try_lock
SELECT pg_try_advisory_xact_lock(%(key)s) AS locked
