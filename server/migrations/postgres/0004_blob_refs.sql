-- Which records refer to which blobs (see `store::blob_refs`): declared by
-- the client in the clear at push, deleted with their record. A blob whose
-- last row here goes is listed in `blob_collections` in that transaction.
CREATE TABLE blob_refs (
    user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    seq     BIGINT NOT NULL,
    name    TEXT NOT NULL,
    PRIMARY KEY (user_id, seq, name)
);
CREATE INDEX blob_refs_by_name ON blob_refs (user_id, name);
-- Blobs no record refers to any more, to delete (`blobs::collect`). `done_at`
-- (ms since the epoch) is set once the blob's bytes are gone; the row stays
-- a while after, so an upload that began before it is refused and retried.
CREATE TABLE blob_collections (
    user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name    TEXT NOT NULL,
    done_at BIGINT,
    PRIMARY KEY (user_id, name)
);
