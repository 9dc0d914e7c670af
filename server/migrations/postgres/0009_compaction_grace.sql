-- When a compaction pointed the records off a listed pack (milliseconds since
-- the epoch, by the database's clock; NULL before): the pack is deleted only
-- a grace period after, so that a pull on another replica that read the old
-- places before still finds them (see `bodies::compact`).
ALTER TABLE forget_compactions ADD COLUMN repointed_at BIGINT;
