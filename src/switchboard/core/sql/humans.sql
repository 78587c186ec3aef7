-- Humans (Board logins). Their API tokens: api_tokens.sql.

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
