-- A slot makes one device, once: as SQLite's 0017_pair_minted.sql.
ALTER TABLE pair_slots ADD COLUMN IF NOT EXISTS minted_at BIGINT;
