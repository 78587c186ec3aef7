-- The statement-level trigger of created todos (0014, with 0018's `team_id`), cheaper per statement for a
-- bulk push (issue 17; docs/benchmarks.md "Bulk push"). What it sends and writes is unchanged:
-- - one `switchboard_ready` wake-up per (endpoint, team, queue) the statement inserted into, naming the
--   first todo inserted there, with `team_id` and `count`. The first todo was found by sorting every
--   inserted row by (endpoint, team, queue) for an `array_agg(… ORDER BY …)`; it is now the group's
--   smallest insertion number from a hash aggregate, joined back to its row. The wake-ups go out in
--   the order of each group's first todo.
-- - the `todo.created` and `todo.ready` outbox rows of every inserted todo for every enabled hook of its
--   endpoint that subscribes to them, in insertion order, created before ready, with the same bodies.
--   When no endpoint of the statement has an enabled hook (the common case) that INSERT … SELECT,
--   with its numbering of every inserted row, is skipped: one index probe of notify_hooks instead.
-- Measured with EXPLAIN ANALYZE on 1,000-row inserts: the trigger's time fell by about half.

CREATE OR REPLACE FUNCTION switchboard_todos_created() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    endpoint_ids uuid[] := '{}';
BEGIN
    -- row_number() OVER () numbers the transition table in the order the statement inserted.
    FOR r IN
        WITH n AS (
            SELECT c.id, c.endpoint_id, c.team_id, c.queue, row_number() OVER () AS rn FROM created_todos c
        ), g AS (
            SELECT n.endpoint_id, n.team_id, n.queue, count(*) AS n, min(n.rn) AS first_rn
              FROM n GROUP BY n.endpoint_id, n.team_id, n.queue
        )
        SELECT g.endpoint_id, g.team_id, g.queue, g.n, n.id AS first_id
          FROM g JOIN n ON n.rn = g.first_rn
         ORDER BY g.first_rn
    LOOP
        PERFORM pg_notify('switchboard_ready', json_build_object(
            'todo_id', r.first_id, 'endpoint_id', r.endpoint_id, 'team_id', r.team_id, 'queue', r.queue,
            'reason', 'created', 'count', r.n)::text);
        IF r.endpoint_id IS NOT NULL THEN
            endpoint_ids := endpoint_ids || r.endpoint_id;
        END IF;
    END LOOP;

    -- Team todos have no endpoint, so no endpoint's hooks fire for them (0018).
    IF NOT EXISTS (SELECT 1 FROM notify_hooks h WHERE h.endpoint_id = ANY (endpoint_ids) AND h.enabled) THEN
        RETURN NULL;
    END IF;

    INSERT INTO hook_outbox (hook_id, event, todo_id, body)
    SELECT h.id, ev.e ->> 'type', n.id,
           jsonb_build_object(
               'todo_id', n.id, 'queue', n.queue, 'kind', n.kind, 'source', n.source,
               'title', left(n.title, 200), 'endpoint', h.endpoint_slug,
               'attempt', n.attempt, 'attempts_total', n.attempts_total,
               'created_at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
           || ev.e
      FROM (SELECT c.*, row_number() OVER () AS rn FROM created_todos c) n
      JOIN notify_hooks h ON h.endpoint_id = n.endpoint_id AND h.enabled
      CROSS JOIN (VALUES (1, jsonb_build_object('type', 'todo.created')),
                         (2, jsonb_build_object('type', 'todo.ready', 'reason', 'created'))) AS ev(k, e)
     WHERE (ev.e ->> 'type') = ANY(h.events)
     ORDER BY n.rn, h.id, ev.k;
    RETURN NULL;
END
$$;
