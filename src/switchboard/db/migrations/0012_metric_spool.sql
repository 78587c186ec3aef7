-- Counting what a process without /metrics commits (SPEC-0034 REQ-14; docs/decisions.md, "Metrics
-- from every process").
--
-- A serving process counts its own transitions in memory after commit. A process that serves no
-- /metrics (the local CLI: `todo fail|release|cancel`, `endpoint revoke`, `sweep --once`, `todo push`)
-- says so on its connections with `-c switchboard.origin=cli`; for those sessions only, the triggers
-- below append one row per counted fact to `metric_spool`, in the transaction of the transition, so
-- the row exists exactly when the transition committed. Serving processes take rows with
-- `DELETE ... FOR UPDATE SKIP LOCKED ... RETURNING` (core/sql/metric_spool.sql) and add each to their
-- counters once. Every other session pays only the trigger's WHEN test: no row, no update.
--
-- Facts: kind 'created' (label: the todo's source), 'claimed' (an attempt opened) and 'closed' (an
-- attempt closed; label: its outcome). The queue is the todo's.

CREATE TABLE metric_spool (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind   text NOT NULL CHECK (kind IN ('created', 'claimed', 'closed')),
    queue  text NOT NULL,
    label  text NOT NULL DEFAULT '',
    at     timestamptz NOT NULL DEFAULT now()
);

-- Bounded: when no serving process ever runs, rows would pile up. Every 1000th row drops what lies
-- more than 100000 rows behind it (rows a serving process is taking at that moment are skipped).
-- Counts dropped that way are lost to /metrics; the attempts themselves stay in todo_attempts.
CREATE FUNCTION switchboard_metric_spool() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    q      text;
    new_id bigint;
BEGIN
    IF TG_TABLE_NAME = 'todos' THEN
        INSERT INTO metric_spool (kind, queue, label)
        VALUES ('created', NEW.queue, coalesce(NEW.source, '')) RETURNING id INTO new_id;
    ELSE
        SELECT t.queue INTO q FROM todos t WHERE t.id = NEW.todo_id;
        IF TG_OP = 'INSERT' THEN
            INSERT INTO metric_spool (kind, queue) VALUES ('claimed', coalesce(q, '')) RETURNING id INTO new_id;
        ELSE
            INSERT INTO metric_spool (kind, queue, label)
            VALUES ('closed', coalesce(q, ''), NEW.outcome) RETURNING id INTO new_id;
        END IF;
    END IF;
    IF new_id % 1000 = 0 THEN
        DELETE FROM metric_spool WHERE id IN (
            SELECT s.id FROM metric_spool s WHERE s.id <= new_id - 100000 FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER todos_metric_spool AFTER INSERT ON todos
    FOR EACH ROW WHEN (current_setting('switchboard.origin', true) = 'cli')
    EXECUTE FUNCTION switchboard_metric_spool();

CREATE TRIGGER attempts_opened_metric_spool AFTER INSERT ON todo_attempts
    FOR EACH ROW WHEN (current_setting('switchboard.origin', true) = 'cli' AND NEW.ended_at IS NULL)
    EXECUTE FUNCTION switchboard_metric_spool();

CREATE TRIGGER attempts_closed_metric_spool AFTER UPDATE OF ended_at ON todo_attempts
    FOR EACH ROW WHEN (current_setting('switchboard.origin', true) = 'cli'
                       AND OLD.ended_at IS NULL AND NEW.ended_at IS NOT NULL)
    EXECUTE FUNCTION switchboard_metric_spool();
