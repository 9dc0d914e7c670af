//! Blobs of any size to and from the server, and none forgotten.
//!
//! A blob whose age file fits the server's `max_blob_bytes` is stored whole
//! under `blob_key(sha)`, as [`blob`](super::blob) describes. A larger one is
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

use std::cell::Cell;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::iter;
use std::path::{Path, PathBuf};

use evi_shared::KeyedId;
use evi_shared::limits::MAX_NAMES_PER_CALL;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::client::{Client, ClientError};
use super::context::SyncContext;
use super::error::SyncError;
use super::push::PushReport;
use super::{BlobError, Identity, SyncKeys, open_blob, seal_blob};
use crate::fsutil::{persist_new, temp_beside};

/// The most bytes a blob may have. A manifest claiming more is refused, and
/// a whole blob streaming past it is cut off: a hostile server can make the
/// client download at most this much and throw it away.
pub const MAX_BLOB_TOTAL_BYTES: u64 = 64 << 30;

/// The smallest part a manifest may name, so a manifest cannot ask for an
/// absurd number of downloads (at most 64 Mi parts for the largest blob).
pub const MIN_PART_BYTES: u64 = 1024;

/// `format` of a [`PartManifest`].
pub const MANIFEST_FORMAT: &str = "evi-blob-parts";

/// The [`PartManifest`] version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// Largest manifest plaintext read (ours are about 200 bytes).
const MANIFEST_MAX_BYTES: u64 = 4096;

/// age's STREAM chunk and the tag each chunk carries.
const AGE_CHUNK: u64 = 64 * 1024;
const AGE_TAG: u64 = 16;

/// Room for the age header: about 200 bytes for one X25519 recipient, plus
/// the 16-byte nonce; the rest is margin.
const AGE_HEADER_ROOM: u64 = 1024;

const BUF: usize = 64 * 1024;

/// An upper bound on the size of the age file of `plain` bytes: the header
/// and a tag per 64 KiB chunk (an empty blob still has one chunk).
pub fn sealed_len(plain: u64) -> u64 {
    AGE_HEADER_ROOM + plain + AGE_TAG * plain.div_ceil(AGE_CHUNK).max(1)
}

/// The largest part whose age file fits in `limit` bytes: whole 64 KiB
/// chunks when the limit holds one, so parts stay aligned to age's chunks.
/// `None` when the limit cannot hold even [`MIN_PART_BYTES`].
pub fn part_size_for(limit: u64) -> Option<u64> {
    let room = limit.checked_sub(AGE_HEADER_ROOM)?;
    let chunks = room / (AGE_CHUNK + AGE_TAG);
    let size = if chunks > 0 {
        chunks * AGE_CHUNK
    } else {
        room.checked_sub(AGE_TAG)?
    };
    (size >= MIN_PART_BYTES).then_some(size)
}

/// The plaintext of a blob's manifest: how it was split. Serialized as JSON
/// with these field names, e.g. `{"format":"evi-blob-parts","version":1,
/// "sha256":"…","size":3145728,"part_size":983040,"parts":4}`. The blob's
/// own name is inside so a manifest moved under another blob's name is
/// refused at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartManifest {
    /// Always [`MANIFEST_FORMAT`].
    pub format: String,
    /// [`MANIFEST_VERSION`]; a later version is refused, not guessed at.
    pub version: u32,
    /// The blob's name: the SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// The blob's size in bytes.
    pub size: u64,
    /// Plaintext bytes of every part but the last.
    pub part_size: u64,
    /// Number of parts: `size / part_size` rounded up.
    pub parts: u64,
}

/// Why a manifest (or a part it names) is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the part manifest is longer than {max} bytes", max = MANIFEST_MAX_BYTES)]
    TooLong,
    #[error("not a part manifest: {0}")]
    NotManifest(String),
    #[error("part manifest version {0} is not supported by this evi (update evi)")]
    Version(u32),
    #[error("the part manifest is for another blob ({0})")]
    OtherBlob(String),
    #[error("the part manifest gives a size of {0} bytes, outside 1 to {max}", max = MAX_BLOB_TOTAL_BYTES)]
    Size(u64),
    #[error("the part manifest gives a part size of {0} bytes, outside {min} to {max}", min = MIN_PART_BYTES, max = MAX_BLOB_TOTAL_BYTES)]
    PartSize(u64),
    #[error("the part manifest gives {parts} parts of {part_size} bytes for {size} bytes")]
    Count {
        parts: u64,
        part_size: u64,
        size: u64,
    },
    #[error("part {index} holds more or fewer than the {expected} bytes its manifest gives")]
    PartLength { index: u64, expected: u64 },
}

