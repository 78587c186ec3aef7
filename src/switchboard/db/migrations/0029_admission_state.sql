-- One writing of a policy's state now (SPEC-0030): `open`, `paused` (the switch, or a limit of 0),
-- `window_exhausted` (the window's budget spent) or `in_flight_full` (the in-flight cap reached), in
-- that order. `admission_status` and the policy reads (core/sql/admission.sql `status`) and the
-- doorbell's hold (core/sql/fragments.sql `held_back`) both ask it; until now each, and the Python
-- that shaped the status, wrote the rule for itself.
--
-- A plain SQL expression, so PostgreSQL inlines it where it is called: each argument is placed where
-- the CASE reads it, and the counts a caller passes are computed only when a branch before theirs
-- did not already decide (the doorbell's in-flight count runs only for a capped policy).
CREATE FUNCTION switchboard_admission_state(paused boolean, max_in_flight int, max_claims int,
                                            used bigint, in_flight bigint)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN paused OR max_in_flight = 0 OR max_claims = 0 THEN 'paused'
                WHEN max_claims IS NOT NULL AND used >= max_claims THEN 'window_exhausted'
                WHEN max_in_flight IS NOT NULL AND in_flight >= max_in_flight THEN 'in_flight_full'
                ELSE 'open' END
$$;
