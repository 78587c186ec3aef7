-- The transition trigger of todos (migration 0018's `switchboard_todo_events`) returns before it
-- looks for notify hooks when the todo is a team's (issue 13's team path; docs/benchmarks.md "Team
-- queues and admission"). Hooks belong to one endpoint each and a team todo has none, so the lookup
-- could never find one; what it cost was its plan. PL/pgSQL plans the lookup (`h.endpoint_id =
-- NEW.endpoint_id`) for each value: with a null endpoint the custom plan is a constant false, cheaper
-- than any generic plan, so PostgreSQL planned it afresh on every completion of a team todo (about
-- 2 % of PostgreSQL's CPU per team claim + complete, seen in a profile). Nothing else changes.

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

    -- A team todo has no endpoint, so no notify hook (each belongs to one endpoint) fires for it; so
    -- the lookup below never runs with a null endpoint (migration 0024).
    IF NEW.endpoint_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM notify_hooks h WHERE h.endpoint_id = NEW.endpoint_id AND h.enabled) THEN
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
