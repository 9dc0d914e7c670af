-- Pairing slots: the blind relay between a device of an account (the
-- creator) and a new device holding a short code (see routes/pairing.rs).
-- A row holds only opaque PAKE messages and sealed bytes, the SHA-256 of
-- the joiner's secret, and the slot's step; a finished slot keeps no
-- message, and every row goes once it has expired.
CREATE TABLE IF NOT EXISTS pair_slots (
    number     INTEGER PRIMARY KEY,   -- the code's first part
    user_id    INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    device_id  TEXT NOT NULL,         -- the creator
    state      TEXT NOT NULL,         -- open, joined, replied, done, closed
    offer      BLOB,
    hello      BLOB,
    reply      BLOB,
    join_hash  BLOB,                  -- SHA-256 of the joiner's secret
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pair_slots_by_expiry ON pair_slots (expires_at);
