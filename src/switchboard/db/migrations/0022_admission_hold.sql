-- The fast path of a claim on one policed queue as ONE autocommit statement (docs/decisions.md D40,
-- core/sql/admission.sql `claim_next_admitted`): `switchboard_admission_hold` is migration 0021's
-- `switchboard_admission_admit` without its charge. It takes the same locks (a free shard of the
-- policy, or the policy row and its shards 0..S-1 when the fast check fails), judges with a snapshot
-- taken after them, refuses the same way (SQLSTATE SBA01) and returns the same row, `shard` naming the
-- shard it holds; it charges nothing. The statement that calls it charges exactly what its claim took,
-- on that shard, in a later step of the same statement (so the committed charge is the number of todos
-- claimed without a give-back or a rollback), and the locks are held until that statement commits.
-- `admit` stays for the pipelined path (claims by id, batches).
CREATE FUNCTION switchboard_admission_hold(ep uuid, q text, want int)
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int, shard int)
LANGUAGE plpgsql VOLATILE
ROWS 1  -- at most one row: the calling statement charges its shard through the primary key, not a hash of the table
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    pid uuid;
    k int;
    n int;
    room int;
    v record;
BEGIN
    -- The fast path, in a subtransaction: when its check fails, leaving the block releases the shard,
    -- so the exact path below never waits for a shard while holding one (as in 0021's admit).
    BEGIN
        SELECT s.policy_id, s.shard INTO pid, k
          FROM admission_policies p
          JOIN admission_shards s ON s.policy_id = p.id
                                 AND s.shard < switchboard_admission_stripes(p.max_in_flight, p.max_claims_per_window)
         WHERE p.queue = q AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
         ORDER BY s.shard
         LIMIT 1
           FOR UPDATE OF s SKIP LOCKED;
        IF NOT FOUND THEN  -- every usable shard is held (or no policy): wait for one
            SELECT p.id, switchboard_admission_stripes(p.max_in_flight, p.max_claims_per_window) INTO pid, n
              FROM admission_policies p
             WHERE p.queue = q AND (p.endpoint_id = ep OR p.team_id IS NOT NULL);
            IF NOT FOUND THEN
                RETURN;  -- no policy applies: nothing to judge or charge
            END IF;
            k := pg_backend_pid() % n;
            PERFORM 1 FROM admission_shards s WHERE s.policy_id = pid AND s.shard = k FOR UPDATE;
        END IF;
        -- A later statement: its snapshot is taken after the shard's lock.
        SELECT j.* INTO v FROM switchboard_admission_judge(ep, ARRAY[q]) j;
        IF NOT FOUND OR v.policy_id IS DISTINCT FROM pid OR v.verdict <> 'admitted' THEN
            RAISE EXCEPTION USING ERRCODE = 'SBA02';
        END IF;
        n := switchboard_admission_stripes(v.max_in_flight, v.max_claims_per_window);
        room := n * switchboard_admission_stripe_take(v.max_in_flight, v.max_claims_per_window);
        IF k >= n OR want > room / n
           OR v.in_flight + room > coalesce(v.max_in_flight, 1000000000)
           OR v.used + room > coalesce(v.max_claims_per_window, 1000000000) THEN
            RAISE EXCEPTION USING ERRCODE = 'SBA02';
        END IF;
        policy_id := v.policy_id; queue := v.queue; verdict := v.verdict; max_in_flight := v.max_in_flight;
        in_flight := v.in_flight; max_claims_per_window := v.max_claims_per_window; used := v.used;
        window_starts := v.window_starts; window_resets := v.window_resets; pending := v.pending;
        next_eligible_at := v.next_eligible_at; cap := v.cap; shard := k;
        RETURN NEXT;
        RETURN;
    EXCEPTION WHEN SQLSTATE 'SBA02' THEN
        NULL;  -- the shard is released: judge exactly
    END;
    FOR v IN SELECT * FROM switchboard_admission_verdicts(ep, ARRAY[q]) LOOP
        IF v.verdict <> 'admitted' OR v.cap < want THEN
            RAISE EXCEPTION 'admission: % on %', v.verdict, v.queue USING ERRCODE = 'SBA01';
        END IF;
        policy_id := v.policy_id; queue := v.queue; verdict := v.verdict; max_in_flight := v.max_in_flight;
        in_flight := v.in_flight; max_claims_per_window := v.max_claims_per_window; used := v.used;
        window_starts := v.window_starts; window_resets := v.window_resets; pending := v.pending;
        next_eligible_at := v.next_eligible_at; cap := v.cap; shard := v.shard;
        RETURN NEXT;
    END LOOP;
END
$$;
