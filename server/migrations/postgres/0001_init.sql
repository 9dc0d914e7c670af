-- The schema the SQLite store reached in its seven steps, in one: users with
-- their counters, devices (one hashed token each), one-time invites, records
-- (metadata only; bodies are in the body store), the entry ids they hold,
-- damaged marks and blob metadata.
CREATE TABLE users (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    key_check     BYTEA,
    created_at    BIGINT NOT NULL,
    -- Counters kept in the same transactions that change them, so status is
    -- one row read. The row is also the lock every write of the user takes
    -- (SELECT ... FOR UPDATE): see PgStore::push.
    newest_seq    BIGINT NOT NULL DEFAULT 0,
    record_count  BIGINT NOT NULL DEFAULT 0,
    entry_count   BIGINT NOT NULL DEFAULT 0,
    blob_count    BIGINT NOT NULL DEFAULT 0,
    bytes_used    BIGINT NOT NULL DEFAULT 0
);
-- Names compare without regard to ASCII case (the only letters a name may
-- hold). Unique here, unlike SQLite's index: a Postgres database starts
-- under the case rule, and the index is what keeps two replicas from
-- registering `alice` and `Alice` at once.
CREATE UNIQUE INDEX users_by_name_nocase ON users (lower(name));

CREATE TABLE devices (
    id           TEXT PRIMARY KEY,
    user_id      BIGINT NOT NULL REFERENCES users(id),
    name         TEXT NOT NULL,
    token_hash   BYTEA NOT NULL UNIQUE,  -- SHA-256 of the bearer token
    created_at   BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL
);
CREATE INDEX devices_by_user ON devices (user_id);

CREATE TABLE invites (
    code_hash  BYTEA PRIMARY KEY,        -- SHA-256 of the invite code
    created_at BIGINT NOT NULL,
    used_by    BIGINT REFERENCES users(id)
);

CREATE TABLE records (
    user_id        BIGINT NOT NULL REFERENCES users(id),
    seq            BIGINT NOT NULL,
    stream         TEXT NOT NULL,
    kind           TEXT NOT NULL,
    -- The record's entry ids as their raw 32-byte MACs, concatenated.
    entry_id_bytes BYTEA NOT NULL,
    device_id      TEXT,
    -- Where the body is in the body store; NULL only for a record whose
    -- body is inline (one copied from a database from before bodies left it).
    body_pack      TEXT,
    body_offset    BIGINT,
    body_len       BIGINT,
    ciphertext     BYTEA,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (user_id, seq)
);
CREATE INDEX records_by_pack ON records (user_id, body_pack) WHERE body_pack IS NOT NULL;
CREATE INDEX records_by_stream ON records (user_id, stream, seq);

CREATE TABLE entries (
    user_id  BIGINT NOT NULL,
    entry_id BYTEA NOT NULL,             -- 32 raw bytes of the keyed id
    seq      BIGINT NOT NULL,
    PRIMARY KEY (user_id, entry_id)
);

CREATE TABLE damaged_records (
    user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    PRIMARY KEY (user_id, seq)
);

CREATE TABLE blobs (
    user_id    BIGINT NOT NULL,
    name       TEXT NOT NULL,
    size       BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, name)
);

-- Failed logins, for limits that hold across replicas (see
-- crate::ratelimit): one row per failure, pruned once past the window.
CREATE TABLE login_failures (
    user_name TEXT NOT NULL,             -- validated and lowercased
    address   TEXT NOT NULL,             -- the limiter's address key
    at_ms     BIGINT NOT NULL
);
CREATE INDEX login_failures_by_user ON login_failures (user_name, at_ms);
CREATE INDEX login_failures_by_age ON login_failures (at_ms);
