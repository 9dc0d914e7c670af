-- Key rotation (see `store::rotation`): as SQLite's 0011_key_rotation.sql.
ALTER TABLE users ADD COLUMN key_generation BIGINT NOT NULL DEFAULT 1;
ALTER TABLE users ADD COLUMN rotated_at BIGINT;
ALTER TABLE users ADD COLUMN rotated_by TEXT;
ALTER TABLE users ADD COLUMN staging_of BIGINT;
ALTER TABLE users ADD COLUMN retired_at BIGINT;
ALTER TABLE devices ADD COLUMN key_generation BIGINT NOT NULL DEFAULT 1;
CREATE UNIQUE INDEX IF NOT EXISTS users_staging ON users (staging_of) WHERE staging_of IS NOT NULL;
