-- A part or the manifest of a blob sent in parts names the whole it belongs
-- to (the keyed name records refer to: see `store::blob_refs`), so that it is
-- deleted with the whole. NULL for a blob stored whole, or one uploaded
-- before this.
ALTER TABLE blobs ADD COLUMN part_of TEXT;
CREATE INDEX blobs_by_part_of ON blobs (user_id, part_of) WHERE part_of IS NOT NULL;
