-- A record's entries are deleted by its seq (a forget, a damaged record, a
-- superseded one): without this index each such delete read every entry of
-- the account inside the write transaction, holding every other account's
-- writes (1,000 seqs against 200,000 entries: 7.8 s).
CREATE INDEX IF NOT EXISTS entries_by_seq ON entries (user_id, seq);
