-- A team's queues report to notification sinks (docs/notifications.md "Team queues").
--
-- Until now a sink heard only about the queues of its human's own endpoints, and a team todo (no
-- endpoint) reached no sink at all. A team queue now reports to the sinks of the team's owners and
-- admins, as they are at the time of the event; a plain member's sinks do not get them, so that a
-- team whose members each point a sink at one team channel does not get a copy per member.
--
-- 1. The dead-letter trigger: a team todo's dead letter queues one message per enabled dead_letter
--    sink of each owner or admin of its team. The body is the endpoint todo's body with `endpoint`
--    null and `team` the team's slug (`queue` is already the label `team:<slug>/<queue>`); an
--    endpoint todo's body, and the dedup key of both, stay exactly as they were.
-- 2. The stuck queues a sink remembers: a row names an endpoint's queue or a team's, so the key
--    (sink, endpoint or team, queue) becomes a unique index over coalesce(endpoint_id, team_id). The
--    ids cannot meet in practice (random UUIDs), and even then the queues could not: a team queue's
--    label is never an endpoint's queue name (todos_team_queue). Rows from before keep their
--    episode: they name an endpoint, as they did.
--
-- The trigger itself (`todos_sink_dead_letter`, recreated by migration 0026) is unchanged: only its
-- function is replaced.

CREATE OR REPLACE FUNCTION switchboard_sink_dead_letter() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    latest record;
    owners uuid[];  -- the humans whose sinks hear about this todo
    slug   text;    -- the endpoint's slug (an endpoint todo)
    team   text;    -- the team's slug (a team todo)
BEGIN
    -- Two separate lookups rather than one with a null on either side, so that neither is planned
    -- for a null id (see migration 0024 for what that costs).
    IF NEW.team_id IS NULL THEN
        SELECT ARRAY[g.human_id], e.slug INTO owners, slug
          FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE e.id = NEW.endpoint_id;
    ELSE
        SELECT tm.slug, ARRAY(SELECT m.human_id FROM team_members m
                               WHERE m.team_id = tm.id AND m.role IN ('owner', 'admin'))
          INTO team, owners
          FROM teams tm WHERE tm.id = NEW.team_id;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM notification_sinks s
                    WHERE s.owner_human_id = ANY(owners) AND s.enabled AND 'dead_letter' = ANY(s.events)) THEN
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
      FROM notification_sinks s
     WHERE s.owner_human_id = ANY(owners) AND s.enabled AND 'dead_letter' = ANY(s.events)
    ON CONFLICT (sink_id, dedup_key) DO NOTHING;
    RETURN NULL;
END
$$;

ALTER TABLE sink_stuck_queues DROP CONSTRAINT sink_stuck_queues_pkey;
ALTER TABLE sink_stuck_queues ALTER COLUMN endpoint_id DROP NOT NULL;
ALTER TABLE sink_stuck_queues ADD COLUMN team_id uuid REFERENCES teams(id) ON DELETE CASCADE;
ALTER TABLE sink_stuck_queues ADD CONSTRAINT sink_stuck_queue_one_owner
    CHECK ((endpoint_id IS NULL) <> (team_id IS NULL));
CREATE UNIQUE INDEX sink_stuck_queues_key ON sink_stuck_queues (sink_id, coalesce(endpoint_id, team_id), queue);
