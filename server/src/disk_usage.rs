//! Bytes the server's storage takes, for the metrics: the database (with
//! its `-wal` and `-shm` files), the record bodies and the blobs.
//!
//! The database is three `stat`s, read at every scrape (0 with
//! `--database`: Postgres's own statistics tell its size). Bodies and blobs
//! in the data folder (or a `file://` store) are walked, one `stat` per
//! file, so their sums are kept for [`FOLDER_MAX_AGE`] and a scrape within
//! that time reuses them: a scraper every few seconds costs no walk each,
//! and a folder of a million blobs is walked at most once a minute, off the
//! async threads. In an `s3://` store they are the sizes of the objects
//! under this server's prefix, listed at most every [`BUCKET_MAX_AGE`]: a
//! listing costs one LIST request per 1,000 objects (a pack per push, a
//! blob per checkpoint file), which a bucket bills, so a scraper every few
//! seconds still lists only every ten minutes. A listing that fails keeps
//! the last sums (logged).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::blobs::BlobStore;
use crate::bodies::BodyStore;
use crate::config::Config;
use crate::storage::StoreUrl;

/// How old the folder sums a scrape reports may be.
pub const FOLDER_MAX_AGE: Duration = Duration::from_secs(60);

/// How old the bucket sums a scrape reports may be.
pub const BUCKET_MAX_AGE: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, Clone, Copy, Default)]
pub struct DiskUsage {
    pub database: u64,
    pub bodies: u64,
    pub blobs: u64,
}

#[derive(Default)]
pub struct Cached {
    folders: tokio::sync::Mutex<Option<(Instant, u64, u64)>>,
}

impl Cached {
    /// The storage's usage: the database now, bodies and blobs as of at
    /// most [`FOLDER_MAX_AGE`] (a folder) or [`BUCKET_MAX_AGE`] (a bucket)
    /// ago.
    pub async fn read(
        &self,
        config: &Config,
        bodies: &dyn BodyStore,
        blobs: &dyn BlobStore,
    ) -> DiskUsage {
        let db = config.db_path();
        let database = ["", "-wal", "-shm"]
            .iter()
            .map(|suffix| {
                let mut p = db.clone().into_os_string();
                p.push(suffix);
                std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len())
            })
            .sum();
        let in_bucket = matches!(config.store_url(), Ok(Some(StoreUrl::S3 { .. })));
        let max_age = if in_bucket {
            BUCKET_MAX_AGE
        } else {
            FOLDER_MAX_AGE
        };
        let mut folders = self.folders.lock().await;
        let fresh = folders.filter(|(at, ..)| at.elapsed() < max_age);
        let (bodies, blobs) = match fresh {
            Some((_, bodies, blobs)) => (bodies, blobs),
            None if in_bucket => {
                let last = folders.map_or((0, 0), |(_, b, l)| (b, l));
                let b = match bodies.stored_bytes().await {
                    Some(Ok(n)) => n,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "metrics: cannot list the bodies in the bucket");
                        last.0
                    }
                    None => 0,
                };
                let l = match blobs.stored_bytes().await {
                    Some(Ok(n)) => n,
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "metrics: cannot list the blobs in the bucket");
                        last.1
                    }
                    None => 0,
                };
                *folders = Some((Instant::now(), b, l));
                (b, l)
            }
            None => {
                let (b, l) = (config.bodies_dir(), config.blobs_dir());
                let sums = tokio::task::spawn_blocking(move || (bytes_under(&b), bytes_under(&l)))
                    .await
                    .unwrap_or_default();
                *folders = Some((Instant::now(), sums.0, sums.1));
                sums
            }
        };
        DiskUsage {
            database,
            bodies,
            blobs,
        }
    }
}

/// The sizes of the files under `dir`, recursively (0 for what cannot be
/// read: a file removed during the walk is simply gone).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}
