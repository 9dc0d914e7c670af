//! Where blobs are kept: the [`BlobStore`] trait, and its default, blob
//! files under `<data>/blobs/<user id>/<keyed name>` ([`BlobDir`]); the
//! bucket one is [`objects::ObjectBlobs`]. Paths are built only from a
//! numeric user id and a validated [`KeyedId`].
//!
//! In a [`BlobDir`], an upload streams into a temp file in the same folder (`.tmp*`, deleted
//! when dropped, so a cut upload leaves nothing), is size-limited while it
//! streams, fsynced, moved into place only if no file has the name yet
//! (`renameat2(RENAME_NOREPLACE)`, or link and unlink where that is
//! missing), and the folder fsynced. So a blob file, once in place, is
//! never replaced: of two uploads of one name the first to complete wins,
//! and the other finds its file there.

use std::path::PathBuf;
use std::pin::Pin;

use async_trait::async_trait;
use axum::body::{Body, Bytes};
use evi_shared::KeyedId;
use futures_util::Stream;
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;

use crate::store::UserId;

pub mod collect;
pub mod objects;

/// The bytes of one stored blob, in chunks.
pub type BlobStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// Where blob contents live; the rows that say which blobs a user has are
/// the metadata store's.
///
/// The promise every implementation keeps: a blob is in place whole or not
/// at all (a cut upload leaves nothing readable), an upload is refused as
/// soon as it passes its limit while it streams (never held whole in
/// memory), and once a name is in place, what is read under it is one
/// upload's bytes.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// Streams `body` into place under `name`, refusing more than `max`
    /// bytes. Returns once the blob is durable.
    async fn receive(
        &self,
        user: UserId,
        name: &KeyedId,
        body: Body,
        max: u64,
    ) -> Result<Placed, UploadError>;
    /// The blob's size and its bytes, streamed; `None` when none is stored.
    async fn open(
        &self,
        user: UserId,
        name: &KeyedId,
    ) -> Result<Option<(u64, BlobStream)>, BlobError>;
    /// Deletes the blob (nothing if it is gone already).
    async fn remove(&self, user: UserId, name: &KeyedId) -> Result<(), BlobError>;
    /// The bytes of every blob, when the store is not the data folder
    /// (whose files [`crate::disk_usage`] walks itself): `None` there.
    async fn stored_bytes(&self) -> Option<Result<u64, BlobError>> {
        None
    }
}

/// Why a stored blob could not be read or deleted.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("blob storage: {0}")]
    Io(#[from] std::io::Error),
    /// The object store did not answer (worth a retry soon: 503).
    #[error("object store unavailable: {0}")]
    Unavailable(String),
}

#[derive(Debug, Clone)]
pub struct BlobDir {
    root: PathBuf,
}

/// Why an upload did not complete.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("blob is larger than {0} bytes")]
    TooLarge(u64),
    #[error("upload body failed: {0}")]
    Body(String),
    /// The body stopped arriving (the body timeout).
    #[error("upload body stopped arriving")]
    Stalled,
    #[error("blob storage: {0}")]
    Io(#[from] std::io::Error),
    /// The object store did not answer (worth a retry soon: 503).
    #[error("object store unavailable: {0}")]
    Unavailable(String),
}

/// A fully received blob in its final place.
pub struct Placed {
    /// The size of the blob in place (another upload's, if `ours` is false).
    pub size: u64,
    /// Whether this upload's bytes are the ones in place; false when another
    /// upload of the name completed first (this one's bytes are dropped).
    pub ours: bool,
}

/// The next chunk of an upload body (`None` at its end), with a body that
/// stopped arriving told apart from one that broke.
pub async fn next_chunk(body: &mut Body) -> Result<Option<Bytes>, UploadError> {
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            if crate::error::is_body_timeout(&e) {
                UploadError::Stalled
            } else {
                UploadError::Body(e.to_string())
            }
        })?;
        if let Ok(data) = frame.into_data() {
            return Ok(Some(data));
        }
    }
    Ok(None)
}

impl BlobDir {
    /// Creates the root and removes temp files a killed process left behind.
    pub fn open(root: PathBuf) -> std::io::Result<Self> {
        Self::open_keeping(root, std::time::Duration::ZERO)
    }

