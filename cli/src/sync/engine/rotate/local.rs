//! What a rotation keeps on the device, in `sync/`:
//!
//! - `identity.new.txt` (0600): the new identity, written before anything
//!   is uploaded, so a rerun after a kill seals under the same key;
//! - `rotation.json`: how far the old records were carried, so a rerun
//!   goes on from there (what it sends again the server drops by id);
//! - after the commit, `identity.old.txt` (0600): the old identity, kept
//!   until the next successful push or pull (then deleted), and the new
//!   one moved over `identity.txt` in one rename.
//!
//! A rerun tells the states apart by the server's key check value: the new
//! key's means the commit happened and only the local swap is left.

use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::sync::state::SyncPaths;

/// How far a rotation got, saved after every page it carried.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Progress {
    /// The new key's fingerprint: once `identity.txt` has it, the swap is
    /// done and only this file was left.
    #[serde(default)]
    pub fingerprint: String,
    /// The old account's records up to this seq are in the staging account.
    pub through_seq: u64,
    /// The staging account's records up to this seq opened under the new key.
    #[serde(default)]
    pub verified_seq: u64,
    /// Records and blobs carried so far (by this run and the ones before).
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub blobs: u64,
}

pub fn new_identity(paths: &SyncPaths) -> PathBuf {
    paths.dir.join("identity.new.txt")
}

pub fn old_identity(paths: &SyncPaths) -> PathBuf {
    paths.dir.join("identity.old.txt")
}

fn progress_file(paths: &SyncPaths) -> PathBuf {
    paths.dir.join("rotation.json")
}

impl Progress {
    /// The saved progress, or none yet.
    pub fn load(paths: &SyncPaths) -> io::Result<Self> {
        match std::fs::read(progress_file(paths)) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is damaged ({e}); delete it to carry everything again",
                        progress_file(paths).display()
                    ),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, paths: &SyncPaths) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        crate::fsutil::replace_file(&progress_file(paths), &bytes)
    }
}

/// After the commit: the old identity aside (a copy, 0600), then the new
/// one over `identity.txt` in one rename, so `identity.txt` is always a
/// whole key; then the progress goes. Each step may run again.
pub fn swap_identity(paths: &SyncPaths) -> io::Result<()> {
    let new = new_identity(paths);
    if new.exists() {
        let old = std::fs::read(paths.identity())?;
        crate::fsutil::replace_file(&old_identity(paths), &old)?;
        std::fs::rename(&new, paths.identity())?;
        crate::fsutil::sync_dir(&paths.dir)?;
    }
    match std::fs::remove_file(progress_file(paths)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Deletes the old identity a rotation kept aside: called once a push or
/// pull under the new key succeeded. Best effort (it is 0600 in `sync/`).
pub fn drop_old_identity(paths: &SyncPaths) {
    let _ = std::fs::remove_file(old_identity(paths));
}
