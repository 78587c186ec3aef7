-- Notification sinks: chat webhooks (Slack, Discord, Microsoft Teams, generic JSON) that hear about
-- dead letters, stuck queues and a daily digest, delivered from a durable outbox (docs/notifications.md).
--
-- A sink is owned by one human today. Teams do not exist yet: when they do, a sink gets an
-- `owner_team_id` beside `owner_human_id` and the CHECK below becomes "exactly one of the two".
-- Dead-letter rows are written by a trigger in the dead-lettering transaction itself; stuck and
-- digest rows by the sweep tick.

CREATE TABLE notification_sinks (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner_human_id       uuid REFERENCES humans(id) ON DELETE CASCADE,
    name                 text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    kind                 text NOT NULL CHECK (kind IN ('slack', 'discord', 'teams', 'generic')),
    url                  text NOT NULL CHECK (octet_length(url) BETWEEN 1 AND 2048),
    events               text[] NOT NULL CHECK (
                             cardinality(events) >= 1
                             AND events <@ ARRAY['dead_letter', 'queue_stuck', 'digest']::text[]),
    stuck_minutes        int NOT NULL DEFAULT 30 CHECK (stuck_minutes BETWEEN 1 AND 10080),
    digest_hour          int NOT NULL DEFAULT 9 CHECK (digest_hour BETWEEN 0 AND 23),
    digest_timezone      text NOT NULL DEFAULT 'UTC' CHECK (length(digest_timezone) BETWEEN 1 AND 64),
    digest_last_on       date,  -- the local date of the last digest queued
    enabled              boolean NOT NULL DEFAULT true,
    created_at           timestamptz NOT NULL DEFAULT now(),
    last_attempt_at      timestamptz,
    last_status          text,
    last_error           text CHECK (octet_length(last_error) <= 256),
    consecutive_failures int NOT NULL DEFAULT 0,
    disabled_reason      text,
    disabled_at          timestamptz,
    CONSTRAINT sink_has_an_owner CHECK (owner_human_id IS NOT NULL)
);
CREATE INDEX notification_sinks_owner ON notification_sinks (owner_human_id);

-- The queues a sink has reported stuck and that have not recovered yet (one message per episode).
CREATE TABLE sink_stuck_queues (
    sink_id     uuid NOT NULL REFERENCES notification_sinks(id) ON DELETE CASCADE,
    endpoint_id uuid NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    queue       text NOT NULL,
    since       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink_id, endpoint_id, queue)
);

-- One message for one sink. `body` holds the facts; the message is rendered per kind when sent.
-- `dedup_key` keeps a second process (or a second trigger firing) from queueing it twice.
CREATE TABLE sink_outbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sink_id          uuid NOT NULL REFERENCES notification_sinks(id) ON DELETE CASCADE,
    event            text NOT NULL CHECK (event IN ('dead_letter', 'queue_stuck', 'digest')),
    dedup_key        text NOT NULL,
    body             jsonb NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         int NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    locked_until     timestamptz,
    finished_at      timestamptz,
    last_status_code int,
    last_result      text,
    last_error       text CHECK (octet_length(last_error) <= 256),
    UNIQUE (sink_id, dedup_key)
);
CREATE INDEX sink_outbox_due ON sink_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX sink_outbox_sink ON sink_outbox (sink_id, id DESC);
CREATE INDEX sink_outbox_finished ON sink_outbox (finished_at) WHERE state <> 'pending';

-- A dead letter queues one message per enabled sink of the endpoint's owner subscribed to it, in
-- the transaction that dead-lettered the todo. The facts: the todo, its queue and endpoint, and its
-- latest attempt's outcome and summary (rendered as inert text per chat kind when sent).
CREATE FUNCTION switchboard_sink_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    latest record;
    owner  uuid;
    slug   text;
BEGIN
    SELECT g.human_id, e.slug INTO owner, slug
      FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE e.id = NEW.endpoint_id;
    IF NOT EXISTS (SELECT 1 FROM notification_sinks s
                    WHERE s.owner_human_id = owner AND s.enabled AND 'dead_letter' = ANY(s.events)) THEN
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
      FROM notification_sinks s
     WHERE s.owner_human_id = owner AND s.enabled AND 'dead_letter' = ANY(s.events)
    ON CONFLICT (sink_id, dedup_key) DO NOTHING;
    RETURN NULL;
END
$$;

-- The same condition as the notify hooks' dead-letter branch (migration 0003): the todo is failed
-- with no retry scheduled and was not a dead letter before this statement.
CREATE TRIGGER todos_sink_dead_letter AFTER UPDATE OF state, next_retry_at ON todos
    FOR EACH ROW
    WHEN (NEW.state = 'failed' AND NEW.next_retry_at IS NULL
          AND (OLD.state <> 'failed' OR OLD.next_retry_at IS NOT NULL))
    EXECUTE FUNCTION switchboard_sink_dead_letter();
