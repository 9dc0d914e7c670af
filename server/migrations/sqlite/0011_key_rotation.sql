-- Key rotation (see `store::rotation`). An account's key generation (1 for
-- the key `evi sync init` made, one more per rotation), and per device the
-- generation it was last given: a device behind its account's is told
-- `key_rotated` until it is paired again. A rotation fills a staging
-- account (`staging_of` names the account it will replace); its commit
-- swaps the two in one transaction and marks the old one retired, whose
-- rows and files the clean-up then deletes.
ALTER TABLE users ADD COLUMN key_generation INTEGER NOT NULL DEFAULT 1;
ALTER TABLE users ADD COLUMN rotated_at INTEGER;
ALTER TABLE users ADD COLUMN rotated_by TEXT;
ALTER TABLE users ADD COLUMN staging_of INTEGER;
ALTER TABLE users ADD COLUMN retired_at INTEGER;
ALTER TABLE devices ADD COLUMN key_generation INTEGER NOT NULL DEFAULT 1;
CREATE UNIQUE INDEX IF NOT EXISTS users_staging ON users (staging_of) WHERE staging_of IS NOT NULL;
