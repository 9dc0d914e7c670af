-- Which device a joined slot made: as SQLite's 0018_pair_minted_device.sql.
ALTER TABLE pair_slots ADD COLUMN IF NOT EXISTS minted_device TEXT;
