-- The metric spool (migration 0012): counted facts committed by processes that serve no /metrics.

-- name: take
-- Take up to `limit` rows, each by exactly one serving process (rows another one holds are skipped),
-- and return them grouped: the rows are gone once this statement commits.
WITH taken AS (
    DELETE FROM metric_spool
     WHERE id IN (SELECT id FROM metric_spool ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
    RETURNING kind, queue, label
)
SELECT kind, queue, label, count(*)::int AS n FROM taken GROUP BY kind, queue, label
