//! One sync at a time per home: an advisory lock on `sync/lock`, holding the
//! pid of its owner so a second command can say who holds it, both when it
//! starts waiting (a [`notice`]) and when it gives up.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::sync::notice::notice;

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
    /// Takes the lock, waiting up to `wait` for another holder to finish
    /// (and saying so once when the wait starts).
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
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < wait => {
                    if !told {
                        told = true;
                        notice(&format!(
                            "waiting for evi sync (pid {}) …",
                            holder(&mut file)
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(LockError::Busy {
                        pid: holder(&mut file),
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

/// The pid the holder wrote, or `?` while it has not yet.
fn holder(file: &mut File) -> String {
    let mut pid = String::new();
    let _ = file.rewind().and_then(|()| file.read_to_string(&mut pid));
    match pid.trim() {
        "" => "?".to_owned(),
        p => p.to_owned(),
    }
}
