//! Bytes the data folder takes on disk, for the metrics: the database (with
//! its `-wal` and `-shm` files), `bodies/` and `blobs/`.
//!
//! The database is three `stat`s, read at every scrape. The folders are
//! walked, one `stat` per file, so their sums are kept for
//! [`FOLDER_MAX_AGE`] and a scrape within that time reuses them: a scraper
//! every few seconds costs no walk each, and a folder of a million blobs is
//! walked at most once a minute, off the async threads.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;

/// How old the folder sums a scrape reports may be.
pub const FOLDER_MAX_AGE: Duration = Duration::from_secs(60);

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
    /// The data folder's usage: the database now, the folders as of at
    /// most [`FOLDER_MAX_AGE`] ago.
    pub async fn read(&self, config: &Config) -> DiskUsage {
        let db = config.db_path();
        let database = ["", "-wal", "-shm"]
            .iter()
            .map(|suffix| {
                let mut p = db.clone().into_os_string();
                p.push(suffix);
                std::fs::metadata(PathBuf::from(p)).map_or(0, |m| m.len())
            })
            .sum();
        let mut folders = self.folders.lock().await;
        let fresh = folders.filter(|(at, ..)| at.elapsed() < FOLDER_MAX_AGE);
        let (bodies, blobs) = match fresh {
            Some((_, bodies, blobs)) => (bodies, blobs),
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
