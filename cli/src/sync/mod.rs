//! Encrypted sync: this device's transcripts and checkpoint journal sealed,
//! sent to the account's server, and what other devices sent fetched and
//! applied. Four rooms, each importing only the ones listed before it
//! (exceptions are named in the room's doc):
//!
//! - [`seal`]: what seals and opens (the identity, its keys, segments,
//!   blobs, pairing); knows neither the server nor the state.
//! - [`remote`]: what talks to the server (the client, the records on the
//!   wire, blob transfer).
//! - [`state`]: what the device remembers between syncs, and the
//!   [`SyncContext`](state::context::SyncContext) a command opens from it.
//! - [`engine`]: push, pull, apply, pending, verify and watch.
//!
//! Beside them, what every room shares: [`error`] (the errors), and what
//! the engine tells the face, [`progress`] (bars and warnings) and
//! [`notice`] (waits and retries).
//!
//! Everything here is synchronous; callers run it on blocking threads.

pub mod engine;
pub mod error;
pub mod notice;
pub mod progress;
pub mod remote;
pub mod seal;
pub mod state;

pub use seal::blob::{BlobDigest, BlobError, BlobWrite, open_blob, open_blob_to_path, seal_blob};
pub use seal::identity::{Identity, IdentityError};
pub use seal::keys::SyncKeys;
pub use seal::segment::{
    Entry, JournalLine, OpenedSegment, SealedSegment, SegmentError, SegmentKind, open, seal,
    seal_journal, seal_stream,
};

/// The fixed identity of the frozen vectors and the fuzz targets (test data
/// only, never a real key).
pub(crate) const TEST_IDENTITY: &str =
    "AGE-SECRET-KEY-19SS7KFETF239GNV7LY5EDZRN9R2FDUS58K9ML8WTY33MDSAEW5RSJCA34J";
