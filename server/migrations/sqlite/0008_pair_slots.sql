-- Pairing slots (see the server's routes/pairing.rs): a blind relay between
-- a device of the account and one that holds the code. Rows hold only
-- opaque PAKE messages and sealed bytes, live at most the slot's lifetime
-- (rows past `expires_at` are deleted as new slots are made), and lose
-- their messages once the pairing ends.
CREATE TABLE IF NOT EXISTS pair_slots (
    number     INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    device_id  TEXT NOT NULL,
    state      TEXT NOT NULL,
    offer      BLOB,
    join_hash  BLOB,
    hello      BLOB,
    reply      BLOB,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pair_slots_by_user ON pair_slots (user_id);
