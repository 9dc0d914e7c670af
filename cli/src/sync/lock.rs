//! One sync at a time per home: an advisory lock on `sync/lock`, holding the
//! pid of its owner so a second command can say who holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Held until dropped (the OS releases it if the process dies).
#[derive(Debug)]
pub struct SyncLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another evi sync is running in this home (pid {pid}); wait for it to finish")]
    Busy { pid: String },
    #[error("cannot open {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl SyncLock {
    /// Takes the lock, waiting up to `wait` for another holder to finish.
    pub fn acquire(path: &Path, wait: Duration) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: path.display().to_string(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let start = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut pid = String::new();
                    let _ = file.read_to_string(&mut pid);
                    return Err(LockError::Busy {
                        pid: pid.trim().to_owned(),
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self { _file: file })
    }
}
