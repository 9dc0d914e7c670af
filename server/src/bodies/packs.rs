//! The default body store: pack files under `<data>/bodies/<user id>/<ULID>`.
//!
//! A push's bodies go, back to back, into one new pack (created with
//! `create_new`, mode 0600), which is fsynced, and then its folder, before
//! [`PackDir::put_batch`] returns: one fsync per batch, not per record. A
//! pack is never written again after that, so a reader needs no lock. Paths
//! are built only from a numeric user id and a checked [`PackName`].

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use axum::body::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use super::{BodyError, BodyRef, BodyStore, BodyStream, PackName};
use crate::store::UserId;

/// Read size when streaming a body out.
const CHUNK: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub struct PackDir {
    root: PathBuf,
}

impl PackDir {
    /// Creates the root folder (and makes its entry durable) if needed.
    pub fn open(root: PathBuf) -> std::io::Result<Self> {
        create_dir_durably(&root)?;
        Ok(Self { root })
    }

    fn user_dir(&self, user: UserId) -> PathBuf {
        self.root.join(user.to_string())
    }

    /// The file of a pack (tests and operators look here).
    pub fn path(&self, user: UserId, pack: &PackName) -> PathBuf {
        self.user_dir(user).join(pack.as_str())
    }
}

/// Creates the folder (0700, see [`crate::private`]), then fsyncs the
/// parent of a folder it made, so a pack's folder cannot vanish in a crash
/// after the pack was reported durable.
fn create_dir_durably(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    crate::private::dir(dir)?;
    if let Some(parent) = dir.parent() {
        crate::private::sync_dir(parent)?;
    }
    Ok(())
}

/// Writes a new pack durably; one that fails part-way (a full disk) is
/// removed again, so no half-written pack stays to take room until the
/// next start's sweep.
fn write_pack(dir: &Path, path: &Path, bodies: &[Bytes]) -> std::io::Result<()> {
    create_dir_durably(dir)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let written = (|| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        for b in bodies {
            w.write_all(b)?;
        }
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    crate::private::sync_dir(dir)
}

#[async_trait]
impl BodyStore for PackDir {
    async fn put_batch(&self, user: UserId, bodies: Vec<Bytes>) -> Result<Vec<BodyRef>, BodyError> {
        if bodies.is_empty() {
            return Ok(Vec::new());
        }
        let pack = PackName::new();
        let dir = self.user_dir(user);
        let path = self.path(user, &pack);
        let mut offset = 0u64;
        let refs = bodies
            .iter()
            .map(|b| {
                let r = BodyRef {
                    pack: pack.clone(),
                    offset,
                    len: b.len() as u64,
                };
                offset += b.len() as u64;
                r
            })
            .collect();
        tokio::task::spawn_blocking(move || write_pack(&dir, &path, &bodies))
            .await
            .map_err(std::io::Error::other)??;
        Ok(refs)
    }

    async fn put_pack(&self, user: UserId, pack: &PackName, bytes: Bytes) -> Result<(), BodyError> {
        let dir = self.user_dir(user);
        let path = self.path(user, pack);
        let written = tokio::task::spawn_blocking(move || write_pack(&dir, &path, &[bytes]))
            .await
            .map_err(std::io::Error::other)?;
        match written {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            other => Ok(other?),
        }
    }

    async fn open(&self, user: UserId, r: &BodyRef) -> Result<BodyStream, BodyError> {
        let mut file = tokio::fs::File::open(self.path(user, &r.pack)).await?;
        let short = || BodyError::Short {
            pack: r.pack.clone(),
            offset: r.offset,
            want: r.len,
        };
        if file.metadata().await?.len() < r.offset.saturating_add(r.len) {
            return Err(short());
        }
        file.seek(std::io::SeekFrom::Start(r.offset)).await?;
        let want = r.len;
        // The file was long enough when opened; if it shrank since (it never
        // should), the stream fails instead of ending a body early.
        let chunks = tokio_util::io::ReaderStream::with_capacity(file.take(want), CHUNK);
        Ok(super::exactly(chunks, want))
    }

    /// One blocking task for the lot, each pack opened once, positioned
    /// reads (a page of 1 KiB records would otherwise pay several blocking
    /// hops per record).
    async fn read_small(&self, user: UserId, refs: Vec<BodyRef>) -> Result<Vec<Bytes>, BodyError> {
        use std::os::unix::fs::FileExt as _;
        let dir = self.user_dir(user);
        tokio::task::spawn_blocking(move || {
            let mut open: Option<(PackName, std::fs::File, u64)> = None;
            let mut out = Vec::with_capacity(refs.len());
            for r in refs {
                if open.as_ref().is_none_or(|(p, _, _)| *p != r.pack) {
                    let f = std::fs::File::open(dir.join(r.pack.as_str()))?;
                    let len = f.metadata()?.len();
                    open = Some((r.pack.clone(), f, len));
                }
                let (_, f, size) = open.as_ref().expect("opened above");
                if *size < r.offset.saturating_add(r.len) {
                    return Err(BodyError::Short {
                        pack: r.pack,
                        offset: r.offset,
                        want: r.len,
                    });
                }
                let mut buf = vec![0u8; usize::try_from(r.len).unwrap_or(usize::MAX)];
                f.read_exact_at(&mut buf, r.offset)?;
                out.push(Bytes::from(buf));
            }
            Ok(out)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    async fn list_packs(&self) -> Result<Vec<(UserId, PackName)>, BodyError> {
        let root = self.root.clone();
        let packs = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<_>> {
            let mut out = Vec::new();
            for user in std::fs::read_dir(&root)? {
                let user = user?;
                let Some(id) = user
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<UserId>().ok())
                else {
                    continue;
                };
                for f in std::fs::read_dir(user.path())? {
                    let f = f?;
                    if let Some(p) = f.file_name().to_str().and_then(|s| s.parse().ok()) {
                        out.push((id, p));
                    }
                }
            }
            Ok(out)
        })
        .await
        .map_err(std::io::Error::other)??;
        Ok(packs)
    }

    async fn remove_pack(&self, user: UserId, pack: &PackName) -> Result<(), BodyError> {
        match tokio::fs::remove_file(self.path(user, pack)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}