impl PartManifest {
    /// The manifest of a blob of `size` bytes split into `part_size` parts.
    pub fn new(sha256: &str, size: u64, part_size: u64) -> Self {
        Self {
            format: MANIFEST_FORMAT.to_owned(),
            version: MANIFEST_VERSION,
            sha256: sha256.to_owned(),
            size,
            part_size,
            parts: size.div_ceil(part_size.max(1)),
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a manifest always serializes")
    }

    /// Reads and checks a manifest fetched for `expected_sha256`: the right
    /// format and version, this blob, and sizes that add up within bounds.
    pub fn parse(bytes: &[u8], expected_sha256: &str) -> Result<Self, ManifestError> {
        #[derive(Deserialize)]
        struct Head {
            format: String,
            version: u32,
        }
        if bytes.len() as u64 > MANIFEST_MAX_BYTES {
            return Err(ManifestError::TooLong);
        }
        let head: Head =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::NotManifest(e.to_string()))?;
        if head.format != MANIFEST_FORMAT {
            return Err(ManifestError::NotManifest(format!(
                "format {:?}",
                head.format
            )));
        }
        if head.version != MANIFEST_VERSION {
            return Err(ManifestError::Version(head.version));
        }
        let m: Self =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::NotManifest(e.to_string()))?;
        if m.sha256 != expected_sha256 {
            return Err(ManifestError::OtherBlob(m.sha256));
        }
        if m.size == 0 || m.size > MAX_BLOB_TOTAL_BYTES {
            return Err(ManifestError::Size(m.size));
        }
        if !(MIN_PART_BYTES..=MAX_BLOB_TOTAL_BYTES).contains(&m.part_size) {
            return Err(ManifestError::PartSize(m.part_size));
        }
        // Exactly the parts the size needs: no empty part, no part beyond.
        if m.parts != m.size.div_ceil(m.part_size) {
            return Err(ManifestError::Count {
                parts: m.parts,
                part_size: m.part_size,
                size: m.size,
            });
        }
        Ok(m)
    }

    /// Where part `index` starts in the blob, and its length.
    pub fn part_range(&self, index: u64) -> (u64, u64) {
        let start = index * self.part_size;
        (start, self.part_size.min(self.size - start))
    }
}

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

/// One attempt at an upload under one limit.
enum Attempt {
    Done(UploadOutcome),
    /// 413: the server's real limit is lower than the one tried.
    TooLarge(ClientError),
}

fn is_sha_name(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A name asked for must be a SHA-256 before it names a file or a key.
fn check_name(sha: &str) -> Result<(), TransferError> {
    if is_sha_name(sha) {
        Ok(())
    } else {
        Err(TransferError::Refused {
            sha: sha.to_owned(),
            source: BlobError::BadName(sha.to_owned()),
        })
    }
}

fn is_404(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status: 404, .. })
}

