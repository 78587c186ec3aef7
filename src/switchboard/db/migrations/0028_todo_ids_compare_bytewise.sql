-- Todo ids compare byte by byte (issue 17; docs/decisions.md D49).
--
-- A todo id is `td_` and a UUID: opaque ASCII whose order means nothing. Compared under the
-- database's collation, every step of every B-tree descent by id (each claim, close and attempt
-- lookup makes several) goes through the C library's locale comparison; under the "C" collation it
-- is one memcmp. With the embedded server's C.UTF-8 that was 2 to 6 % of PostgreSQL's CPU per todo on
-- the batch and per-claim paths (bench/group_bench.py); under a language collation such as
-- en_US.UTF-8 each comparison costs more. The columns that hold todo ids and are compared with them
-- change together, so no comparison mixes two collations. Changing only the collation keeps the rows
-- as they are; PostgreSQL rebuilds the indexes on these columns.
ALTER TABLE todos ALTER COLUMN id TYPE text COLLATE "C";
ALTER TABLE todo_attempts ALTER COLUMN todo_id TYPE text COLLATE "C";
ALTER TABLE hook_outbox ALTER COLUMN todo_id TYPE text COLLATE "C";
ALTER TABLE intake_seen ALTER COLUMN todo_id TYPE text COLLATE "C";
