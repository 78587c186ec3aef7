-- The events of created todos, once per INSERT statement instead of once per row (bulk push,
-- docs/api.md "Push many todos"; docs/decisions.md, "Bulk push: one wake-up per queue").
--
-- Migration 0003's row trigger sent one `pg_notify('switchboard_ready', …)` per created todo; a
-- bulk push of 1,000 todos sent 1,000 notifications, each woke every process's listener, and each
-- paid its own outbox check. This statement-level trigger reads the statement's inserted rows from
-- its transition table and
-- - sends one wake-up per (endpoint, queue) the statement inserted into, naming the first todo
--   inserted there (the one the doorbell rings) and how many were inserted (`count`); the payload
--   keeps 0003's keys, so a one-row insert sends the same wake-up as before plus `"count": 1`;
-- - writes the `todo.created` and `todo.ready` outbox rows of every inserted todo for every enabled
--   hook subscribed to them in one INSERT … SELECT, in insertion order, created before ready, with
--   the same bodies as 0003.
-- Updates (released, re-queued, done, dead-lettered) keep 0003's row trigger.

CREATE FUNCTION switchboard_todos_created() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    -- row_number() OVER () numbers the transition table in the order the statement inserted.
    FOR r IN
        SELECT n.endpoint_id, n.queue, count(*) AS n, (array_agg(n.id ORDER BY n.rn))[1] AS first_id
          FROM (SELECT c.id, c.endpoint_id, c.queue, row_number() OVER () AS rn FROM created_todos c) n
         GROUP BY n.endpoint_id, n.queue
    LOOP
        PERFORM pg_notify('switchboard_ready', json_build_object(
            'todo_id', r.first_id, 'endpoint_id', r.endpoint_id, 'queue', r.queue,
            'reason', 'created', 'count', r.n)::text);
    END LOOP;

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

DROP TRIGGER todos_created_events ON todos;

CREATE TRIGGER todos_created_events AFTER INSERT ON todos
    REFERENCING NEW TABLE AS created_todos
    FOR EACH STATEMENT EXECUTE FUNCTION switchboard_todos_created();
