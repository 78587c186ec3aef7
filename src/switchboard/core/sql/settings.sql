-- Operator settings kept in the database.

-- name: get
SELECT value FROM settings WHERE key = %(key)s

-- name: set
INSERT INTO settings (key, value) VALUES (%(key)s, %(value)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
