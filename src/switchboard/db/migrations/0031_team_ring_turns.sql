-- One ring per team todo across every serving process (issue 13: "a push to a team queue rings one
-- live session among the eligible endpoints ... not every session"; docs/decisions.md D35, amended).
--
-- Each process holds its own sessions, so each chose among its own and a push rang one session per
-- process. Now a process that has a session to ring for a team todo's wake-up first takes the ring's
-- turn here; the first process to take it rings, the others stand down. A turn is named by the todo,
-- the version of it that is ready (`version`, its updated_at: a push, a release or a re-queue make a
-- new one), the re-rings counted on it (`rings`: each re-ring is a new turn), and the slot (a bulk
-- push's wake-up stands for `count` todos and rings that many sessions: slots 1..count).
--
-- Unlogged: a turn matters for the seconds every process takes to hear one wake-up, and after a
-- crash an empty table only means a ring may reach one session per process once. The doorbell's
-- sweep tick drops turns older than ten minutes.
CREATE UNLOGGED TABLE team_ring_turns (
    todo_id  text NOT NULL,
    version  timestamptz NOT NULL,
    rings    int NOT NULL,
    slot     int NOT NULL,
    taken_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (todo_id, version, rings, slot)
);
CREATE INDEX team_ring_turns_age ON team_ring_turns (taken_at);