/// What the client needs to move blobs: borrowed from a
/// [`SyncContext`](super::context::SyncContext) or given piecemeal.
pub struct BlobTransfer<'a> {
    client: &'a Client,
    identity: &'a Identity,
    keys: &'a SyncKeys,
    temp_dir: &'a Path,
    /// The server's `max_blob_bytes`, asked for on the first upload that
    /// needs it unless given.
    max_blob_bytes: Cell<Option<u64>>,
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
            max_blob_bytes: Cell::new(None),
        }
    }

    /// With the server's `max_blob_bytes` known (from `capabilities()`), so
    /// uploads do not ask for it again.
    pub fn with_max_blob_bytes(self, max: u64) -> Self {
        self.max_blob_bytes.set(Some(max));
        self
    }

    fn max_blob_bytes(&self) -> Result<u64, ClientError> {
        if let Some(m) = self.max_blob_bytes.get() {
            return Ok(m);
        }
        let m = self.client.capabilities()?.max_blob_bytes;
        self.max_blob_bytes.set(Some(m));
        Ok(m)
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

    /// Uploads each `(sha256, source file)` the server lacks, in parts when
    /// its age file would exceed the server's blob limit. One outcome per
    /// blob, in order; asks which are missing in batches, not per blob.
    pub fn upload_blobs(
        &self,
        blobs: &[(String, PathBuf)],
    ) -> Result<Vec<UploadOutcome>, TransferError> {
        let shas: Vec<String> = blobs.iter().map(|(s, _)| s.clone()).collect();
        let stored = self.stored(&shas)?;
        let mut out = Vec::with_capacity(blobs.len());
        for ((sha, path), stored) in blobs.iter().zip(stored) {
            out.push(if !is_sha_name(sha) {
                UploadOutcome::Failed(UploadFailure::BadName(sha.clone()))
            } else if stored {
                UploadOutcome::AlreadyStored
            } else {
                self.send(sha, path)?
            });
        }
        Ok(out)
    }

    /// [`Self::upload_blobs`] for one blob.
    pub fn upload_blob(&self, sha256: &str, src: &Path) -> Result<UploadOutcome, TransferError> {
        let mut v = self.upload_blobs(&[(sha256.to_owned(), src.to_owned())])?;
        Ok(v.pop().expect("one outcome per blob"))
    }

    /// Uploads one blob the server lacks. A 413 despite the advertised
    /// limit (a proxy in front with a lower one) halves the limit tried,
    /// down to parts too small to be worth it.
    fn send(&self, sha: &str, path: &Path) -> Result<UploadOutcome, TransferError> {
        let size = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => {
                return Ok(UploadOutcome::Failed(UploadFailure::Unreadable {
                    path: path.to_owned(),
                    source: io::Error::other("not a regular file"),
                }));
            }
            Err(source) => {
                return Ok(UploadOutcome::Failed(UploadFailure::Unreadable {
                    path: path.to_owned(),
                    source,
                }));
            }
        };
        if size > MAX_BLOB_TOTAL_BYTES {
            return Ok(UploadOutcome::Failed(UploadFailure::TooLarge(size)));
        }
        let mut limit = self.max_blob_bytes()?;
        loop {
            let attempt = if sealed_len(size) <= limit {
                self.send_whole(sha, path)?
            } else {
                match part_size_for(limit) {
                    Some(part) => self.send_parts(sha, path, part)?,
                    None => return Ok(UploadOutcome::Failed(UploadFailure::LimitTooSmall(limit))),
                }
            };
            match attempt {
                Attempt::Done(o) => return Ok(o),
                Attempt::TooLarge(e) => {
                    limit /= 2;
                    if part_size_for(limit).is_none() {
                        return Ok(UploadOutcome::Failed(UploadFailure::Refused(e)));
                    }
                }
            }
        }
    }

    fn temp(&self) -> Result<NamedTempFile, TransferError> {
        tempfile::Builder::new()
            .prefix(".evi-upload-")
            .tempfile_in(self.temp_dir)
            .map_err(|source| TransferError::Io {
                context: format!("cannot create a temp file in {}", self.temp_dir.display()),
                source,
            })
    }

    /// PUTs a sealed file; sorts the failures that concern this blob only
    /// from those that stop the transfer.
    fn put(&self, name: &KeyedId, sealed: &Path) -> Result<Option<Attempt>, TransferError> {
        match self.client.put_blob(name, sealed) {
            Ok(_) => Ok(None),
            Err(e @ ClientError::Api { status: 413, .. }) => Ok(Some(Attempt::TooLarge(e))),
            Err(e @ ClientError::Api { status, .. })
                if !e.is_transient() && status != 401 && status != 403 =>
            {
                Ok(Some(Attempt::Done(UploadOutcome::Failed(
                    UploadFailure::Refused(e),
                ))))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn send_whole(&self, sha: &str, path: &Path) -> Result<Attempt, TransferError> {
        let failed = |f| Ok(Attempt::Done(UploadOutcome::Failed(f)));
        let src = match File::open(path) {
            Ok(f) => f,
            Err(source) => {
                return failed(UploadFailure::Unreadable {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let tmp = self.temp()?;
        let digest = match seal_blob(self.identity, src, tmp.as_file()) {
            Ok((_, d)) => d,
            Err(e) => return failed(UploadFailure::Seal(e)),
        };
        if digest.sha256_hex != sha {
            return failed(UploadFailure::Changed {
                path: path.to_owned(),
                actual: digest.sha256_hex,
            });
        }
        if let Some(a) = self.put(&self.keys.blob_key(sha), tmp.path())? {
            return Ok(a);
        }
        Ok(Attempt::Done(UploadOutcome::Uploaded { parts: 0 }))
    }

    /// Parts the server lacks (an interrupted upload resumes), then the
    /// manifest.
    fn send_parts(&self, sha: &str, path: &Path, part_size: u64) -> Result<Attempt, TransferError> {
        let failed = |f| Ok(Attempt::Done(UploadOutcome::Failed(f)));
        let unreadable = |source| {
            failed(UploadFailure::Unreadable {
                path: path.to_owned(),
                source,
            })
        };
        let mut src = match File::open(path) {
            Ok(f) => f,
            Err(e) => return unreadable(e),
        };
        let hashes = match hash_parts(&mut src, part_size) {
            Ok(h) => h,
            Err(e) => return unreadable(e),
        };
        if hashes.whole != sha {
            return failed(UploadFailure::Changed {
                path: path.to_owned(),
                actual: hashes.whole,
            });
        }
        let m = PartManifest::new(sha, hashes.size, part_size);
        let names: Vec<KeyedId> = (0..m.parts)
            .map(|i| self.keys.blob_part_key(sha, i, m.parts))
            .collect();
        let mut missing = BTreeSet::new();
        for chunk in names.chunks(MAX_NAMES_PER_CALL) {
            missing.extend(self.client.missing_blobs(chunk.to_vec())?);
        }
        for (i, name) in names.iter().enumerate() {
            if !missing.contains(name) {
                continue;
            }
            let (start, len) = m.part_range(i as u64);
            if let Err(e) = src.seek(SeekFrom::Start(start)) {
                return unreadable(e);
            }
            let tmp = self.temp()?;
            let digest = match seal_blob(self.identity, (&src).take(len), tmp.as_file()) {
                Ok((_, d)) => d,
                Err(e) => return failed(UploadFailure::Seal(e)),
            };
            if digest.size != len || digest.sha256_hex != hashes.parts[i] {
                return failed(UploadFailure::ChangedWhileSent {
                    path: path.to_owned(),
                    part: i as u64,
                });
            }
            if let Some(a) = self.put(name, tmp.path())? {
                return Ok(a);
            }
        }
        let tmp = self.temp()?;
        if let Err(e) = seal_blob(self.identity, &m.to_bytes()[..], tmp.as_file()) {
            return failed(UploadFailure::Seal(e));
        }
        if let Some(a) = self.put(&self.keys.blob_manifest_key(sha), tmp.path())? {
            return Ok(a);
        }
        Ok(Attempt::Done(UploadOutcome::Uploaded { parts: m.parts }))
    }

    /// Fetches, verifies and links a blob into `dest` (created, never
    /// replaced); the folder is created if missing. An existing `dest` is
    /// not fetched at all.
    pub fn fetch_blob(&self, sha256: &str, dest: &Path) -> Result<Fetched, TransferError> {
        check_name(sha256)?;
        if dest.exists() {
            return Ok(Fetched::AlreadyPresent);
        }
        let io_err = |source| TransferError::Io {
            context: format!("cannot write {}", dest.display()),
            source,
        };
        let mut tmp = temp_beside(dest).map_err(io_err)?;
        let Some(size) = self.fetch_into(sha256, tmp.as_file_mut())? else {
            return Ok(Fetched::Missing);
        };
        match persist_new(tmp, dest) {
            Ok(()) => Ok(Fetched::Written(size)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(Fetched::AlreadyPresent),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Fetches and verifies a blob into a new temp file in `dir` (created if
    /// missing), for a caller that wants the bytes rather than a file in
    /// `checkpoints/blobs/`: read it from the start, or persist it. `None`
    /// when the server does not have it. The file is deleted on drop.
    pub fn fetch_blob_to_temp(
        &self,
        sha256: &str,
        dir: &Path,
    ) -> Result<Option<NamedTempFile>, TransferError> {
        check_name(sha256)?;
        let io_err = |source| TransferError::Io {
            context: format!("cannot write a temp file in {}", dir.display()),
            source,
        };
        let mut tmp = temp_beside(&dir.join(sha256)).map_err(io_err)?;
        if self.fetch_into(sha256, tmp.as_file_mut())?.is_none() {
            return Ok(None);
        }
        tmp.as_file_mut().seek(SeekFrom::Start(0)).map_err(io_err)?;
        Ok(Some(tmp))
    }

    /// Writes the verified blob into `out` (fresh, empty); its size, or
    /// `None` when the server has neither the whole blob nor all its parts.
    fn fetch_into(&self, sha: &str, out: &mut File) -> Result<Option<u64>, TransferError> {
        let write_err = |source| TransferError::Io {
            context: format!("cannot write blob {sha}"),
            source,
        };
        match self.client.get_blob(&self.keys.blob_key(sha)) {
            Ok(body) => {
                let mut w = Capped::new(BufWriter::with_capacity(BUF, &mut *out));
                let size = match open_blob(self.identity, sha, body, &mut w) {
                    Ok(n) => n,
                    Err(_) if w.over => {
                        return Err(TransferError::Refused {
                            sha: sha.to_owned(),
                            source: BlobError::Inconsistent(format!(
                                "it is longer than the {MAX_BLOB_TOTAL_BYTES} bytes a blob may have"
                            )),
                        });
                    }
                    Err(BlobError::Io(e)) => return Err(write_err(e)),
                    Err(source) => {
                        return Err(TransferError::Refused {
                            sha: sha.to_owned(),
                            source,
                        });
                    }
                };
                w.inner.flush().map_err(write_err)?;
                return Ok(Some(size));
            }
            Err(e) if is_404(&e) => {}
            Err(e) => return Err(e.into()),
        }
        let m = match self.client.get_blob(&self.keys.blob_manifest_key(sha)) {
            Ok(body) => read_manifest(self.identity, sha, body)?,
            Err(e) if is_404(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let parts = m.parts;
        join_parts(
            self.identity,
            &m,
            |i| match self
                .client
                .get_blob(&self.keys.blob_part_key(sha, i, parts))
            {
                Ok(body) => Ok(Some(body)),
                Err(e) if is_404(&e) => Ok(None),
                Err(e) => Err(e.into()),
            },
            BufWriter::with_capacity(BUF, out),
        )
    }
}

/// A writer that refuses to grow past [`MAX_BLOB_TOTAL_BYTES`], and says so.
struct Capped<W> {
    inner: W,
    left: u64,
    over: bool,
}

impl<W> Capped<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            left: MAX_BLOB_TOTAL_BYTES,
            over: false,
        }
    }
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.left {
            self.over = true;
            return Err(io::Error::other("blob longer than any blob may be"));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The SHA-256 of a whole file and of each of its parts.
struct PartHashes {
    whole: String,
    parts: Vec<String>,
    size: u64,
}

fn hash_parts(src: &mut File, part_size: u64) -> io::Result<PartHashes> {
    src.seek(SeekFrom::Start(0))?;
    let mut whole = Sha256::new();
    let mut parts = Vec::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; BUF];
    loop {
        let mut part = Sha256::new();
        let mut r = (&*src).take(part_size);
        let mut n_part = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            whole.update(&buf[..n]);
            part.update(&buf[..n]);
            n_part += n as u64;
        }
        if n_part == 0 {
            break;
        }
        size += n_part;
        parts.push(hex::encode(part.finalize()));
        if n_part < part_size {
            break;
        }
    }
    Ok(PartHashes {
        whole: hex::encode(whole.finalize()),
        parts,
        size,
    })
}

/// An age decryptor of `ciphertext` for the identity.
fn decryptor<R: Read>(identity: &Identity, ciphertext: R) -> Result<impl Read, BlobError> {
    let dec = age::Decryptor::new_buffered(BufReader::with_capacity(BUF, ciphertext))
        .map_err(|e| BlobError::Decrypt(e.to_string()))?;
    dec.decrypt(iter::once(identity.age_identity() as &dyn age::Identity))
        .map_err(|e| BlobError::Decrypt(e.to_string()))
}

/// Decrypts and checks a manifest fetched for `sha`.
fn read_manifest<R: Read>(
    identity: &Identity,
    sha: &str,
    ciphertext: R,
) -> Result<PartManifest, TransferError> {
    let refused = |source| TransferError::Refused {
        sha: sha.to_owned(),
        source,
    };
    let mut plain = Vec::new();
    decryptor(identity, ciphertext)
        .map_err(refused)?
        .take(MANIFEST_MAX_BYTES + 1)
        .read_to_end(&mut plain)
        .map_err(|e| refused(BlobError::Decrypt(e.to_string())))?;
    PartManifest::parse(&plain, sha).map_err(|source| TransferError::Manifest {
        sha: sha.to_owned(),
        source,
    })
}

/// Decrypts the parts `next(i)` yields, in order, into `out`, checking each
/// part's length against the manifest and the whole against its name.
/// `Ok(None)` as soon as a part is not on the server.
fn join_parts<R: Read, W: Write>(
    identity: &Identity,
    m: &PartManifest,
    mut next: impl FnMut(u64) -> Result<Option<R>, TransferError>,
    mut out: W,
) -> Result<Option<u64>, TransferError> {
    let sha = m.sha256.as_str();
    let refused = |source| TransferError::Refused {
        sha: sha.to_owned(),
        source,
    };
    let write_err = |source| TransferError::Io {
        context: format!("cannot write blob {sha}"),
        source,
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    for i in 0..m.parts {
        let Some(ct) = next(i)? else {
            return Ok(None);
        };
        let (_, expected) = m.part_range(i);
        // One byte more than the part may hold tells a long part from a
        // right one without reading the rest.
        let mut r = decryptor(identity, ct).map_err(refused)?.take(expected + 1);
        let mut got = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(refused(BlobError::Decrypt(e.to_string()))),
            };
            got += n as u64;
            if got > expected {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(write_err)?;
        }
        if got != expected {
            return Err(TransferError::Manifest {
                sha: sha.to_owned(),
                source: ManifestError::PartLength { index: i, expected },
            });
        }
    }
    out.flush().map_err(write_err)?;
    let actual = hex::encode(hasher.finalize());
    if actual != sha {
        return Err(refused(BlobError::HashMismatch {
            expected: sha.to_owned(),
            actual,
        }));
    }
    Ok(Some(m.size))
}

// ---------------------------------------------------------------------------
// The sync commands' side: which blobs, what the state remembers, warnings.

/// Where a checkpoint blob lives: `checkpoints/blobs/<sha256>`.
pub fn checkpoint_blob_path(ctx: &SyncContext, sha256: &str) -> PathBuf {
    ctx.home.checkpoints_dir().join("blobs").join(sha256)
}

fn transfer(ctx: &SyncContext) -> BlobTransfer<'_> {
    BlobTransfer::new(&ctx.client, &ctx.identity, &ctx.keys, &ctx.paths.dir)
}

/// Uploads one blob from `src` unless the server has it; `true` if it went
/// up now. A blob that cannot be sent is an error about that item alone
/// ([`SyncError::Io`], its cause as the source), so a caller can name it and
/// go on; the state is not touched.
pub fn upload_one(ctx: &SyncContext, sha256: &str, src: &Path) -> Result<bool, SyncError> {
    match transfer(ctx).upload_blob(sha256, src)? {
        UploadOutcome::Uploaded { .. } => Ok(true),
        UploadOutcome::AlreadyStored => Ok(false),
        UploadOutcome::Failed(why) => Err(SyncError::Io {
            context: format!("blob {sha256} was not uploaded"),
            source: io::Error::other(why),
        }),
    }
}

/// Fetches one blob into `dest` (verified, created, never replaced; see
/// [`BlobTransfer::fetch_blob`]), with no warning and no state: a caller
/// that gets [`Fetched::Missing`] decides what waits.
pub fn fetch_to(ctx: &SyncContext, sha256: &str, dest: &Path) -> Result<Fetched, SyncError> {
    Ok(transfer(ctx).fetch_blob(sha256, dest)?)
}

/// Uploads the blobs `shas` (named by journal lines about to be pushed) and
/// those the state remembers as missing that are here now. A blob that
/// cannot be sent is warned about, counted in `blobs_failed`, and
/// remembered, so the next push tries again; the lines naming it still go.
pub fn push_blobs(
    ctx: &mut SyncContext,
    report: &mut PushReport,
    mut shas: BTreeSet<String>,
) -> Result<(), SyncError> {
    shas.retain(|s| is_sha_name(s));
    shas.extend(
        ctx.state
            .missing_blobs
            .iter()
            .filter(|s| is_sha_name(s) && checkpoint_blob_path(ctx, s).is_file())
            .cloned(),
    );
    if shas.is_empty() {
        return Ok(());
    }
    let list: Vec<(String, PathBuf)> = shas
        .into_iter()
        .map(|s| {
            let p = checkpoint_blob_path(ctx, &s);
            (s, p)
        })
        .collect();
    let outcomes = transfer(ctx).upload_blobs(&list)?;
    for ((sha, _), outcome) in list.into_iter().zip(outcomes) {
        match outcome {
            UploadOutcome::Uploaded { .. } => {
                report.blobs_uploaded += 1;
                ctx.state.missing_blobs.remove(&sha);
            }
            UploadOutcome::AlreadyStored => {
                ctx.state.missing_blobs.remove(&sha);
            }
            UploadOutcome::Failed(why) => {
                crate::commands::warn(&format!(
                    "blob {sha} was not uploaded: {why}; the journal lines naming it go \
                     without it, and the next push tries again"
                ));
                report.blobs_failed += 1;
                ctx.state.missing_blobs.insert(sha);
            }
        }
    }
    Ok(())
}

/// [`push_blobs`] of only the blobs the state remembers as missing: what a
/// push owes the server even when its journal did not change.
pub fn push_missing_blobs(ctx: &mut SyncContext, report: &mut PushReport) -> Result<(), SyncError> {
    push_blobs(ctx, report, BTreeSet::new())
}

/// Fetches the blobs `shas` (named by journal lines about to be applied)
/// that are not here. One the server does not have is warned about and
/// remembered, and its line is applied anyway: [`pull_missing_blobs`] asks
/// for it again at every pull. Those already remembered were asked for at
/// the start of this pull, so each is warned about once per pull. Returns
/// how many were written.
pub fn pull_blobs(ctx: &mut SyncContext, shas: &[String]) -> Result<u64, SyncError> {
    let todo: BTreeSet<&String> = shas
        .iter()
        .filter(|s| is_sha_name(s) && !ctx.state.missing_blobs.contains(*s))
        .filter(|s| !checkpoint_blob_path(ctx, s).exists())
        .collect();
    if todo.is_empty() {
        return Ok(0);
    }
    let t = transfer(ctx);
    let mut fetched = 0;
    let mut missing = Vec::new();
    for sha in todo {
        match t.fetch_blob(sha, &checkpoint_blob_path(ctx, sha))? {
            Fetched::Written(_) => fetched += 1,
            Fetched::AlreadyPresent => {}
            Fetched::Missing => {
                crate::commands::warn(&format!(
                    "blob {sha} is not on the server; its journal line is applied, and \
                     every pull asks for the blob again"
                ));
                missing.push(sha.clone());
            }
        }
    }
    ctx.state.missing_blobs.extend(missing);
    Ok(fetched)
}

/// Asks again for every blob the state remembers as missing (at the start
/// of a pull): those that arrive, or that are here and now on the server,
/// are forgotten; one the server refuses to give right is warned about and
/// kept (its line is applied already, so refusing the pull would only block
/// everything else). Those that are here but not on the server wait for
/// this device's next push. Returns how many were written.
pub fn pull_missing_blobs(ctx: &mut SyncContext) -> Result<u64, SyncError> {
    if ctx.state.missing_blobs.is_empty() {
        return Ok(0);
    }
    let mut done = Vec::new();
    let mut here = Vec::new();
    let mut absent = Vec::new();
    for sha in &ctx.state.missing_blobs {
        if !is_sha_name(sha) {
            done.push(sha.clone());
        } else if checkpoint_blob_path(ctx, sha).exists() {
            here.push(sha.clone());
        } else {
            absent.push(sha.clone());
        }
    }
    let t = transfer(ctx);
    let mut fetched = 0;
    if !here.is_empty() {
        let stored = t.stored(&here)?;
        done.extend(
            here.into_iter()
                .zip(stored)
                .filter(|(_, s)| *s)
                .map(|(h, _)| h),
        );
    }
    for sha in absent {
        match t.fetch_blob(&sha, &checkpoint_blob_path(ctx, &sha)) {
            Ok(Fetched::Written(_)) => {
                fetched += 1;
                done.push(sha);
            }
            Ok(Fetched::AlreadyPresent) => done.push(sha),
            Ok(Fetched::Missing) => crate::commands::warn(&format!(
                "blob {sha} is still not on the server; a journal line here names it, and \
                 the next pull asks again"
            )),
            Err(e @ (TransferError::Refused { .. } | TransferError::Manifest { .. })) => {
                crate::commands::warn(&format!("{e}; nothing was kept, the next pull asks again"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    for sha in done {
        ctx.state.missing_blobs.remove(&sha);
    }
    Ok(fetched)
}

#[cfg(test)]
mod tests;
