-- Credentials take effect in every process at once (docs/deploy.md, "Revocation and the credential
-- cache"): two parts, so that correctness never rests on a notification arriving.
--
-- 1. `switchboard_endpoint_live(endpoint_id)`: true for an active, unexpired endpoint (and for NULL,
--    a human caller); otherwise it raises SQLSTATE 28000 (invalid_authorization_specification). The
--    shared statement fragments (core/sql/fragments.sql: `scope`, the claim arms) call it with the
--    caller's endpoint as a top-level condition, which PostgreSQL runs once per statement before
--    touching any todo, so a revoked or expired endpoint is refused by the very statement it sent,
--    whatever a process's credential cache still believes.
-- 2. A trigger on `endpoints` sends `pg_notify('switchboard_credentials', {"endpoint_id", "reason"})`
--    when a credential stops being what a process may have remembered (revoked, rotated, its expiry
--    or scope changed, deleted). Sent at commit, from whichever process or CLI made the change; each
--    serving process drops its cached credential and ends the endpoint's open MCP sessions.

CREATE FUNCTION switchboard_endpoint_live(ep uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF ep IS NULL THEN
        RETURN true;
    END IF;
    PERFORM 1 FROM endpoints e
      WHERE e.id = ep AND e.state = 'active' AND (e.expires_at IS NULL OR e.expires_at > now());
    IF FOUND THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'endpoint revoked or expired' USING ERRCODE = '28000';
END
$$;

CREATE FUNCTION switchboard_endpoint_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    reason text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('switchboard_credentials',
                          json_build_object('endpoint_id', OLD.id, 'reason', 'deleted')::text);
        RETURN NULL;
    END IF;
    IF OLD.state = 'active' AND NEW.state <> 'active' THEN
        reason := NEW.state;  -- revoked (by hand, by the expiry sweep, by a cascade)
    ELSIF NEW.credential_hash IS DISTINCT FROM OLD.credential_hash THEN
        reason := 'rotated';
    ELSIF NEW.expires_at IS DISTINCT FROM OLD.expires_at THEN
        reason := 'expiry_changed';
    ELSIF NEW.scope_verbs IS DISTINCT FROM OLD.scope_verbs OR NEW.scope_queues IS DISTINCT FROM OLD.scope_queues THEN
        reason := 'rescoped';
    END IF;
    IF reason IS NOT NULL THEN
        PERFORM pg_notify('switchboard_credentials',
                          json_build_object('endpoint_id', NEW.id, 'reason', reason)::text);
    END IF;
    RETURN NULL;
END
$$;

-- Column-listed: the frequent `last_used_at` touch does not fire it.
CREATE TRIGGER endpoints_credential_changed
    AFTER UPDATE OF state, credential_hash, expires_at, scope_verbs, scope_queues ON endpoints
    FOR EACH ROW EXECUTE FUNCTION switchboard_endpoint_changed();

CREATE TRIGGER endpoints_credential_deleted
    AFTER DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION switchboard_endpoint_changed();
