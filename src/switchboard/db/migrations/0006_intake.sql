-- Webhook intake (docs/intake.md): signed deliveries from other systems (GitHub, a Standard Webhooks
-- sender, a generic HMAC or bearer sender) become todos through the owner's routing rules.
--
-- An intake belongs to one human (who manages it) and feeds one queue of one of that human's
-- endpoints: `endpoint_id` + `queue` say whose todos it makes. Team queues do not exist yet; when
-- they do, a nullable `team_id` joins `endpoint_id` and `intakes_one_target` becomes
-- `num_nonnulls(endpoint_id, team_id) = 1`, with no change to the rest of the table.

CREATE TABLE intakes (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    human_id         uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    name             text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
    endpoint_id      uuid REFERENCES endpoints(id) ON DELETE CASCADE,
    queue            text NOT NULL CHECK (length(queue) BETWEEN 1 AND 64),
    -- The URL token (`sbi_…`) is shown once; only its SHA-256 and a display prefix are kept.
    token_hash       bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    token_prefix     text NOT NULL,
    source           text NOT NULL CHECK (source IN ('github', 'standard', 'hmac', 'bearer')),
    -- Verifying an HMAC needs the key itself, so the secret is kept as given. It is returned once, at
    -- creation, never listed, shown or logged afterwards (docs/security.md: who can read this column).
    secret           text NOT NULL CHECK (octet_length(secret) BETWEEN 16 AND 256),
    rules            jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(rules) = 'array'),
    enabled          boolean NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Counters: deliveries that made a todo, redeliveries of a known delivery, deliveries quarantined,
    -- and requests that failed verification (nothing else is kept of those).
    accepted         bigint NOT NULL DEFAULT 0,
    duplicates       bigint NOT NULL DEFAULT 0,
    quarantined      bigint NOT NULL DEFAULT 0,
    verify_failures  bigint NOT NULL DEFAULT 0,
    last_delivery_at timestamptz,
    last_failure_at  timestamptz,
    UNIQUE (human_id, name),
    CONSTRAINT intakes_one_target CHECK (num_nonnulls(endpoint_id) = 1)
);
CREATE INDEX intakes_endpoint ON intakes (endpoint_id);

-- Verified deliveries that no rule matched or whose rule failed, kept for the owner to inspect,
-- replay after fixing the rules, or drop. Bounded per intake (the oldest go first) and by age.
CREATE TABLE intake_quarantine (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intake_id   uuid NOT NULL REFERENCES intakes(id) ON DELETE CASCADE,
    received_at timestamptz NOT NULL DEFAULT now(),
    event       text CHECK (octet_length(event) <= 256),
    delivery    text CHECK (octet_length(delivery) <= 256),
    -- The delivery document the rules see: {event, delivery, headers, body}.
    document    jsonb NOT NULL,
    reason      text NOT NULL CHECK (octet_length(reason) BETWEEN 1 AND 1024),
    replays     int NOT NULL DEFAULT 0
);
CREATE INDEX intake_quarantine_intake ON intake_quarantine (intake_id, id DESC);
CREATE INDEX intake_quarantine_age ON intake_quarantine (received_at);

-- Delivery ids already turned into todos, so a redelivery makes no second todo even after the first
-- one finished (the todos' own key dedupe covers live todos only). Pruned by age.
CREATE TABLE intake_seen (
    intake_id   uuid NOT NULL REFERENCES intakes(id) ON DELETE CASCADE,
    delivery    text NOT NULL CHECK (octet_length(delivery) BETWEEN 1 AND 256),
    todo_id     text NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (intake_id, delivery)
);
CREATE INDEX intake_seen_age ON intake_seen (seen_at);
