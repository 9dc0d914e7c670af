//! `sync/forget.json`: what this device knows of forgotten sessions.
//!
//! Per session: whether it is forgotten or was brought back, when the
//! user asked, the tombstone's keyed entry id, and whether this device
//! still has to send it (a forget made offline goes up with the next
//! push). Beside that, the entry ids of every tombstone applied here, so
//! one pulled again (`pull --all`, a session fetched alone) changes
//! nothing. Replaced atomically, like the sync state.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::tombstone::Action;

const FILE: &str = "forget.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionMark {
    pub action: Action,
    /// When the user asked, in ms since the epoch.
    pub at_ms: i64,
    /// The device that asked (the server's id).
    pub device: String,
    /// The tombstone's keyed entry id.
    pub tombstone: String,
    /// Made here and not acknowledged by the server yet.
    #[serde(default)]
    pub unsent: bool,
}

impl SessionMark {
    pub fn forgotten(&self) -> bool {
        self.action == Action::Forget
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub sessions: BTreeMap<String, SessionMark>,
    #[serde(default)]
    pub applied: BTreeSet<String>,
}

impl Ledger {
    fn path(sync_dir: &Path) -> PathBuf {
        sync_dir.join(FILE)
    }

    /// The ledger, or an empty one when there is none yet.
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

    /// Whether `session` is forgotten here.
    pub fn is_forgotten(&self, session: &str) -> bool {
        self.sessions
            .get(session)
            .is_some_and(SessionMark::forgotten)
    }
}
