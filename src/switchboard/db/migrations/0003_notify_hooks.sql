-- Events that leave the process (SYSTEM.md section 10): the cross-process wake-up for ready todos
-- and notify hooks (per-endpoint outbound webhooks) with their durable outbox and delivery log.
--
-- One row trigger on `todos` does both, in the transaction of the transition that fired it
-- (docs/decisions.md D9): `pg_notify('switchboard_ready', …)` for a todo that became claimable
-- (delivered only at commit, so a rolled-back transition wakes nobody) and one `hook_outbox` row
-- per subscribed hook. The sender delivers the outbox after commit, however long that takes.

CREATE TABLE notify_hooks (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id          uuid NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    endpoint_slug        text NOT NULL,
    url                  text NOT NULL CHECK (octet_length(url) BETWEEN 1 AND 2048),
    events               text[] NOT NULL CHECK (
                             cardinality(events) >= 1
                             AND events <@ ARRAY['todo.created', 'todo.ready', 'todo.completed',
                                                 'todo.dead_lettered']::text[]),
    -- The Standard Webhooks signing secret (`whsec_…`). HMAC signing needs the key itself, so it is
    -- kept, never shown again after creation and never logged.
    secret               text NOT NULL CHECK (secret LIKE 'whsec\_%'),
    enabled              boolean NOT NULL DEFAULT true,
    created_by           uuid REFERENCES humans(id) ON DELETE SET NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    last_attempt_at      timestamptz,
    last_status          text,
    last_error           text CHECK (octet_length(last_error) <= 256),
    consecutive_failures int NOT NULL DEFAULT 0,
    disabled_reason      text,
    disabled_at          timestamptz
);
CREATE INDEX notify_hooks_endpoint ON notify_hooks (endpoint_id);

-- One notification for one hook. `message_id` is the `webhook-id` header, the same on every attempt.
CREATE TABLE hook_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id      text NOT NULL UNIQUE DEFAULT ('msg_' || replace(gen_random_uuid()::text, '-', '')),
    hook_id         uuid NOT NULL REFERENCES notify_hooks(id) ON DELETE CASCADE,
    event           text NOT NULL,
    todo_id         text NOT NULL,
    body            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        int NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_until    timestamptz,
    finished_at     timestamptz
);
CREATE INDEX hook_outbox_due ON hook_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX hook_outbox_hook ON hook_outbox (hook_id, id DESC);
CREATE INDEX hook_outbox_finished ON hook_outbox (finished_at) WHERE state <> 'pending';

-- Every delivery attempt, for the Board's delivery log and `switchboard hook deliveries`.
CREATE TABLE hook_deliveries (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id   bigint NOT NULL REFERENCES hook_outbox(id) ON DELETE CASCADE,
    hook_id     uuid NOT NULL REFERENCES notify_hooks(id) ON DELETE CASCADE,
    attempt     int NOT NULL CHECK (attempt >= 1),
    started_at  timestamptz NOT NULL,
    duration_ms int NOT NULL CHECK (duration_ms >= 0),
    status_code int,
    result      text NOT NULL CHECK (result IN ('2xx', '3xx', '4xx', '5xx', 'timeout', 'network', 'tls',
                                                'rejected_ssrf', 'invalid')),
    error       text CHECK (octet_length(error) <= 256)
);
CREATE INDEX hook_deliveries_outbox ON hook_deliveries (outbox_id, attempt);

-- The doorbell's re-ring scan: pending todos that may still be rung, by when they were last rung
-- (or became pending).
CREATE INDEX todos_rering ON todos (endpoint_id, (coalesce(last_ringed_at, updated_at)))
    WHERE state = 'pending' AND ring_attempts < 5;

-- The transition trigger. NEW is the todo after the transition; the attempt it closed (if any)
-- was written by the same statement and is visible here (AFTER triggers run at statement end).
CREATE FUNCTION switchboard_todo_events() RETURNS trigger LANGUAGE plpgsql AS $$
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
            'todo_id', NEW.id, 'endpoint_id', NEW.endpoint_id, 'queue', NEW.queue,
            'reason', reason)::text);
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

CREATE TRIGGER todos_created_events AFTER INSERT ON todos
    FOR EACH ROW EXECUTE FUNCTION switchboard_todo_events();

-- Only transitions that make a todo claimable, done or a dead letter call the function; claims,
-- heartbeats and parked retries never do. A parked retry dead-lettered by revocation stays `failed`
-- but loses its next_retry_at, hence the second condition.
CREATE TRIGGER todos_transition_events AFTER UPDATE OF state, next_retry_at ON todos
    FOR EACH ROW
    WHEN ((OLD.state IS DISTINCT FROM NEW.state AND NEW.state IN ('pending', 'done'))
          OR (NEW.state = 'failed' AND NEW.next_retry_at IS NULL
              AND (OLD.state <> 'failed' OR OLD.next_retry_at IS NOT NULL)))
    EXECUTE FUNCTION switchboard_todo_events();
