//! eVi's checkpoints: the journal of every file it wrote
//! (`checkpoints/journal.jsonl`) and the earlier contents it kept
//! (`checkpoints/blobs/<sha256>`), and what a user does with them: list
//! them ([`journal`]), undo the latest writes ([`rewind`], which trims the
//! journal with [`trim`] under [`lock`]), and copy one checkpoint's bytes
//! anywhere ([`restore_checkpoint`]), from this device's journal or from
//! another device's as pull keeps it ([`devices`]).
//!
//! Nothing here touches sync's state: a trimmed journal is noticed by the
//! next push, which reads it again (see `sync::journal`).

pub mod devices;
pub mod forget;
pub mod journal;
pub mod lock;
pub mod restore;
pub mod rewind;
pub mod trim;

use std::path::Path;

pub use journal::{Checkpoint, Journal, Op};
pub use restore::{Overwrite, RestoreError};

/// Writes the earlier contents `c` kept to `dest` (atomically; see
/// [`restore`]); their length.
pub fn restore_checkpoint(
    checkpoints: &Path,
    c: &Checkpoint,
    dest: &Path,
    overwrite: Overwrite,
) -> Result<u64, RestoreError> {
    match (&c.op, c.blob.as_deref()) {
        (Op::Modify, Some(sha)) => {
            restore::write_blob(&checkpoints.join("blobs"), sha, dest, overwrite)
        }
        (Op::Modify, None) => Err(RestoreError::NoBlob),
        (Op::Create, _) => Err(RestoreError::NothingSaved),
        (Op::Skip, _) => Err(RestoreError::NotSnapshotted),
        (Op::Other(op), _) => Err(RestoreError::UnknownOp(op.clone())),
    }
}
