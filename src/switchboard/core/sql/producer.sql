-- Producing todos in bulk (core/producer.py). Statements of one todo live in todos.sql.

-- name: create_batch
-- Up to 1,000 todos in one INSERT: the items arrive as one JSON array, each with its place (`ord`, from
-- 1). An item whose key a live todo already holds inserts nothing (the same partial unique index as
-- `todos.create`); its existing todo is read from the statement's snapshot and answered with
-- batch_created = false. An item found in neither arm (a duplicate committed while this statement
-- waited on it) is left out of the answer: the caller runs it once more. Keys are unique within one
-- call (the caller folds repeats onto their first item). Only the columns of the compact shape come
-- back, and the payload only for existing todos (the caller knows the size of what it sent). The
-- statement-level trigger of migration 0014 sends one wake-up per queue for the rows inserted here.
WITH live AS (
    -- As in todos.create: only while the endpoint is live, its row share-locked until commit, so a
    -- revocation either waits for this batch and dead-letters it or commits first and nothing is made.
    SELECT e.id FROM endpoints e
     WHERE e.id = %(endpoint_id)s AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())
       FOR SHARE
), input AS (
    SELECT *
      FROM jsonb_to_recordset(%(items)s::jsonb)
           AS i(ord int, id text, queue text, kind text, title text, payload jsonb, key text, assignee text,
                max_attempts int)
), made AS (
    INSERT INTO todos (id, endpoint_id, queue, source, kind, title, payload, idempotency_key, assignee,
                       max_attempts)
    SELECT i.id, live.id, i.queue, %(source)s, i.kind, i.title, i.payload, i.key, i.assignee,
           i.max_attempts
      FROM input i CROSS JOIN live
     ORDER BY i.ord
    ON CONFLICT (endpoint_id, idempotency_key)
       WHERE idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
         AND (state <> 'failed' OR next_retry_at IS NOT NULL)
    DO NOTHING
    RETURNING id, endpoint_id, queue, source, kind, title, state, owner, assignee, attempt, max_attempts,
              lease_expires_at, next_retry_at, created_at
)
SELECT i.ord AS batch_ord, true AS batch_created, m.*, NULL::jsonb AS payload
  FROM input i JOIN made m ON m.id = i.id
UNION ALL
SELECT i.ord, false, t.id, t.endpoint_id, t.queue, t.source, t.kind, t.title, t.state, t.owner, t.assignee,
       t.attempt, t.max_attempts, t.lease_expires_at, t.next_retry_at, t.created_at, t.payload
  FROM input i
  JOIN todos t ON t.endpoint_id = %(endpoint_id)s AND t.idempotency_key = i.key
              AND t.state NOT IN ('done', 'canceled') AND (t.state <> 'failed' OR t.next_retry_at IS NOT NULL)
 WHERE i.key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM made m WHERE m.id = i.id)
