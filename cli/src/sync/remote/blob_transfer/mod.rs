//! Blobs of any size to and from the server, and none forgotten.
//!
//! A blob whose age file fits the server's `max_blob_bytes` is stored whole
//! under `blob_key(sha)`, as [`blob`](crate::sync::seal::blob) describes. A larger one is
//! split: parts of [`PartManifest::part_size`] plaintext bytes (the last one
//! shorter), each its own standard age file under `blob_part_key(sha, i,
//! count)`, so `age -d` of the parts in order, concatenated, is the blob;
//! then a small manifest (an age file whose plaintext is [`PartManifest`] as
//! JSON) under `blob_manifest_key(sha)`, uploaded last, so a manifest on the
//! server means every part is there. Nothing goes up whose bytes do not hash
//! to the blob's name (a first pass hashes the whole and each part; a part
//! sealed in the second pass must hash the same before it is sent). A
//! download lands in a temp file beside its destination, hashed as it goes,
//! and is linked into place only when the whole hashes to the name: an
//! existing file is never replaced and a failed or refused download leaves
//! nothing behind. What a manifest can make the client do is bounded
//! ([`MAX_BLOB_TOTAL_BYTES`], a part count that adds up, no part longer than
//! it says). One blob that cannot be read or uploaded is an outcome
//! ([`UploadOutcome::Failed`]), not an error, so the rest goes on; only a
//! server out of reach or refusing the device (or a sync folder that cannot
//! hold a temp file) stops a transfer. The sync state remembers each blob a
//! journal here names that the server lacks (`SyncState::missing_blobs`):
//! every pull asks for those first, every push sends those this device has,
//! until the server has them.
//!
//! The parts: `manifest` (part sizing and the manifest's format and checks),
//! and `upload` and `fetch` (the two directions of [`BlobTransfer`]). Which
//! blobs a push or pull moves, and what the sync state remembers of them, is
//! the engine's ([`crate::sync::engine::blobs`]). This file holds what the
//! parts share: the errors and outcomes, and [`BlobTransfer`] itself.

mod fetch;
pub(crate) use fetch::Landing;
mod manifest;
mod upload;

pub use manifest::{
    MANIFEST_FORMAT, MANIFEST_VERSION, MAX_BLOB_TOTAL_BYTES, MIN_PART_BYTES, ManifestError,
    PartManifest, part_size_for, sealed_len,
};

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use evi_shared::KeyedId;
use evi_shared::limits::MAX_NAMES_PER_CALL;

use crate::sync::error::SyncError;
use crate::sync::remote::client::{Client, ClientError};
use crate::sync::{BlobError, Identity, SyncKeys};

const BUF: usize = 64 * 1024;

/// Why a transfer stopped. Worth retrying: a transient
/// [`TransferError::Client`]; the others mean a server sent what must not be
/// trusted, or this device cannot write.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The server is out of reach, or refused the device (token, a failure
    /// that persisted through the client's retries).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// What the server sent is not the blob; nothing was kept.
    #[error("blob {sha} from the server was refused: {source}")]
    Refused {
        sha: String,
        #[source]
        source: BlobError,
    },
    /// The blob's manifest, or a part against it, does not add up; nothing
    /// was kept.
    #[error("blob {sha} from the server was refused: {source}")]
    Manifest {
        sha: String,
        #[source]
        source: ManifestError,
    },
    /// This device could not write a temp file or the blob.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl From<TransferError> for SyncError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Client(e) => Self::Client(e),
            TransferError::Refused { sha, source } => Self::Blob { name: sha, source },
            TransferError::Manifest { sha, source } => Self::Blob {
                name: sha,
                source: BlobError::Inconsistent(source.to_string()),
            },
            TransferError::Io { context, source } => Self::Io { context, source },
        }
    }
}

