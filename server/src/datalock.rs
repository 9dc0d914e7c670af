//! One server per data folder.
//!
//! [`DataLock::acquire`] takes an exclusive `flock` on `<data>/evi-server.lock`
//! and holds it for the life of the process (the kernel drops it when the
//! process ends, however it ends, so a crash never leaves a stale lock). A
//! second server on the same folder is refused before it opens the database
//! or sweeps anything: its start-up sweep would otherwise delete the bodies
//! the first server is about to commit. The lock file holds the holder's pid,
//! so the refusal can say which process to look at.
//!
//! `flock` locks are per host: servers on different machines sharing one
//! folder over a network filesystem are not covered, which is why the sweep
//! also keeps every body younger than [`crate::bodies::ORPHAN_MIN_AGE`].

use std::fs::{File, TryLockError};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The lock file's name inside the data folder.
pub const LOCK_FILE: &str = "evi-server.lock";

/// Why the data folder could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataLockError {
    /// Another process holds the lock: most likely a second `evi-server`
    /// started on the same `--data`.
    #[error(
        "the data folder {} is in use by another evi-server ({})",
        .folder.display(),
        .pid.map_or_else(|| "pid unknown".to_owned(), |p| format!("pid {p}"))
    )]
    Held { folder: PathBuf, pid: Option<u32> },
    #[error("cannot lock the data folder {} ({}): {source}", .folder.display(), LOCK_FILE)]
    Io {
        folder: PathBuf,
        source: std::io::Error,
    },
}

/// The held lock; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub struct DataLock {
    _file: File,
}

impl DataLock {
    /// Locks `folder` (which must exist) for this process, or says who holds it.
    pub fn acquire(folder: &Path) -> Result<Self, DataLockError> {
        let abs = std::path::absolute(folder).unwrap_or_else(|_| folder.to_owned());
        let io = |source| DataLockError::Io {
            folder: abs.clone(),
            source,
        };
        // Opened without truncating: the holder's pid must stay readable
        // to the process that is refused.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(folder.join(LOCK_FILE))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(DataLockError::Held {
                    folder: abs,
                    pid: text.trim().parse().ok(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Ours now: record who we are (a pid left by an earlier holder is
        // replaced; a reader racing this write sees "pid unknown").
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}
