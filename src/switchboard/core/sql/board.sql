-- Reads the Board needs beyond the todo and endpoint statements: aggregates over the signed-in
-- human's own endpoints (never across owners), and the owner of an endpoint for routing live frames.

-- name: attempt_outcomes
-- Closed attempts per endpoint, queue, UTC day and outcome since a moment, for the owning human only.
SELECT e.slug AS endpoint, todos.queue, date_trunc('day', a.ended_at, 'UTC')::date AS day,
       a.outcome, count(*)::int AS n
  FROM todo_attempts a
  JOIN todos ON todos.id = a.todo_id
  JOIN endpoints e ON e.id = todos.endpoint_id
  JOIN agents g ON g.id = e.agent_id
 WHERE g.human_id = %(human_id)s::uuid
   AND a.ended_at >= %(since)s::timestamptz
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
 GROUP BY e.slug, todos.queue, day, a.outcome
 ORDER BY e.slug, todos.queue, day

-- name: open_attempts
-- Attempts in progress per endpoint and queue, for the owning human only.
SELECT e.slug AS endpoint, todos.queue, count(*)::int AS n
  FROM todo_attempts a
  JOIN todos ON todos.id = a.todo_id
  JOIN endpoints e ON e.id = todos.endpoint_id
  JOIN agents g ON g.id = e.agent_id
 WHERE g.human_id = %(human_id)s::uuid AND a.ended_at IS NULL
   AND (%(slug)s::text IS NULL OR e.slug = %(slug)s::text)
 GROUP BY e.slug, todos.queue

-- name: endpoint_owner
-- The human who owns an endpoint (ownership never changes), to route a live frame to their streams.
SELECT g.human_id FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE e.id = %(endpoint_id)s::uuid
