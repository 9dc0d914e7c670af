-- When a joined slot made its device (see routes/pairing.rs): a slot makes
-- one device, once; before, one joined slot made a device per call.
ALTER TABLE pair_slots ADD COLUMN minted_at INTEGER;
