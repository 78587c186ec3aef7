-- Failed Board sign-ins counted in the database (docs/decisions.md D64, amending D21).
--
-- The counts that slow down password guessing, per (account, client address) and per address, were
-- kept in each serving process's memory: behind a proxy with N processes a guesser had N times the
-- free failures and N separate doublings, and a restart forgot them. A row per key, shared by every
-- process: the SHA-256 of the key (it holds an account name and an address), the failures counted,
-- and when the last one was. What a key's wait is follows from those two and the key's free count,
-- in the statements of core/sql/signin_failures.sql.

CREATE TABLE signin_failures (
    key_hash bytea PRIMARY KEY CHECK (length(key_hash) = 32),
    failures integer NOT NULL,
    last_at  timestamptz NOT NULL
);
