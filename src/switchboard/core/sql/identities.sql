-- Humans' identities at sign-in providers (core/identities.py).

-- name: find
SELECT h.id, h.name, h.disabled_at FROM human_identities i JOIN humans h ON h.id = i.human_id
 WHERE i.issuer = %(issuer)s AND i.subject = %(subject)s
   FOR UPDATE OF i

-- name: touch
UPDATE human_identities SET last_sign_in_at = now() WHERE issuer = %(issuer)s AND subject = %(subject)s

-- name: insert
INSERT INTO human_identities (issuer, subject, human_id, last_sign_in_at)
VALUES (%(issuer)s, %(subject)s, %(human_id)s, CASE WHEN %(signed_in)s THEN now() END)
ON CONFLICT (issuer, subject) DO NOTHING
RETURNING issuer, subject, human_id, created_at

-- name: taken_names
SELECT name FROM humans WHERE name = ANY(%(names)s::text[])

-- name: insert_human
INSERT INTO humans (name, password_hash) VALUES (%(name)s, NULL)
ON CONFLICT (name) DO NOTHING
RETURNING id, name

-- name: of_human
SELECT issuer, subject, created_at, last_sign_in_at FROM human_identities
 WHERE human_id = %(human_id)s
 ORDER BY issuer, subject

-- name: unlink
DELETE FROM human_identities WHERE human_id = %(human_id)s AND issuer = %(issuer)s AND subject = %(subject)s
RETURNING issuer, subject

-- name: clear_password
UPDATE humans SET password_hash = NULL WHERE id = %(id)s
