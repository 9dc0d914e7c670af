//! The cryptography of sync: the user's age identity, the keys derived from
//! it, and the sealed formats that leave the device.
//!
//! - [`identity`]: the age X25519 identity file, its fingerprint, and its
//!   passphrase-protected export/import.
//! - [`keys`]: HKDF-derived keys, the keyed ids the server sees, and the key
//!   check value.
//! - [`segment`]: many entries (or journal lines) of one stream in one age
//!   file, compressed, MAC'd and bound to their outer ids.
//! - [`blob`]: checkpoint blobs as streamed age files, verified by SHA-256.
//! - [`blob_transfer`]: blobs of any size to and from the server (in parts
//!   past its blob limit), and the blobs still missing remembered.
//! - [`pairing`]: the short code, the PAKE and the sealed messages that
//!   move the identity to a new device through the server as a blind relay.
//!
//! Everything here is synchronous; callers run it on blocking threads.
//! `testdata/vectors.json` freezes every deterministic byte (keyed ids, KCV,
//! segment plaintext and MAC) for a fixed test identity.

pub mod apply;
pub mod blob;
pub mod blob_transfer;
pub mod client;
pub mod context;
pub mod damaged;
pub mod error;
pub mod forget;
pub mod high_water;
pub mod id_set;
pub mod identity;
pub mod incoming;
pub mod journal;
pub mod keys;
pub mod line_blobs;
pub mod lock;
pub mod notice;
pub mod pairing;
pub mod pending;
pub mod progress;
pub mod pull;
pub mod push;
pub mod records;
pub mod redact;
pub mod segment;
pub mod state;
mod unfinished;
pub mod uploader;
pub mod verify;
pub mod watch;
pub mod zstd_context;

pub use blob::{BlobDigest, BlobError, BlobWrite, open_blob, open_blob_to_path, seal_blob};
pub use identity::{Identity, IdentityError};
pub use keys::SyncKeys;
pub use segment::{
    Entry, JournalLine, OpenedSegment, SealedSegment, SegmentError, SegmentKind, open, seal,
    seal_journal, seal_stream,
};

/// The fixed identity of the frozen vectors and the fuzz targets (test data
/// only, never a real key).
pub(crate) const TEST_IDENTITY: &str =
    "AGE-SECRET-KEY-19SS7KFETF239GNV7LY5EDZRN9R2FDUS58K9ML8WTY33MDSAEW5RSJCA34J";

#[cfg(test)]
mod vectors;
