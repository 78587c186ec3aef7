-- A completion's todo.completed rows are queued by the completing statement, not by a row trigger
-- (docs/decisions.md D67).
--
-- `todos_transition_events` ran switchboard_todo_events() for every todo a statement completed: an
-- after-trigger event per row, a PL/pgSQL call and a lookup of the todo's hooks, which nearly always
-- found none. Measured on a batched claim + complete cycle, that was about 9 of 76 microseconds of
-- PostgreSQL CPU per todo at one worker (docs/benchmarks.md, "Completions without a row trigger").
-- Only two statements complete a todo (todos.sql `complete`, and fragments.sql `complete_each` under
-- complete_batch and complete_fleet); each now queues todo.completed for the enabled hooks of the
-- todos it completed, in CTEs of its own (fragments.sql `completed_hooks`), set-wise.
--
-- 1. `switchboard_hook_body(...)`: a hook's body for one todo and one event, in one place for the
--    triggers and the statements: the todo's fields, the hook's endpoint slug (an endpoint's hook) or
--    its team's slug (a team's hook, `endpoint` null), the time it was queued, and the event's own
--    fields. The same bodies as migrations 0032 and 0036 built inline.
-- 2. `switchboard_todo_events()` and `switchboard_todos_created()`: 0036's bodies, through that
--    function; the first no longer has a branch for `done`.
-- 3. `todos_transition_events` no longer fires on a todo becoming done; it still fires on a todo
--    becoming claimable again and on a dead letter.

CREATE FUNCTION switchboard_hook_body(todo_id text, queue text, kind text, source text, title text, attempt int,
                                      attempts_total int, endpoint_slug text, team_slug text, ev jsonb)
