-- Every commit that ends or changes a long poll (`GET /records/wait`) of an
-- account announces it on the channel every replica LISTENs on
-- (`store::postgres::listen`, CHANNEL), with the account's id alone. The
-- schema sends it, not the code paths: none that commits such a change can
-- forget to (a key rotation's commit once did). Postgres delivers a notice
-- at commit, never for a rollback, and folds the notices of one transaction
-- with the same payload into one.
--   users:   newest_seq moved (records or forgets pushed), or key_generation
--            or retired_at changed (a key rotation swapped the account);
--   devices: one deleted (revoked, by a password change, by a rotation), or
--            moved to another account or key generation (a rotation).
CREATE FUNCTION evi_announce_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'users' THEN
        PERFORM pg_notify('evi_changes', NEW.id::text);
    ELSE
        PERFORM pg_notify('evi_changes', OLD.user_id::text);
        IF TG_OP = 'UPDATE' THEN
            PERFORM pg_notify('evi_changes', NEW.user_id::text);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER users_announce_change
    AFTER UPDATE OF newest_seq, key_generation, retired_at ON users
    FOR EACH ROW
    WHEN (OLD.newest_seq IS DISTINCT FROM NEW.newest_seq
          OR OLD.key_generation IS DISTINCT FROM NEW.key_generation
          OR OLD.retired_at IS DISTINCT FROM NEW.retired_at)
    EXECUTE FUNCTION evi_announce_change();

CREATE TRIGGER devices_announce_gone
    AFTER DELETE ON devices
    FOR EACH ROW
    EXECUTE FUNCTION evi_announce_change();

CREATE TRIGGER devices_announce_moved
    AFTER UPDATE OF user_id, key_generation ON devices
    FOR EACH ROW
    WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id
          OR OLD.key_generation IS DISTINCT FROM NEW.key_generation)
    EXECUTE FUNCTION evi_announce_change();
