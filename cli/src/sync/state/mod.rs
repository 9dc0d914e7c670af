//! What a device remembers between syncs, in `$EVI_HOME/sync/`:
//!
//! - `identity.txt`: the age identity (0600, never leaves the device except
//!   through `evi sync key export`);
//! - `token`: this device's bearer token (0600);
//! - `state.json`: the account, the pull cursor, and per transcript file how
//!   far it was pushed, so an unchanged home costs one `stat` per file;
//! - `lock`: held while a sync command runs;
//! - `appending`: the appends to transcripts begun and not yet durable (see
//!   [`append_marks`]).
//!
//! `state.json` is replaced atomically (temp file, fsync, rename), so a killed
//! sync leaves either the old or the new state, never a torn one. The state
//! only ever lags the server: losing it costs a re-upload that the server
//! drops by entry id, never data.
//!
//! The room also holds what a command opens from that state and keeps for
//! its run:
//!
//! - [`context`]: everything a sync command works with, opened once under
//!   the lock ([`context::SyncContext`]);
//! - [`lock`]: the sync lock;
//! - [`high_water`]: the most this device has seen the server hold;
//! - [`damaged`]: records that arrived whole and failed their checks;
//! - [`pulled_journals`]: other devices' checkpoint journals as pulled here;
//! - [`append_marks`]: `appending`, so that a line a killed pull cut short
//!   is finished, not taken for one eVi is writing;
//! - [`json_file`]: how the small JSON files beside `state.json` are read
//!   and replaced.

pub mod append_marks;
pub mod context;
pub mod damaged;
pub mod high_water;
pub mod json_file;
pub mod lock;
pub mod pulled_journals;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home::EviHome;
use crate::sync::state::damaged::DamagedRecord;
use crate::sync::state::high_water::HighWater;

/// The account this device syncs with.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Account {
    pub server: String,
    pub user: String,
    /// This device's name (path-safe: it names its journal folder elsewhere).
    pub device: String,
    /// The server's id of the device this home's token belongs to.
    pub device_id: String,
    /// The server's ids of the devices this home synced as before it logged
    /// in again (`evi sync login` after a revoke): what they pushed is this
    /// home's own, so pull passes over it as over `device_id`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_device_ids: Vec<String>,
    /// The name this home's checkpoint journal was first pushed under, kept
    /// when it logs in again as a new device, so other devices go on holding
    /// one journal of it (`None`: named for `device` and `device_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal: Option<String>,
}

impl Account {
    /// Whether the server device `id` is this home (now or before it logged
    /// in again).
    pub fn is_own_device(&self, id: &str) -> bool {
        self.device_id == id || self.earlier_device_ids.iter().any(|d| d == id)
    }
}

/// How far one transcript file was pushed, and how it looked then.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct FileState {
    pub size: u64,
    pub mtime_ns: i128,
    pub ino: u64,
    /// Bytes up to the end of the last complete line taken into account.
    pub offset: u64,
    /// Start of that last line, and the SHA-256 of its bytes: if they change,
    /// the pushed prefix was rewritten and the file is read again whole.
    pub last_start: u64,
    pub last_hash: Option<String>,
    /// The implicit parent when the file begins and after `offset`.
    pub chain_before: Option<String>,
    pub chain_after: Option<String>,
}

impl FileState {
    /// This state recorded part-way through a file: it carries no stat, so
    /// the next push never takes the file as done and resumes at `offset`.
    pub fn mid_file(&self) -> Self {
        Self {
            size: 0,
            mtime_ns: 0,
            ..self.clone()
        }
    }
}

