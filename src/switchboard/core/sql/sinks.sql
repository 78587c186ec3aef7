-- Notification sinks: the owner's list, the sweep tick's stuck and digest messages, and the outbox
-- the sender drains (migration 0011).

-- name: lock_owner
SELECT id FROM humans WHERE id = %(human_id)s FOR UPDATE

-- name: count_for_owner
SELECT count(*)::int AS n FROM notification_sinks WHERE owner_human_id = %(human_id)s

-- name: lock_team
-- The team's row, locked while the human still manages it (an owner or admin): concurrent adds to
-- one team are serialised, so its ceiling holds under races.
SELECT tm.id FROM teams tm JOIN team_members m ON m.team_id = tm.id
 WHERE tm.id = %(team_id)s AND m.human_id = %(human_id)s AND {{manages}}
   FOR UPDATE OF tm

-- name: count_for_team
SELECT count(*)::int AS n FROM notification_sinks WHERE owner_team_id = %(team_id)s

-- name: insert
-- A human's sink (%(owner_human_id)s) or a team's (%(owner_team_id)s); the other null (migration 0033).
INSERT INTO notification_sinks (owner_human_id, owner_team_id, name, kind, url, events, stuck_minutes,
                                digest_hour, digest_timezone)
VALUES (%(owner_human_id)s, %(owner_team_id)s, %(name)s, %(kind)s, %(url)s, %(events)s, %(stuck_minutes)s,
        %(digest_hour)s, %(timezone)s)
RETURNING *, (SELECT tm.slug FROM teams tm WHERE tm.id = owner_team_id) AS team_slug

-- name: for_owner
SELECT * FROM notification_sinks WHERE owner_human_id = %(human_id)s ORDER BY created_at, id

-- name: get_for_owner
SELECT * FROM notification_sinks WHERE id = %(id)s AND owner_human_id = %(human_id)s

-- name: remove_for_owner
DELETE FROM notification_sinks WHERE id = %(id)s AND owner_human_id = %(human_id)s RETURNING *

-- name: enable_for_owner
UPDATE notification_sinks
   SET enabled = true, consecutive_failures = 0, disabled_reason = NULL, disabled_at = NULL
 WHERE id = %(id)s AND owner_human_id = %(human_id)s
RETURNING *

-- name: for_team
-- A team's sinks, for any member (membership is checked by the caller).
SELECT s.*, %(team_slug)s::text AS team_slug FROM notification_sinks s
 WHERE s.owner_team_id = %(team_id)s ORDER BY s.created_at, s.id

-- name: get_for_team
-- One of a team's sinks while the human manages the team (for sending a test message).
SELECT s.*, %(team_slug)s::text AS team_slug FROM notification_sinks s
  JOIN team_members m ON m.team_id = s.owner_team_id
 WHERE s.id = %(id)s AND s.owner_team_id = %(team_id)s AND m.human_id = %(human_id)s AND {{manages}}

-- name: remove_for_team
-- Only a sink of that team, and only while the human manages the team; anything else matches nothing.
DELETE FROM notification_sinks s
 USING team_members m
 WHERE s.id = %(id)s AND s.owner_team_id = %(team_id)s
   AND m.team_id = s.owner_team_id AND m.human_id = %(human_id)s AND {{manages}}
RETURNING s.*, %(team_slug)s::text AS team_slug

-- name: enable_for_team
UPDATE notification_sinks s
   SET enabled = true, consecutive_failures = 0, disabled_reason = NULL, disabled_at = NULL
  FROM team_members m
 WHERE s.id = %(id)s AND s.owner_team_id = %(team_id)s
   AND m.team_id = s.owner_team_id AND m.human_id = %(human_id)s AND {{manages}}
RETURNING s.*, %(team_slug)s::text AS team_slug

-- name: visible_to_human
-- The sinks a human sees (only sink %(id)s when given): their own, which they manage, then those of
-- every team they belong to, which its owners and admins manage (`manage`). Anything else is not
-- there: another human's or another team's sink reads like an unknown id.
SELECT s.*, NULL::text AS team_slug, true AS manage
  FROM notification_sinks s
 WHERE s.owner_human_id = %(human_id)s AND (%(id)s::uuid IS NULL OR s.id = %(id)s::uuid)
