-- The human API's tokens get a scope and an expiry, and humans an admin flag (docs/api.md, D-entry
-- "Admins of the human API").
--
-- * `human_tokens.scope`: `read` (GET routes only; any write is 403) or `write` (everything the human
--   may do). Tokens made before this migration keep doing what they did: `write`.
-- * `human_tokens.expires_at`: NULL for a token that never expires; past it the token is refused like
--   an unknown one.
-- * `humans.is_admin`: who may read and change the operator settings over the API. The first human
--   of an installation becomes the admin (existing installations: the oldest human); the trigger
--   below makes that hold for a fresh database too, whichever surface creates the first human.

ALTER TABLE human_tokens
    ADD COLUMN scope text NOT NULL DEFAULT 'write' CHECK (scope IN ('read', 'write')),
    ADD COLUMN expires_at timestamptz;

ALTER TABLE humans ADD COLUMN is_admin boolean NOT NULL DEFAULT false;

UPDATE humans SET is_admin = true
 WHERE id = (SELECT id FROM humans ORDER BY created_at, id LIMIT 1);

CREATE FUNCTION switchboard_first_human_is_admin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Serialise concurrent first sign-ups, so exactly one of them becomes the admin.
    PERFORM pg_advisory_xact_lock(hashtext('switchboard_first_human_is_admin'));
    IF NOT EXISTS (SELECT 1 FROM humans WHERE is_admin) THEN
        NEW.is_admin := true;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER humans_first_is_admin BEFORE INSERT ON humans
    FOR EACH ROW EXECUTE FUNCTION switchboard_first_human_is_admin();
