-- Board sessions: one row per sign-in, found by the SHA-256 of the id the browser holds.

-- name: insert
INSERT INTO board_sessions (id_hash, human_id, expires_at)
VALUES (%(hash)s, %(human_id)s, now() + make_interval(secs => %(seconds)s))
RETURNING created_at, expires_at

-- name: live
-- The session and its human, only while the session is neither ended nor expired and the human is
-- not disabled.
SELECT h.id, h.name, s.id_hash, s.last_seen_at < now() - interval '60 seconds' AS stale
  FROM board_sessions s JOIN humans h ON h.id = s.human_id
 WHERE s.id_hash = %(hash)s AND s.revoked_at IS NULL AND s.expires_at > now() AND h.disabled_at IS NULL

-- name: touch
UPDATE board_sessions SET last_seen_at = now() WHERE id_hash = %(hash)s

-- name: end_one
UPDATE board_sessions SET revoked_at = now() WHERE id_hash = %(hash)s AND revoked_at IS NULL

-- name: end_all
UPDATE board_sessions SET revoked_at = now()
 WHERE human_id = %(human_id)s AND revoked_at IS NULL AND expires_at > now()

-- name: prune
-- Rows a day past their expiry (or their end) say nothing any more.
DELETE FROM board_sessions
 WHERE expires_at < now() - interval '1 day' OR revoked_at < now() - interval '1 day'

