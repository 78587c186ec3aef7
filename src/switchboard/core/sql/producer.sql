-- Producing todos in bulk (core/producer.py). Statements of one todo live in todos.sql.
--
-- Both statements take the items as one JSON array per column, zipped by position with ROWS FROM
-- (cheaper for the caller to build than an array of objects; a payload travels once, as the caller
-- serialised it to check it). A column whose items are all null may be sent as NULL: ROWS FROM pads
-- it. Rows are inserted in input order (the ordinality needs no sort), so the statement-level trigger
-- of migration 0014 (0019) names each queue's first item in its one wake-up. A created todo is not
-- read back: the caller knows every column it sent, the others are the table's defaults, and
-- `created_at` is the statement's now(), answered once.

-- name: create_batch
-- Up to 1,000 todos in one INSERT, some with idempotency keys (unique within one call: the caller
-- folds repeats onto their first item). An item whose key a live todo already holds inserts nothing
-- (the same partial unique index as `todos.create`). The first row answers how many were inserted and
-- now(); then one row per item that inserted nothing, by its place (`batch_ord`, from 1): with the
-- live todo holding its key, read from the statement's snapshot (payload included), or with a null id
-- when none is visible (a duplicate committed while this statement waited on it: the caller runs it
-- once more). When every item was inserted, that second part is not run at all.
-- Keyed batches of one endpoint take turns (`turn`, a transaction-level advisory lock on the
-- endpoint): each inserts its keys in input order, so two batches naming the same keys in different
-- orders would each insert one and wait for the other's (D66).
WITH turn AS (
    SELECT pg_advisory_xact_lock(%(turn_class)s::int, hashtext(%(endpoint_id)s::text))
), live AS (
    -- As in todos.create: only while the endpoint is live, its row share-locked until commit, so a
    -- revocation either waits for this batch and dead-letters it or commits first and nothing is made.
    SELECT e.id FROM endpoints e CROSS JOIN turn
     WHERE e.id = %(endpoint_id)s AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())
       FOR SHARE OF e
), made AS (
    INSERT INTO todos (id, endpoint_id, queue, source, kind, title, payload, idempotency_key, assignee,
                       max_attempts)
    SELECT i.id, %(endpoint_id)s, i.queue, %(source)s, i.kind, i.title, nullif(i.payload, 'null'), i.key,
           i.assignee, i.max_attempts::int
      FROM {{batch_items_keyed}}
     WHERE EXISTS (SELECT FROM live)
     ORDER BY i.ord
    ON CONFLICT (endpoint_id, idempotency_key)
       WHERE idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
         AND (state <> 'failed' OR next_retry_at IS NOT NULL)
    DO NOTHING
    RETURNING id
)
{{batch_head}}
UNION ALL
SELECT i.ord, NULL, t.created_at, t.id, t.endpoint_id, t.queue, t.source, t.kind, t.title, t.state, t.owner,
       t.assignee, t.attempt, t.max_attempts, t.lease_expires_at, t.next_retry_at, t.payload
  FROM ROWS FROM (jsonb_array_elements_text(%(ids)s::jsonb), jsonb_array_elements_text(%(keys)s::jsonb))
       WITH ORDINALITY AS i(id, key, ord)
  LEFT JOIN todos t ON t.endpoint_id = %(endpoint_id)s AND t.idempotency_key = i.key
                   AND t.state NOT IN ('done', 'canceled') AND (t.state <> 'failed' OR t.next_retry_at IS NOT NULL)
 WHERE (SELECT count(*) FROM made) < jsonb_array_length(%(ids)s::jsonb)
   AND NOT EXISTS (SELECT 1 FROM made m WHERE m.id = i.id)

