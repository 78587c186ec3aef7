-- The index of held leases covers team todos only (issue 17; docs/decisions.md D48).
--
-- `todos_held_by` finds the leases a revoked endpoint or a removed member hands back (teams.sql
-- `hand_back`, which names team todos only). Its predicate did not say so, and every claim records
-- the claiming endpoint, so each claim of an endpoint's own todo added an entry nothing looks up: one
-- of the eleven index entries a claim + complete of such a todo wrote.
DROP INDEX todos_held_by;
CREATE INDEX todos_held_by ON todos (claimed_by_endpoint_id)
    WHERE claimed_by_endpoint_id IS NOT NULL AND team_id IS NOT NULL AND state IN ('claimed', 'input-required');
