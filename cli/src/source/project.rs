//! The repository a session of another agent was written in, carried with
//! the session so that a device whose checkout of it is somewhere else can
//! place the session there.
//!
//! # What travels
//!
//! When push first sends a session whose project (its `cwd`) is in a git
//! checkout with an `origin` remote, it adds one entry to the session's own
//! stream, sealed and keyed like every other:
//!
//! ```text
//! {"id":"<32 hex>","parentId":null,"type":"evi-project","project":"/home/pat/src/app","remote":"github.com/pat/app"}
//! ```
//!
//! `project` is the top of the checkout as every device agrees on it (the
//! pushing device's path mapped back through `[paths]`), `remote` the
//! origin in [`crate::git::remote::normalize`]'s form (no user, password or
//! port). The id is `hex(SHA-256("evi-project-v1" 0x00 stream 0x00
//! project 0x00 remote))[..32]`: two devices that record the same fact send
//! one entry, and the server sees only its keyed id. Pull keeps such an
//! entry out of the agent's file (the agent would not know the line): it is
//! remembered here, in `sync/projects.json`.
//!
//! # Where a session lands
//!
//! `sync/projects.json` also records, per session, where this device found
//! the checkout (`local`) when a pull placed the session by its remote.
//! That pair (`project` → `local`) is written before the session's first
//! line and never changes, so the rewrite of its `cwd`s
//! ([`super::Agent::localize`]) and its reversal before ids and pushes
//! ([`super::Agent::canonical`]) are the same function at every read.

use std::collections::BTreeMap;
use std::io;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::paths::PathMap;
use super::{Agent, AgentFile, StreamName};
use crate::sync::Entry;

/// The `type` of a project entry.
pub const PROJECT_TYPE: &str = "evi-project";

/// What a project entry says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRecord {
    pub project: String,
    /// Empty for a session whose entry carries only `dir` (a Gemini
    /// session outside any checkout with a remote).
    pub remote: String,
    /// The folder the agent ran in, for an agent whose lines name none
    /// (Gemini CLI): under `project`, as every device agrees on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Line<'a> {
    id: &'a str,
    #[serde(rename = "parentId")]
    parent_id: Option<&'a str>,
    #[serde(rename = "type")]
    kind: &'a str,
    project: &'a str,
    remote: &'a str,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dir: Option<&'a str>,
}

impl ProjectRecord {
    /// The entry id of this record in `stream`'s tree (a root).
    pub fn id(&self, stream: &StreamName) -> String {
        let mut h = Sha256::new();
        for (i, part) in [
            "evi-project-v1",
            &stream.to_string(),
            &self.project,
            &self.remote,
        ]
        .into_iter()
        .chain(self.dir.as_deref())
        .enumerate()
        {
            if i > 0 {
                h.update([0]);
            }
            h.update(part.as_bytes());
        }
        hex::encode(&h.finalize()[..16])
    }

    /// The entry that carries this record in `stream`.
    pub fn entry(&self, stream: &StreamName) -> Entry {
        let id = self.id(stream);
        let line = serde_json::to_vec(&Line {
            id: &id,
            parent_id: None,
            kind: PROJECT_TYPE,
            project: &self.project,
            remote: &self.remote,
            dir: self.dir.as_deref(),
        })
        .expect("serializable");
        Entry {
            id,
            parent: None,
            day: super::agent_day(),
            line,
            line_blob: None,
        }
    }

    /// The record `e` carries, when it is a well-formed project entry of
    /// `stream` (its id the one its content gives).
    pub fn of_entry(stream: &StreamName, e: &Entry) -> Option<Self> {
        if e.parent.is_some() || e.line_blob.is_some() {
            return None;
        }
        let line: Line<'_> = serde_json::from_slice(&e.line).ok()?;
        if line.kind != PROJECT_TYPE || line.id != e.id || line.parent_id.is_some() {
            return None;
        }
        let r = Self {
            project: line.project.to_owned(),
            remote: line.remote.to_owned(),
            dir: line.dir.map(str::to_owned),
        };
        let dir_ok = r.dir.as_ref().is_none_or(|d| d.starts_with('/'));
        (r.id(stream) == e.id && r.project.starts_with('/') && dir_ok).then_some(r)
    }
}

/// What this device knows of one session's project.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Known {
    /// The record the server holds (pushed from here, or pulled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<ProjectRecord>,
    /// Where this device's checkout of `record.project` is, when a pull
    /// placed the session there by its remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// The file's size when push last looked and found no remote: it looks
    /// again once the session grows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub none_at: Option<u64>,
}

/// `sync/projects.json`: what this device knows of its sessions' projects,
/// by stream name.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Projects {
    #[serde(default)]
    streams: BTreeMap<String, Known>,
    #[serde(skip)]
    dirty: AtomicBool,
}

