-- OAuth clients, authorization codes and tokens (migration 0015). Secrets arrive as SHA-256 digests.

-- name: insert_client
INSERT INTO oauth_clients (client_id, metadata, secret_hash)
VALUES (%(client_id)s, %(metadata)s, %(secret_hash)s)

-- name: client
SELECT client_id, metadata, secret_hash FROM oauth_clients WHERE client_id = %(client_id)s

-- name: insert_code
INSERT INTO oauth_codes (code_hash, client_id, endpoint_id, human_id, redirect_uri, redirect_uri_explicit,
                         code_challenge, scopes, resource, family, expires_at)
VALUES (%(hash)s, %(client_id)s, %(endpoint_id)s, %(human_id)s, %(redirect_uri)s, %(explicit)s,
        %(challenge)s, %(scopes)s, %(resource)s, gen_random_uuid(),
        now() + make_interval(secs => %(seconds)s::int))

-- name: code
-- An unused code of a live endpoint (its expiry is checked by the caller, which names it).
SELECT c.*, extract(epoch FROM c.expires_at)::float8 AS expires_epoch
  FROM oauth_codes c JOIN endpoints e ON e.id = c.endpoint_id
 WHERE c.code_hash = %(hash)s AND c.client_id = %(client_id)s AND c.used_at IS NULL
   AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())

-- name: use_code
-- Single use: the first exchange wins; a second finds nothing.
UPDATE oauth_codes SET used_at = now()
 WHERE code_hash = %(hash)s AND client_id = %(client_id)s AND used_at IS NULL AND expires_at > now()
RETURNING endpoint_id, scopes, resource, family

-- name: used_code_family
SELECT family FROM oauth_codes WHERE code_hash = %(hash)s AND used_at IS NOT NULL

-- name: insert_token
INSERT INTO oauth_tokens (token_hash, kind, client_id, endpoint_id, scopes, resource, family, expires_at)
VALUES (%(hash)s, %(kind)s, %(client_id)s, %(endpoint_id)s, %(scopes)s, %(resource)s, %(family)s,
        now() + make_interval(secs => %(seconds)s::int))

-- name: refresh_token
-- A live refresh token of this client whose endpoint is live.
SELECT t.*, extract(epoch FROM t.expires_at)::float8 AS expires_epoch
  FROM oauth_tokens t JOIN endpoints e ON e.id = t.endpoint_id
 WHERE t.token_hash = %(hash)s AND t.kind = 'refresh' AND t.client_id = %(client_id)s
   AND t.revoked_at IS NULL AND t.expires_at > now()
   AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())

-- name: rotate_refresh
-- Spend a refresh token (once): the new pair's refresh hash is recorded as its successor.
UPDATE oauth_tokens SET revoked_at = now(), replaced_by = %(successor)s
 WHERE token_hash = %(hash)s AND kind = 'refresh' AND client_id = %(client_id)s
   AND revoked_at IS NULL AND expires_at > now()
RETURNING endpoint_id, scopes, resource, family

-- name: spent_refresh_family
SELECT family FROM oauth_tokens
 WHERE token_hash = %(hash)s AND kind = 'refresh' AND client_id = %(client_id)s AND replaced_by IS NOT NULL

-- name: revoke_family
UPDATE oauth_tokens SET revoked_at = coalesce(revoked_at, now())
 WHERE family = %(family)s
RETURNING endpoint_id

-- name: access_token
-- A live access token and its live endpoint: the row the MCP surface acts as.
SELECT e.*, g.name AS agent_name, g.human_id, t.token_hash AS oauth_hash, t.client_id AS oauth_client,
       t.scopes AS oauth_scopes, t.resource AS oauth_resource, t.family AS oauth_family,
       t.expires_at AS oauth_expires_at
  FROM oauth_tokens t
  JOIN endpoints e ON e.id = t.endpoint_id
  JOIN agents g ON g.id = e.agent_id
 WHERE t.token_hash = %(hash)s AND t.kind = 'access' AND t.revoked_at IS NULL AND t.expires_at > now()
   AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now())

-- name: any_token
-- A token of either kind, live or not, for revocation (RFC 7009 answers 200 whatever it finds).
SELECT kind, client_id, endpoint_id, scopes, resource, family,
       extract(epoch FROM expires_at)::float8 AS expires_epoch, revoked_at
  FROM oauth_tokens WHERE token_hash = %(hash)s

-- name: notify_endpoint
-- Tell every serving process to forget the endpoint's cached credentials (migration 0008's channel).
SELECT pg_notify('switchboard_credentials',
                 json_build_object('endpoint_id', %(endpoint_id)s::uuid, 'reason', 'oauth_revoked')::text)

-- name: purge
-- On the sweep tick: codes an hour past their expiry, tokens a day past theirs (a spent refresh token
-- stays until then, so its replay is still recognised), and clients registered over a day ago that
-- hold no code or token (registration is open, so abandoned ones must not pile up).
WITH codes AS (
    DELETE FROM oauth_codes WHERE expires_at < now() - interval '1 hour' RETURNING 1
), tokens AS (
    DELETE FROM oauth_tokens WHERE expires_at < now() - interval '1 day' RETURNING 1
), clients AS (
    DELETE FROM oauth_clients c
     WHERE c.created_at < now() - interval '1 day'
       AND NOT EXISTS (SELECT 1 FROM oauth_codes k WHERE k.client_id = c.client_id)
       AND NOT EXISTS (SELECT 1 FROM oauth_tokens t WHERE t.client_id = c.client_id)
    RETURNING 1
)
SELECT (SELECT count(*) FROM codes) AS codes, (SELECT count(*) FROM tokens) AS tokens,
       (SELECT count(*) FROM clients) AS clients
