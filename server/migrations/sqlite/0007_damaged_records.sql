-- Records a device reported as damaged (a body that arrives whole and
-- fails its checks there: a flipped byte on this disk). Their entries are
-- taken out of `entries` when marked, so the entries count as lacking and
-- a device that has them sends them again; once a later record holds every
-- entry of a marked one, the marked row goes (see the store's `push`).
CREATE TABLE IF NOT EXISTS damaged_records (
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    PRIMARY KEY (user_id, seq)
);
