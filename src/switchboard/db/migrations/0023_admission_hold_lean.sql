-- The one-statement policed claim's admission (migration 0022's `switchboard_admission_hold`), leaner
-- in PostgreSQL (issue 13's target; docs/decisions.md D41, docs/benchmarks.md "Team queues and
-- admission"). Same locks, same check, same row; two costs gone:
--
-- 1. No subtransaction. 0022 locked the shard inside a PL/pgSQL block with an exception handler, so
--    that a failed fast check could release the shard and judge exactly in the same statement. Such a
--    block opens a subtransaction on every call (and the shard's lock then belongs to a subtransaction
--    id of its own), though the fast check almost never fails. Now a failed check is the refusal
--    SQLSTATE SBA01 itself: the statement fails, its rollback releases the shard, nothing was claimed
--    or charged, and the caller judges again on the locked path (core/todos.py `_take_locked`), which
--    locks the policy and its shards and judges exactly, as 0022's in-statement fallback did. Only
--    claims at about three quarters of a cap or beyond pay that second statement, as refusals already
--    did.
-- 2. Smaller plans, each run to the end. The shard is locked below the policy's index probe (a
--    LATERAL subquery on the shards' primary key, in shard order) rather than by a hash join of the
--    two tables and a sort. The verdict is read in this function, by the policy id whose shard it
--    holds, with one query per kind of identity (an endpoint's queue or a team's): no nested
--    set-returning function (`switchboard_admission_judge`, its own executor and tuplestore), and a
--    plan that holds only the two counts of leases in flight it runs, not all four. The reply of a
--    refusal (pending, next eligible) is the locked path's, so this reads none of it.
--
-- Unchanged: the shard is locked first (a free one among the first S, SKIP LOCKED; when every usable
-- one is held, wait for shard pid % S), the verdict's query runs after that lock with a snapshot of its
-- own, and the check is 0021's (in_flight + S·B <= max_in_flight, used + S·B <= max_claims_per_window,
-- the claim's `want` at most B, the shard below S under the policy as now read). So migration 0021's
-- proof holds as it stands: every claim holds a shard from before its verdict's snapshot to its end.
-- The statement that calls it still charges exactly what it claimed to the shard it holds.
CREATE OR REPLACE FUNCTION switchboard_admission_hold(ep uuid, q text, want int)
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int, shard int)
LANGUAGE plpgsql VOLATILE
ROWS 1
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    pid uuid;
    k int;
    n int;
    room int;
    team boolean;
    v record;
BEGIN
    -- The policy (one index probe) and, below it, its first free shard (the primary key's order).
    SELECT p.id, s.shard, p.team_id IS NOT NULL INTO pid, k, team
      FROM admission_policies p
     CROSS JOIN LATERAL (
            SELECT s.shard FROM admission_shards s
             WHERE s.policy_id = p.id
               AND s.shard < switchboard_admission_stripes(p.max_in_flight, p.max_claims_per_window)
             ORDER BY s.shard
             LIMIT 1
               FOR UPDATE SKIP LOCKED) s
     WHERE p.queue = q AND (p.endpoint_id = ep OR p.team_id IS NOT NULL);
    IF NOT FOUND THEN  -- every usable shard is held (or no policy): wait for one
        SELECT p.id, switchboard_admission_stripes(p.max_in_flight, p.max_claims_per_window),
               p.team_id IS NOT NULL INTO pid, n, team
          FROM admission_policies p
         WHERE p.queue = q AND (p.endpoint_id = ep OR p.team_id IS NOT NULL);
        IF NOT FOUND THEN
            RETURN;  -- no policy applies: nothing to judge or charge
        END IF;
        k := pg_backend_pid() % n;
        PERFORM 1 FROM admission_shards s WHERE s.policy_id = pid AND s.shard = k FOR UPDATE;
    END IF;
    -- A later statement: its snapshot is taken after the shard's lock. One statement per kind of
    -- identity, so that each plan holds only the two counts it runs.
    IF team THEN
        SELECT p.queue AS queue, p.max_in_flight AS max_in_flight, p.max_claims_per_window AS max_claims,
               p.paused AS paused, w.ws AS ws, switchboard_window_end(p.window_period, p.window_tz, w.ws) AS we,
               (SELECT coalesce(sum(s.charged), 0)::int FROM admission_shards s
                 WHERE s.policy_id = p.id AND s.charged_window = w.ws) AS used,
               (SELECT count(*)::int FROM todos t
                 WHERE t.team_id = p.team_id AND t.team_id IS NOT NULL AND t.queue = p.queue
                   AND t.state = 'claimed' AND t.lease_expires_at >= now())
             + (SELECT count(*)::int FROM todos t
                 WHERE t.team_id = p.team_id AND t.team_id IS NOT NULL AND t.queue = p.queue
                   AND t.state = 'input-required') AS in_flight
          INTO v
          FROM admission_policies p
         CROSS JOIN LATERAL (SELECT switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                                             p.window_weekday, now()) AS ws OFFSET 0) w
         WHERE p.id = pid AND p.queue = q;
    ELSE
        SELECT p.queue AS queue, p.max_in_flight AS max_in_flight, p.max_claims_per_window AS max_claims,
               p.paused AS paused, w.ws AS ws, switchboard_window_end(p.window_period, p.window_tz, w.ws) AS we,
               (SELECT coalesce(sum(s.charged), 0)::int FROM admission_shards s
                 WHERE s.policy_id = p.id AND s.charged_window = w.ws) AS used,
               (SELECT count(*)::int FROM todos t
                 WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue
                   AND t.state = 'claimed' AND t.lease_expires_at >= now())
             + (SELECT count(*)::int FROM todos t
                 WHERE t.endpoint_id = p.endpoint_id AND t.queue = p.queue AND t.state = 'input-required')
               AS in_flight
          INTO v
          FROM admission_policies p
         CROSS JOIN LATERAL (SELECT switchboard_window_start(p.window_period, p.window_tz, p.window_start_minute,
                                                             p.window_weekday, now()) AS ws OFFSET 0) w
         WHERE p.id = pid AND p.queue = q;
    END IF;
    IF NOT FOUND OR v.paused OR v.max_in_flight = 0 OR v.max_claims = 0 THEN
        RAISE EXCEPTION 'admission: not admitted on %', q USING ERRCODE = 'SBA01';
    END IF;
    n := switchboard_admission_stripes(v.max_in_flight, v.max_claims);
    room := n * switchboard_admission_stripe_take(v.max_in_flight, v.max_claims);
    IF k >= n OR want > room / n
       OR v.in_flight + room > coalesce(v.max_in_flight, 1000000000)
       OR v.used + room > coalesce(v.max_claims, 1000000000) THEN
        RAISE EXCEPTION 'admission: near a cap on %', q USING ERRCODE = 'SBA01';
    END IF;
    policy_id := pid; queue := v.queue; verdict := 'admitted'; max_in_flight := v.max_in_flight;
    in_flight := v.in_flight; max_claims_per_window := v.max_claims; used := v.used;
    window_starts := v.ws; window_resets := v.we; pending := NULL; next_eligible_at := NULL;
    cap := least(coalesce(v.max_claims - v.used, 1000000), coalesce(v.max_in_flight - v.in_flight, 1000000));
    shard := k;
    RETURN NEXT;
END
$$;
