-- SPEC-0034 REQ-3: an owner extending an agent's lease is not the holder's heartbeat. The attempt
-- keeps `last_heartbeat_at` for the holder's own heartbeats and records the owner's extension apart.
ALTER TABLE todo_attempts ADD COLUMN owner_extended_at timestamptz;
