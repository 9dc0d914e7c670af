//! The device's record of what push redacted: `sync/redactions.json`
//! (mode 0600), for `evi sync status` and `evi sessions show --redactions`.
//! It names where (stream, file, byte offset, entry id) and which rules,
//! never the secret. Written whole through a temp file, so a crash leaves
//! the old record or the new one; a lost record loses only this report,
//! never what was or was not sent.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One redacted line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    /// The entry id the line is synced under (the original's).
    pub entry: String,
    /// The file, as the push state names it (`<day>/<session>.jsonl`, or
    /// another agent's stream key).
    pub file: String,
    /// Where the line starts in that file.
    pub offset: u64,
    /// Secrets replaced, by rule id.
    pub rules: BTreeMap<String, u64>,
}

/// Every redaction, by stream (an eVi session's bare id), then entry id.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct RedactionRecord {
    pub streams: BTreeMap<String, BTreeMap<String, Redaction>>,
}

/// Where the record lives under `sync/`.
pub fn path(sync_dir: &Path) -> PathBuf {
    sync_dir.join("redactions.json")
}

impl RedactionRecord {
    /// The record; an absent one is empty.
    pub fn load(sync_dir: &Path) -> io::Result<Self> {
        match std::fs::read(path(sync_dir)) {
            Ok(b) => serde_json::from_slice(&b).map_err(io::Error::other),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Adds `new` (stream, redaction) and saves, when there is anything new.
    pub fn add(sync_dir: &Path, new: Vec<(String, Redaction)>) -> io::Result<()> {
        if new.is_empty() {
            return Ok(());
        }
        let mut rec = Self::load(sync_dir).unwrap_or_default();
        for (stream, r) in new {
            rec.streams
                .entry(stream)
                .or_default()
                .insert(r.entry.clone(), r);
        }
        let bytes = serde_json::to_vec_pretty(&rec).map_err(io::Error::other)?;
        crate::fsutil::replace_file(&path(sync_dir), &bytes)
    }

    /// Secrets replaced, by rule, over every stream.
    pub fn by_rule(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for r in self.streams.values().flat_map(|s| s.values()) {
            for (rule, n) in &r.rules {
                *out.entry(rule.clone()).or_default() += n;
            }
        }
        out
    }

    /// Lines redacted, over every stream.
    pub fn lines(&self) -> u64 {
        self.streams.values().map(|s| s.len() as u64).sum()
    }
}
