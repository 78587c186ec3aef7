-- OAuth 2.1 for MCP hosts that cannot paste a bearer header (docs/mcp.md, "Hosts that only speak
-- OAuth"). Every secret is stored as its SHA-256 only. An authorization code or token is bound to one
-- endpoint: it acts as that endpoint's caller, and stops working when the endpoint is revoked, expires
-- or is deleted (the resolve statement joins the endpoint's state; deletion cascades).

CREATE TABLE oauth_clients (
    client_id text PRIMARY KEY,
    metadata jsonb NOT NULL,                    -- the registered client metadata (RFC 7591), no secret
    secret_hash bytea,                          -- NULL for a public client (token_endpoint_auth_method none)
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE oauth_codes (
    code_hash bytea PRIMARY KEY,
    client_id text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
    endpoint_id uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    human_id uuid NOT NULL,
    redirect_uri text NOT NULL,
    redirect_uri_explicit boolean NOT NULL,
    code_challenge text NOT NULL,
    scopes text[] NOT NULL,
    resource text NOT NULL,
    family uuid NOT NULL,                       -- the tokens issued for this code share it
    expires_at timestamptz NOT NULL,
    used_at timestamptz,                        -- single use: set by the exchange
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Access and refresh tokens. A refresh is single use: exchanging it sets its revoked_at and issues a
-- new pair in the same family (`replaced_by` links the chain); presenting a used refresh token again
-- revokes the whole family.
CREATE TABLE oauth_tokens (
    token_hash bytea PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('access', 'refresh')),
    client_id text NOT NULL REFERENCES oauth_clients (client_id) ON DELETE CASCADE,
    endpoint_id uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
    scopes text[] NOT NULL,
    resource text NOT NULL,
    family uuid NOT NULL,
    replaced_by bytea,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX oauth_tokens_family ON oauth_tokens (family);
CREATE INDEX oauth_tokens_endpoint ON oauth_tokens (endpoint_id);
CREATE INDEX oauth_codes_expires ON oauth_codes (expires_at);
