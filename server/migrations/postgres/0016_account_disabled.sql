-- When the operator disabled the account: as SQLite's 0020_account_disabled.sql.
ALTER TABLE users ADD COLUMN IF NOT EXISTS disabled_at BIGINT;
