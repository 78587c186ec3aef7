-- SPEC-0034 REQ-17: attempt history. One additive migration: the attempts table, the per-todo
-- counters, and one `migrated` attempt for every todo that holds a lease when this runs.

CREATE TABLE todo_attempts (
    todo_id             text NOT NULL REFERENCES todos(id) ON DELETE CASCADE,
    seq                 int NOT NULL CHECK (seq >= 1),
    attempt             int NOT NULL CHECK (attempt >= 0),
    claimer_kind        text NOT NULL CHECK (claimer_kind IN ('endpoint', 'owner')),
    claimer_endpoint_id uuid,
    claimer_session     text,
    owner               text NOT NULL,
    claimant            text CHECK (octet_length(claimant) <= 128),
    claimed_at          timestamptz NOT NULL,
    last_heartbeat_at   timestamptz,
    lease_expires_at    timestamptz NOT NULL,
    ended_at            timestamptz,
    outcome             text CHECK (outcome IN ('completed', 'failed', 'released', 'lease_expired',
                                                'reaped', 'canceled', 'revoked')),
    disposition         text CHECK (disposition IN ('done', 'retry_scheduled', 'dead_lettered',
                                                    'requeued', 'canceled')),
    summary             text CHECK (octet_length(summary) <= 2048),
    summary_truncated   boolean NOT NULL DEFAULT false,
    artifact            text CHECK (octet_length(artifact) <= 512),
    lease_token_hash    bytea CHECK (lease_token_hash IS NULL OR length(lease_token_hash) = 32),
    PRIMARY KEY (todo_id, seq),
    CONSTRAINT attempt_open_or_closed CHECK (
        (ended_at IS NULL AND outcome IS NULL AND disposition IS NULL)
        OR (ended_at IS NOT NULL AND outcome IS NOT NULL AND disposition IS NOT NULL)),
    CONSTRAINT attempt_died_reports_nothing CHECK (
        outcome IS NULL OR outcome NOT IN ('lease_expired', 'reaped')
        OR (summary IS NULL AND artifact IS NULL)),
    CONSTRAINT one_open_attempt EXCLUDE USING btree (todo_id WITH =)
        WHERE (ended_at IS NULL) DEFERRABLE INITIALLY DEFERRED
);

ALTER TABLE todos
    ADD COLUMN attempts_total  int NOT NULL DEFAULT 0 CHECK (attempts_total >= 0),
    ADD COLUMN attempts_pruned int NOT NULL DEFAULT 0 CHECK (attempts_pruned >= 0);

INSERT INTO settings (key, value) VALUES ('attempt_history_max_per_todo', '50')
    ON CONFLICT (key) DO NOTHING;

-- Backfill: a lease in flight across the upgrade gets one open attempt it can close.
INSERT INTO todo_attempts (todo_id, seq, attempt, claimer_kind, claimer_endpoint_id, owner, claimant,
                           claimed_at, lease_expires_at)
SELECT t.id, 1, greatest(t.attempt, 1), 'endpoint',
       CASE WHEN t.owner LIKE 'agent:%' THEN t.endpoint_id END,
       coalesce(t.owner, 'unknown'), 'migrated',
       coalesce(t.claimed_at, t.updated_at), coalesce(t.lease_expires_at, now())
  FROM todos t
 WHERE t.state IN ('claimed', 'input-required');

UPDATE todos SET attempts_total = 1 WHERE state IN ('claimed', 'input-required');