    /// [`Self::open`] for a folder other live replicas may share: keeps
    /// temp files younger than [`crate::bodies::ORPHAN_MIN_AGE`], which may
    /// be uploads under way there.
    pub fn open_shared(root: PathBuf) -> std::io::Result<Self> {
        Self::open_keeping(root, crate::bodies::ORPHAN_MIN_AGE)
    }

    fn open_keeping(root: PathBuf, min_age: std::time::Duration) -> std::io::Result<Self> {
        crate::private::dir(&root)?;
        let now = std::time::SystemTime::now();
        for user in std::fs::read_dir(&root)?.flatten() {
            if let Ok(files) = std::fs::read_dir(user.path()) {
                for f in files.flatten() {
                    let old = f
                        .metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| now.duration_since(t).unwrap_or_default() >= min_age);
                    if f.file_name().to_string_lossy().starts_with(".tmp") && old {
                        let _ = std::fs::remove_file(f.path());
                    }
                }
            }
        }
        Ok(Self { root })
    }

    fn user_dir(&self, user: UserId) -> PathBuf {
        self.root.join(user.to_string())
    }

    pub fn path(&self, user: UserId, name: &KeyedId) -> PathBuf {
        self.user_dir(user).join(name.as_str())
    }
}

#[async_trait]
impl BlobStore for BlobDir {
    /// Streams `body` to a temp file, then moves it to the blob's final path.
    async fn receive(
        &self,
        user: UserId,
        name: &KeyedId,
        body: Body,
        max: u64,
    ) -> Result<Placed, UploadError> {
        let dir = self.user_dir(user);
        let d = dir.clone();
        tokio::task::spawn_blocking(move || crate::private::dir(&d))
            .await
            .map_err(std::io::Error::other)??;
        let d = dir.clone();
        let tmp = tokio::task::spawn_blocking(move || {
            tempfile::Builder::new().prefix(".tmp").tempfile_in(d)
        })
        .await
        .map_err(std::io::Error::other)??;
        let mut file = tokio::fs::File::from_std(tmp.reopen()?);
        let mut size = 0u64;
        let mut body = body;
        while let Some(data) = next_chunk(&mut body).await? {
            size += data.len() as u64;
            if size > max {
                return Err(UploadError::TooLarge(max));
            }
            if let Err(e) = file.write_all(&data).await {
                // A full disk: the rest is read and dropped, so the client
                // gets the answer rather than a connection closed under
                // its upload.
                drain(body, max.saturating_sub(size)).await;
                return Err(e.into());
            }
        }
        file.flush().await?;
        file.sync_all().await?;
        drop(file);
        let dest = self.path(user, name);
        let (size, ours) = tokio::task::spawn_blocking(move || -> std::io::Result<(u64, bool)> {
            let mut tmp = tmp;
            // A purge or the collector may delete the file in place between
            // the refused move and the look at it: then this upload's file
            // goes in its place (a second time at most, then its answer).
            for _ in 0..3 {
                match tmp.persist_noclobber(&dest) {
                    Ok(_) => {
                        crate::private::sync_dir(&dir)?;
                        return Ok((size, true));
                    }
                    // Dropping the temp file (inside the error) deletes it.
                    Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                        match std::fs::metadata(&dest) {
                            Ok(m) => return Ok((m.len(), false)),
                            Err(gone) if gone.kind() == std::io::ErrorKind::NotFound => {
                                tmp = e.file;
                            }
                            Err(other) => return Err(other),
                        }
                    }
                    Err(e) => return Err(e.error),
                }
            }
            Err(std::io::Error::other(
                "the blob's file kept appearing and going while this upload moved in",
            ))
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(Placed { size, ours })
    }

    async fn open(
        &self,
        user: UserId,
        name: &KeyedId,
    ) -> Result<Option<(u64, BlobStream)>, BlobError> {
        let file = match tokio::fs::File::open(self.path(user, name)).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let size = file.metadata().await?.len();
        Ok(Some((
            size,
            Box::pin(tokio_util::io::ReaderStream::new(file)),
        )))
    }

    async fn remove(&self, user: UserId, name: &KeyedId) -> Result<(), BlobError> {
        match tokio::fs::remove_file(self.path(user, name)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// Reads and drops up to `max` more bytes of `body`.
pub async fn drain(mut body: Body, max: u64) {
    let mut seen = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        seen += frame.data_ref().map_or(0, |d| d.len() as u64);
        if seen > max {
            break;
        }
    }
}
