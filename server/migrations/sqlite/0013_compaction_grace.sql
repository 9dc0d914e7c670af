-- When a compaction pointed the records off a listed pack (milliseconds since
-- the epoch; NULL before): see `bodies::compact` and the Postgres twin.
ALTER TABLE forget_compactions ADD COLUMN repointed_at INTEGER;
