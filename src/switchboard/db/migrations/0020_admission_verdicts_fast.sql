-- A policed claim at the cost of an unpoliced one (issue 13's target; docs/benchmarks.md "Team queues and
-- admission", docs/decisions.md D38). Same results and semantics as migration 0017's verdicts; cheaper:
--
-- 1. Leases in flight are counted per queue identity from the identity's own partial indexes: live
--    leases from `todos_claimed` (an endpoint's queue) or `todos_team_claimed` (a team queue) with
--    `lease_expires_at >= now()`, leases parked for input from `todos_input_required` or
--    `todos_team_input_required`, as separate counts. 0017 counted `state = 'input-required' OR (state =
--    'claimed' AND ...)`: PostgreSQL answered the OR with a bitmap of `todos_lease_sweep` (every lease of
--    the installation) and filtered by queue afterwards.
-- 2. Each count is computed once per policy: an aggregate in a LATERAL subquery is never pulled up
--    into the expressions that use it (0017's CASE expressions repeated the count's subquery).
-- 3. The function's query keeps one generic plan per session (`plan_cache_mode` set on the function):
--    PostgreSQL planned it afresh on every call, about as long as running it.
--
-- Unchanged: the policies are locked first (one statement, in id order) and the verdicts are read by a
-- later statement of this VOLATILE function, with a snapshot taken after the lock, so the counts include
-- every claim committed by an earlier holder of the lock; `cap` is what the policy admits now.

CREATE OR REPLACE FUNCTION switchboard_admission_verdicts(ep uuid, queues text[])
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM admission_policies p
      WHERE p.queue = ANY(queues) AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
      ORDER BY p.id
        FOR UPDATE;
    RETURN QUERY
    SELECT p.id, p.queue, j.why, p.max_in_flight, f.n, p.max_claims_per_window, u.n, w.ws, w.we,
           CASE WHEN j.why = 'admitted' THEN NULL
                WHEN p.team_id IS NULL THEN
                    (SELECT count(*)::int FROM (SELECT 1 FROM todos t
                      WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue AND t.state = 'pending'
                      LIMIT 100000) z)
                ELSE
                    (SELECT count(*)::int FROM (SELECT 1 FROM todos t
                      WHERE t.team_id = p.team_id AND t.queue = p.queue AND t.state = 'pending'
                      LIMIT 100000) z)
           END,
           CASE WHEN j.why = 'window_exhausted' THEN w.we
                WHEN j.why <> 'in_flight_full' THEN NULL
                WHEN p.team_id IS NULL THEN
                    (SELECT min(t.lease_expires_at) FROM todos t
                      WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue AND t.state = 'claimed'
                        AND t.lease_expires_at >= now())
                ELSE
                    (SELECT min(t.lease_expires_at) FROM todos t
                      WHERE t.team_id = p.team_id AND t.queue = p.queue AND t.state = 'claimed'
                        AND t.lease_expires_at >= now())
           END,
           CASE WHEN j.why <> 'admitted' THEN 0
                ELSE least(coalesce(p.max_claims_per_window - u.n, 1000000),
                           coalesce(p.max_in_flight - f.n, 1000000)) END
      FROM admission_policies p
     CROSS JOIN LATERAL (
            SELECT s.ws, switchboard_window_end(p.window_period, p.window_tz, s.ws) AS we
              FROM (SELECT switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                                    p.window_weekday, now()) AS ws OFFSET 0) s) w
     CROSS JOIN LATERAL (SELECT CASE WHEN p.charged_window = w.ws THEN p.charged ELSE 0 END AS n) u
     -- In flight: the identity's live leases plus its leases parked for input, four index probes of
     -- which the two of the other kind of identity (its key null) end at once.
     CROSS JOIN LATERAL (SELECT count(*)::int AS n FROM todos t
                          WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue
                            AND t.state = 'claimed' AND t.lease_expires_at >= now()) ec
     CROSS JOIN LATERAL (SELECT count(*)::int AS n FROM todos t
                          WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue
                            AND t.state = 'input-required') ei
     CROSS JOIN LATERAL (SELECT count(*)::int AS n FROM todos t
                          WHERE t.team_id = p.team_id AND t.team_id IS NOT NULL AND t.queue = p.queue
                            AND t.state = 'claimed' AND t.lease_expires_at >= now()) tc
     CROSS JOIN LATERAL (SELECT count(*)::int AS n FROM todos t
                          WHERE t.team_id = p.team_id AND t.team_id IS NOT NULL AND t.queue = p.queue
                            AND t.state = 'input-required') ti
     CROSS JOIN LATERAL (SELECT ec.n + ei.n + tc.n + ti.n AS n OFFSET 0) f
     CROSS JOIN LATERAL (
            SELECT CASE WHEN p.paused OR p.max_in_flight = 0 OR p.max_claims_per_window = 0 THEN 'paused'
                        WHEN p.max_claims_per_window IS NOT NULL AND u.n >= p.max_claims_per_window
                             THEN 'window_exhausted'
                        WHEN p.max_in_flight IS NOT NULL AND f.n >= p.max_in_flight THEN 'in_flight_full'
                        ELSE 'admitted' END AS why OFFSET 0) j
     WHERE p.queue = ANY(queues) AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
     ORDER BY p.queue;
END
$$;

-- The fast path of a claim on ONE policed queue `q` (core/admission.py, `admit`): the verdict of its
-- policy (locked first, as above) and, when it admits `want` claims (`cap >= want`), those `want` units
-- charged at once, in this statement. The caller sends the claim behind this statement without waiting
-- for it (one round trip for BEGIN, this and the claim) and then commits only when the claim took
-- exactly `want` todos; when it took fewer it charges the difference back (a negative `charge`) before
-- COMMIT, or rolls back when it took none. So every committed claim is charged exactly once, and the
-- lock is held for the claim and the commit only.
-- A refusal (the policy does not admit `want` now) is the error SQLSTATE SBA01, raised before the
-- claim runs: the claim queued behind it is then skipped, the transaction rolls back, and the caller
-- judges again on the locked path that reports the refusal. No row back: `q` has no policy that
-- applies to `ep` (nothing charged).
CREATE FUNCTION switchboard_admission_admit(ep uuid, q text, want int)
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT * FROM switchboard_admission_verdicts(ep, ARRAY[q]) LOOP
        IF v.verdict <> 'admitted' OR v.cap < want THEN
            RAISE EXCEPTION 'admission: % on %', v.verdict, v.queue USING ERRCODE = 'SBA01';
        END IF;
        UPDATE admission_policies p
           SET charged = CASE WHEN p.charged_window = v.window_starts THEN p.charged + want ELSE want END,
               charged_window = v.window_starts
         WHERE p.id = v.policy_id;
        policy_id := v.policy_id; queue := v.queue; verdict := v.verdict; max_in_flight := v.max_in_flight;
        in_flight := v.in_flight; max_claims_per_window := v.max_claims_per_window; used := v.used;
        window_starts := v.window_starts; window_resets := v.window_resets; pending := v.pending;
        next_eligible_at := v.next_eligible_at; cap := v.cap;
        RETURN NEXT;
    END LOOP;
END
$$;
