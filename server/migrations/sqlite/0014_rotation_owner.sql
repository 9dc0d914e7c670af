-- Key rotation (see `store::rotation`): the device that began a staging
-- account's rotation. Another device beginning one abandons it (retired
-- like an account a commit replaced), a revoke of that device ends it, and
-- only that device commits it. NULL on staging accounts from before.
ALTER TABLE users ADD COLUMN staging_by TEXT;
