-- Users, their devices (one hashed token each), one-time invites, records,
-- known entry ids (for merge by entry id) and blob metadata.
CREATE TABLE users (
    id            INTEGER PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    key_check     BLOB,
    created_at    INTEGER NOT NULL,
    -- Counters kept in the same transactions that change them, so status is
    -- one row read.
    newest_seq    INTEGER NOT NULL DEFAULT 0,
    record_count  INTEGER NOT NULL DEFAULT 0,
    entry_count   INTEGER NOT NULL DEFAULT 0,
    blob_count    INTEGER NOT NULL DEFAULT 0,
    bytes_used    INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE devices (
    id           TEXT PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users(id),
    name         TEXT NOT NULL,
    token_hash   BLOB NOT NULL UNIQUE,  -- SHA-256 of the bearer token
    created_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL
);
CREATE INDEX devices_by_user ON devices(user_id);

CREATE TABLE invites (
    code_hash  BLOB PRIMARY KEY,        -- SHA-256 of the invite code
    created_at INTEGER NOT NULL,
    used_by    INTEGER REFERENCES users(id)
);

CREATE TABLE records (
    id         INTEGER PRIMARY KEY,
    user_id    INTEGER NOT NULL REFERENCES users(id),
    seq        INTEGER NOT NULL,
    stream     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    entry_ids  TEXT NOT NULL,           -- comma-separated keyed ids
    ciphertext BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (user_id, seq)
);

CREATE TABLE entries (
    user_id  INTEGER NOT NULL,
    entry_id BLOB NOT NULL,             -- 32 raw bytes of the keyed id
    seq      INTEGER NOT NULL,
    PRIMARY KEY (user_id, entry_id)
) WITHOUT ROWID;

CREATE TABLE blobs (
    user_id    INTEGER NOT NULL,
    name       TEXT NOT NULL,
    size       INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (user_id, name)
) WITHOUT ROWID;
