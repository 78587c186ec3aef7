-- Notification sinks owned by a team (docs/notifications.md "Team queues", docs/decisions.md D60).
--
-- Until now a sink belonged to one human, and a team's queues reached the sinks of its owners and
-- admins (migration 0030). A team that wants its dead letters, stuck queues and digest in one team
-- channel had no sink of its own: each manager's sink pointed at that channel posted its own copy,
-- and the channel went silent when those people left the team.
--
-- A sink now belongs to one human or to one team (a CHECK). A team's sink hears about that team's
-- queues only, whoever manages it; the managers' own sinks keep hearing about them as before.
--
-- 1. The owner column, its index, and the one-owner rule in place of `sink_has_an_owner`.
-- 2. The dead-letter trigger's function: a team todo's dead letter also queues one message per
--    enabled dead_letter sink of its team. An endpoint todo's path, the bodies and the dedup key are
--    unchanged; the trigger itself (`todos_sink_dead_letter`) stays.

ALTER TABLE notification_sinks ADD COLUMN owner_team_id uuid REFERENCES teams(id) ON DELETE CASCADE;
ALTER TABLE notification_sinks DROP CONSTRAINT sink_has_an_owner;
ALTER TABLE notification_sinks ADD CONSTRAINT sink_has_one_owner
    CHECK ((owner_human_id IS NULL) <> (owner_team_id IS NULL));
CREATE INDEX notification_sinks_team ON notification_sinks (owner_team_id) WHERE owner_team_id IS NOT NULL;

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
                        WHERE s.owner_human_id = ANY(owners) AND s.enabled AND 'dead_letter' = ANY(s.events));
    ELSE
        SELECT tm.slug, ARRAY(SELECT m.human_id FROM team_members m
                               WHERE m.team_id = tm.id AND m.role IN ('owner', 'admin'))
          INTO team, owners
          FROM teams tm WHERE tm.id = NEW.team_id;
        sinks := ARRAY(SELECT s.id FROM notification_sinks s
                        WHERE s.owner_human_id = ANY(owners) AND s.enabled AND 'dead_letter' = ANY(s.events)
                       UNION ALL
                       SELECT s.id FROM notification_sinks s
                        WHERE s.owner_team_id = NEW.team_id AND s.enabled AND 'dead_letter' = ANY(s.events));
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
