-- Humans (Board logins) and their API tokens.

-- name: insert
INSERT INTO humans (name, password_hash) VALUES (%(name)s, %(password_hash)s) RETURNING *

-- name: by_name
SELECT * FROM humans WHERE name = %(name)s

-- name: by_id
SELECT * FROM humans WHERE id = %(id)s

-- name: set_password
UPDATE humans SET password_hash = %(password_hash)s WHERE id = %(id)s

-- name: insert_token
INSERT INTO human_tokens (human_id, token_hash, prefix) VALUES (%(human_id)s, %(hash)s, %(prefix)s)
RETURNING id, human_id, prefix, created_at

-- name: by_token
SELECT h.*, k.token_hash FROM human_tokens k JOIN humans h ON h.id = k.human_id
 WHERE k.token_hash = %(hash)s AND k.revoked_at IS NULL
