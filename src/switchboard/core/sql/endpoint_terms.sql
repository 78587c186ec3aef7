-- An active endpoint's terms, changed by its owner: expiry and default lease (core/endpoint_terms.py).

-- name: update
UPDATE endpoints SET
    expires_at = CASE WHEN %(set_expiry)s
                      THEN CASE WHEN %(expires_in)s::int IS NULL THEN NULL
                                ELSE now() + make_interval(secs => %(expires_in)s::int) END
                      ELSE expires_at END,
    default_lease_ttl_seconds = CASE WHEN %(set_lease)s THEN %(lease)s::int ELSE default_lease_ttl_seconds END
 WHERE id = %(id)s AND state = 'active'
RETURNING id
