-- The human API's tokens with their scope and expiry, and the admin flag (migration 0009).

-- name: insert
INSERT INTO human_tokens (human_id, token_hash, prefix, scope, expires_at)
VALUES (%(human_id)s, %(hash)s, %(prefix)s, %(scope)s,
        CASE WHEN %(expires_in)s::int IS NULL THEN NULL ELSE now() + make_interval(secs => %(expires_in)s::int) END)
RETURNING id, prefix, scope, created_at, expires_at, revoked_at

-- name: resolve
-- A live token: not revoked, not expired, its human not disabled.
SELECT h.id, h.name, h.is_admin, k.id AS token_id, k.token_hash, k.scope
  FROM human_tokens k JOIN humans h ON h.id = k.human_id
 WHERE k.token_hash = %(hash)s AND k.revoked_at IS NULL AND h.disabled_at IS NULL
   AND (k.expires_at IS NULL OR k.expires_at > now())

-- name: of_human
SELECT id, prefix, scope, created_at, expires_at, revoked_at FROM human_tokens
 WHERE human_id = %(human_id)s
 ORDER BY created_at DESC, id

-- name: matching
-- One human's tokens whose id is the given uuid text or whose display prefix is the given text.
SELECT id, prefix, scope, created_at, expires_at, revoked_at FROM human_tokens
 WHERE human_id = %(human_id)s AND (id::text = %(ref)s OR prefix = %(ref)s)

-- name: revoke
UPDATE human_tokens SET revoked_at = coalesce(revoked_at, now())
 WHERE id = %(id)s AND human_id = %(human_id)s
RETURNING id, prefix, scope, created_at, expires_at, revoked_at

-- name: is_admin
SELECT is_admin FROM humans WHERE id = %(id)s AND disabled_at IS NULL

-- name: set_admin
UPDATE humans SET is_admin = %(is_admin)s WHERE id = %(id)s RETURNING is_admin
