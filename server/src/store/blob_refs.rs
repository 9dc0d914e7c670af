//! Which records refer to which blobs, so that a blob no record refers to
//! any more is deleted (the clear-text names are declared by the client:
//! see [`evi_shared::blob_refs`], which also says what this shows).
//!
//! # Promises
//!
//! - A record's references are stored in its push's transaction, for the
//!   blobs it names that are stored then. A record naming a blob that was
//!   deleted as unreferenced (listed for collection) is refused
//!   ([`super::PushOutcome::blob_missing`]) and the client uploads the blob
//!   again; one naming a blob not stored (not sent yet, or sent in parts
//!   by a client that did not tie them to it) is taken without that
//!   reference, and such a blob is never deleted on its own. So no record
//!   the server keeps refers to a blob it has deleted.
//! - A blob sent in parts is stored when one of its pieces (a part or the
//!   manifest, uploaded with `part_of` naming the whole: see
//!   [`evi_shared::blob_refs`]) is; references name the whole, and the
//!   whole is what is listed for collection. Its row step takes the rows
//!   of every piece in one transaction, so a push never finds it half
//!   taken, and lists each piece, so a kill before their bytes are gone
//!   leaves them to the next run.
//! - When records are deleted (a forgotten session's, those holding
//!   journal lines a `forget-lines` record names, or damaged ones another
//!   push replaced), their references go in the same transaction. For a forgotten session, each blob whose last
//!   reference went is listed for collection; for a `forget-lines`, each
//!   blob it names that nothing refers to any more (the other lines of the
//!   deleted records are sent again by the device that forgot them, with
//!   their references, so their blobs are not listed meanwhile); for a
//!   replaced damaged record, each blob whose last reference went (its
//!   replacement, holding the same lines, declares its own). A blob
//!   with no recorded reference is listed only when a `forget-lines` names
//!   it (one pushed before references were declared).
//! - Collection ([`crate::blobs::collect`]) runs in the background. For
//!   one listed blob, one transaction deletes its row (and takes it off
//!   the account's counters) only if still nothing refers to it, which a
//!   push checks under the same lock; then its bytes are removed, then the
//!   listing is marked done. A kill between any two steps leaves the
//!   listing, and the next run repeats what was left.
//! - An upload of a listed name is refused (503, retried) until the
//!   listing is done, and one that began before it was done is refused
//!   too ([`UPLOAD_RACE_MS`]): it may have found the old bytes in place,
//!   just before they were removed. A done listing is dropped after
//!   [`KEEP_DONE_MS`].

/// How much earlier than an upload's start a collection that finished
/// still refuses it: room for the clocks of replicas that differ a little
/// (a refused upload is retried by the client after `Retry-After`).
pub const UPLOAD_RACE_MS: i64 = 5_000;

/// How long a finished collection is kept to refuse uploads that began
/// before it (longer than any upload may stream).
pub const KEEP_DONE_MS: i64 = 24 * 3600 * 1000;

/// Whether an upload that began at `since_ms` may record a blob whose
/// collection is listed with `done_at` (`None`: not done yet).
pub fn upload_allowed(done_at: Option<i64>, since_ms: i64) -> bool {
    done_at.is_some_and(|d| d < since_ms - UPLOAD_RACE_MS)
}

/// Why an upload is refused while its name is collected (a 503, retried).
pub fn collecting() -> super::StoreError {
    super::StoreError::Unavailable(
        "a blob of this name is being deleted as unreferenced; upload it again in a minute".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_wait_for_a_collection_and_its_margin() {
        let now = 10_000_000;
        assert!(!upload_allowed(None, now));
        assert!(!upload_allowed(Some(now - 1), now));
        assert!(!upload_allowed(Some(now - UPLOAD_RACE_MS), now));
        assert!(upload_allowed(Some(now - UPLOAD_RACE_MS - 1), now));
    }
}
