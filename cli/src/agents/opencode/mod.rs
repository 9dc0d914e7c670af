//! OpenCode (`opencode-ai`): one SQLite database, `opencode.db`, in its
//! data folder (`[agents] opencode-dir`, else `$XDG_DATA_HOME/opencode`,
//! else `~/.local/share/opencode`), with `session`, `message` and `part`
//! tables; its rows as lines in mirror files ([`row`], [`mirror`], [`db`]),
//! read as messages by [`message`].
//!
//! OpenCode's entries are rows, not lines. A session's stream holds its
//! session row, its message rows and its part rows, each as one entry: a
//! canonical JSON line of the row with its table ([`row`]). Rows are kept as
//! lines in a mirror file per session, `<data folder>/evi-sync/<session
//! id>.jsonl`, which is what sync reads and appends to like any other
//! agent's file ([`mirror`]): a row OpenCode later changes (it updates
//! messages and parts as a turn streams, the session row at every turn) is
//! a new line, a new version of that entry, with a derived id chained after
//! the last; readers take the latest version of each row.
//!
//! # Promises
//!
//! - Append-only means rows inserted by id: evi never updates or deletes a
//!   row the user's OpenCode wrote. A pulled row this device lacks is
//!   inserted; a newer version is applied only where the local row is one
//!   evi itself wrote and OpenCode has not changed since. A row that was
//!   here once and is gone (the user deleted the session) is not brought
//!   back.
//! - Writes to OpenCode's live WAL database are `IMMEDIATE` transactions of
//!   at most about 200 ms each, with a busy timeout ([`db::Batch`]).
//! - Paths (`session.directory`, an assistant message's `path.cwd` and
//!   `path.root`) are canonicalized through `[paths]` before ids are
//!   derived and localized when written, as Claude Code's `cwd` is:
//!   OpenCode resumes a session only from its `directory`.
//! - A message is mirrored once it is finished (a user message, or an
//!   assistant message OpenCode marked completed or failed), so a turn in
//!   flight is not synced half-way; it goes with the next sync.

pub mod db;
mod message;
pub mod mirror;
mod owners;
pub mod row;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::{Agent, AgentKind, Landing, Reader};
use crate::source::{AgentFile, StreamName};
use crate::sync::state::context::SyncContext;

pub struct OpenCode;

/// The path fields of OpenCode's rows, by JSON key.
const PATH_KEYS: &[&str] = &["directory", "cwd", "root"];

static READER: Reader = Reader {
    read: message::read,
    keys: message::KEYS,
    trimmed_enough: |_| true,
    // The tree reads a row's line whole.
    outline: |_| None,
};

/// The database in OpenCode's data folder `root`.
pub fn database(root: &Path) -> PathBuf {
    root.join("opencode.db")
}

/// Where the mirror files of `root`'s sessions are.
pub fn mirror_dir(root: &Path) -> PathBuf {
    root.join("evi-sync")
}

