-- What the operator sets with `evi-server admin`, kept in the database so
-- that every replica and every command on the server machine reads the same:
-- a quota per account (NULL: the server's --quota-bytes; -1: none), when an
-- unused invite stops working (NULL: never), and server-wide settings such
-- as the registration mode (`registration`: open, invite or closed).
ALTER TABLE users ADD COLUMN quota_bytes INTEGER;
ALTER TABLE invites ADD COLUMN expires_at INTEGER;
CREATE TABLE server_settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
