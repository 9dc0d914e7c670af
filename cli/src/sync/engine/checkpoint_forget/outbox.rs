//! `sync/checkpoint-forget.json`: checkpoint forgets made here that the
//! server has not acknowledged yet. Written (atomically, like the sync
//! state) before the journal is rewritten, so a forget made offline, or
//! cut short by a crash, goes up with the next push.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::tombstone::LinesTombstone;
use crate::sync::seal::keys::SyncKeys;

const FILE: &str = "checkpoint-forget.json";

/// One tombstone to send, with the clear-text ids its record carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Queued {
    pub tombstone: LinesTombstone,
    /// Keyed ids of the lines (`journal_line_key`), for the server.
    pub line_ids: Vec<evi_shared::KeyedId>,
    /// Keyed names of the blobs (`blob_key`), for the server.
    pub blob_ids: Vec<evi_shared::KeyedId>,
}

impl Queued {
    /// `t` with the keyed ids of `lines` (the bytes of the lines it names).
    pub fn new(keys: &SyncKeys, t: LinesTombstone, lines: &[Vec<u8>]) -> Self {
        let line_ids = (lines.iter())
            .map(|l| keys.journal_line_key(&t.journal, l))
            .collect();
        let blob_ids = t.blobs.iter().map(|b| keys.blob_key(b)).collect();
        Self {
            tombstone: t,
            line_ids,
            blob_ids,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Outbox {
    #[serde(default)]
    pub unsent: Vec<Queued>,
}

impl Outbox {
    fn path(sync_dir: &Path) -> PathBuf {
        sync_dir.join(FILE)
    }

    /// The outbox, or an empty one when there is none yet.
    pub fn load(sync_dir: &Path) -> io::Result<Self> {
        match std::fs::read(Self::path(sync_dir)) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is damaged ({e})", Self::path(sync_dir).display()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, sync_dir: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        crate::fsutil::replace_file(&Self::path(sync_dir), &bytes)
    }
}
