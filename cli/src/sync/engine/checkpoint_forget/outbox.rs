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
        crate::sync::state::json_file::load(&Self::path(sync_dir))
    }

    pub fn save(&self, sync_dir: &Path) -> io::Result<()> {
        crate::sync::state::json_file::save(&Self::path(sync_dir), self)
    }
}
