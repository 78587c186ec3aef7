-- Team-owned notify hooks (docs/teams.md "Notify hooks"). Until now a hook belonged to one endpoint
-- and a team todo (no endpoint) fired none (migration 0024). A hook now belongs to one endpoint or to
-- one team, never both; a team's hooks get the events of the team's todos, whichever member's
-- endpoint claims them, and are managed by the team's owners and admins.
--
-- 1. `notify_hooks`: `team_id` (deleted with its team) and `team_slug` (the body's `team`, as
--    `endpoint_slug` is its `endpoint`; a team's slug never changes); `endpoint_id` and
--    `endpoint_slug` become nullable; exactly one owner, whose slug is set with it.
-- 2. `switchboard_todo_events()` (migration 0024's body; todo.ready on a release or requeue,
--    todo.completed, todo.dead_lettered): a team todo looks up its team's enabled hooks, in a branch
--    of its own so that neither lookup is planned for a null id, and queues the same events for
--    them; the body names the team (`endpoint` null, `team` the team's slug).
-- 3. `switchboard_todos_created()` (migration 0019's body; todo.created and todo.ready of inserted
--    todos, per statement): the team ids the statement inserted into are collected beside the
--    endpoint ids, and only when there are any are their teams' hooks looked up and their rows
--    queued, with the same team body.
-- An endpoint todo's path and body are unchanged in both. The triggers themselves are unchanged.

ALTER TABLE notify_hooks ALTER COLUMN endpoint_id DROP NOT NULL;
ALTER TABLE notify_hooks ALTER COLUMN endpoint_slug DROP NOT NULL;
ALTER TABLE notify_hooks ADD COLUMN team_id uuid REFERENCES teams(id) ON DELETE CASCADE;
ALTER TABLE notify_hooks ADD COLUMN team_slug text;
ALTER TABLE notify_hooks ADD CONSTRAINT notify_hooks_one_owner
    CHECK ((endpoint_id IS NULL) <> (team_id IS NULL)
           AND (endpoint_slug IS NULL) = (endpoint_id IS NULL)
           AND (team_slug IS NULL) = (team_id IS NULL));
CREATE INDEX notify_hooks_team ON notify_hooks (team_id);

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
    ELSIF NEW.state = 'done' THEN
        evs := jsonb_build_array(jsonb_build_object('type', 'todo.completed'));
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
               jsonb_build_object(
                   'todo_id', NEW.id, 'queue', NEW.queue, 'kind', NEW.kind, 'source', NEW.source,
                   'title', left(NEW.title, 200), 'endpoint', NULL, 'team', h.team_slug,
                   'attempt', NEW.attempt, 'attempts_total', NEW.attempts_total,
                   'created_at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
               || ev
          FROM notify_hooks h CROSS JOIN jsonb_array_elements(evs) AS ev
         WHERE h.team_id = NEW.team_id AND h.enabled AND (ev ->> 'type') = ANY(h.events);
        RETURN NULL;
    END IF;

    INSERT INTO hook_outbox (hook_id, event, todo_id, body)
    SELECT h.id, ev ->> 'type', NEW.id,
           jsonb_build_object(
               'todo_id', NEW.id, 'queue', NEW.queue, 'kind', NEW.kind, 'source', NEW.source,
               'title', left(NEW.title, 200), 'endpoint', h.endpoint_slug,
               'attempt', NEW.attempt, 'attempts_total', NEW.attempts_total,
               'created_at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
           || ev
      FROM notify_hooks h CROSS JOIN jsonb_array_elements(evs) AS ev
     WHERE h.endpoint_id = NEW.endpoint_id AND h.enabled AND (ev ->> 'type') = ANY(h.events);
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
                   jsonb_build_object(
                       'todo_id', n.id, 'queue', n.queue, 'kind', n.kind, 'source', n.source,
                       'title', left(n.title, 200), 'endpoint', NULL, 'team', h.team_slug,
                       'attempt', n.attempt, 'attempts_total', n.attempts_total,
                       'created_at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
                   || ev.e
              FROM (SELECT c.*, row_number() OVER () AS rn FROM created_todos c) n
              JOIN notify_hooks h ON h.team_id = n.team_id AND h.enabled
              CROSS JOIN (VALUES (1, jsonb_build_object('type', 'todo.created')),
                                 (2, jsonb_build_object('type', 'todo.ready', 'reason', 'created'))) AS ev(k, e)
             WHERE (ev.e ->> 'type') = ANY(h.events)
             ORDER BY n.rn, h.id, ev.k;
        END IF;
    END IF;

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
