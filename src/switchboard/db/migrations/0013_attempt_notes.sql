-- Progress notes on attempts (issue 16): the holder's heartbeat may carry a short note, kept on its
-- attempt as a JSON array of {"at", "text"}, oldest first, trimmed to the newest
-- inputs.NOTES_MAX_PER_ATTEMPT by the heartbeat's own UPDATE (docs/decisions.md). A constant default:
-- adding the column rewrites no row.
ALTER TABLE todo_attempts
    ADD COLUMN notes jsonb NOT NULL DEFAULT '[]'::jsonb
        CONSTRAINT attempt_notes_array CHECK (jsonb_typeof(notes) = 'array');
