-- The todo queue: humans, their tokens, agents, endpoints, todos and settings.

CREATE TABLE humans (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name          text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    password_hash text,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE human_tokens (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    human_id    uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    prefix      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE TABLE agents (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    human_id   uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (human_id, name)
);

CREATE TABLE endpoints (
    id                        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent_id                  uuid NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    slug                      text NOT NULL UNIQUE,
    credential_hash           bytea NOT NULL UNIQUE CHECK (length(credential_hash) = 32),
    credential_prefix         text NOT NULL,
    scope_verbs               text[] NOT NULL,
    scope_queues              text[] NOT NULL CHECK (cardinality(scope_queues) >= 1),
    default_lease_ttl_seconds int CHECK (default_lease_ttl_seconds BETWEEN 60 AND 86400),
    state                     text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'revoked')),
    created_at                timestamptz NOT NULL DEFAULT now(),
    revoked_at                timestamptz,
    expires_at                timestamptz,
    last_used_at              timestamptz
);
CREATE INDEX endpoints_agent ON endpoints (agent_id);

CREATE TABLE todos (
    id               text PRIMARY KEY,
    endpoint_id      uuid NOT NULL REFERENCES endpoints(id) ON DELETE CASCADE,
    queue            text NOT NULL CHECK (length(queue) BETWEEN 1 AND 64),
    source           text,
    kind             text,
    title            text NOT NULL CHECK (length(title) BETWEEN 1 AND 512),
    payload          jsonb,
    idempotency_key  text,
    assignee         text,
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'claimed', 'done', 'failed', 'canceled', 'input-required')),
    owner            text,
    lease_expires_at timestamptz,
    attempt          int NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     int NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 100),
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz,
    completed_at     timestamptz,
    next_retry_at    timestamptz,
    input_request    text CHECK (octet_length(input_request) <= 2048),
    input            jsonb,
    last_ringed_at   timestamptz,
    ring_attempts    int NOT NULL DEFAULT 0
);

-- The claim scan: one partial index per arm, each ordered by created_at inside (endpoint, queue).
-- (P16: never `queue = ANY(...)` with ORDER BY; the claim walks the granted queues one by one.)
CREATE INDEX todos_pending ON todos (endpoint_id, queue, created_at) WHERE state = 'pending';
CREATE INDEX todos_claimed ON todos (endpoint_id, queue, lease_expires_at) WHERE state = 'claimed';
CREATE INDEX todos_parked ON todos (endpoint_id, queue, next_retry_at)
    WHERE state = 'failed' AND next_retry_at IS NOT NULL;
-- The sweeps: lapsed leases and due retries across every endpoint.
CREATE INDEX todos_lease_sweep ON todos (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX todos_retry_sweep ON todos (next_retry_at) WHERE state = 'failed' AND next_retry_at IS NOT NULL;
CREATE INDEX todos_endpoint_created ON todos (endpoint_id, created_at DESC);
CREATE INDEX todos_terminal_updated ON todos (updated_at)
    WHERE state IN ('done', 'canceled') OR (state = 'failed' AND next_retry_at IS NULL);
CREATE UNIQUE INDEX todos_dedupe ON todos (endpoint_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND state NOT IN ('done', 'canceled')
      AND (state <> 'failed' OR next_retry_at IS NOT NULL);

CREATE TABLE settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO settings (key, value) VALUES
    ('retention_max_age_days', '30'),
    ('retention_max_rows', '500000');
