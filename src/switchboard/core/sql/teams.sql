-- Teams, their members and the team queues granted to endpoints (migration 0016).

-- name: create
WITH t AS (
    INSERT INTO teams (slug, name) VALUES (%(slug)s, %(name)s)
    ON CONFLICT (slug) DO NOTHING
    RETURNING *
), m AS (
    INSERT INTO team_members (team_id, human_id, role)
    SELECT t.id, %(human_id)s, 'owner' FROM t
    RETURNING role
)
SELECT t.*, (SELECT role FROM m) AS role FROM t

-- name: for_human
-- The teams a human belongs to, with their role and member count.
SELECT tm.*, m.role, (SELECT count(*)::int FROM team_members x WHERE x.team_id = tm.id) AS members
  FROM team_members m JOIN teams tm ON tm.id = m.team_id
 WHERE m.human_id = %(human_id)s
 ORDER BY tm.slug

-- name: membership
-- A team by slug with the calling human's role; no row when the team is absent or the human is not a
-- member (the same answer: outside reach is not_found). `lock` takes the team's row for a change of
-- membership so that two changes to one team are serialised (the last owner stays).
SELECT tm.*, m.role FROM teams tm JOIN team_members m ON m.team_id = tm.id
 WHERE tm.slug = %(slug)s AND m.human_id = %(human_id)s

-- name: lock_team
SELECT id FROM teams WHERE id = %(team_id)s FOR UPDATE

-- name: members
SELECT h.id AS human_id, h.name, m.role, m.added_at
  FROM team_members m JOIN humans h ON h.id = m.human_id
 WHERE m.team_id = %(team_id)s
 ORDER BY CASE m.role WHEN 'owner' THEN 0 WHEN 'admin' THEN 1 ELSE 2 END, h.name

-- name: member_role
SELECT m.role FROM team_members m WHERE m.team_id = %(team_id)s AND m.human_id = %(human_id)s

-- name: owners
SELECT count(*)::int AS n FROM team_members WHERE team_id = %(team_id)s AND role = 'owner'

-- name: add_member
INSERT INTO team_members (team_id, human_id, role)
VALUES (%(team_id)s, %(human_id)s, %(role)s)
ON CONFLICT (team_id, human_id) DO NOTHING
RETURNING *

-- name: set_role
UPDATE team_members SET role = %(role)s
 WHERE team_id = %(team_id)s AND human_id = %(human_id)s
RETURNING *

-- name: remove_member
DELETE FROM team_members WHERE team_id = %(team_id)s AND human_id = %(human_id)s RETURNING *

-- name: human_endpoints
-- Every endpoint of a human's agents (a removed member's endpoints hand back their team leases).
SELECT e.id FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE g.human_id = %(human_id)s

-- name: lock_member_grants
-- Before drop_member_grants, in its transaction: the human's grants in the team, locked in key order
-- (endpoint, queue), the order in which a claim over several team queues share-locks its grants.
-- Deleted in the order a scan met them, a removal could hold a claim's next grant while the claim
-- held the one the removal waited for.
SELECT endpoint_id, queue FROM team_grants
 WHERE team_id = %(team_id)s AND human_id = %(human_id)s
 ORDER BY endpoint_id, queue FOR UPDATE

-- name: drop_member_grants
DELETE FROM team_grants WHERE team_id = %(team_id)s AND human_id = %(human_id)s RETURNING endpoint_id, queue

-- name: hand_back
-- The team leases held by %(endpoint_ids)s (in %(team_id)s, or every team when null; on %(queue)s, or
-- every queue when null), and those of %(team_id)s held by the human whose owner string is %(owner)s
-- (a member's own claim from the Board, when that member leaves; null for none), go back to pending:
-- the open attempt closes with %(outcome)s (`released` for a member's removal or an ungrant, `revoked`
-- for a revoked endpoint) and disposition `requeued`, and the hand-back does not count as an attempt
-- (docs/decisions.md D32). One statement, inside the caller's transaction.
WITH t AS (
    SELECT todos.id, todos.attempts_total FROM todos
     WHERE (todos.claimed_by_endpoint_id = ANY(%(endpoint_ids)s::uuid[])
            OR (todos.team_id = %(team_id)s::uuid AND todos.owner = %(owner)s::text))
       AND todos.team_id IS NOT NULL
       AND todos.state IN ('claimed', 'input-required')
       AND (%(team_id)s::uuid IS NULL OR todos.team_id = %(team_id)s::uuid)
       AND (%(queue)s::text IS NULL OR todos.queue = %(queue)s::text)
     ORDER BY todos.id  -- id order, as a fleet's batched close locks them (endpoints.sql revoke)
       FOR UPDATE
), a AS (
    -- Never before the claim: a claim that committed while this transaction waited for it has a
    -- later transaction time than ours.
    UPDATE todo_attempts a
       SET ended_at = greatest(now(), a.claimed_at), outcome = %(outcome)s, disposition = 'requeued'
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = 'pending', owner = NULL, lease_expires_at = NULL, claimed_by_endpoint_id = NULL,
           attempt = greatest(x.attempt - 1, 0), updated_at = greatest(now(), x.claimed_at),
           last_ringed_at = NULL,
           ring_attempts = 0
      FROM t
     WHERE x.id = t.id
    RETURNING x.*
)
SELECT u.*, (SELECT to_jsonb(a) FROM a WHERE a.todo_id = u.id) AS closed_attempt FROM u

-- name: lock_members_to_delete
-- Before `delete`, in its transaction and after lock_team: what the delete's cascades would lock in
-- whatever order they run, locked first in the order the team's other work locks it (D65). Members
-- (a team push share-locks the pusher's row), then grants in key order (a claim share-locks them),
-- then the team's todos in id order (a close holds its todo while its triggers read the team's hooks
-- and sinks, which the cascade deletes before it reaches the todos). Work already holding one of these
-- finishes first; work that comes later waits, and then finds the team gone.
SELECT human_id FROM team_members WHERE team_id = %(team_id)s ORDER BY human_id FOR UPDATE

-- name: lock_grants_to_delete
SELECT endpoint_id, queue FROM team_grants WHERE team_id = %(team_id)s ORDER BY endpoint_id, queue FOR UPDATE

-- name: lock_todos_to_delete
SELECT id FROM todos WHERE team_id = %(team_id)s ORDER BY id FOR UPDATE

-- name: delete
DELETE FROM teams WHERE id = %(team_id)s RETURNING slug

-- name: grants
-- The team's grants with each endpoint's slug, agent and human, and whether it still reaches the
-- queue (its human a member, the endpoint live).
SELECT gr.queue, e.slug AS endpoint, g.name AS agent, h.name AS human, gr.granted_at, e.state,
       EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = gr.team_id AND m.human_id = gr.human_id)
           AS member
  FROM team_grants gr
  JOIN endpoints e ON e.id = gr.endpoint_id
  JOIN agents g ON g.id = e.agent_id
  JOIN humans h ON h.id = gr.human_id
 WHERE gr.team_id = %(team_id)s
 ORDER BY gr.queue, e.slug

