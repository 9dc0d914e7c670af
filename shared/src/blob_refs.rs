//! What a record says in the clear about blobs, so a server that cannot
//! read records can still delete a blob once nothing refers to it.
//!
//! A segment may carry, beside its entry ids:
//!
//! - `refs`: the keyed names of the blobs its content refers to (a
//!   checkpoint journal line's earlier contents, a transcript line too large
//!   for a segment). The server records them and refuses the segment
//!   ([`crate::api::PushResponse::blob_missing`]) when one of them is not
//!   stored, so no record it keeps ever refers to a blob it deleted.
//! - on a [`FORGET_LINES_KIND`] record only, `forgets`: the keyed entry ids
//!   of the journal lines forgotten (the server deletes the records of the
//!   stream holding any of them), and `forget_blobs`: the keyed names of
//!   the blobs those lines named (deleted when no record refers to them any
//!   more, even a blob pushed before records carried `refs`).
//!
//! What this shows the server: which records refer to which blobs (it saw
//! each blob's keyed name and size already, and when it came; now it also
//! sees that one record, or many, share it), and which journal lines a
//! forget took back. Never what a blob or line holds: the names are keyed
//! (HMAC), not content hashes.
//!
//! A blob no record was ever seen to refer to (stored before this) is
//! never deleted by the server on its own.
//!
//! # Blobs sent in parts
//!
//! A blob over the server's blob limit is stored as parts and a manifest
//! under names of their own (`blob_part_key(sha, i, count)`,
//! `blob_manifest_key(sha)`), never under the whole's name
//! (`blob_key(sha)`). Records still declare only the whole's name, and each
//! part and the manifest is uploaded with that name as its `part_of`
//! ([`crate::api::BlobPutQuery`]): the server counts the whole as stored
//! while one of its pieces is, and deletes every piece with it once no
//! record refers to it.
//!
//! Why the upload ties the pieces, rather than records declaring every
//! part's name: a record's refs are derived from its content alone (the
//! lines and their blobs' hashes), the same on every device and again at a
//! key rotation, which reseals records with refs computed under the new
//! key. How a blob was split is not in the content: the part count depends
//! on the server's limit when the blob went up (and halves after a 413 from
//! a proxy), and the device that pushes a line may not be the one that
//! uploaded its blob, so it would have to read the manifest first. The
//! uploader is the one party that knows the pieces, at the moment it sends
//! them. What this shows the server: which stored names are the pieces of
//! one blob (their sizes and upload times already said as much), and the
//! keyed name of the whole.

use serde::{Deserialize, Serialize};

use crate::KeyedId;

/// Record kind of a forget of checkpoint journal lines: a tombstone of the
/// journal's stream, sealed and MAC-bound by the client like any segment.
/// Unlike [`crate::forget::FORGET_KIND`] it forgets some lines of the
/// stream, not the stream.
pub const FORGET_LINES_KIND: &str = "forget-lines";

/// The clear-text blob metadata of a segment (empty for older clients).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SegmentRefs {
    /// Keyed names of the blobs the segment's content refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<KeyedId>,
    /// Of a [`FORGET_LINES_KIND`] record: keyed entry ids forgotten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgets: Vec<KeyedId>,
    /// Of a [`FORGET_LINES_KIND`] record: keyed blob names forgotten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forget_blobs: Vec<KeyedId>,
}

impl SegmentRefs {
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty() && self.forgets.is_empty() && self.forget_blobs.is_empty()
    }

    /// Every name and id it holds, for the per-segment limit on ids.
    pub fn len(&self) -> usize {
        self.refs.len() + self.forgets.len() + self.forget_blobs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_heads_read_as_empty_and_empty_ones_write_nothing() {
        let h: crate::frames::SegmentHead = serde_json::from_str(&format!(
            r#"{{"stream":"{0}","kind":"entries","entry_ids":[]}}"#,
            "a".repeat(64)
        ))
        .unwrap();
        assert!(h.refs.is_empty());
        let out = serde_json::to_string(&h).unwrap();
        assert!(!out.contains("refs") && !out.contains("forget"));
        let n: KeyedId = "b".repeat(64).parse().unwrap();
        let with = crate::frames::SegmentHead {
            refs: SegmentRefs {
                refs: vec![n.clone()],
                ..SegmentRefs::default()
            },
            ..h
        };
        let back: crate::frames::SegmentHead =
            serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back.refs.refs, vec![n]);
    }
}
