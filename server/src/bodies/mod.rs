//! Where segment bodies (record ciphertext) live, apart from their metadata.
//!
//! The metadata store keeps only a [`BodyRef`] per record; the bytes are in a
//! [`BodyStore`]. The promise that makes the two safe to combine: a push
//! writes its bodies with [`BodyStore::put_batch`], which returns only once
//! they are durable, and only then commits the rows that point at them. So a
//! row never points at a missing body; a crash between the two steps leaves
//! an orphan (bodies no row references), which [`sweep_orphans`] removes
//! once it is older than any push could still be committing.
//!
//! The default is [`packs::PackDir`], one pack file per push under the data
//! folder (or the folder of a `file://` store); [`objects::ObjectPacks`]
//! keeps one object per push in an S3-compatible bucket.

use std::collections::HashSet;
use std::pin::Pin;

use async_trait::async_trait;
use axum::body::Bytes;
use futures_util::Stream;

use crate::store::UserId;

pub mod compact;
pub mod objects;
pub mod packs;
pub mod readers;

/// Where one record's body is: `len` bytes at `offset` of pack `pack`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRef {
    pub pack: PackName,
    pub offset: u64,
    pub len: u64,
}

/// A pack's name: a ULID, so names are unique without coordination and only
/// ever `[0-9A-Z]{26}` (safe as a file or object name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PackName(String);

impl PackName {
    pub fn new() -> Self {
        Self(ulid::Ulid::new().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// When the pack was named (the ULID's time), as the server's clock
    /// read it then; the same on every backend, whatever its file times.
    pub fn created(&self) -> Option<std::time::SystemTime> {
        let ms = ulid::Ulid::from_string(&self.0).ok()?.timestamp_ms();
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms))
    }
}

impl Default for PackName {
    fn default() -> Self {
        Self::new()
    }
}

impl std::str::FromStr for PackName {
    type Err = BodyError;

    /// Accepts only what [`PackName::new`] makes, so a corrupt row can never
    /// name a path outside the store.
    fn from_str(s: &str) -> Result<Self, BodyError> {
        let ok = s.len() == 26
            && s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase());
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(BodyError::BadPackName(s.to_owned()))
        }
    }
}

impl std::fmt::Display for PackName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a body could not be stored or read. All are worth retrying except
/// `BadPackName` and `Short` (the store or its metadata is damaged);
/// `Unavailable` is answered 503 so the client retries soon.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("body storage: {0}")]
    Io(#[from] std::io::Error),
    /// The object store did not answer, or refused what was asked (after
    /// its own few retries).
    #[error("object store unavailable: {0}")]
    Unavailable(String),
    #[error("not a pack name: {0:?}")]
    BadPackName(String),
    #[error("pack {pack} holds fewer bytes than its records point at (wanted {want} at {offset})")]
    Short {
        pack: PackName,
        offset: u64,
        want: u64,
    },
}

/// The bytes of one body, in chunks; ends with an error rather than early.
pub type BodyStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// `chunks` as a [`BodyStream`] of exactly `want` bytes: a source that ends
/// before them (a file that shrank, a connection cut mid-body) fails the
/// stream instead of ending a body early. Every backend's `open` ends so.
pub(crate) fn exactly(
    chunks: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    want: u64,
) -> BodyStream {
    use futures_util::StreamExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let seen = Arc::new(AtomicU64::new(0));
    let counted = seen.clone();
    let chunks = chunks.map(move |c| {
        if let Ok(c) = &c {
            counted.fetch_add(c.len() as u64, Ordering::Relaxed);
        }
        c
    });
    let check = futures_util::stream::once(async move {
        let n = seen.load(Ordering::Relaxed);
        (n < want).then(|| {
            Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("pack ended after {n} of {want} bytes"),
            ))
        })
    })
    .filter_map(std::future::ready);
    Box::pin(chunks.chain(check))
}

