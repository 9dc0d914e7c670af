-- What the operator sets with `evi-server admin`: as SQLite's
-- 0021_operator_settings.sql.
ALTER TABLE users ADD COLUMN IF NOT EXISTS quota_bytes BIGINT;
ALTER TABLE invites ADD COLUMN IF NOT EXISTS expires_at BIGINT;
CREATE TABLE IF NOT EXISTS server_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
