-- Liveness of the database for /healthz.

-- name: ping
SELECT 1 AS ok
