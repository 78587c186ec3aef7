-- Board sessions kept in the database (docs/decisions.md, "Board sessions in the database"), so that
-- signing out, a password change or a disabled account ends a session in every serving process and
-- across restarts. The browser holds a random session id inside the signed `sb_session` cookie;
-- only its SHA-256 is stored here.

CREATE TABLE board_sessions (
    id_hash      bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    human_id     uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    CHECK (expires_at > created_at)
);

-- Ending every session of one human (password change, disable) and pruning expired rows.
CREATE INDEX board_sessions_live_by_human ON board_sessions (human_id) WHERE revoked_at IS NULL;
CREATE INDEX board_sessions_by_expiry ON board_sessions (expires_at);

-- A disabled human cannot sign in, holds no Board session and no working API token.
ALTER TABLE humans ADD COLUMN disabled_at timestamptz;

CREATE INDEX human_tokens_by_human ON human_tokens (human_id);
