-- Scrape-time gauges for /metrics: live todos by queue and state, and the oldest pending age.
-- Each arm walks one partial index; terminal todos (done, canceled, dead letters) are counted by
-- the lifecycle counters, not scanned here.

-- name: queue_states
SELECT queue, 'pending' AS state, count(*)::bigint AS n,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float AS oldest_seconds
  FROM todos WHERE state = 'pending' GROUP BY queue
UNION ALL
SELECT queue, 'claimed', count(*)::bigint, 0::float FROM todos WHERE state = 'claimed' GROUP BY queue
UNION ALL
SELECT queue, 'input-required', count(*)::bigint, 0::float FROM todos WHERE state = 'input-required' GROUP BY queue
UNION ALL
SELECT queue, 'retry_scheduled', count(*)::bigint, 0::float FROM todos
 WHERE state = 'failed' AND next_retry_at IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, 'dead_letter', count(*)::bigint, 0::float FROM todos
 WHERE state = 'failed' AND next_retry_at IS NULL GROUP BY queue

-- name: scoped_queues
-- Queues granted to active endpoints: they report zeros when nothing is in them.
SELECT DISTINCT unnest(scope_queues) AS queue FROM endpoints WHERE state = 'active'

-- name: statement_timeout
SET LOCAL statement_timeout = '5s'
