-- Agents and their vended endpoints.

-- name: upsert_agent
INSERT INTO agents (human_id, name) VALUES (%(human_id)s, %(name)s)
ON CONFLICT (human_id, name) DO UPDATE SET name = EXCLUDED.name
RETURNING *

-- name: insert_endpoint
INSERT INTO endpoints (agent_id, slug, credential_hash, credential_prefix, scope_verbs, scope_queues,
                       default_lease_ttl_seconds, expires_at)
VALUES (%(agent_id)s, %(slug)s, %(credential_hash)s, %(prefix)s, %(verbs)s, %(queues)s,
        %(lease_ttl)s, %(expires_at)s)
RETURNING *

-- name: by_credential
-- Active, unexpired endpoint for a credential hash (the MCP bearer check).
SELECT e.*, g.name AS agent_name, g.human_id
  FROM endpoints e JOIN agents g ON g.id = e.agent_id
 WHERE e.credential_hash = %(hash)s AND e.state = 'active'
   AND (e.expires_at IS NULL OR e.expires_at > now())

-- name: touch
UPDATE endpoints SET last_used_at = now()
 WHERE id = %(id)s AND (last_used_at IS NULL OR last_used_at < now() - interval '30 seconds')

-- name: for_human
SELECT e.*, g.name AS agent_name, g.human_id
  FROM endpoints e JOIN agents g ON g.id = e.agent_id
 WHERE g.human_id = %(human_id)s
 ORDER BY e.created_at DESC

-- name: by_slug_for_human
SELECT e.*, g.name AS agent_name, g.human_id
  FROM endpoints e JOIN agents g ON g.id = e.agent_id
 WHERE e.slug = %(slug)s AND g.human_id = %(human_id)s

-- name: by_slug_any
-- An endpoint by slug whoever owns it (a team admin taking a team queue back from a member's endpoint,
-- after the team's own checks).
SELECT e.*, g.human_id FROM endpoints e JOIN agents g ON g.id = e.agent_id WHERE e.slug = %(slug)s

-- name: by_id
SELECT e.*, g.name AS agent_name, g.human_id
  FROM endpoints e JOIN agents g ON g.id = e.agent_id
 WHERE e.id = %(id)s

-- name: lock_for_revoke
-- First statement of a revocation's transaction: waits for pushes holding the endpoint's row (see
-- todos.create), so that the cascade below, a later statement, sees every todo they committed.
SELECT id FROM endpoints WHERE id = %(endpoint_id)s FOR NO KEY UPDATE

-- name: revoke
-- The revocation cascade (SYSTEM.md section 6, last row): the endpoint stops, every live todo of it
-- becomes a dead letter, and each open attempt closes `revoked` / `dead_lettered`. One statement;
-- `prior_state` is each todo's state when locked. A claim that committed while this statement waited
-- for its todo opened an attempt this statement cannot see (its snapshot predates the wait): such a
-- todo, held with no attempt closed here, is closed by `revoke_unseen_attempts`, the next statement.
WITH ep AS (
    UPDATE endpoints SET state = 'revoked', revoked_at = now()
     WHERE id = %(endpoint_id)s AND state = 'active'
    RETURNING id
), t AS (
    -- Locked in id order, as every statement that locks several todos locks them (a batched close
    -- sorts its items so): in another order a revocation and a batch could each hold what the other
    -- waits for (tests/test_lock_order.py).
    SELECT todos.id, todos.attempts_total, todos.state AS prior_state FROM todos JOIN ep ON todos.endpoint_id = ep.id
     WHERE todos.state IN ('pending', 'claimed', 'input-required')
        OR (todos.state = 'failed' AND todos.next_retry_at IS NOT NULL)
     ORDER BY todos.id
       FOR UPDATE OF todos
), a AS (
    -- Never before the claim: a claim that committed while this transaction waited for it has a
    -- later transaction time than ours.
    UPDATE todo_attempts a
       SET ended_at = greatest(now(), a.claimed_at), outcome = 'revoked', disposition = 'dead_lettered'
      FROM t
     WHERE a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
    RETURNING a.*
), u AS (
    UPDATE todos x
       SET state = 'failed', next_retry_at = NULL, lease_expires_at = NULL, owner = NULL,
           result = '{"error": "endpoint_revoked", "detail": "the endpoint was revoked; no session can claim it"}'::jsonb,
           completed_at = greatest(now(), x.claimed_at), updated_at = greatest(now(), x.claimed_at)
      FROM t
     WHERE x.id = t.id
    RETURNING x.*
)
SELECT (SELECT count(*) FROM ep) AS revoked,
       u.*, (SELECT to_jsonb(a) FROM a WHERE a.todo_id = u.id) AS closed_attempt,
       (SELECT t.prior_state FROM t WHERE t.id = u.id) AS prior_state
  FROM (SELECT 1) one LEFT JOIN u ON true

-- name: revoke_unseen_attempts
-- After `revoke`, in its transaction: the open attempts of %(ids)s, todos it dead-lettered while held
-- without closing an attempt, which claims committed while it waited had opened.
UPDATE todo_attempts a
   SET ended_at = greatest(now(), a.claimed_at), outcome = 'revoked', disposition = 'dead_lettered'
  FROM todos t
 WHERE t.id = ANY(%(ids)s::text[]) AND a.todo_id = t.id AND a.seq = t.attempts_total AND a.ended_at IS NULL
RETURNING a.todo_id, to_jsonb(a) AS closed_attempt

-- name: by_credential_any_state
-- The endpoint a credential belongs to, whatever its state: only to answer an open MCP session of a
-- revoked endpoint with a refusal it can read (mcp/auth.py); never to authenticate.
SELECT e.*, g.name AS agent_name, g.human_id
  FROM endpoints e JOIN agents g ON g.id = e.agent_id
 WHERE e.credential_hash = %(hash)s

-- name: not_live
-- Which of these endpoints are revoked, expired or gone (after a lost LISTEN connection).
SELECT x.id FROM unnest(%(ids)s::uuid[]) AS x(id)
 WHERE NOT EXISTS (SELECT 1 FROM endpoints e
                    WHERE e.id = x.id AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now()))
