-- Taking a session back (see `store::forget`). A stream whose `forget`
-- record committed, and no `unforget` since: pushes to it are refused as
-- forgotten. `seq` is the tombstone's.
CREATE TABLE IF NOT EXISTS forgotten_streams (
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    stream  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (user_id, stream)
);
-- Packs that held bodies of records a forget deleted: rewritten without
-- them by the compaction, which deletes the row once the old pack is gone.
-- Written in the forget's own transaction, so a crash never loses one.
CREATE TABLE IF NOT EXISTS forget_compactions (
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    pack    TEXT NOT NULL,
    PRIMARY KEY (user_id, pack)
);
