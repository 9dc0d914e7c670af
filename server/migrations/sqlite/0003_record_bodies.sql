-- Record bodies move out of the database into a body store (pack files under
-- <data>/bodies/): a record stored from now on has ciphertext = x'' and its
-- body at (body_pack, body_offset, body_len). Rows stored before keep their
-- inline ciphertext and NULL location, and stay readable as they are: moving
-- them at start-up would make the first start after an upgrade rewrite every
-- byte (and need its own crash safety) for no gain to a reader.
ALTER TABLE records ADD COLUMN body_pack TEXT;
ALTER TABLE records ADD COLUMN body_offset INTEGER;
ALTER TABLE records ADD COLUMN body_len INTEGER;
-- For "which packs does any row reference" (the orphan sweep at start, and
-- the clean-up after a push that stored nothing).
CREATE INDEX records_by_pack ON records(user_id, body_pack) WHERE body_pack IS NOT NULL;