-- name: queue_counts
-- Live todos of each of the team's queues by state, and its granted queues with none.
SELECT q.queue,
       count(t.id) FILTER (WHERE t.state = 'pending')::int AS pending,
       count(t.id) FILTER (WHERE t.state IN ('claimed', 'input-required'))::int AS in_flight,
       count(t.id) FILTER (WHERE t.state = 'failed' AND t.next_retry_at IS NOT NULL)::int AS parked,
       count(t.id) FILTER (WHERE t.state = 'failed' AND t.next_retry_at IS NULL)::int AS dead
  FROM (SELECT DISTINCT queue FROM todos WHERE team_id = %(team_id)s
        UNION SELECT queue FROM team_grants WHERE team_id = %(team_id)s) q
  LEFT JOIN todos t ON t.team_id = %(team_id)s AND t.queue = q.queue
 GROUP BY q.queue
 ORDER BY q.queue

-- name: endpoint_of_member
-- An endpoint by slug when its human is a member of the team (the endpoints an admin may grant to).
SELECT e.*, g.human_id FROM endpoints e JOIN agents g ON g.id = e.agent_id
 WHERE e.slug = %(slug)s
   AND EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = %(team_id)s AND m.human_id = g.human_id)

-- name: grant
INSERT INTO team_grants (endpoint_id, queue, team_id, human_id, granted_by)
VALUES (%(endpoint_id)s, %(queue)s, %(team_id)s, %(endpoint_human_id)s, %(granted_by)s)
ON CONFLICT (endpoint_id, queue) DO NOTHING
RETURNING *

-- name: add_scope_queue
-- A granted team queue joins the endpoint's scope (once).
UPDATE endpoints SET scope_queues = array_append(scope_queues, %(queue)s::text)
 WHERE id = %(endpoint_id)s AND NOT (%(queue)s::text = ANY(scope_queues))

-- name: lock_endpoint_grants
-- Before ungrant, in its transaction: every grant of the endpoint, locked in queue order. A claim
-- over several team queues share-locks its first grant, then the endpoint, then its next grants; an
-- ungrant that deleted a later grant and then waited to update the endpoint (drop_scope_queue)
-- deadlocked with it (tests/test_lock_order.py).
SELECT queue FROM team_grants WHERE endpoint_id = %(endpoint_id)s ORDER BY queue FOR UPDATE

-- name: ungrant
DELETE FROM team_grants WHERE endpoint_id = %(endpoint_id)s AND queue = %(queue)s RETURNING *

-- name: drop_scope_queue
-- An ungranted team queue leaves the endpoint's scope, unless it is the only queue (the scope keeps
-- at least one; without the grant the label reaches nothing).
UPDATE endpoints SET scope_queues = array_remove(scope_queues, %(queue)s::text)
 WHERE id = %(endpoint_id)s AND cardinality(scope_queues) > 1

-- name: team_of_label
-- The team a team-queue label names, with the calling human's role (no row: absent or not a member).
SELECT tm.id, tm.slug, m.role FROM teams tm JOIN team_members m ON m.team_id = tm.id
 WHERE tm.slug = %(slug)s AND m.human_id = %(human_id)s

-- name: ring_candidates
-- The live endpoints that reach a team queue now (granted, their human a member), least recently
-- rung first: the doorbell rings one of them per ready todo (issue 13).
SELECT gr.endpoint_id FROM team_grants gr
  JOIN team_members m ON m.team_id = gr.team_id AND m.human_id = gr.human_id
  JOIN endpoints e ON e.id = gr.endpoint_id
 WHERE gr.team_id = %(team_id)s AND gr.queue = %(queue)s
   AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())

-- name: reached_teams
-- The teams whose queues among %(team_queues)s the endpoint reaches now.
SELECT DISTINCT g.team_id FROM team_grants g
  JOIN team_members m ON m.team_id = g.team_id AND m.human_id = g.human_id
 WHERE g.endpoint_id = %(endpoint_id)s::uuid AND g.queue = ANY(%(team_queues)s::text[])