impl AgentKind for OpenCode {
    fn title(&self) -> &'static str {
        "OpenCode"
    }

    fn default_folder(&self) -> Option<PathBuf> {
        super::env_or_home("XDG_DATA_HOME", ".local/share").map(|d| d.join("opencode"))
    }

    /// Every session as its mirror file, after bringing the mirrors and the
    /// database level ([`mirror::refresh`]).
    fn sessions(&self, root: &Path) -> Vec<AgentFile> {
        if let Err(e) = mirror::refresh(root) {
            eprintln!(
                "warning: OpenCode sessions in {} not read: {e}",
                root.display()
            );
        }
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir(mirror_dir(root)) else {
            return out;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                continue;
            };
            if let Ok(session) = id.parse() {
                out.push(AgentFile {
                    stream: StreamName {
                        agent: Agent::OpenCode,
                        session,
                        sub: None,
                    },
                    path: e.path(),
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// The mirror file a pulled session goes to.
    fn target(&self, at: &Landing<'_>) -> Option<PathBuf> {
        let file = format!("{}.jsonl", at.stream.session);
        at.stream
            .sub
            .is_none()
            .then(|| mirror_dir(at.root).join(file))
    }

    /// A row's line (`{"table":…`) has no ids of its own: only pull's, in
    /// front, as eVi's. Read without a parse of every row.
    fn explicit_ids(&self, raw: &[u8]) -> crate::transcript::entry_id::ExplicitIds {
        if raw.starts_with(b"{\"table\":") {
            return Default::default();
        }
        crate::transcript::line::explicit_ids(raw)
    }

    /// `session.directory` and an assistant message's `path.cwd` and
    /// `path.root`.
    fn map_paths<'a>(&self, raw: &'a [u8], f: &dyn Fn(&str) -> String) -> Cow<'a, [u8]> {
        super::cwd::map_string_fields(raw, PATH_KEYS, f)
    }

    /// The `directory` of its session row.
    fn project(&self, lines: &mut dyn Iterator<Item = &[u8]>) -> Option<String> {
        for line in lines {
            if let Some(d) = directory(line) {
                return Some(d);
            }
        }
        None
    }

    fn line_project(&self, raw: &[u8]) -> Option<Option<String>> {
        directory(raw).map(Some)
    }

    fn reader(&self) -> Option<&'static Reader> {
        Some(&READER)
    }

    /// `opencode --session <id>`: OpenCode's own way back into a session
    /// (its interactive form; `opencode run --session <id> MESSAGE` is the
    /// scripted one), from the session's directory.
    fn resume_program(&self) -> &'static [&'static str] {
        &["opencode", "--session"]
    }

    /// The session's rows leave OpenCode's database once its mirror is in
    /// the trash with every row ([`mirror::remove`]): else the next refresh
    /// would export them again and the session would come back.
    fn after_trash(
        &self,
        root: &Path,
        stream: &StreamName,
        moved: &[(PathBuf, PathBuf)],
    ) -> Option<String> {
        let mirror = mirror_dir(root).join(format!("{}.jsonl", stream.session));
        let (_, trashed) = moved.iter().find(|(from, _)| *from == mirror)?;
        match mirror::remove(root, stream.session.as_str(), trashed) {
            Ok(_) => None,
            Err(e) => Some(format!(
                "OpenCode session {} is in sync/trash/, but it could not be taken out of \
                 OpenCode's database: {e}; OpenCode still lists it, and `evi sessions \
                 forget {stream}` takes it out once that is fixed",
                stream.session
            )),
        }
    }

    /// The rows of the mirror an undo brought back go into the database.
    fn after_restore(&self, root: &Path, stream: &StreamName) -> Option<String> {
        match mirror::restore(root, stream.session.as_str()) {
            Ok(()) => None,
            Err(e) => Some(format!(
                "OpenCode session {} is back in {}, not yet in OpenCode's database: {e}; \
                 it goes in at the next evi command once that is fixed",
                stream.session,
                mirror_dir(root).display()
            )),
        }
    }

    /// The rows pull appended to the mirrors go into the database, once per
    /// command ([`mirror::import_files`]); a note when they cannot yet.
    fn after_pull(
        &self,
        _ctx: &SyncContext,
        root: &Path,
        files: &[(StreamName, PathBuf)],
    ) -> Vec<String> {
        let mirrors: Vec<&Path> = files.iter().map(|(_, p)| p.as_path()).collect();
        let failed: Vec<(&Path, String)> = match mirror::import_files(root, &mirrors) {
            Ok(failed) => failed
                .into_iter()
                .map(|(m, e)| (m, e.to_string()))
                .collect(),
            Err(e) => mirrors.iter().map(|m| (*m, e.to_string())).collect(),
        };
        failed
            .into_iter()
            .map(|(m, e)| {
                format!(
                    "OpenCode session in {}, not yet in OpenCode's database: {e}; it goes in \
                     at the next evi command once that is fixed",
                    m.display()
                )
            })
            .collect()
    }
}

/// The `directory` of a session row's line.
fn directory(raw: &[u8]) -> Option<String> {
    let line = row::Line::parse(raw)?;
    (line.table == "session")
        .then(|| line.text("directory"))
        .flatten()
        .filter(|d| d.starts_with('/'))
}
