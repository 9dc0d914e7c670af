//! One rewind at a time per home: an advisory lock on the `checkpoints/`
//! folder itself (no lock file in eVi's folder), held while the journal is
//! read, files are put back and the journal is trimmed. Two rewinds at
//! once would both undo the same writes and race to replace the journal.
//!
//! Only rewinds write temp files directly in `checkpoints/` (pull writes
//! its own in `checkpoints/blobs/` and `devices/`, under the sync lock), so
//! the holder sweeps the ones a killed rewind left.

use std::fs::{File, TryLockError};
use std::io;
use std::path::Path;

/// Held until dropped (the OS releases it if the process dies).
#[derive(Debug)]
pub struct RewindLock {
    _dir: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("another evi rewind is running in this home; wait for it to finish")]
    Busy,
    #[error("cannot lock {path}: {source}")]
    Io { path: String, source: io::Error },
}

impl RewindLock {
    /// Takes the lock on `checkpoints` without waiting, then sweeps stale
    /// temp files there.
    pub fn acquire(checkpoints: &Path) -> Result<Self, LockError> {
        let io = |source| LockError::Io {
            path: checkpoints.display().to_string(),
            source,
        };
        let dir = File::open(checkpoints).map_err(io)?;
        match dir.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(LockError::Busy),
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        crate::fsutil::remove_stale_temps(checkpoints).map_err(io)?;
        Ok(Self { _dir: dir })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_and_temps_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let (_, left) = crate::fsutil::temp_beside(&dir.path().join("journal.jsonl"))
            .unwrap()
            .keep()
            .unwrap();
        let held = RewindLock::acquire(dir.path()).unwrap();
        assert!(!left.exists());
        assert!(matches!(
            RewindLock::acquire(dir.path()),
            Err(LockError::Busy)
        ));
        drop(held);
        RewindLock::acquire(dir.path()).unwrap();
    }
}
