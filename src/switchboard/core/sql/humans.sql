-- Humans (Board logins) and their API tokens.

-- name: insert
INSERT INTO humans (name, password_hash) VALUES (%(name)s, %(password_hash)s) RETURNING *

-- name: by_name
SELECT * FROM humans WHERE name = %(name)s

-- name: by_id
SELECT * FROM humans WHERE id = %(id)s

-- name: set_password
UPDATE humans SET password_hash = %(password_hash)s WHERE id = %(id)s

-- name: set_disabled
UPDATE humans SET disabled_at = CASE WHEN %(disabled)s THEN coalesce(disabled_at, now()) END
 WHERE id = %(id)s
RETURNING disabled_at

-- name: insert_token
INSERT INTO human_tokens (human_id, token_hash, prefix) VALUES (%(human_id)s, %(hash)s, %(prefix)s)
RETURNING id, human_id, prefix, created_at

-- name: by_token
SELECT h.*, k.token_hash FROM human_tokens k JOIN humans h ON h.id = k.human_id
 WHERE k.token_hash = %(hash)s AND k.revoked_at IS NULL AND h.disabled_at IS NULL

-- name: tokens_of
SELECT id, prefix, created_at, revoked_at FROM human_tokens
 WHERE human_id = %(human_id)s
 ORDER BY created_at DESC, id

-- name: tokens_matching
-- One human's tokens whose id is the given uuid text or whose display prefix is the given text.
SELECT id, prefix, created_at, revoked_at FROM human_tokens
 WHERE human_id = %(human_id)s AND (id::text = %(ref)s OR prefix = %(ref)s)

-- name: revoke_token
UPDATE human_tokens SET revoked_at = coalesce(revoked_at, now())
 WHERE id = %(id)s AND human_id = %(human_id)s
RETURNING id, prefix, created_at, revoked_at
