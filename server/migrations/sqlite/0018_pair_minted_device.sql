-- Which device a joined slot made (see routes/pairing.rs): asked again
-- (the creator's answer was lost), the slot replaces that device with a new
-- one instead of refusing, so a slot still holds one device and a retry
-- goes through.
ALTER TABLE pair_slots ADD COLUMN minted_device TEXT;
