-- The Board's one-time reveals (core/reveals.py): a sealed hand-over found by the SHA-256 of its key.

-- name: put
-- A new ticket; those past their expiry go in the same statement.
WITH gone AS (DELETE FROM board_reveals WHERE expires_at < now())
INSERT INTO board_reveals (id_hash, human_id, kind, sealed, expires_at)
VALUES (%(hash)s, %(human_id)s, %(kind)s, %(sealed)s, now() + make_interval(secs => %(seconds)s))

-- name: take
-- The ticket, once: only by its human, for its kind, before its expiry. A wrong human or kind
-- leaves it in place for the right one.
DELETE FROM board_reveals
 WHERE id_hash = %(hash)s AND human_id = %(human_id)s AND kind = %(kind)s AND expires_at > now()
RETURNING id_hash, sealed
