-- Webhook intake (migration 0006): intakes, their quarantine and the delivery ids already seen.
-- Every owner statement predicates on the owning human: another human's intake matches nothing.

-- name: insert
INSERT INTO intakes (human_id, name, endpoint_id, queue, token_hash, token_prefix, source, secret, rules)
VALUES (%(human_id)s, %(name)s, %(endpoint_id)s, %(queue)s, %(token_hash)s, %(token_prefix)s, %(source)s,
        %(secret)s, %(rules)s)
ON CONFLICT (human_id, name) DO NOTHING
RETURNING id

-- name: list_for_human
SELECT i.id, i.name, i.queue, i.token_prefix, i.source, i.rules, i.enabled, i.created_at, i.accepted,
       i.duplicates, i.quarantined, i.verify_failures, i.last_delivery_at, i.last_failure_at,
       e.slug AS endpoint_slug, e.state AS endpoint_state,
       (SELECT count(*) FROM intake_quarantine q WHERE q.intake_id = i.id)::int AS held
  FROM intakes i JOIN endpoints e ON e.id = i.endpoint_id
 WHERE i.human_id = %(human_id)s
 ORDER BY i.name

-- name: one_for_human
-- By id or by name; never the secret or the token hash.
SELECT i.id, i.name, i.queue, i.token_prefix, i.source, i.rules, i.enabled, i.created_at, i.accepted,
       i.duplicates, i.quarantined, i.verify_failures, i.last_delivery_at, i.last_failure_at,
       e.slug AS endpoint_slug, e.state AS endpoint_state,
       (SELECT count(*) FROM intake_quarantine q WHERE q.intake_id = i.id)::int AS held
  FROM intakes i JOIN endpoints e ON e.id = i.endpoint_id
 WHERE i.human_id = %(human_id)s AND (i.id::text = %(ref)s OR i.name = %(ref)s)
 ORDER BY (i.id::text = %(ref)s) DESC
 LIMIT 1

-- name: set_rules
UPDATE intakes SET rules = %(rules)s WHERE id = %(id)s AND human_id = %(human_id)s RETURNING id

-- name: set_enabled
UPDATE intakes SET enabled = %(enabled)s WHERE id = %(id)s AND human_id = %(human_id)s RETURNING id

-- name: remove_for_human
DELETE FROM intakes WHERE id = %(id)s AND human_id = %(human_id)s RETURNING id, name

-- name: by_token
-- The receiving route's lookup: the intake of a URL token, with what verifying and routing need.
-- A disabled human's intakes answer like unknown ones (as their API tokens do).
SELECT i.id, i.human_id, i.name, i.queue, i.source, i.secret, i.rules, i.token_hash,
       e.slug AS endpoint_slug
  FROM intakes i JOIN endpoints e ON e.id = i.endpoint_id JOIN humans h ON h.id = i.human_id
 WHERE i.token_hash = %(token_hash)s AND i.enabled AND h.disabled_at IS NULL

-- name: lock_live
-- The intake's row, first in each transaction that writes rows referencing it (a seen delivery, a
-- quarantined one) or its counters. A removal in flight makes this wait, and then it matches nothing:
-- without it, such a write waited for the removal and failed its foreign-key check (23503), and a
-- replay holding a quarantined row deadlocked with the removal's cascade to it.
SELECT id FROM intakes WHERE id = %(id)s FOR NO KEY UPDATE

-- name: count_verify_failure
UPDATE intakes SET verify_failures = verify_failures + 1, last_failure_at = now() WHERE id = %(id)s

-- name: count_delivery
UPDATE intakes
   SET accepted = accepted + %(accepted)s, duplicates = duplicates + %(duplicates)s,
       quarantined = quarantined + %(quarantined)s, last_delivery_at = now()
 WHERE id = %(id)s

-- name: count_replayed
-- A quarantined delivery that became a todo on replay: accepted after all, and no longer quarantined.
UPDATE intakes SET accepted = accepted + 1 WHERE id = %(id)s

-- name: seen_get
SELECT todo_id FROM intake_seen WHERE intake_id = %(intake_id)s AND delivery = %(delivery)s

-- name: seen_put
INSERT INTO intake_seen (intake_id, delivery, todo_id) VALUES (%(intake_id)s, %(delivery)s, %(todo_id)s)
ON CONFLICT (intake_id, delivery) DO NOTHING

-- name: quarantine_insert
INSERT INTO intake_quarantine (intake_id, event, delivery, document, reason)
VALUES (%(intake_id)s, %(event)s, %(delivery)s, %(document)s, %(reason)s)
RETURNING id

-- name: quarantine_trim
-- Keep the newest `keep` deliveries of one intake.
DELETE FROM intake_quarantine
 WHERE intake_id = %(intake_id)s
   AND id NOT IN (SELECT id FROM intake_quarantine WHERE intake_id = %(intake_id)s
                   ORDER BY id DESC LIMIT %(keep)s)

-- name: quarantine_list
SELECT id, received_at, event, delivery, reason, replays, octet_length(document::text) AS size
  FROM intake_quarantine WHERE intake_id = %(intake_id)s
 ORDER BY id DESC LIMIT %(limit)s

-- name: quarantine_list_documents
SELECT id, received_at, event, delivery, reason, replays, document
  FROM intake_quarantine WHERE intake_id = %(intake_id)s
 ORDER BY id DESC LIMIT %(limit)s

-- name: quarantine_get
SELECT id, received_at, event, delivery, reason, replays, document
  FROM intake_quarantine WHERE intake_id = %(intake_id)s AND id = %(id)s

-- name: quarantine_delete
DELETE FROM intake_quarantine WHERE intake_id = %(intake_id)s AND id = %(id)s RETURNING id

-- name: quarantine_still_held
UPDATE intake_quarantine SET reason = %(reason)s, replays = replays + 1
 WHERE intake_id = %(intake_id)s AND id = %(id)s

-- name: prune_quarantine
DELETE FROM intake_quarantine WHERE received_at < now() - make_interval(days => %(days)s)

-- name: prune_seen
DELETE FROM intake_seen WHERE seen_at < now() - make_interval(days => %(days)s)