RETURNS jsonb LANGUAGE sql VOLATILE AS $$
    SELECT jsonb_build_object(
               'todo_id', todo_id, 'queue', queue, 'kind', kind, 'source', source, 'title', left(title, 200),
               'endpoint', endpoint_slug, 'attempt', attempt, 'attempts_total', attempts_total,
               'created_at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
           || CASE WHEN team_slug IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('team', team_slug) END
           || ev
$$;

CREATE OR REPLACE FUNCTION switchboard_todo_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    reason  text;      -- why the todo is claimable now: created | released | requeued
    evs     jsonb;     -- the hook events of this transition: [{type, extra fields}]
    closing record;
    final   jsonb := 'null'::jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        reason := 'created';
    ELSIF NEW.state = 'pending' THEN
        IF OLD.state = 'claimed' AND EXISTS (
               SELECT 1 FROM todo_attempts a
                WHERE a.todo_id = NEW.id AND a.seq = NEW.attempts_total AND a.outcome = 'released') THEN
            reason := 'released';
        ELSE
            reason := 'requeued';  -- reaper below the cap, retry scheduler, manual retry
        END IF;
    END IF;

    IF reason IS NOT NULL THEN
        PERFORM pg_notify('switchboard_ready', json_build_object(
            'todo_id', NEW.id, 'endpoint_id', NEW.endpoint_id, 'team_id', NEW.team_id, 'queue', NEW.queue,
            'reason', reason)::text);
    END IF;

    -- A team todo's hooks are the team's, an endpoint todo's the endpoint's: two lookups in branches
    -- of their own, so that neither is planned for a null id (migration 0024).
    IF NEW.endpoint_id IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM notify_hooks h WHERE h.team_id = NEW.team_id AND h.enabled) THEN
            RETURN NULL;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM notify_hooks h WHERE h.endpoint_id = NEW.endpoint_id AND h.enabled) THEN
        RETURN NULL;
    END IF;

    IF TG_OP = 'INSERT' THEN
        evs := jsonb_build_array(jsonb_build_object('type', 'todo.created'),
                                 jsonb_build_object('type', 'todo.ready', 'reason', 'created'));
    ELSIF reason IS NOT NULL THEN
        evs := jsonb_build_array(jsonb_build_object('type', 'todo.ready', 'reason', reason));
    ELSIF NEW.state = 'failed' AND NEW.next_retry_at IS NULL THEN
        -- A dead letter (SPEC-0034 REQ-15): the attempt this transaction closed as dead_lettered.
        SELECT a.seq, a.outcome, a.summary, a.summary_truncated, a.artifact INTO closing
          FROM todo_attempts a
         WHERE a.todo_id = NEW.id AND a.seq = NEW.attempts_total
           AND a.disposition = 'dead_lettered' AND a.ended_at = now();
        IF FOUND THEN
            final := jsonb_build_object(
                'seq', closing.seq, 'outcome', closing.outcome,
                'died', closing.outcome IN ('lease_expired', 'reaped'),
                'summary', closing.summary, 'summary_truncated', closing.summary_truncated,
                'artifact', closing.artifact, 'attempts_total', NEW.attempts_total);
        END IF;
        evs := jsonb_build_array(jsonb_build_object(
            'type', 'todo.dead_lettered',
            'reason', CASE WHEN NEW.result ->> 'error' = 'endpoint_revoked' THEN 'revoked'
                           WHEN closing.outcome IS NOT NULL THEN closing.outcome
                           ELSE 'failed' END,
            'final_attempt', final));
    ELSE
        RETURN NULL;
    END IF;

    IF NEW.endpoint_id IS NULL THEN
        -- A team's hook: the body names the team (`endpoint` null); `queue` is the team queue's label.
        INSERT INTO hook_outbox (hook_id, event, todo_id, body)
        SELECT h.id, ev ->> 'type', NEW.id,
               switchboard_hook_body(NEW.id, NEW.queue, NEW.kind, NEW.source, NEW.title, NEW.attempt,
                                     NEW.attempts_total, NULL, h.team_slug, ev)
          FROM notify_hooks h CROSS JOIN jsonb_array_elements(evs) AS ev
         WHERE h.team_id = NEW.team_id AND h.enabled AND (ev ->> 'type') = ANY(h.events)
           FOR KEY SHARE OF h;
        RETURN NULL;
    END IF;

    INSERT INTO hook_outbox (hook_id, event, todo_id, body)
    SELECT h.id, ev ->> 'type', NEW.id,
           switchboard_hook_body(NEW.id, NEW.queue, NEW.kind, NEW.source, NEW.title, NEW.attempt,
                                 NEW.attempts_total, h.endpoint_slug, NULL, ev)
      FROM notify_hooks h CROSS JOIN jsonb_array_elements(evs) AS ev
     WHERE h.endpoint_id = NEW.endpoint_id AND h.enabled AND (ev ->> 'type') = ANY(h.events)
       FOR KEY SHARE OF h;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION switchboard_todos_created() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
    endpoint_ids uuid[] := '{}';
    team_ids     uuid[] := '{}';
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
        ELSE
            team_ids := team_ids || r.team_id;
        END IF;
    END LOOP;

    -- A team's hooks get its todos' events (0032), looked up only when the statement inserted team
    -- todos: a statement of endpoint todos does what it did before.
    IF cardinality(team_ids) > 0 THEN
        IF EXISTS (SELECT 1 FROM notify_hooks h WHERE h.team_id = ANY (team_ids) AND h.enabled) THEN
            INSERT INTO hook_outbox (hook_id, event, todo_id, body)
            SELECT h.id, ev.e ->> 'type', n.id,
                   switchboard_hook_body(n.id, n.queue, n.kind, n.source, n.title, n.attempt, n.attempts_total,
                                         NULL, h.team_slug, ev.e)
              FROM (SELECT c.*, row_number() OVER () AS rn FROM created_todos c) n
              JOIN notify_hooks h ON h.team_id = n.team_id AND h.enabled
              CROSS JOIN (VALUES (1, jsonb_build_object('type', 'todo.created')),
                                 (2, jsonb_build_object('type', 'todo.ready', 'reason', 'created'))) AS ev(k, e)
             WHERE (ev.e ->> 'type') = ANY(h.events)
             ORDER BY n.rn, h.id, ev.k
               FOR KEY SHARE OF h;
        END IF;
    END IF;

    -- Team todos have no endpoint, so no endpoint's hooks fire for them (0018).
    IF NOT EXISTS (SELECT 1 FROM notify_hooks h WHERE h.endpoint_id = ANY (endpoint_ids) AND h.enabled) THEN
        RETURN NULL;
    END IF;

    INSERT INTO hook_outbox (hook_id, event, todo_id, body)
    SELECT h.id, ev.e ->> 'type', n.id,
           switchboard_hook_body(n.id, n.queue, n.kind, n.source, n.title, n.attempt, n.attempts_total,
                                 h.endpoint_slug, NULL, ev.e)
      FROM (SELECT c.*, row_number() OVER () AS rn FROM created_todos c) n
      JOIN notify_hooks h ON h.endpoint_id = n.endpoint_id AND h.enabled
      CROSS JOIN (VALUES (1, jsonb_build_object('type', 'todo.created')),
                         (2, jsonb_build_object('type', 'todo.ready', 'reason', 'created'))) AS ev(k, e)
     WHERE (ev.e ->> 'type') = ANY(h.events)
     ORDER BY n.rn, h.id, ev.k
       FOR KEY SHARE OF h;
    RETURN NULL;
END
$$;

-- Only transitions that make a todo claimable again or a dead letter call the function now (0003's
-- condition without `done`); claims, heartbeats, completions and parked retries never do.
DROP TRIGGER todos_transition_events ON todos;
CREATE TRIGGER todos_transition_events AFTER UPDATE OF state, next_retry_at ON todos
    FOR EACH ROW
    WHEN ((OLD.state IS DISTINCT FROM NEW.state AND NEW.state = 'pending')
          OR (NEW.state = 'failed' AND NEW.next_retry_at IS NULL
              AND (OLD.state <> 'failed' OR OLD.next_retry_at IS NOT NULL)))
    EXECUTE FUNCTION switchboard_todo_events();
