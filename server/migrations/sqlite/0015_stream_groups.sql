-- A forget takes a session's group (see `store::forget`): a record of a
-- stream that belongs to a session (a Claude Code subagent transcript)
-- names the session's keyed stream id, and a forget of that stream deletes
-- and refuses the group's records with its own. NULL on every other record
-- and on those from before.
ALTER TABLE records ADD COLUMN group_stream TEXT;
CREATE INDEX IF NOT EXISTS records_by_group ON records(user_id, group_stream, seq)
    WHERE group_stream IS NOT NULL;
