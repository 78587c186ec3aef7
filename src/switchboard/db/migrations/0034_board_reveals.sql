-- The Board's one-time reveals in the database (docs/decisions.md D62).
--
-- Vending an endpoint and creating an intake on the Board show a secret once (the credential; the
-- intake's URL and signing secret). The form's POST hands the secret to the page after its redirect
-- through a single-use ticket. Those tickets lived in the serving process's memory, so with several
-- processes behind one proxy the redirect's GET, sent wherever the proxy sent it, found nothing on
-- any other process: the secret was lost and the endpoint had to be revoked and vended again.
--
-- A ticket is now a row any process can take once. The browser holds the ticket's key (256 bits,
-- in the redirect's path); the row holds only the key's SHA-256 and the facts sealed with AES-GCM
-- under a key derived from the Board's secret and the ticket's key, so neither the database nor a
-- log of paths alone opens it. Taking it deletes it, in one statement.

CREATE TABLE board_reveals (
    id_hash    bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    human_id   uuid NOT NULL REFERENCES humans(id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('endpoint', 'intake')),
    sealed     bytea NOT NULL CHECK (length(sealed) BETWEEN 29 AND 65536),
    expires_at timestamptz NOT NULL
);