-- name: create_batch_keyless
-- The same when no item has a key: a plain INSERT (no conflict arbiter, no duplicate lookup). Either
-- every item is inserted, or none is (the endpoint is not live). One row: how many, and now().
WITH live AS (
    SELECT e.id FROM endpoints e
     WHERE e.id = %(endpoint_id)s AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())
       FOR SHARE
), made AS (
    INSERT INTO todos (id, endpoint_id, queue, source, kind, title, payload, assignee, max_attempts)
    SELECT i.id, %(endpoint_id)s, i.queue, %(source)s, i.kind, i.title, nullif(i.payload, 'null'), i.assignee,
           i.max_attempts::int
      FROM {{batch_items}}
     WHERE EXISTS (SELECT FROM live)
     ORDER BY i.ord
    RETURNING 1
)
SELECT 0 AS batch_ord, count(*)::int AS batch_made, now() AS created_at FROM made

-- name: create_team_batch
-- create_batch on the queues of a team (each item's queue is a label of that team), pushed by a member:
-- inserts only while %(human_id)s is a member, the membership row share-locked until commit (a removal
-- waits for the batch or commits first and nothing is made), as `todos.create_team` does. Keys are the
-- team's (the same partial unique index as a single team push). Keyed batches of one team take turns,
-- as create_batch's of one endpoint do.
WITH turn AS (
    SELECT pg_advisory_xact_lock(%(turn_class)s::int, hashtext(%(team_id)s::text))
), live AS (
    SELECT m.team_id FROM team_members m CROSS JOIN turn
     WHERE m.team_id = %(team_id)s AND m.human_id = %(human_id)s
       FOR SHARE OF m
), made AS (
    INSERT INTO todos (id, team_id, queue, source, kind, title, payload, idempotency_key, assignee, max_attempts)
    SELECT i.id, %(team_id)s, i.queue, %(source)s, i.kind, i.title, nullif(i.payload, 'null'), i.key,
           i.assignee, i.max_attempts::int
      FROM {{batch_items_keyed}}
     WHERE EXISTS (SELECT FROM live)
     ORDER BY i.ord
    ON CONFLICT (team_id, idempotency_key)
       WHERE team_id IS NOT NULL AND idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
         AND (state <> 'failed' OR next_retry_at IS NOT NULL)
    DO NOTHING
    RETURNING id
)
{{batch_head}}
UNION ALL
SELECT i.ord, NULL, t.created_at, t.id, t.endpoint_id, t.queue, t.source, t.kind, t.title, t.state, t.owner,
       t.assignee, t.attempt, t.max_attempts, t.lease_expires_at, t.next_retry_at, t.payload
  FROM ROWS FROM (jsonb_array_elements_text(%(ids)s::jsonb), jsonb_array_elements_text(%(keys)s::jsonb))
       WITH ORDINALITY AS i(id, key, ord)
  LEFT JOIN todos t ON t.team_id = %(team_id)s AND t.idempotency_key = i.key
                   AND t.state NOT IN ('done', 'canceled') AND (t.state <> 'failed' OR t.next_retry_at IS NOT NULL)
 WHERE EXISTS (SELECT FROM live)
   AND (SELECT count(*) FROM made) < jsonb_array_length(%(ids)s::jsonb)
   AND NOT EXISTS (SELECT 1 FROM made m WHERE m.id = i.id)

-- name: create_team_batch_keyless
-- create_batch_keyless on the queues of a team, pushed by a member (the membership share-locked).
WITH live AS (
    SELECT m.team_id FROM team_members m
     WHERE m.team_id = %(team_id)s AND m.human_id = %(human_id)s
       FOR SHARE
), made AS (
    INSERT INTO todos (id, team_id, queue, source, kind, title, payload, assignee, max_attempts)
    SELECT i.id, %(team_id)s, i.queue, %(source)s, i.kind, i.title, nullif(i.payload, 'null'), i.assignee,
           i.max_attempts::int
      FROM {{batch_items}}
     WHERE EXISTS (SELECT FROM live)
     ORDER BY i.ord
    RETURNING 1
)
SELECT 0 AS batch_ord, count(*)::int AS batch_made, now() AS created_at FROM made
