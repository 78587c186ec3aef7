-- The doorbell's reads and its re-ring (SYSTEM.md section 10). Rings never change a todo's state.

-- name: pending_by_ids
-- The todos named by wake-ups that are still waiting to be claimed, each with whether admission
-- control holds its queue back now (`held`: no push for it), and for a team todo the version that is
-- ready and its re-rings, which name its ring's turn (take_team_turns).
SELECT t.id, t.endpoint_id, t.team_id, t.queue, t.title, t.kind, t.source, t.updated_at, t.ring_attempts,
       {{held_back}} AS held FROM todos t
 WHERE t.id = ANY(%(ids)s::text[]) AND t.state = 'pending'

-- name: oldest_pending
-- The oldest pending todos of one endpoint over some of its queues, one index probe per queue; the
-- team queues among them count only while the endpoint reaches them (`team_targets`). `held`: as in
-- pending_by_ids.
SELECT t.id, t.endpoint_id, t.team_id, t.queue, t.title, t.kind, t.source, {{held_back}} AS held
  FROM (SELECT NULL::uuid AS team_id, name FROM unnest(%(queues)s::text[]) AS u(name)
         WHERE name NOT LIKE 'team:%%'
        UNION ALL
        SELECT * FROM ({{team_targets}}) g) AS q,
       LATERAL (SELECT id, endpoint_id, team_id, queue, title, kind, source, created_at FROM todos
                 WHERE ((q.team_id IS NULL AND endpoint_id = %(endpoint_id)s::uuid)
                        OR (q.team_id IS NOT NULL AND team_id = q.team_id))
                   AND queue = q.name AND state = 'pending'
                 ORDER BY created_at LIMIT %(limit)s) t
 ORDER BY t.created_at
 LIMIT %(limit)s


-- name: rering_due
-- Pending todos nobody claimed, rung again on a widening interval: the k-th re-ring is due
-- intervals[min(k, n)] seconds after the last ring (or after the todo became pending), at most 5
-- re-rings, at most `per_endpoint` per endpoint (or per team queue among %(team_queues)s, the labels
-- the process's sessions name) per tick. The ring is counted in this statement and the wake-up
-- leaves at its commit, so every process rings its own sessions (a team todo's, one of them). A todo
-- whose queue admission control holds back is not due: its ring would reach nobody (D56), and its
-- queue is rung when it reopens.
WITH due AS (
    SELECT id FROM (
        SELECT t.id, row_number() OVER (PARTITION BY t.endpoint_id, CASE WHEN t.endpoint_id IS NULL THEN t.queue END
                                        ORDER BY coalesce(t.last_ringed_at, t.updated_at)) AS rn
          FROM todos t
         WHERE (t.endpoint_id = ANY(%(endpoints)s::uuid[])
                OR (t.endpoint_id IS NULL AND t.queue = ANY(%(team_queues)s::text[])))
           AND t.state = 'pending' AND t.ring_attempts < 5
           AND coalesce(t.last_ringed_at, t.updated_at) <= now() - make_interval(secs => %(min_interval)s)
           AND coalesce(t.last_ringed_at, t.updated_at)
               <= now() - make_interval(secs => (%(intervals)s::float8[])[
                      least(t.ring_attempts + 1, cardinality(%(intervals)s::float8[]))])
           AND NOT {{held_back}}
    ) ranked
     WHERE rn <= %(per_endpoint)s
), locked AS (
    -- The dueness again, on the row version this locks: a todo another process rang after this
    -- statement's snapshot is no longer due (sinks.sql's claim_due says why).
    SELECT todos.id FROM todos
     WHERE todos.id IN (SELECT id FROM due) AND todos.state = 'pending' AND todos.ring_attempts < 5
       AND coalesce(todos.last_ringed_at, todos.updated_at)
           <= now() - make_interval(secs => (%(intervals)s::float8[])[
                  least(todos.ring_attempts + 1, cardinality(%(intervals)s::float8[]))])
       FOR UPDATE SKIP LOCKED
)
UPDATE todos x
   SET last_ringed_at = now(), ring_attempts = x.ring_attempts + 1
  FROM locked
 WHERE x.id = locked.id
RETURNING x.id, x.ring_attempts,
          pg_notify('switchboard_ready', json_build_object('todo_id', x.id, 'endpoint_id', x.endpoint_id,
                                                           'team_id', x.team_id, 'queue', x.queue,
                                                           'reason', 'rering')::text) AS rang

-- name: oldest_in_team_queue
-- The oldest pending todo of one team queue (a queue that reopened after admission held it back; an
-- endpoint's own queue is read with oldest_pending).
SELECT id, endpoint_id, team_id, queue, title, kind, source FROM todos
 WHERE team_id = %(team_id)s::uuid AND queue = %(queue)s AND state = 'pending'
 ORDER BY created_at LIMIT 1

-- name: take_team_turns
-- Up to %(want)s of the %(slots)s turns of one ring of a team todo (migration 0031): the slots no
-- process took yet, taken for this one. Two processes taking at once split them (a slot goes to
-- whichever inserts it first), so each slot rings one session in all.
WITH free AS (
    SELECT k FROM generate_series(1, %(slots)s::int) AS k
     WHERE NOT EXISTS (SELECT 1 FROM team_ring_turns r
                        WHERE r.todo_id = %(todo_id)s AND r.version = %(version)s
                          AND r.rings = %(rings)s AND r.slot = k)
     ORDER BY k
     LIMIT %(want)s
)
INSERT INTO team_ring_turns (todo_id, version, rings, slot)
SELECT %(todo_id)s, %(version)s, %(rings)s, k FROM free
ON CONFLICT DO NOTHING
RETURNING slot

-- name: prune_team_turns
-- Turns are needed while every process hears one wake-up: seconds. Older ones go.
DELETE FROM team_ring_turns WHERE taken_at < now() - interval '10 minutes'
