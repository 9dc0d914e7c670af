//! Pulled entries that cannot be appended yet: eVi's in `sync/pending/`,
//! other agents' in `sync/pending-agents/`, one mechanism for both.
//!
//! # Promises
//!
//! An entry lands here only after its segment verified (MAC, outer ids,
//! formats), so what waits is as trustworthy as what was applied. Each
//! session's (or agent stream's) waiting entries are one file,
//! `<session>.json` (an agent stream's name with `+` for `/`), replaced
//! atomically (temp file, fsync, rename, folder fsync) before the pull
//! cursor moves past the records that carried them: a crash loses neither
//! the entries nor the cursor's promise. Entries keep their order of
//! arrival, so a later pull or push applies them as if they had never
//! waited, and an entry that arrives again (the server re-sent it, or `pull
//! --all`) is not kept twice; it keeps the time it first had to wait. Nothing
//! here is ever sent to a server.
//!
//! Every push and pull applies what waits first ([`drain_pending`]); a
//! partial line untouched for [`ABANDONED_AFTER`] is given up on
//! ([`abandoned`]), eVi's by writing to the next day's file, another
//! agent's by ending the line (see `crate::source::apply`).
//!
//! [`drain_pending`]: crate::sync::engine::incoming::drain_pending

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::io;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use evi_shared::{Day, SessionId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::fsutil::{replace_file, sync_dir};
use crate::sync::Entry;

/// A partial line untouched this long was abandoned by the program that
/// was writing it.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Whether a file last written at `mtime` was abandoned mid-line (when it
/// ends in one): untouched for [`ABANDONED_AFTER`].
pub fn abandoned(mtime: SystemTime) -> bool {
    SystemTime::now()
        .duration_since(mtime)
        .is_ok_and(|age| age >= ABANDONED_AFTER)
}

/// What names a session's waiting entries: eVi's session id, another
/// agent's stream name.
pub trait WaitKey: Ord + Clone + Display + Serialize + DeserializeOwned {
    /// The key a file name's stem gives (`+` read as `/`).
    fn from_stem(stem: &str) -> Option<Self>;
}

impl WaitKey for SessionId {
    fn from_stem(stem: &str) -> Option<Self> {
        stem.parse().ok()
    }
}

/// The file that holds `key`'s waiting entries in `dir`.
fn file_of(dir: &std::path::Path, key: &impl Display) -> PathBuf {
    dir.join(format!("{}.json", key.to_string().replace('/', "+")))
}

/// Why an entry waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// The file of its day ends in a line eVi is still writing: appending
    /// now would glue this entry onto that line.
    PartialLine,
    /// Its line travels as a blob the server does not have (yet).
    BlobMissing,
    /// Another agent's entry whose file is not here and whose place is not
    /// known yet: none of its session's lines that arrived names a project
    /// folder (`cwd`), or, for a Claude Code subagent transcript, its
    /// session's file is not here (the transcript goes beside it).
    NotPlaced,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PartialLine => "partial_line",
            Self::BlobMissing => "blob_missing",
            Self::NotPlaced => "not_placed",
        }
    }
}

/// One entry that waits, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Waiting {
    pub id: String,
    pub parent: Option<String>,
    pub day: Day,
    /// The raw line, base64 (lines are bytes, not always UTF-8).
    #[serde(with = "b64")]
    pub line: Vec<u8>,
    /// Set when the line itself still has to be fetched as a blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_blob: Option<StoredLineBlob>,
    pub reason: WaitReason,
    /// When it first had to wait (RFC 3339 UTC).
    pub since: String,
}

/// A line that travels as a blob: its SHA-256 (the blob's name) and length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredLineBlob {
    pub sha256: String,
    pub len: u64,
}

impl Waiting {
    pub fn new(e: &Entry, reason: WaitReason) -> Self {
        Self {
            id: e.id.clone(),
            parent: e.parent.clone(),
            day: e.day,
            line: e.line.clone(),
            line_blob: e.line_blob.as_ref().map(|b| StoredLineBlob {
                sha256: b.sha256_hex.clone(),
                len: b.len,
            }),
            reason,
            since: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }
    }

