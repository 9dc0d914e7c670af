-- Key rotation (see `store::rotation`): as SQLite's 0014_rotation_owner.sql.
ALTER TABLE users ADD COLUMN staging_by TEXT;