UNION ALL
SELECT s.*, tm.slug, {{manages}}
  FROM notification_sinks s
  JOIN team_members m ON m.team_id = s.owner_team_id
  JOIN teams tm ON tm.id = m.team_id
 WHERE m.human_id = %(human_id)s AND (%(id)s::uuid IS NULL OR s.id = %(id)s::uuid)
 ORDER BY team_slug NULLS FIRST, created_at, id

-- name: record_test
UPDATE notification_sinks
   SET last_attempt_at = now(), last_status = %(status)s, last_error = %(error)s
 WHERE id = %(id)s

-- name: deliveries_for_owner
SELECT o.id, o.sink_id, o.event, o.state, o.attempts, o.created_at, o.finished_at, o.last_status_code,
       o.last_result, o.last_error
  FROM sink_outbox o JOIN notification_sinks s ON s.id = o.sink_id
 WHERE s.owner_human_id = %(human_id)s AND (%(sink_id)s::uuid IS NULL OR o.sink_id = %(sink_id)s::uuid)
 ORDER BY o.id DESC
 LIMIT %(limit)s

-- name: deliveries_for_team
SELECT o.id, o.sink_id, o.event, o.state, o.attempts, o.created_at, o.finished_at, o.last_status_code,
       o.last_result, o.last_error
  FROM sink_outbox o JOIN notification_sinks s ON s.id = o.sink_id
 WHERE s.owner_team_id = %(team_id)s AND (%(sink_id)s::uuid IS NULL OR o.sink_id = %(sink_id)s::uuid)
 ORDER BY o.id DESC
 LIMIT %(limit)s

