-- Teams and team queues (issue 13; SPEC-0033 facts in docs/teams.md).
--
-- A team has members with a role. A team queue is addressed `team:<slug>/<queue>` and that label is
-- stored as the todo's `queue`, so every surface shows the address agents use. A todo is owned by
-- exactly one endpoint or one team. An endpoint reaches a team queue when its scope names the label,
-- an owner or admin granted it (`team_grants`), and its human is still a member: the last two are
-- checked by the statements themselves on every call (core/sql/fragments.sql, `team_reach`).

CREATE TABLE teams (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug       text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,31}$'),
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE team_members (
    team_id  uuid NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    human_id uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    role     text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, human_id)
);
CREATE INDEX team_members_human ON team_members (human_id);

-- A team queue granted to one endpoint. `human_id` is the endpoint's human (fixed for its life), kept
-- here so that the reach check is two primary-key probes: the grant and the membership.
CREATE TABLE team_grants (
    endpoint_id uuid NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    queue       text NOT NULL,
    team_id     uuid NOT NULL REFERENCES teams(id) ON DELETE CASCADE,
    human_id    uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    granted_by  uuid REFERENCES humans(id) ON DELETE SET NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, queue)
);
CREATE INDEX team_grants_team ON team_grants (team_id, queue);

ALTER TABLE todos ALTER COLUMN endpoint_id DROP NOT NULL;
ALTER TABLE todos ADD COLUMN team_id uuid REFERENCES teams(id) ON DELETE CASCADE;
-- The endpoint whose claim holds the lease (null for a human's claim and when not held): only it may
-- act on a team todo's lease; a revocation or a member's removal hands its team todos back.
ALTER TABLE todos ADD COLUMN claimed_by_endpoint_id uuid REFERENCES endpoints(id) ON DELETE SET NULL;
ALTER TABLE todos ADD CONSTRAINT todos_one_owner CHECK ((endpoint_id IS NULL) <> (team_id IS NULL));
ALTER TABLE todos DROP CONSTRAINT todos_queue_check;
ALTER TABLE todos ADD CONSTRAINT todos_queue_check CHECK (
    length(queue) BETWEEN 1 AND 128
    AND (team_id IS NOT NULL) = (queue LIKE 'team:%/%'));

-- The claim scan of a team queue: the same three arms as an endpoint's queue.
CREATE INDEX todos_team_pending ON todos (team_id, queue, created_at)
    WHERE state = 'pending' AND team_id IS NOT NULL;
CREATE INDEX todos_team_claimed ON todos (team_id, queue, lease_expires_at)
    WHERE state = 'claimed' AND team_id IS NOT NULL;
CREATE INDEX todos_team_parked ON todos (team_id, queue, next_retry_at)
    WHERE state = 'failed' AND next_retry_at IS NOT NULL AND team_id IS NOT NULL;
CREATE INDEX todos_team_created ON todos (team_id, created_at DESC) WHERE team_id IS NOT NULL;
CREATE UNIQUE INDEX todos_team_dedupe ON todos (team_id, idempotency_key)
    WHERE team_id IS NOT NULL AND idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
      AND (state <> 'failed' OR next_retry_at IS NOT NULL);
-- The leases an endpoint holds on team todos: what a revocation or a removal hands back.
CREATE INDEX todos_held_by ON todos (claimed_by_endpoint_id)
    WHERE claimed_by_endpoint_id IS NOT NULL AND state IN ('claimed', 'input-required');

-- A grant or a membership change moves what an endpoint reaches: tell every serving process, as
-- migration 0008 does for the credential itself (reason `reach`; the statements check reach anyway).
CREATE FUNCTION switchboard_grant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('switchboard_credentials',
                      json_build_object('endpoint_id', coalesce(NEW.endpoint_id, OLD.endpoint_id),
                                        'reason', 'reach')::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER team_grants_changed AFTER INSERT OR DELETE ON team_grants
    FOR EACH ROW EXECUTE FUNCTION switchboard_grant_changed();

CREATE FUNCTION switchboard_member_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT endpoint_id FROM team_grants
              WHERE team_id = OLD.team_id AND human_id = OLD.human_id LOOP
        PERFORM pg_notify('switchboard_credentials',
                          json_build_object('endpoint_id', g.endpoint_id, 'reason', 'reach')::text);
    END LOOP;
    RETURN NULL;
END
$$;
CREATE TRIGGER team_members_removed AFTER DELETE ON team_members
    FOR EACH ROW EXECUTE FUNCTION switchboard_member_changed();