    pub fn entry(&self) -> Entry {
        Entry {
            id: self.id.clone(),
            parent: self.parent.clone(),
            day: self.day,
            line: self.line.clone(),
            line_blob: self
                .line_blob
                .as_ref()
                .map(|b| crate::sync::seal::segment::LineBlob {
                    sha256_hex: b.sha256.clone(),
                    len: b.len,
                }),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
struct SessionFile<K: WaitKey> {
    session: K,
    entries: Vec<Waiting>,
}

/// The waiting entries of every session, loaded once per sync command.
pub struct PendingStore<K: WaitKey = SessionId> {
    dir: PathBuf,
    sessions: BTreeMap<K, Vec<Waiting>>,
    dirty: BTreeSet<K>,
}

impl<K: WaitKey> PendingStore<K> {
    /// Reads `dir` (missing: nothing waits). A file that does not parse is
    /// an error naming it: silently dropping it would lose entries.
    pub fn load(dir: PathBuf) -> io::Result<Self> {
        let mut sessions = BTreeMap::new();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => Some(rd),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        for ent in rd.into_iter().flatten() {
            let path = ent?.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let bytes = std::fs::read(&path)?;
            let damaged = |why: String| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is damaged ({why}); move it away to drop the entries it holds \
                         (the next `evi sync pull --all` fetches them again)",
                        path.display()
                    ),
                )
            };
            // Written before eVi's and the agents' shared this store, an
            // agent stream's file is its list alone, the stream in its name.
            let bare = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
            let f = if bare {
                let entries = serde_json::from_slice(&bytes).map_err(|e| damaged(e.to_string()))?;
                let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                let session = K::from_stem(&stem.replace('+', "/"))
                    .ok_or_else(|| damaged("its name is no session's".into()))?;
                SessionFile { session, entries }
            } else {
                serde_json::from_slice::<SessionFile<K>>(&bytes)
                    .map_err(|e| damaged(e.to_string()))?
            };
            if !f.entries.is_empty() {
                sessions.insert(f.session, f.entries);
            }
        }
        Ok(Self {
            dir,
            sessions,
            dirty: BTreeSet::new(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Every session with waiting entries, in order.
    pub fn sessions(&self) -> impl Iterator<Item = (&K, &[Waiting])> {
        self.sessions.iter().map(|(s, w)| (s, w.as_slice()))
    }

    /// Takes a session's waiting entries out (to apply them); what still
    /// cannot be applied goes back through [`Self::wait`].
    pub fn take(&mut self, session: &K) -> Vec<Waiting> {
        match self.sessions.remove(session) {
            Some(w) => {
                self.dirty.insert(session.clone());
                w
            }
            None => Vec::new(),
        }
    }

    /// Adds an entry to wait (kept once per id, its first `since` kept).
    pub fn wait(&mut self, session: &K, w: Waiting) {
        let list = self.sessions.entry(session.clone()).or_default();
        match list.iter_mut().find(|x| x.id == w.id) {
            Some(old) => old.reason = w.reason,
            None => list.push(w),
        }
        self.dirty.insert(session.clone());
    }

    /// Drops what waits for `session` (it was forgotten): its file goes
    /// with the next [`Self::save`].
    pub fn drop_session(&mut self, session: &K) {
        self.sessions.remove(session);
        self.dirty.insert(session.clone());
    }

    /// Entries waiting in all.
    pub fn count(&self) -> u64 {
        self.sessions.values().map(|w| w.len() as u64).sum()
    }

    /// Writes every changed session's file durably (or removes it when
    /// nothing waits any more).
    pub fn save(&mut self) -> io::Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let mut removed = false;
        for session in std::mem::take(&mut self.dirty) {
            let path = file_of(&self.dir, &session);
            match self.sessions.get(&session) {
                Some(entries) if !entries.is_empty() => {
                    if !self.dir.exists() {
                        crate::fsutil::create_dir_all_durable(&self.dir)?;
                    }
                    let f = SessionFile {
                        session: session.clone(),
                        entries: entries.clone(),
                    };
                    let bytes = serde_json::to_vec(&f).map_err(io::Error::other)?;
                    replace_file(&path, &bytes)?;
                }
                _ => match std::fs::remove_file(&path) {
                    Ok(()) => removed = true,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                },
            }
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

/// Removes the file of what waits for `session` in `dir` (it was
/// forgotten: those entries must not bring it back).
pub fn discard(dir: &std::path::Path, session: &impl Display) -> io::Result<()> {
    match std::fs::remove_file(file_of(dir, session)) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> Entry {
        Entry {
            id: id.into(),
            parent: None,
            day: "2026-06-08".parse().unwrap(),
            line: b"\xff not utf-8".to_vec(),
            line_blob: None,
        }
    }

    #[test]
    fn waits_survive_a_reload_in_order_and_once() {
        let dir = tempfile::tempdir().unwrap();
        let pdir = dir.path().join("pending");
        let s: SessionId = "s1".parse().unwrap();
        let mut p = PendingStore::<SessionId>::load(pdir.clone()).unwrap();
        assert!(p.is_empty());
        for id in ["a", "b", "a"] {
            p.wait(&s, Waiting::new(&entry(id), WaitReason::PartialLine));
        }
        p.save().unwrap();
        let mut p = PendingStore::<SessionId>::load(pdir.clone()).unwrap();
        let got: Vec<_> = p.take(&s).into_iter().map(|w| w.entry()).collect();
        assert_eq!(got, vec![entry("a"), entry("b")]);
        p.save().unwrap();
        assert!(
            PendingStore::<SessionId>::load(pdir.clone())
                .unwrap()
                .is_empty()
        );
        assert_eq!(std::fs::read_dir(&pdir).unwrap().count(), 0);
    }

    #[test]
    fn an_agents_stream_names_its_file_and_a_list_written_before_still_loads() {
        use crate::source::StreamName;
        let dir = tempfile::tempdir().unwrap();
        let sub = StreamName::parse("claude-code/abc/agent-1").unwrap();
        let mut p = PendingStore::<StreamName>::load(dir.path().to_owned()).unwrap();
        p.wait(&sub, Waiting::new(&entry("a"), WaitReason::NotPlaced));
        p.save().unwrap();
        assert!(dir.path().join("claude-code+abc+agent-1.json").is_file());
        // The list alone, its stream in its name, as agents' files were.
        let bare = vec![Waiting::new(&entry("b"), WaitReason::PartialLine)];
        let old = dir.path().join("codex+0199.json");
        std::fs::write(&old, serde_json::to_vec(&bare).unwrap()).unwrap();
        let p = PendingStore::<StreamName>::load(dir.path().to_owned()).unwrap();
        let got: Vec<(String, Vec<String>, WaitReason)> = p
            .sessions()
            .map(|(k, w)| (k.to_string(), vec![w[0].id.clone()], w[0].reason))
            .collect();
        assert_eq!(
            got,
            vec![
                (sub.to_string(), vec!["a".into()], WaitReason::NotPlaced),
                (
                    "codex/0199".into(),
                    vec!["b".into()],
                    WaitReason::PartialLine
                ),
            ]
        );
    }

    #[test]
    fn a_damaged_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s1.json"), b"{").unwrap();
        let e = PendingStore::<SessionId>::load(dir.path().to_owned())
            .err()
            .unwrap();
        assert!(e.to_string().contains("s1.json"), "{e}");
    }
}
