-- The `evi-server migrate` that moved an embedded server into this database
-- (see `migrate::record`): the data folder it copied, when it began, and
-- when it finished (the target checked against the source). One row at most:
-- a move goes into an empty database, and only once.
CREATE TABLE moved_in (
    one         BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    source      TEXT NOT NULL,
    started_at  BIGINT NOT NULL,
    finished_at BIGINT
);
