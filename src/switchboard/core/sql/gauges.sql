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

-- name: admission_states
-- Each admission policy's status now (`switchboard_admission_state`, migration 0029, as
-- `admission_status` says it; the window's usage summed over the policy's shards) and, when it holds
-- the queue back, how many todos wait on it (counted up to 100,000).
SELECT v.queue, v.status,
       CASE WHEN v.status = 'open' THEN 0 ELSE
           (SELECT count(*) FROM (SELECT 1 FROM todos t
                                   WHERE t.queue = v.queue AND t.state = 'pending'
                                     AND (CASE WHEN v.team_id IS NULL THEN t.endpoint_id = v.endpoint_id
                                               ELSE t.team_id = v.team_id END)
                                   LIMIT 100000) z) END::bigint AS pending
  FROM (SELECT p.queue, p.endpoint_id, p.team_id,
               switchboard_admission_state(
                   p.paused, p.max_in_flight, p.max_claims_per_window,
                   switchboard_admission_used(p.id, switchboard_window_start(
                       p.window_period, p.window_tz, p.window_start_minute, p.window_weekday, now())),
                   {{policy_in_flight}}) AS status
          FROM admission_policies p) v

-- name: statement_timeout
SET LOCAL statement_timeout = '5s'
