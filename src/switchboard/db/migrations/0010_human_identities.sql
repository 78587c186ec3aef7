-- Identities at sign-in providers (OpenID Connect, GitHub) of Board humans (docs/operations.md,
-- "Sign-in with OpenID Connect or GitHub"). A human is found by (issuer, subject): the same subject
-- at another issuer is another identity. A human may hold several identities and a password; an
-- operator links an identity to an existing human with `switchboard user link`.

CREATE TABLE human_identities (
    issuer          text NOT NULL CHECK (length(issuer) BETWEEN 1 AND 512),
    subject         text NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    human_id        uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_sign_in_at timestamptz,
    PRIMARY KEY (issuer, subject)
);

CREATE INDEX human_identities_by_human ON human_identities (human_id);
