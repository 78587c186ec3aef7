-- Admission control per queue identity (issue 13; SPEC-0030 facts in docs/admission.md).
--
-- One policy per `(endpoint, queue)` or `(team, queue)`: a cap on leases in flight, a budget of claims
-- per window, a pause switch. A claim on a policed queue runs in a transaction that first locks the
-- policy row, then (a later statement, so with a snapshot taken after the lock) counts what is in
-- flight, claims, and charges the window: concurrent claimers of one queue are serialised on the
-- policy row and never over-admit (core/admission.py).

CREATE TABLE admission_policies (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id           uuid REFERENCES endpoints(id) ON DELETE CASCADE,
    team_id               uuid REFERENCES teams(id) ON DELETE CASCADE,
    queue                 text NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),
    max_in_flight         int CHECK (max_in_flight BETWEEN 0 AND 10000),
    max_claims_per_window int CHECK (max_claims_per_window BETWEEN 0 AND 1000000),
    window_period         text NOT NULL DEFAULT 'hour' CHECK (window_period IN ('hour', 'day', 'week')),
    window_tz             text NOT NULL DEFAULT 'UTC' CHECK (length(window_tz) BETWEEN 1 AND 64),
    window_start_minute   int NOT NULL DEFAULT 0 CHECK (window_start_minute BETWEEN 0 AND 1439),
    window_weekday        int CHECK (window_weekday BETWEEN 1 AND 7),
    paused                boolean NOT NULL DEFAULT false,
    -- The window the charges below belong to (its start), and the units charged in it.
    charged_window        timestamptz,
    charged               int NOT NULL DEFAULT 0 CHECK (charged >= 0),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT admission_one_owner CHECK ((endpoint_id IS NULL) <> (team_id IS NULL)),
    CONSTRAINT admission_team_queue CHECK ((team_id IS NOT NULL) = (queue LIKE 'team:%/%')),
    CONSTRAINT admission_weekday_for_weeks CHECK ((window_weekday IS NOT NULL) = (window_period = 'week'))
);
CREATE UNIQUE INDEX admission_endpoint_queue ON admission_policies (endpoint_id, queue) WHERE endpoint_id IS NOT NULL;
CREATE UNIQUE INDEX admission_team_queue ON admission_policies (team_id, queue) WHERE team_id IS NOT NULL;
-- A team queue's label names its team, so the label alone finds a team policy.
CREATE INDEX admission_queue ON admission_policies (queue);

-- Leases parked for input count as in flight: the index that counts them per queue identity.
CREATE INDEX todos_input_required ON todos (endpoint_id, queue) WHERE state = 'input-required';
CREATE INDEX todos_team_input_required ON todos (team_id, queue)
    WHERE state = 'input-required' AND team_id IS NOT NULL;

-- The start of the window that contains `at`: hourly windows start at the minute of `start_minute`,
-- daily ones at that time of day, weekly ones at that time on ISO weekday `weekday` (1 = Monday),
-- all in time zone `tz`.
CREATE FUNCTION switchboard_window_start(period text, tz text, start_minute int, weekday int, at timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE period
        WHEN 'hour' THEN
            (date_trunc('hour', (at AT TIME ZONE tz) - make_interval(mins => start_minute % 60))
             + make_interval(mins => start_minute % 60)) AT TIME ZONE tz
        WHEN 'day' THEN
            (date_trunc('day', (at AT TIME ZONE tz) - make_interval(mins => start_minute))
             + make_interval(mins => start_minute)) AT TIME ZONE tz
        ELSE
            (date_trunc('week', (at AT TIME ZONE tz) - make_interval(mins => start_minute)
                                - make_interval(days => weekday - 1))
             + make_interval(days => weekday - 1, mins => start_minute)) AT TIME ZONE tz
    END
$$;

-- When the window that starts at `starts` ends (the next one's start), in the same time zone.
CREATE FUNCTION switchboard_window_end(period text, tz text, starts timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT ((starts AT TIME ZONE tz)
            + CASE period WHEN 'hour' THEN interval '1 hour' WHEN 'day' THEN interval '1 day'
                          ELSE interval '7 days' END) AT TIME ZONE tz
$$;

-- The first statement of a claim on policed queues: lock the policies of `queues` that apply to the
-- endpoint `ep` (its own queues, or team labels), then report each one's verdict. A VOLATILE function
-- runs each statement with a fresh snapshot, so the counts below see every claim committed by a
-- transaction that held the lock before us: concurrent claimers cannot both take the last slot.
-- `in_flight` counts live leases and leases parked for input; a lapsed lease does not count (taking
-- it over replaces it). `cap` is how many claims the policy admits now.
CREATE FUNCTION switchboard_admission_verdicts(ep uuid, queues text[])
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM 1 FROM admission_policies p
      WHERE p.queue = ANY(queues) AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
      ORDER BY p.id
        FOR UPDATE;
    RETURN QUERY
    WITH p AS (
        SELECT p.*, switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                             p.window_weekday, now()) AS ws
          FROM admission_policies p
         WHERE p.queue = ANY(queues) AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
    ), c AS (
        SELECT p.*,
               CASE WHEN p.charged_window = p.ws THEN p.charged ELSE 0 END AS used_now,
               CASE WHEN p.team_id IS NULL THEN
                   (SELECT count(*)::int FROM todos t
                     WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue
                       AND (t.state = 'input-required' OR (t.state = 'claimed' AND t.lease_expires_at >= now())))
               ELSE
                   (SELECT count(*)::int FROM todos t
                     WHERE t.team_id = p.team_id AND t.queue = p.queue
                       AND (t.state = 'input-required' OR (t.state = 'claimed' AND t.lease_expires_at >= now())))
               END AS flying
          FROM p
    ), v AS (
        SELECT c.*,
               CASE WHEN c.paused OR c.max_in_flight = 0 OR c.max_claims_per_window = 0 THEN 'paused'
                    WHEN c.max_claims_per_window IS NOT NULL AND c.used_now >= c.max_claims_per_window
                         THEN 'window_exhausted'
                    WHEN c.max_in_flight IS NOT NULL AND c.flying >= c.max_in_flight THEN 'in_flight_full'
                    ELSE 'admitted' END AS why
          FROM c
    )
    SELECT v.id, v.queue, v.why, v.max_in_flight, v.flying, v.max_claims_per_window, v.used_now, v.ws,
           switchboard_window_end(v.window_period, v.window_tz, v.ws),
           CASE WHEN v.why = 'admitted' THEN NULL ELSE
               (SELECT count(*)::int FROM (SELECT 1 FROM todos t
                                            WHERE t.queue = v.queue
                                              AND t.endpoint_id IS NOT DISTINCT FROM v.endpoint_id AND t.team_id IS NOT DISTINCT FROM v.team_id
                                              AND t.state = 'pending' LIMIT 100000) z) END,
           CASE v.why
               WHEN 'window_exhausted' THEN switchboard_window_end(v.window_period, v.window_tz, v.ws)
               WHEN 'in_flight_full' THEN
                   (SELECT min(t.lease_expires_at) FROM todos t
                     WHERE t.queue = v.queue AND t.endpoint_id IS NOT DISTINCT FROM v.endpoint_id AND t.team_id IS NOT DISTINCT FROM v.team_id
                       AND t.state = 'claimed' AND t.lease_expires_at >= now())
               END,
           CASE WHEN v.why <> 'admitted' THEN 0
                ELSE least(coalesce(v.max_claims_per_window - v.used_now, 1000000),
                           coalesce(v.max_in_flight - v.flying, 1000000)) END
      FROM v
     ORDER BY v.queue;
END
$$;
