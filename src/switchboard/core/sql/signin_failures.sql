-- Failed sign-ins per throttle key (core/signin_failures.py). A key is the SHA-256 of its text; each
-- comes with its number of free failures. A row whose last failure is older than %(forget)s seconds
-- counts as none.

-- name: ensure
-- Rows for the keys of an attempt about to be judged, so that `judge` can lock them.
INSERT INTO signin_failures (key_hash, failures, last_at)
SELECT h, 0, now() FROM unnest(%(hashes)s::bytea[]) AS h
    ON CONFLICT (key_hash) DO NOTHING

-- name: judge
-- Lock the keys' rows (in one order: two attempts never wait on each other crosswise) and say how
-- many seconds the next attempt must wait: past a key's free failures, each further one doubles the
-- wait from its last failure (1 s, 2 s, 4 s ... at most %(max_wait)s).
WITH locked AS (
    SELECT f.key_hash, f.failures, f.last_at FROM signin_failures f
     WHERE f.key_hash = ANY(%(hashes)s::bytea[]) ORDER BY f.key_hash FOR UPDATE
)
SELECT coalesce(max(ceil(extract(epoch FROM
           l.last_at + make_interval(secs => least(power(2, l.failures - k.free), %(max_wait)s)) - now()))), 0)::int
       AS seconds
  FROM unnest(%(hashes)s::bytea[], %(frees)s::int[]) AS k(hash, free)
  JOIN locked l ON l.key_hash = k.hash
 WHERE l.failures >= k.free AND l.last_at > now() - make_interval(secs => %(forget)s)

-- name: count
-- One more failure for each key, counted when the attempt starts (a key quiet for too long starts
-- again at one).
UPDATE signin_failures
   SET failures = CASE WHEN last_at > now() - make_interval(secs => %(forget)s) AND failures > 0
                       THEN failures + 1 ELSE 1 END,
       last_at = now()
 WHERE key_hash = ANY(%(hashes)s::bytea[])

-- name: confirm
-- The counted attempt's password was wrong: its wait runs from the end of the check.
UPDATE signin_failures SET last_at = greatest(last_at, now()) WHERE key_hash = ANY(%(hashes)s::bytea[])

-- name: forgive
-- Take one counted failure back from each key (an attempt whose password was never checked, or the
-- address's count of an attempt that succeeded).
UPDATE signin_failures SET failures = failures - 1 WHERE key_hash = ANY(%(hashes)s::bytea[]) AND failures > 0

-- name: succeed
-- The password was right: the (account, address) key is forgotten, the address's key takes back
-- this attempt's count.
WITH forgotten AS (DELETE FROM signin_failures WHERE key_hash = %(pair)s)
UPDATE signin_failures SET failures = failures - 1 WHERE key_hash = %(address)s AND failures > 0

-- name: lock_keys
-- Before confirm, forgive or succeed, in its transaction: the keys' rows in key order, as `judge`
-- locks them. Updated in the order a scan met them, two statements on the same keys could each hold
-- one row and wait for the other.
SELECT key_hash FROM signin_failures WHERE key_hash = ANY(%(hashes)s::bytea[]) ORDER BY key_hash FOR UPDATE

-- name: prune
-- Rows a sign-in holds are skipped (pruned another time): the prune never waits for one, so it cannot
-- hold one row while a sign-in holds the next.
DELETE FROM signin_failures
 WHERE key_hash IN (SELECT key_hash FROM signin_failures
                     WHERE failures <= 0 OR last_at < now() - make_interval(secs => %(forget)s)
                       FOR UPDATE SKIP LOCKED)
