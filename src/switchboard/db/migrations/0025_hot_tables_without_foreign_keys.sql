-- The hot tables' references checked by the statements that write them, not by foreign-key triggers
-- (issue 17; docs/decisions.md D42, docs/benchmarks.md "Bulk push" and "Batched claims").
--
-- A foreign key checks each inserted or re-pointed row on its own: PostgreSQL runs one lookup query,
-- with its own executor, per row. On the paths issue 17 measures that is most of the difference from
-- the bare statements: a bulk push of 1,000 todos ran 1,000 lookups of the same endpoint (about a third
-- of PostgreSQL's time for the statement: 40,000 to 45,000 todos/s with the keys, 56,000 to 59,000
-- without, in one run), a batch claim one lookup of the todo per attempt opened and one of the endpoint
-- per todo it re-points (`claimed_by_endpoint_id`).
--
-- Every statement that writes these columns already proves the row it names, more strictly than the
-- key did, in the same statement:
--   todos.endpoint_id           inserted only while the endpoint is live, its row share-locked until
--                               commit (`create`, `create_batch*`: the `live` CTE; reliability.md 2);
--   todos.team_id               inserted only while the pushing human is a member, the membership row
--                               share-locked (`create_team*`), and a member's row goes before its team;
--   todos.claimed_by_endpoint_id set by a claim to the calling endpoint, which the claim checks live
--                               (`endpoint_live`) and, on a team queue, share-locks with its grant;
--   todo_attempts.todo_id       inserted by the claim statements for the todo row they just locked and
--                               updated (the claim tail's `opened` CTE).
-- What the keys also did on delete is kept by statement-level triggers (one statement per DELETE, not
-- one per row): deleting an endpoint deletes its todos and clears it as a holder; deleting a team
-- deletes its todos; deleting todos deletes their attempts. The invariant checker asserts that no todo,
-- holder or attempt points at a row that does not exist (core/invariants.py).

ALTER TABLE todos DROP CONSTRAINT todos_endpoint_id_fkey,
                  DROP CONSTRAINT todos_team_id_fkey,
                  DROP CONSTRAINT todos_claimed_by_endpoint_id_fkey;
ALTER TABLE todo_attempts DROP CONSTRAINT todo_attempts_todo_id_fkey;

-- ON DELETE CASCADE of todos.endpoint_id, ON DELETE SET NULL of todos.claimed_by_endpoint_id.
CREATE FUNCTION switchboard_endpoints_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM todos t USING gone g WHERE t.endpoint_id = g.id;
    UPDATE todos t SET claimed_by_endpoint_id = NULL FROM gone g WHERE t.claimed_by_endpoint_id = g.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER endpoints_deleted AFTER DELETE ON endpoints REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION switchboard_endpoints_deleted();

-- ON DELETE CASCADE of todos.team_id.
CREATE FUNCTION switchboard_teams_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM todos t USING gone g WHERE t.team_id = g.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER teams_deleted AFTER DELETE ON teams REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION switchboard_teams_deleted();

-- ON DELETE CASCADE of todo_attempts.todo_id.
CREATE FUNCTION switchboard_todos_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM todo_attempts a USING gone g WHERE a.todo_id = g.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER todos_deleted AFTER DELETE ON todos REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION switchboard_todos_deleted();
