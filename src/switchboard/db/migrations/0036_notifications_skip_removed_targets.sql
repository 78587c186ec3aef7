-- A transition's notifications skip a hook or sink that is being removed (docs/decisions.md D66).
--
-- The event triggers read a todo's enabled hooks (or sinks) and queue outbox rows for them. When a
-- human removed a hook while a transition of one of its todos ran, the transition's read saw the
-- hook, its outbox insert's foreign-key check waited for the removal, and when the removal committed
-- the check failed (23503): the claim, complete or fail itself was rolled back and answered as an
-- internal error, for a notification nobody would receive.
--
-- The hooks (and sinks) an outbox row is queued for are now read FOR KEY SHARE, the lock the
-- foreign-key check takes anyway. A hook being removed makes that read wait; once the removal
-- commits the read skips it, and the transition commits without that hook's row. A hook the read
-- has locked cannot be removed until the transition commits, and then its rows go with it (ON DELETE
-- CASCADE), as any queued row does. Sinks are locked in id order, as several may be.
--
-- The three functions are the bodies of migrations 0032 (todo events, created events) and 0033 (the
-- sink dead-letter message) with the locks added; the triggers are unchanged.

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
         WHERE h.team_id = NEW.team_id AND h.enabled AND (ev ->> 'type') = ANY(h.events)
           FOR KEY SHARE OF h;
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
     ORDER BY n.rn, h.id, ev.k
       FOR KEY SHARE OF h;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION switchboard_sink_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    latest record;
    owners uuid[];  -- the humans whose own sinks hear about this todo
    slug   text;    -- the endpoint's slug (an endpoint todo)
    team   text;    -- the team's slug (a team todo)
    sinks  uuid[];  -- the sinks that get the message
BEGIN
    -- Two separate lookups rather than one with a null on either side, so that neither is planned
    -- for a null id (see migration 0024 for what that costs).
    IF NEW.team_id IS NULL THEN
        SELECT ARRAY[g.human_id], e.slug INTO owners, slug
          FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE e.id = NEW.endpoint_id;
        sinks := ARRAY(SELECT s.id FROM notification_sinks s
                        WHERE s.owner_human_id = ANY(owners) AND s.enabled AND 'dead_letter' = ANY(s.events)
                        ORDER BY s.id FOR KEY SHARE);
    ELSE
        SELECT tm.slug, ARRAY(SELECT m.human_id FROM team_members m
                               WHERE m.team_id = tm.id AND m.role IN ('owner', 'admin'))
          INTO team, owners
          FROM teams tm WHERE tm.id = NEW.team_id;
        -- The managers' own sinks and the team's (one owner each, so no sink twice), in one locking
        -- read: a lock cannot be taken through UNION ALL.
        sinks := ARRAY(SELECT s.id FROM notification_sinks s
                        WHERE (s.owner_human_id = ANY(owners) OR s.owner_team_id = NEW.team_id)
                          AND s.enabled AND 'dead_letter' = ANY(s.events)
                        ORDER BY s.id FOR KEY SHARE);
    END IF;
    IF cardinality(sinks) = 0 THEN
        RETURN NULL;
    END IF;
    SELECT a.seq, a.outcome, a.summary, a.artifact INTO latest
      FROM todo_attempts a WHERE a.todo_id = NEW.id ORDER BY a.seq DESC LIMIT 1;
    INSERT INTO sink_outbox (sink_id, event, dedup_key, body)
    SELECT s.id, 'dead_letter', 'dead_letter:' || NEW.id || ':' || NEW.attempts_total || ':' || NEW.attempt,
           jsonb_build_object(
               'todo_id', NEW.id, 'title', left(NEW.title, 200), 'queue', NEW.queue, 'endpoint', slug,
               'attempts_total', NEW.attempts_total,
               'reason', CASE WHEN NEW.result ->> 'error' = 'endpoint_revoked' THEN 'revoked'
                              ELSE coalesce(latest.outcome, 'failed') END,
               'last_outcome', latest.outcome, 'last_summary', left(latest.summary, 300),
               'at', to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
           || CASE WHEN NEW.team_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('team', team) END
      FROM unnest(sinks) AS s(id)
    ON CONFLICT (sink_id, dedup_key) DO NOTHING;
    RETURN NULL;
END
$$;