/// Why one blob was not uploaded (the others went on).
#[derive(Debug, thiserror::Error)]
pub enum UploadFailure {
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} does not match its name: its SHA-256 is {actual} (changed on disk?)")]
    Changed { path: PathBuf, actual: String },
    #[error(
        "{path} changed while it was being sent (part {part} differs); its manifest was not sent"
    )]
    ChangedWhileSent { path: PathBuf, part: u64 },
    #[error("{0:?} is not a blob name (64 lowercase hex characters)")]
    BadName(String),
    #[error("it is {0} bytes, more than the {max} a blob may have", max = MAX_BLOB_TOTAL_BYTES)]
    TooLarge(u64),
    #[error("cannot encrypt it: {0}")]
    Seal(#[source] BlobError),
    #[error("the server refused it: {0}")]
    Refused(#[source] ClientError),
    #[error("the server's blob limit ({0} bytes) cannot hold even a small part")]
    LimitTooSmall(u64),
}

/// What [`BlobTransfer::upload_blobs`] did with one blob.
#[derive(Debug)]
pub enum UploadOutcome {
    /// Uploaded now: whole (`parts == 0`), or in `parts` parts and a
    /// manifest.
    Uploaded { parts: u64 },
    /// The server had it already, whole or complete in parts.
    AlreadyStored,
    /// Not uploaded; the reason says why. Nothing was stored under its
    /// whole or manifest name.
    Failed(UploadFailure),
}

/// What [`BlobTransfer::fetch_blob`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetched {
    /// Verified and linked into place; its size in bytes.
    Written(u64),
    /// The destination existed and was left untouched.
    AlreadyPresent,
    /// The server has neither the whole blob nor a complete set of parts.
    Missing,
}

/// Blob transfers in flight at once: each mostly waits for the other side
/// (the server making an upload durable, a download's fsync here, and on a
/// server whose blobs are in object storage, the bucket's wait before the
/// first byte of every GET: about 45 ms per blob on the bench's s3s-fs
/// against 1 ms from a folder), so several at once keep both busy; more
/// only hold more buffers (one per transfer) and threads.
pub(crate) const TRANSFERS: usize = 8;

/// `f` over `items` on [`TRANSFERS`] threads; results in the order of
/// `items`. Items are taken in order and none is started after a failure,
/// so the first failure in that order is the one returned.
pub(crate) fn in_parallel<T: Sync, R: Send, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    in_parallel_on(TRANSFERS, items, f)
}

/// [`in_parallel`] on at most `threads` threads.
pub(crate) fn in_parallel_on<T: Sync, R: Send, E: Send>(
    threads: usize,
    items: &[T],
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let done = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(items.len()) {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { return };
                    let r = f(item);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    done.lock().unwrap_or_else(|p| p.into_inner()).push((i, r));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

pub(crate) fn is_sha_name(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the client needs to move blobs: borrowed from a
/// [`SyncContext`](crate::sync::state::context::SyncContext) or given piecemeal.
pub struct BlobTransfer<'a> {
    client: &'a Client,
    identity: &'a Identity,
    keys: &'a SyncKeys,
    temp_dir: &'a Path,
    /// The server's `max_blob_bytes`, asked for on the first upload that
    /// needs it unless given.
    max_blob_bytes: OnceLock<u64>,
}

impl<'a> BlobTransfer<'a> {
    /// `temp_dir` holds sealed uploads while they go up (the sync folder:
    /// owner-only).
    pub fn new(
        client: &'a Client,
        identity: &'a Identity,
        keys: &'a SyncKeys,
        temp_dir: &'a Path,
    ) -> Self {
        Self {
            client,
            identity,
            keys,
            temp_dir,
            max_blob_bytes: OnceLock::new(),
        }
    }

    /// The owner-only folder its temp files go in.
    pub fn temp_dir(&self) -> &'a Path {
        self.temp_dir
    }

    /// With the server's `max_blob_bytes` known (from `capabilities()`), so
    /// uploads do not ask for it again.
    pub fn with_max_blob_bytes(self, max: u64) -> Self {
        let _ = self.max_blob_bytes.set(max);
        self
    }

    /// Whether the server holds each blob, whole or complete in parts (a
    /// manifest is there); one call per `MAX_NAMES_PER_CALL / 2` blobs. A
    /// malformed name is never stored.
    pub fn stored(&self, shas: &[String]) -> Result<Vec<bool>, TransferError> {
        let mut out = Vec::with_capacity(shas.len());
        for chunk in shas.chunks(MAX_NAMES_PER_CALL / 2) {
            let valid: Vec<&String> = chunk.iter().filter(|s| is_sha_name(s)).collect();
            let names = valid
                .iter()
                .flat_map(|s| [self.keys.blob_key(s), self.keys.blob_manifest_key(s)])
                .collect();
            let missing: BTreeSet<KeyedId> = if valid.is_empty() {
                BTreeSet::new()
            } else {
                self.client.missing_blobs(names)?.into_iter().collect()
            };
            out.extend(chunk.iter().map(|s| {
                is_sha_name(s)
                    && (!missing.contains(&self.keys.blob_key(s))
                        || !missing.contains(&self.keys.blob_manifest_key(s)))
            }));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
