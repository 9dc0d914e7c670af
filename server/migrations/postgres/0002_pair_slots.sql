-- Pairing slots (see the server's routes/pairing.rs): a blind relay between
-- a device of the account and one that holds the code. In the database, not
-- in a replica's memory, so the two devices may reach different replicas.
-- Rows hold only opaque PAKE messages and sealed bytes, live at most the
-- slot's lifetime (rows past `expires_at` are deleted as new slots are
-- made), and lose their messages once the pairing ends.
CREATE TABLE pair_slots (
    number     BIGINT PRIMARY KEY,
    user_id    BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    device_id  TEXT NOT NULL,
    state      TEXT NOT NULL,
    offer      BYTEA,
    join_hash  BYTEA,
    hello      BYTEA,
    reply      BYTEA,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX pair_slots_by_user ON pair_slots (user_id);
