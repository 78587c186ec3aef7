-- Admission striped over shard rows (issue 13's target; docs/decisions.md D38 and D40): the claimers of
-- one policed queue no longer take turns on the policy row, and admission stays exact.
--
-- Each policy gets SHARD_ROWS (8) shard rows, created with it (a trigger) and here for the policies that
-- exist. A shard carries its own charges: the window they belong to and the units charged in it. The
-- window's usage of a policy is the sum over its shards of the charges of that window
-- (`switchboard_admission_used`); `admission_policies.charged` and `charged_window` are gone (their
-- values move to shard 0), so nothing can read a stale total.
--
-- Two ways to admit a claim on one policed queue (`switchboard_admission_admit`):
--
-- * fast: lock ONE shard (a free one, FOR UPDATE SKIP LOCKED; when every usable shard is held, wait
--   for one), the policy row not locked at all; then, in a later statement (a snapshot taken after that
--   lock), judge with the committed usage and admit only while it leaves room for every shard holder:
--       in_flight + S·B <= max_in_flight   and   used + S·B <= max_claims_per_window
--   where S = `switchboard_admission_stripes(policy)` is how many shards the fast path of this policy
--   may use (shards 0..S-1) and B = `switchboard_admission_stripe_take(policy)` the most one fast claim
--   may take (its `want`). Both depend on the policy's caps only, so that small caps still work: S and
--   B shrink with the smallest cap R (S = least(8, greatest(1, R/4)), B = least(100, greatest(1,
--   R/(4·S)))), S·B <= R/4 for R >= 4, so the fast path admits until about three quarters of a cap are
--   used. The claim charges `want` units to its own shard.
-- * exact (the fast check fails, or the shard was no longer usable): the shard is given up (it was
--   locked in a subtransaction that is rolled back), the policy row is locked FOR UPDATE, then its
--   shards 0..S-1 in order (waiting for every fast holder), and the verdict counts exactly, as
--   migration 0017 did (`cap`); the charge goes to shard 0. The locked path of several queues
--   (`switchboard_admission_verdicts`) takes the same locks, policies in id order first.
--
-- A policy change takes effect on commit: a trigger makes every UPDATE of a policy lock its shards
-- (after the policy row, the exact path's order), so the change waits for every shard holder and
-- commits only while no shard is held; a DELETE takes the shard rows with it (the cascade waits the
-- same way). A shard holder therefore judges and commits entirely before or entirely after a change.
--
-- Proof that no cap is passed (potential argument). Call usage U the committed count of the cap at
-- hand (leases in flight, or units charged in the window); only claims raise it, and every claim
-- transaction holds a shard from before its verdict's snapshot to its end (fast: one shard; exact:
-- shards 0..S-1 and the policy row). Potential = U + B·(number of open fast holders that passed the
-- check). Take any moment t and, among the claim transactions committed by t, the one with the latest
-- snapshot, Z (snapshot s_Z, shard lock taken at l_Z < s_Z, end e_Z <= t).
--   - Z exact: a claim committed in (s_Z, t] holds a shard Z holds during [l_Z, e_Z], so it locked it
--     after e_Z, and took its snapshot after that: later than s_Z, against the choice of Z. So U(t) is
--     what Z counted exactly plus what Z took: at most the cap (Z's verdict).
--   - Z fast, shard k: a claim Y committed in (s_Z, t] took its snapshot at s_Y <= s_Z, after its lock
--     l_Y, and ended after s_Z: it held its shard at the moment s_Z. An exact Y would have held shard k
--     then, which Z held; so Y is fast and held at s_Z a shard j != k with j < S. Every policy change
--     commits while no shard is held, so Y, Z and the claims between judged under one version of the
--     policy (one S, one B). At most S-1 such Y, each adding at most B, plus Z's own B:
--         U(t) <= U(s_Z) + S·B <= cap          (Z's check).
-- Lapsed leases and closed attempts only lower in-flight usage, and the verdict counts leases live at
-- the transaction's start (now()), so it never counts fewer than live. In words: committed usage plus
-- what the open shard holders may still add never exceeds the cap.
--
-- Every committed claim is charged exactly once: the charge, the claim and any give-back (a negative
-- charge on the same shard, same transaction, for the todos a batch did not find) are one transaction,
-- as in 0020. A charge made by a transaction that began in an earlier window than the one the shard
-- now counts is not recorded on it (the shard keeps the later window: `greatest`), so a straggler
-- across a window's end can no longer reset a newer window's count.

CREATE TABLE admission_shards (
    policy_id       uuid NOT NULL REFERENCES admission_policies(id) ON DELETE CASCADE,
    shard           int NOT NULL CHECK (shard BETWEEN 0 AND 63),
    -- The window the charges below belong to (its start), and the units charged to it on this shard.
    charged_window  timestamptz,
    charged         int NOT NULL DEFAULT 0 CHECK (charged >= 0),
    PRIMARY KEY (policy_id, shard)
) WITH (fillfactor = 50);  -- room on the page for the charges' HOT updates

-- How many shard rows a policy has.
CREATE FUNCTION switchboard_admission_shard_rows() RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 8 $$;

-- How many shards the fast path of a policy with these caps uses (S): at most the shard rows, about a
-- quarter of its smallest cap, at least one.
CREATE FUNCTION switchboard_admission_stripes(max_in_flight int, max_claims int) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(switchboard_admission_shard_rows(),
                 greatest(1, least(coalesce(max_in_flight, 1000000000), coalesce(max_claims, 1000000000)) / 4))
$$;

-- The most one fast-path claim may take under a policy with these caps (B): S·B stays within a quarter
-- of the smallest cap (for a cap of 4 or more), at most a full batch (inputs.BATCH_CLAIM_MAX).
CREATE FUNCTION switchboard_admission_stripe_take(max_in_flight int, max_claims int) RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(100, greatest(1, least(coalesce(max_in_flight, 1000000000), coalesce(max_claims, 1000000000))
                                  / (4 * switchboard_admission_stripes(max_in_flight, max_claims))))
$$;

-- The units a policy has charged to the window that starts at `ws`: the sum over its shards.
CREATE FUNCTION switchboard_admission_used(policy uuid, ws timestamptz) RETURNS int
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(s.charged), 0)::int FROM admission_shards s
     WHERE s.policy_id = policy AND s.charged_window = ws
$$;

INSERT INTO admission_shards (policy_id, shard, charged_window, charged)
SELECT p.id, g, CASE WHEN g = 0 THEN p.charged_window END, CASE WHEN g = 0 THEN p.charged ELSE 0 END
  FROM admission_policies p CROSS JOIN generate_series(0, switchboard_admission_shard_rows() - 1) g;

DROP FUNCTION switchboard_admission_admit(uuid, text, int);
DROP FUNCTION switchboard_admission_verdicts(uuid, text[]);
ALTER TABLE admission_policies DROP COLUMN charged, DROP COLUMN charged_window;

-- A new policy gets its shard rows in the statement that creates it.
CREATE FUNCTION switchboard_admission_shards_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO admission_shards (policy_id, shard)
    SELECT NEW.id, g FROM generate_series(0, switchboard_admission_shard_rows() - 1) g;
    RETURN NULL;
END
$$;
CREATE TRIGGER admission_policy_shards AFTER INSERT ON admission_policies
    FOR EACH ROW EXECUTE FUNCTION switchboard_admission_shards_add();

-- A change of a policy (limits, window, pause) locks all its shards after the policy row: it waits for
-- every claim holding one, and no claim judges while it is uncommitted (see the proof above).
CREATE FUNCTION switchboard_admission_shards_hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM admission_shards s WHERE s.policy_id = OLD.id ORDER BY s.shard FOR UPDATE;
    RETURN NEW;
END
$$;
CREATE TRIGGER admission_policy_change BEFORE UPDATE ON admission_policies
    FOR EACH ROW EXECUTE FUNCTION switchboard_admission_shards_hold();

-- The verdict of the policies of `queues` that apply to `ep`, read with this statement's snapshot and
-- no lock (the callers lock first): 0020's counts, with the window's usage summed over the shards.
-- `cap` is what the policy admits now, exactly when the caller holds the policy and its shards.
CREATE FUNCTION switchboard_admission_judge(ep uuid, queues text[])
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
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
     CROSS JOIN LATERAL (SELECT coalesce(sum(s.charged), 0)::int AS n FROM admission_shards s
                          WHERE s.policy_id = p.id AND s.charged_window = w.ws) u
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

-- The exact verdicts (the locked path, and the fast path's fallback): lock the policies of `queues`
-- that apply to `ep` (in id order), then the shards their fast paths use (0..S-1 of each, S read after
-- the policy's lock; in policy and shard order), so every fast holder has ended; then judge, with a
-- snapshot taken after the locks: the counts include every claim committed before. `shard` is where
-- the caller charges (shard 0, which it holds).
CREATE FUNCTION switchboard_admission_verdicts(ep uuid, queues text[])
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int, shard int)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM 1 FROM admission_policies p
      WHERE p.queue = ANY(queues) AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
      ORDER BY p.id
        FOR UPDATE;
    PERFORM 1 FROM admission_policies p
      JOIN admission_shards s ON s.policy_id = p.id
                             AND s.shard < switchboard_admission_stripes(p.max_in_flight, p.max_claims_per_window)
      WHERE p.queue = ANY(queues) AND (p.endpoint_id = ep OR p.team_id IS NOT NULL)
      ORDER BY s.policy_id, s.shard
        FOR UPDATE OF s;
    RETURN QUERY SELECT j.*, 0 FROM switchboard_admission_judge(ep, queues) j;
END
$$;

-- The fast path of a claim on ONE policed queue `q` (core/admission.py, `admit`): judge the policy and
-- charge `want` claims in this statement, on a shard when the committed usage leaves room for every
-- shard holder, else exactly (see the head of this file). The caller sends the claim behind this
-- statement in the same pipeline and commits only when the claim took `want` todos, giving back the
-- difference on the same shard when it took fewer, rolling back when it took none (migration 0020).
-- A refusal is the error SQLSTATE SBA01 (the claim behind it is skipped; the caller's locked path
-- reports why). No row back: `q` has no policy that applies to `ep` (nothing charged).
CREATE FUNCTION switchboard_admission_admit(ep uuid, q text, want int)
RETURNS TABLE (policy_id uuid, queue text, verdict text, max_in_flight int, in_flight int,
               max_claims_per_window int, used int, window_starts timestamptz,
               window_resets timestamptz, pending int, next_eligible_at timestamptz, cap int, shard int)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    pid uuid;
    k int;
    n int;
    room int;
    v record;
BEGIN
    -- The fast path, in a subtransaction: when its check fails, leaving the block releases the shard
    -- (a lock taken after a savepoint ends with its rollback), so the exact path below never waits for
    -- a shard while holding one.
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
        UPDATE admission_shards s
           SET charged = CASE WHEN s.charged_window = v.window_starts THEN s.charged + want
                              WHEN s.charged_window > v.window_starts THEN s.charged
                              ELSE want END,
               charged_window = greatest(s.charged_window, v.window_starts)
         WHERE s.policy_id = pid AND s.shard = k;
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
        UPDATE admission_shards s
           SET charged = CASE WHEN s.charged_window = v.window_starts THEN s.charged + want
                              WHEN s.charged_window > v.window_starts THEN s.charged
                              ELSE want END,
               charged_window = greatest(s.charged_window, v.window_starts)
         WHERE s.policy_id = v.policy_id AND s.shard = v.shard;
        policy_id := v.policy_id; queue := v.queue; verdict := v.verdict; max_in_flight := v.max_in_flight;
        in_flight := v.in_flight; max_claims_per_window := v.max_claims_per_window; used := v.used;
        window_starts := v.window_starts; window_resets := v.window_resets; pending := v.pending;
        next_eligible_at := v.next_eligible_at; cap := v.cap; shard := v.shard;
        RETURN NEXT;
    END LOOP;
END
$$;
