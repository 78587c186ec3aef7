-- The single-column CHECKs of the two hot tables as domains on their columns (issue 17; docs/decisions.md
-- D46, docs/benchmarks.md "Per-claim levers").
--
-- PostgreSQL checks every CHECK constraint of a table on every row an INSERT or UPDATE writes, whichever
-- columns it sets, and it reads the constraints' stored expression trees back from text (stringToNode)
-- and compiles them once per statement execution: a prepared statement does not keep them. The 21
-- CHECKs of `todos` and `todo_attempts` are about 19 kB of such text, and a claim + complete writes
-- each table twice, so about 13 % of PostgreSQL's CPU per cycle went there (perf, D46). A domain's
-- constraint is kept compiled in the backend's type cache and is checked only where a value is assigned
-- to the column, so an UPDATE that sets `state` checks `state` and nothing else. The rules are the same
-- ones, with the same SQLSTATE (23514) on a violation; the checks that compare columns stay table CHECKs.
--
-- Changing a column's type rewrites the table and rebuilds its indexes (an ACCESS EXCLUSIVE lock for
-- as long as that takes), and PostgreSQL refuses while a trigger names the column: the two triggers
-- that fire on `UPDATE OF state` are dropped first and created again from their own definitions.

CREATE DOMAIN todo_state AS text
    CHECK (VALUE IN ('pending', 'claimed', 'done', 'failed', 'canceled', 'input-required'));
CREATE DOMAIN attempt_outcome AS text
    CHECK (VALUE IN ('completed', 'failed', 'released', 'lease_expired', 'reaped', 'canceled', 'revoked'));
CREATE DOMAIN attempt_disposition AS text
    CHECK (VALUE IN ('done', 'retry_scheduled', 'dead_lettered', 'requeued', 'canceled'));
CREATE DOMAIN claimer_kind AS text CHECK (VALUE IN ('endpoint', 'owner'));
CREATE DOMAIN count_int AS int CHECK (VALUE >= 0);
CREATE DOMAIN seq_int AS int CHECK (VALUE >= 1);
CREATE DOMAIN max_attempts_int AS int CHECK (VALUE BETWEEN 1 AND 100);
CREATE DOMAIN queue_name AS text CHECK (length(VALUE) BETWEEN 1 AND 128);
CREATE DOMAIN todo_title AS text CHECK (length(VALUE) BETWEEN 1 AND 512);
CREATE DOMAIN report_text AS text CHECK (octet_length(VALUE) <= 2048);
CREATE DOMAIN artifact_text AS text CHECK (octet_length(VALUE) <= 512);
CREATE DOMAIN claimant_text AS text CHECK (octet_length(VALUE) <= 128);
CREATE DOMAIN token_hash AS bytea CHECK (length(VALUE) = 32);
CREATE DOMAIN note_list AS jsonb CHECK (jsonb_typeof(VALUE) = 'array');

DO $$
DECLARE
    kept text[];
    def text;
BEGIN
    SELECT array_agg(pg_get_triggerdef(oid) ORDER BY tgname) INTO kept FROM pg_trigger
     WHERE tgrelid = 'todos'::regclass AND tgname IN ('todos_transition_events', 'todos_sink_dead_letter');
    IF cardinality(kept) IS DISTINCT FROM 2 THEN
        RAISE EXCEPTION 'migration 0026: expected the two transition triggers on todos, found %', kept;
    END IF;
    DROP TRIGGER todos_transition_events ON todos;
    DROP TRIGGER todos_sink_dead_letter ON todos;

    ALTER TABLE todos
        DROP CONSTRAINT todos_state_check, ALTER COLUMN state TYPE todo_state,
        DROP CONSTRAINT todos_attempt_check, ALTER COLUMN attempt TYPE count_int,
        DROP CONSTRAINT todos_attempts_total_check, ALTER COLUMN attempts_total TYPE count_int,
        DROP CONSTRAINT todos_attempts_pruned_check, ALTER COLUMN attempts_pruned TYPE count_int,
        DROP CONSTRAINT todos_max_attempts_check, ALTER COLUMN max_attempts TYPE max_attempts_int,
        DROP CONSTRAINT todos_title_check, ALTER COLUMN title TYPE todo_title,
        DROP CONSTRAINT todos_input_request_check, ALTER COLUMN input_request TYPE report_text,
        DROP CONSTRAINT todos_queue_check, ALTER COLUMN queue TYPE queue_name,
        ADD CONSTRAINT todos_team_queue CHECK ((team_id IS NOT NULL) = (queue LIKE 'team:%/%'));

    ALTER TABLE todo_attempts
        DROP CONSTRAINT todo_attempts_seq_check, ALTER COLUMN seq TYPE seq_int,
        DROP CONSTRAINT todo_attempts_attempt_check, ALTER COLUMN attempt TYPE count_int,
        DROP CONSTRAINT todo_attempts_claimer_kind_check, ALTER COLUMN claimer_kind TYPE claimer_kind,
        DROP CONSTRAINT todo_attempts_claimant_check, ALTER COLUMN claimant TYPE claimant_text,
        DROP CONSTRAINT todo_attempts_outcome_check, ALTER COLUMN outcome TYPE attempt_outcome,
        DROP CONSTRAINT todo_attempts_disposition_check, ALTER COLUMN disposition TYPE attempt_disposition,
        DROP CONSTRAINT todo_attempts_summary_check, ALTER COLUMN summary TYPE report_text,
        DROP CONSTRAINT todo_attempts_artifact_check, ALTER COLUMN artifact TYPE artifact_text,
        DROP CONSTRAINT todo_attempts_lease_token_hash_check, ALTER COLUMN lease_token_hash TYPE token_hash,
        DROP CONSTRAINT attempt_notes_array, ALTER COLUMN notes TYPE note_list;

    FOREACH def IN ARRAY kept LOOP
        EXECUTE def;
    END LOOP;
END
$$;

-- Retyping a column drops its statistics: gather them again now where there are rows, rather than
-- leave the claim plans to default estimates until autovacuum comes by. Not on empty tables (a new
-- installation): statistics of an empty table make PostgreSQL plan for one that stays empty, and the
-- claims of a fresh database then ran 40 to 50 % more PostgreSQL CPU until the next autovacuum.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM todos) THEN
        ANALYZE todos;
    END IF;
    IF EXISTS (SELECT 1 FROM todo_attempts) THEN
        ANALYZE todo_attempts;
    END IF;
END
$$;
