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
        crate::sync::state::json_file::load(&Self::path(sync_dir))
    }

    pub fn save(&self, sync_dir: &Path) -> io::Result<()> {
        crate::sync::state::json_file::save(&Self::path(sync_dir), self)
    }

    /// Whether `session` is forgotten here.
    pub fn is_forgotten(&self, session: &str) -> bool {
        self.sessions
            .get(session)
            .is_some_and(SessionMark::forgotten)
    }
}
