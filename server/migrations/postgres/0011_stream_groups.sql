-- A forget takes a session's group (see `store::forget`): as SQLite's
-- 0015_stream_groups.sql.
ALTER TABLE records ADD COLUMN group_stream TEXT;
CREATE INDEX IF NOT EXISTS records_by_group ON records(user_id, group_stream, seq)
    WHERE group_stream IS NOT NULL;
