-- Which device pushed a record, so a device can pass over its own records
-- when it pulls (NULL for records stored before this migration).
ALTER TABLE records ADD COLUMN device_id TEXT;