/// How far the checkpoint journal was pushed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct JournalState {
    pub file: FileState,
    /// Lines taken so far (the seq of a line without one).
    pub lines: u64,
    /// The journal name it was pushed under (`None`: by an older version).
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct SyncState {
    pub account: Option<Account>,
    /// Seq of the last record pulled and applied.
    #[serde(default)]
    pub cursor: u64,
    /// Per session fetched alone (`pull_session`), the seq of its last
    /// record applied, when past `cursor`: the next fetch of that session
    /// starts there, and a full pull that passes it forgets it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub session_cursors: BTreeMap<String, u64>,
    #[serde(default)]
    pub last_push: Option<String>,
    #[serde(default)]
    pub last_pull: Option<String>,
    /// Per transcript file, keyed `<day>/<session>.jsonl`.
    #[serde(default)]
    pub files: BTreeMap<String, FileState>,
    /// Entry ids that pull appended after lines not yet pushed, per session:
    /// push passes over them (the server has them) instead of sending them back.
    #[serde(default)]
    pub skip: BTreeMap<String, BTreeSet<String>>,
    #[serde(default)]
    pub journal: JournalState,
    /// Blobs named by a journal here (pulled, or this device's own) that the
    /// server did not have when last asked: every pull asks for them again
    /// and every push sends those this device has, until the server has
    /// them, so a blob that was late is never forgotten (`blob_transfer`).
    #[serde(default)]
    pub missing_blobs: BTreeSet<String>,
    /// The most the server has shown this device: a server whose counts
    /// fall below them went backwards ([`HighWater`]).
    #[serde(default)]
    pub high_water: HighWater,
    /// Records pull refused as damaged and passed, each fetched again by
    /// every later pull until it opens ([`damaged`](crate::sync::state::damaged)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub damaged: Vec<DamagedRecord>,
}

/// Paths of the sync folder.
#[derive(Debug, Clone)]
pub struct SyncPaths {
    pub dir: PathBuf,
}

impl SyncPaths {
    pub fn new(home: &EviHome) -> Self {
        Self {
            dir: home.sync_dir(),
        }
    }
    pub fn identity(&self) -> PathBuf {
        self.dir.join("identity.txt")
    }
    pub fn token(&self) -> PathBuf {
        self.dir.join("token")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
}

impl SyncState {
    /// Moves the global cursor on to `next_after` (never back), and forgets
    /// the session cursors it passes.
    pub fn advance_cursor(&mut self, next_after: u64) {
        self.cursor = self.cursor.max(next_after);
        let cursor = self.cursor;
        self.session_cursors.retain(|_, c| *c > cursor);
    }

    /// Whether `home` is set up for sync (`evi sync init` or `login` ran).
    pub fn is_set_up(home: &EviHome) -> bool {
        Self::load(&SyncPaths::new(home).state()).is_ok_and(|s| s.account.is_some())
    }

    pub fn load(path: &Path) -> io::Result<Self> {
        match fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is damaged ({e}); move it away to start over",
                        path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        crate::fsutil::replace_file(path, &bytes)
    }
}

/// How a [`FileState`] fingerprints its last line: SHA-256 of the line and
/// its `\n`, in hex.
pub fn line_hash(raw: &[u8]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(raw);
    h.update(b"\n");
    hex::encode(h.finalize())
}

/// What `stat` says of a file, to compare with a [`FileState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub size: u64,
    pub mtime_ns: i128,
    pub ino: u64,
}

impl Stat {
    pub fn of(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(path)?;
        Ok(Self {
            size: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ino: m.ino(),
        })
    }

    pub fn matches(&self, f: &FileState) -> bool {
        self.size == f.size && self.mtime_ns == f.mtime_ns && self.ino == f.ino
    }
}

/// The relative name of a transcript file in the state.
pub fn rel_name(day: evi_shared::Day, session: &evi_shared::SessionId) -> String {
    format!("{day}/{session}.jsonl")
}

/// Whether the line the state names as last pushed is still in place.
pub(crate) fn prefix_intact(path: &std::path::Path, fs: &FileState) -> bool {
    let Some(hash) = &fs.last_hash else {
        return fs.offset == 0;
    };
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    use std::io::{Read, Seek, SeekFrom};
    let len = (fs.offset - fs.last_start) as usize;
    let mut buf = vec![0; len];
    f.seek(SeekFrom::Start(fs.last_start)).is_ok()
        && f.read_exact(&mut buf).is_ok()
        && buf.pop() == Some(b'\n')
        && line_hash(&buf) == *hash
}