#[async_trait]
pub trait BodyStore: Send + Sync + 'static {
    /// Stores `bodies` for `user` together (one pack, one durable write) and
    /// returns where each went, in order. Returns only once they survive a
    /// crash: file data and its directory entry synced, or the bucket's PUT
    /// answered.
    async fn put_batch(&self, user: UserId, bodies: Vec<Bytes>) -> Result<Vec<BodyRef>, BodyError>;
    /// Exactly the body at `r`, streamed; a body shorter than `r.len` ends
    /// the stream with an error.
    async fn open(&self, user: UserId, r: &BodyRef) -> Result<BodyStream, BodyError>;
    /// Several bodies whole, in order: for pages of small records, where a
    /// stream per body would cost more than its bytes. The caller bounds the
    /// total (see `SMALL_RUN_BYTES` in the framed pull). Errors as `open`.
    async fn read_small(&self, user: UserId, refs: Vec<BodyRef>) -> Result<Vec<Bytes>, BodyError> {
        use futures_util::TryStreamExt as _;
        let mut out = Vec::with_capacity(refs.len());
        for r in &refs {
            let mut body = Vec::with_capacity(usize::try_from(r.len).unwrap_or(0));
            let mut s = self.open(user, r).await?;
            while let Some(chunk) = s.try_next().await? {
                body.extend_from_slice(&chunk);
            }
            out.push(body.into());
        }
        Ok(out)
    }
    /// Stores a whole pack under the name it has in another store
    /// (`evi-server migrate`), durably as [`Self::put_batch`] does, so the
    /// rows copied after it point at the same offsets. A pack already there
    /// under that name is left as it is (names are never reused).
    async fn put_pack(&self, user: UserId, pack: &PackName, bytes: Bytes) -> Result<(), BodyError>;
    /// Every pack stored, with its owner.
    async fn list_packs(&self) -> Result<Vec<(UserId, PackName)>, BodyError>;
    /// Deletes a pack (nothing if it is gone already).
    async fn remove_pack(&self, user: UserId, pack: &PackName) -> Result<(), BodyError>;
    /// The bytes of every pack, when the store is not the data folder
    /// (whose files [`crate::disk_usage`] walks itself): `None` there.
    async fn stored_bytes(&self) -> Option<Result<u64, BodyError>> {
        None
    }
}

/// How old an unreferenced pack must be before the sweep removes it.
///
/// A push writes its pack, then commits the rows that point at it; between
/// the two the pack is unreferenced but not an orphan. That window is one
/// request: bounded by the body timeout (seconds between bytes), the batch
/// limit and a SQLite commit, which in practice is seconds, and under a
/// stalled disk or a slow client at most minutes. An hour is far past any
/// push still able to commit, while an orphan (a push that crashed) costs
/// only its bytes until a later start removes it. Kept even with the data
/// folder lock ([`crate::datalock`]): the lock covers one host, and a
/// shared backend (object storage behind several replicas) has no lock.
pub const ORPHAN_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// What [`sweep_orphans`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Orphans removed.
    pub removed: usize,
    /// Unreferenced packs younger than [`ORPHAN_MIN_AGE`], left alone.
    pub young: usize,
}

/// Removes every pack that no record references (`referenced`, read from
/// the metadata store after the packs were listed) and that is older than
/// [`ORPHAN_MIN_AGE`] at `now`.
///
/// A pack's age is read from its name (a ULID made when it was written),
/// so the rule is the same on every backend. A pack whose time is in the
/// future (the clock went back) counts as young: kept.
pub async fn sweep_orphans(
    store: &dyn BodyStore,
    packs: Vec<(UserId, PackName)>,
    referenced: &HashSet<(UserId, PackName)>,
    now: std::time::SystemTime,
) -> Result<Swept, BodyError> {
    let mut swept = Swept::default();
    for (user, pack) in packs {
        if referenced.contains(&(user, pack.clone())) {
            continue;
        }
        let old = pack
            .created()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= ORPHAN_MIN_AGE);
        if old {
            store.remove_pack(user, &pack).await?;
            swept.removed += 1;
        } else {
            swept.young += 1;
        }
    }
    Ok(swept)
}