-- name: lock_ticked_teams
-- Before lock_ticked_sinks: the teams whose queues a sink watches (the team of a team's own sink, and
-- the teams where a sink's human is a manager), locked in id order with the lock a stuck-queue row's
-- foreign key takes. A team's deletion locks the team first and reaches its sinks through the cascade;
-- a tick that held a sink and then waited for the team, through that foreign key, deadlocked with it.
SELECT tm.id FROM teams tm
 WHERE EXISTS (SELECT 1 FROM notification_sinks s
                WHERE s.owner_team_id = tm.id AND s.enabled AND 'queue_stuck' = ANY(s.events))
    OR EXISTS (SELECT 1 FROM team_members m JOIN notification_sinks s ON s.owner_human_id = m.human_id
                WHERE m.team_id = tm.id AND {{manages}} AND s.enabled AND 'queue_stuck' = ANY(s.events))
 ORDER BY tm.id
   FOR KEY SHARE OF tm

-- name: lock_ticked_sinks
-- The sinks a tick may queue messages for, locked first and in id order with the lock the outbox's
-- foreign key takes (migration 0036): a sink being removed makes this wait, and is gone from what the
-- tick reads next; a sink locked here is removed only after the tick commits. Without it the tick
-- queued rows for a sink whose removal was in flight and failed its foreign-key check.
SELECT id FROM notification_sinks
 WHERE enabled AND ('queue_stuck' = ANY(events) OR 'digest' = ANY(events))
 ORDER BY id
   FOR KEY SHARE

-- name: mark_stuck
-- A queue is stuck for a sink when one of its todos has been claimable (pending since it was
-- created or last returned to the queue) for longer than the sink's stuck_minutes: nothing claimed
-- it in that time. A newly stuck queue is remembered and gets one message; a remembered queue that
-- is no longer stuck is forgotten (it recovered), so the next episode is reported again.
-- A sink watches the queues of its human's active endpoints and the team queues of every team where
-- its human is an owner or admin now (migration 0030); a team's own sink watches that team's queues
-- (migration 0033). `scope_id` is the endpoint's or the team's id.
WITH watched AS (
    SELECT s.id AS sink_id, s.stuck_minutes, e.id AS endpoint_id, NULL::uuid AS team_id, e.slug AS endpoint,
           NULL::text AS team
      FROM notification_sinks s
      JOIN agents g ON g.human_id = s.owner_human_id
      JOIN endpoints e ON e.agent_id = g.id AND e.state = 'active'
     WHERE s.enabled AND 'queue_stuck' = ANY(s.events)
    UNION ALL
    SELECT s.id, s.stuck_minutes, NULL::uuid, tm.id, NULL::text, tm.slug
      FROM notification_sinks s
      JOIN team_members m ON m.human_id = s.owner_human_id AND {{manages}}
      JOIN teams tm ON tm.id = m.team_id
     WHERE s.enabled AND 'queue_stuck' = ANY(s.events)
    UNION ALL
    SELECT s.id, s.stuck_minutes, NULL::uuid, tm.id, NULL::text, tm.slug
      FROM notification_sinks s
      JOIN teams tm ON tm.id = s.owner_team_id
     WHERE s.enabled AND 'queue_stuck' = ANY(s.events)
), stuck AS (
    SELECT s.sink_id, coalesce(s.endpoint_id, s.team_id) AS scope_id, s.endpoint_id, s.team_id, s.endpoint,
           s.team, t.queue, s.stuck_minutes, count(*)::int AS pending, min(t.updated_at) AS pending_since
      FROM watched s CROSS JOIN LATERAL {{scope_todos}} t
     WHERE t.state = 'pending'
     GROUP BY s.sink_id, s.endpoint_id, s.team_id, s.endpoint, s.team, t.queue, s.stuck_minutes
    HAVING min(t.updated_at) < %(now)s::timestamptz - make_interval(mins => s.stuck_minutes)
), recovered AS (
    DELETE FROM sink_stuck_queues q
     WHERE NOT EXISTS (SELECT 1 FROM stuck x WHERE x.sink_id = q.sink_id
                                                AND x.scope_id = coalesce(q.endpoint_id, q.team_id)
                                                AND x.queue = q.queue)
), fresh AS (
    INSERT INTO sink_stuck_queues (sink_id, endpoint_id, team_id, queue, since)
    SELECT sink_id, endpoint_id, team_id, queue, %(now)s::timestamptz FROM stuck
    ON CONFLICT DO NOTHING
    RETURNING sink_id, coalesce(endpoint_id, team_id) AS scope_id, queue, since
)
INSERT INTO sink_outbox (sink_id, event, dedup_key, body)
SELECT f.sink_id, 'queue_stuck',
       'queue_stuck:' || f.scope_id || ':' || f.queue || ':' || (extract(epoch FROM f.since) * 1000000)::bigint,
       jsonb_build_object(
           'endpoint', x.endpoint, 'queue', f.queue, 'pending', x.pending, 'stuck_minutes', x.stuck_minutes,
           'waiting_minutes', floor(extract(epoch FROM %(now)s::timestamptz - x.pending_since) / 60)::int,
           'pending_since', to_char(x.pending_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
       || CASE WHEN x.team IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('team', x.team) END
  FROM fresh f JOIN stuck x ON x.sink_id = f.sink_id AND x.scope_id = f.scope_id AND x.queue = f.queue
ON CONFLICT (sink_id, dedup_key) DO NOTHING
RETURNING id

-- name: digest_subscribers
SELECT id, owner_human_id, owner_team_id, digest_hour, digest_timezone, digest_last_on
  FROM notification_sinks WHERE enabled AND 'digest' = ANY(events)

-- name: claim_digest_day
-- The day's digest is queued once, whichever process gets here first.
UPDATE notification_sinks SET digest_last_on = %(on)s
 WHERE id = %(id)s AND digest_last_on IS DISTINCT FROM %(on)s
RETURNING id

-- name: digest_stats
-- Per queue of the owner's endpoints, and per team queue of every team where the owner is an owner
-- or admin (migration 0030), over [since, until); for a team's own sink (%(team_id)s, and no
-- %(human_id)s), per queue of that team (migration 0033): todos pushed, done and dead-lettered, attempts
-- that failed (failed, lease expired or reaped), and how long the oldest pending todo has waited.
-- A team queue's row has no endpoint and names its team; its queue is the label team:<slug>/<queue>,
-- which is never an endpoint's queue name, so (endpoint or '', queue) tells the rows apart. Queues
-- with nothing in the window and nothing pending are left out.
WITH scopes AS (
    SELECT e.id AS endpoint_id, NULL::uuid AS team_id, e.slug AS endpoint, NULL::text AS team
      FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE g.human_id = %(human_id)s::uuid
    UNION ALL
    SELECT NULL::uuid, tm.id, NULL::text, tm.slug
      FROM team_members m JOIN teams tm ON tm.id = m.team_id
     WHERE m.human_id = %(human_id)s::uuid AND {{manages}}
    UNION ALL
    SELECT NULL::uuid, tm.id, NULL::text, tm.slug FROM teams tm WHERE tm.id = %(team_id)s::uuid
), per_todo AS (
    SELECT s.endpoint, s.team, t.queue,
           count(*) FILTER (WHERE t.created_at >= %(since)s AND t.created_at < %(until)s)::int AS pushed,
           count(*) FILTER (WHERE t.state = 'done' AND t.completed_at >= %(since)s
                              AND t.completed_at < %(until)s)::int AS done,
           count(*) FILTER (WHERE t.state = 'failed' AND t.next_retry_at IS NULL AND t.updated_at >= %(since)s
                              AND t.updated_at < %(until)s)::int AS dead_lettered,
           min(t.updated_at) FILTER (WHERE t.state = 'pending') AS oldest_pending_since
      FROM scopes s CROSS JOIN LATERAL {{scope_todos}} t
     WHERE t.state = 'pending' OR t.updated_at >= %(since)s OR t.created_at >= %(since)s
     GROUP BY s.endpoint, s.team, t.queue
), per_attempt AS (
    SELECT s.endpoint, s.team, t.queue, count(*)::int AS failed
      FROM scopes s CROSS JOIN LATERAL {{scope_todos}} t
      JOIN todo_attempts a ON a.todo_id = t.id
     WHERE a.ended_at >= %(since)s AND a.ended_at < %(until)s
       AND a.outcome IN ('failed', 'lease_expired', 'reaped')
     GROUP BY s.endpoint, s.team, t.queue
)
SELECT coalesce(p.endpoint, f.endpoint) AS endpoint, coalesce(p.queue, f.queue) AS queue,
       coalesce(p.pushed, 0) AS pushed, coalesce(p.done, 0) AS done, coalesce(f.failed, 0) AS failed,
       coalesce(p.dead_lettered, 0) AS dead_lettered,
       floor(extract(epoch FROM %(until)s::timestamptz - p.oldest_pending_since) / 60)::int AS oldest_pending_minutes,
       coalesce(p.team, f.team) AS team
  FROM per_todo p FULL JOIN per_attempt f ON coalesce(f.endpoint, '') = coalesce(p.endpoint, '') AND f.queue = p.queue
 WHERE coalesce(p.pushed, 0) + coalesce(p.done, 0) + coalesce(f.failed, 0) + coalesce(p.dead_lettered, 0) > 0
    OR p.oldest_pending_since IS NOT NULL
 ORDER BY 1, 2

-- name: queue_message
INSERT INTO sink_outbox (sink_id, event, dedup_key, body)
VALUES (%(sink_id)s, %(event)s, %(dedup_key)s, %(body)s)
ON CONFLICT (sink_id, dedup_key) DO NOTHING
RETURNING id

-- name: claim_due
-- The sender takes due messages under a short lease (so a crashed sender's rows come back), at
-- most one per sink and none of the sinks it is still busy with. SKIP LOCKED skips a row another
-- process holds; a row another process took or settled after this statement's snapshot is locked
-- in its latest version, and READ COMMITTED rechecks only the locking scan's own conditions on it,
-- so the due conditions are repeated there (without them two senders sent one message twice).
WITH due AS (
    SELECT o.id, o.sink_id, o.next_attempt_at FROM sink_outbox o
      JOIN notification_sinks s ON s.id = o.sink_id AND s.enabled
     WHERE o.state = 'pending' AND o.next_attempt_at <= now()
       AND (o.locked_until IS NULL OR o.locked_until < now())
       AND NOT (o.sink_id = ANY(%(busy)s::uuid[]))
     ORDER BY o.next_attempt_at
     LIMIT 1000
), ranked AS (
    SELECT d.id, row_number() OVER (PARTITION BY d.sink_id ORDER BY d.next_attempt_at, d.id) AS rn FROM due d
), picked AS (
    SELECT o.id FROM sink_outbox o
     WHERE o.id IN (SELECT id FROM ranked WHERE rn = 1)
       AND o.state = 'pending' AND o.next_attempt_at <= now()
       AND (o.locked_until IS NULL OR o.locked_until < now())
     ORDER BY o.next_attempt_at, o.id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE sink_outbox o
   SET locked_until = now() + make_interval(secs => %(lease)s), attempts = o.attempts + 1
  FROM picked p, notification_sinks s
 WHERE o.id = p.id AND s.id = o.sink_id
RETURNING o.id, o.sink_id, o.event, o.body, o.attempts, s.kind, s.url, s.name

-- name: record_attempt
-- One attempt's outcome: the outbox row (delivered, failed, or due again later) and the sink's
-- health, in one statement. A sink removed meanwhile matches nothing. The sink's row is locked
-- before its outbox row, as removing the sink (or its owner) locks them (hooks.sql record_attempt).
WITH s AS (
    SELECT s.id FROM notification_sinks s
     WHERE s.id = (SELECT o.sink_id FROM sink_outbox o WHERE o.id = %(outbox_id)s)
       FOR NO KEY UPDATE
), o AS (
    UPDATE sink_outbox o
       SET state = %(state)s, locked_until = NULL,
           next_attempt_at = now() + make_interval(secs => %(retry_in)s),
           finished_at = CASE WHEN %(state)s <> 'pending' THEN now() END,
           last_status_code = %(status_code)s, last_result = %(result)s, last_error = %(error)s
      FROM s
     WHERE o.id = %(outbox_id)s AND o.sink_id = s.id
    RETURNING o.id, o.sink_id
)
UPDATE notification_sinks s
   SET last_attempt_at = now(), last_status = coalesce(%(status_code)s::text, %(result)s),
       last_error = %(error)s,
       consecutive_failures = CASE WHEN %(state)s = 'delivered' THEN 0
                                   WHEN %(state)s = 'failed' THEN s.consecutive_failures + 1
                                   ELSE s.consecutive_failures END,
       enabled = s.enabled AND NOT (%(state)s = 'failed' AND s.consecutive_failures + 1 >= %(disable_after)s),
       disabled_reason = CASE WHEN s.enabled AND %(state)s = 'failed'
                                   AND s.consecutive_failures + 1 >= %(disable_after)s
                              THEN 'disabled after ' || (s.consecutive_failures + 1)
                                   || ' failed messages in a row; last: '
                                   || coalesce(%(error)s, %(result)s)
                              ELSE s.disabled_reason END,
       disabled_at = CASE WHEN s.enabled AND %(state)s = 'failed'
                               AND s.consecutive_failures + 1 >= %(disable_after)s
                          THEN now() ELSE s.disabled_at END
  FROM o
 WHERE s.id = o.sink_id
RETURNING s.enabled

-- name: fail_pending_of_disabled
UPDATE sink_outbox o SET state = 'failed', finished_at = now(), locked_until = NULL,
       last_error = coalesce(o.last_error, 'sink disabled')
  FROM notification_sinks s
 WHERE s.id = o.sink_id AND NOT s.enabled AND o.state = 'pending'

-- name: prune_finished
DELETE FROM sink_outbox
 WHERE id IN (SELECT id FROM sink_outbox
               WHERE state <> 'pending' AND finished_at < now() - make_interval(days => %(days)s)
               LIMIT 5000)

-- name: next_due_in
SELECT extract(epoch FROM min(next_attempt_at) - now())::float AS seconds
  FROM sink_outbox WHERE state = 'pending'