impl Projects {
    pub fn path(sync_dir: &Path) -> std::path::PathBuf {
        sync_dir.join("projects.json")
    }

    /// The file in `sync_dir`; empty when there is none (or it cannot be
    /// read: then sessions are placed and read as if none had been placed
    /// by remote, which only ever falls back to the original paths).
    pub fn load(sync_dir: &Path) -> Self {
        std::fs::read(Self::path(sync_dir))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Writes the file (durably, replacing it whole) if anything changed.
    pub fn save(&self, sync_dir: &Path) -> io::Result<()> {
        if !self.dirty.load(Ordering::Relaxed) {
            return Ok(());
        }
        let bytes = serde_json::to_vec(self).expect("serializable");
        crate::fsutil::replace_file(&Self::path(sync_dir), &bytes)?;
        self.dirty.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// The project entries the server holds for this device's sessions (sent
    /// from here or pulled), by stream.
    pub fn records(&self) -> impl Iterator<Item = (StreamName, &ProjectRecord)> {
        (self.streams.iter()).filter_map(|(s, k)| Some((StreamName::parse(s)?, k.record.as_ref()?)))
    }

    pub fn get(&self, stream: &StreamName) -> Option<&Known> {
        self.streams.get(&stream.to_string())
    }

    fn known_mut(&mut self, stream: &StreamName) -> &mut Known {
        self.dirty.store(true, Ordering::Relaxed);
        self.streams.entry(stream.to_string()).or_default()
    }

    /// Records that the server holds `record` for `stream`.
    pub fn set_record(&mut self, stream: &StreamName, record: ProjectRecord) {
        if self.get(stream).and_then(|k| k.record.as_ref()) != Some(&record) {
            let k = self.known_mut(stream);
            k.record = Some(record);
            k.none_at = None;
        }
    }

    /// Records that push found no remote for `stream` at file size `size`.
    pub fn set_none(&mut self, stream: &StreamName, size: u64) {
        self.known_mut(stream).none_at = Some(size);
    }

    /// Records where `stream`'s project is here.
    pub fn place(&mut self, stream: &StreamName, local: String) {
        self.known_mut(stream).local = Some(local);
    }

    /// The path map for `stream`: `base` and, for a session placed by its
    /// remote, its project's pair.
    pub fn map_for<'a>(
        &self,
        base: &'a PathMap,
        stream: &StreamName,
    ) -> std::borrow::Cow<'a, PathMap> {
        // A subagent's transcript sits beside its session and shares its project.
        let session = StreamName {
            sub: None,
            ..stream.clone()
        };
        match self.get(&session) {
            Some(Known {
                record: Some(r),
                local: Some(l),
                ..
            }) => std::borrow::Cow::Owned(base.with(&r.project, l)),
            _ => std::borrow::Cow::Borrowed(base),
        }
    }
}

/// The project directory a session file names (its first `cwd`, as the
/// file holds it), from the first lines only; for an agent whose lines name
/// none (Gemini), the folder its file is kept for.
pub fn cwd_of_file(file: &AgentFile) -> Option<String> {
    if let Some(dir) = file.stream.agent.project_of_file(&file.path) {
        return Some(dir);
    }
    const MAX_LINES: usize = 64;
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut found = None;
    let _ = crate::transcript::lines::walk_file(&file.path, 0, |_, raw| {
        lines.push(raw.to_vec());
        found = cwd_of_lines(file.stream.agent, lines.iter().map(Vec::as_slice));
        if found.is_some() || lines.len() >= MAX_LINES {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    found
}

/// The project directory of a session from its lines (Claude Code's first
/// `cwd`, Codex's `session_meta`).
pub fn cwd_of_lines<'a>(agent: Agent, lines: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    agent.kind().project(&mut lines.into_iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_bind_their_stream() {
        let s: StreamName = StreamName::parse("claude-code/abc").unwrap();
        let r = ProjectRecord {
            project: "/home/a/proj".into(),
            remote: "github.com/pat/app".into(),
            dir: None,
        };
        let e = r.entry(&s);
        assert_eq!(e.id.len(), 32);
        assert_eq!(ProjectRecord::of_entry(&s, &e), Some(r.clone()));
        let other = StreamName::parse("claude-code/abd").unwrap();
        assert_eq!(
            ProjectRecord::of_entry(&other, &e),
            None,
            "bound to its stream"
        );
        let mut forged = e.clone();
        forged.line = String::from_utf8(e.line.clone())
            .unwrap()
            .replace("/home/a/proj", "/etc")
            .into_bytes();
        assert_eq!(ProjectRecord::of_entry(&s, &forged), None);
    }
}
