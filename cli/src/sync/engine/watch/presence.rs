//! One watcher per home, and what it tells `evi sync status`.
//!
//! The watcher holds an advisory lock on `sync/watch.lock` for its whole
//! life (the OS drops it when the process dies, however it dies), and keeps
//! `sync/watch.json` (its pid, when it started and last synced) up to date,
//! replaced atomically. Whether a watcher runs is the lock, never the file:
//! a killed watcher leaves a file that no lock backs.
//!
//! The watch lock is not the sync lock: the watcher takes the sync lock only
//! for each push or pull, so manual `evi sync push` and `pull` run beside it.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sync::state::SyncPaths;

/// What the running watcher says of itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchInfo {
    pub pid: u32,
    /// RFC 3339.
    pub started: String,
    /// When it last pushed or pulled successfully (RFC 3339).
    #[serde(default)]
    pub last_sync: Option<String>,
    /// Since when the server has not answered (RFC 3339), while it does not.
    #[serde(default)]
    pub server_away_since: Option<String>,
    /// Since when the server refuses this device's token and the watcher
    /// waits for `evi sync login` (RFC 3339), while it does.
    #[serde(default)]
    pub waiting_for_login_since: Option<String>,
    /// Since when the server says the account's key was rotated and the
    /// watcher waits for `evi sync join` (RFC 3339), while it does.
    #[serde(default)]
    pub waiting_for_join_since: Option<String>,
}

/// Held while this process is the home's watcher.
#[derive(Debug)]
pub struct Presence {
    _lock: File,
    info_path: PathBuf,
    pub info: WatchInfo,
}

#[derive(Debug, thiserror::Error)]
pub enum PresenceError {
    #[error("another evi sync watch is running in this home (pid {pid})")]
    Running { pid: String },
    #[error("cannot open {path}: {source}")]
    Io { path: String, source: io::Error },
}

/// How the watcher's temps for `watch.json` begin: apart from the temps a
/// push or pull sweeps from `sync/` under the sync lock, which the watcher
/// does not hold while it writes this file (a sweep once took one between
/// its write and its rename, and status lost that the watcher waits for a
/// login). The watcher sweeps these itself, under the watch lock.
const TEMP_PREFIX: &str = ".evi-watch-tmp-";

fn lock_path(paths: &SyncPaths) -> PathBuf {
    paths.dir.join("watch.lock")
}

fn info_path(paths: &SyncPaths) -> PathBuf {
    paths.dir.join("watch.json")
}

fn open_lock(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

impl Presence {
    /// Becomes the home's watcher, or says which process is.
    pub fn claim(paths: &SyncPaths) -> Result<Self, PresenceError> {
        let path = lock_path(paths);
        let io = |source| PresenceError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = open_lock(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = read_info(paths).map_or_else(|| "?".to_owned(), |i| i.pid.to_string());
                return Err(PresenceError::Running { pid });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // Left by a watcher killed mid-write: only a watcher writes these.
        let _ = crate::fsutil::remove_temps_named(&paths.dir, TEMP_PREFIX);
        let me = Self {
            _lock: file,
            info_path: info_path(paths),
            info: WatchInfo {
                pid: std::process::id(),
                started: chrono::Utc::now().to_rfc3339(),
                ..WatchInfo::default()
            },
        };
        me.save().map_err(io)?;
        Ok(me)
    }

    /// Writes `info` (best effort for callers: status only reads it).
    pub fn save(&self) -> io::Result<()> {
        let bytes = serde_json::to_vec(&self.info).map_err(io::Error::other)?;
        crate::fsutil::replace_file_as(&self.info_path, &bytes, TEMP_PREFIX)
    }
}

fn read_info(paths: &SyncPaths) -> Option<WatchInfo> {
    serde_json::from_slice(&std::fs::read(info_path(paths)).ok()?).ok()
}

/// The home's running watcher, if one runs (its lock is held).
pub fn running(paths: &SyncPaths) -> Option<WatchInfo> {
    let file = open_lock_existing(&lock_path(paths))?;
    match file.try_lock() {
        // Nobody holds it: no watcher (the lock goes with this handle).
        Ok(()) => None,
        Err(std::fs::TryLockError::WouldBlock) => Some(read_info(paths).unwrap_or_default()),
        Err(std::fs::TryLockError::Error(_)) => None,
    }
}

/// The lock file if it exists (a home that never ran a watcher has none,
/// and asking must not create it).
fn open_lock_existing(path: &Path) -> Option<File> {
    OpenOptions::new().read(true).write(true).open(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_watcher_per_home_and_status_sees_it() {
        let dir = tempfile::tempdir().unwrap();
        let paths = SyncPaths {
            dir: dir.path().to_owned(),
        };
        assert_eq!(running(&paths), None);
        assert!(!lock_path(&paths).exists(), "asking created the lock");
        let first = Presence::claim(&paths).unwrap();
        let e = Presence::claim(&paths).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "another evi sync watch is running in this home (pid {})",
                std::process::id()
            )
        );
        assert_eq!(running(&paths).unwrap().pid, std::process::id());
        drop(first);
        assert_eq!(running(&paths), None, "a file no lock backs is no watcher");
    }
}
