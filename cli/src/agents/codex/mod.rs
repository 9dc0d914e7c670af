//! Codex (`codex`): rollouts in `$CODEX_HOME` (default `~/.codex`) named
//! by local time and id, lines without ids ([`files`]), a row per session
//! in Codex's own SQLite index ([`index`]); read as messages by
//! [`message`].

pub mod files;
pub mod index;
mod message;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::{AgentKind, Landing, Reader};
use crate::source::paths::PathMap;
use crate::source::{AgentFile, StreamName};
use crate::sync::state::context::SyncContext;

pub struct Codex;

static READER: Reader = Reader {
    read: message::read,
    keys: message::KEYS,
    // A bare response item (no `payload`) is read whole.
    trimmed_enough: |v| v.get("payload").is_some(),
    outline: message::outline,
};

impl AgentKind for Codex {
    fn title(&self) -> &'static str {
        "Codex"
    }

    fn default_folder(&self) -> Option<PathBuf> {
        super::env_or_home("CODEX_HOME", ".codex")
    }

    fn sessions(&self, root: &Path) -> Vec<AgentFile> {
        files::sessions(root)
    }

    fn sessions_dir(&self, root: &Path) -> PathBuf {
        root.join("sessions")
    }

    fn target(&self, at: &Landing<'_>) -> Option<PathBuf> {
        files::target(at.root, at.stream, at.lines)
    }

    fn map_paths<'a>(&self, raw: &'a [u8], f: &dyn Fn(&str) -> String) -> Cow<'a, [u8]> {
        super::cwd::map_cwd(raw, f)
    }

    fn project(&self, lines: &mut dyn Iterator<Item = &[u8]>) -> Option<String> {
        files::meta(lines)
            .and_then(|m| m.cwd)
            .filter(|c| c.starts_with('/'))
    }

    fn line_project(&self, raw: &[u8]) -> Option<Option<String>> {
        files::meta([raw]).map(|m| m.cwd)
    }

    /// A `session_meta` without `cwd` says the session has no project.
    fn project_here(&self, named: Option<Option<String>>, map: &PathMap) -> Option<String> {
        named.map(|cwd| cwd.map(|c| here(map, &c)).unwrap_or_default())
    }

    fn reader(&self) -> Option<&'static Reader> {
        Some(&READER)
    }

    fn resume_program(&self) -> &'static [&'static str] {
        &["codex", "resume"]
    }

    /// Enters each rollout in Codex's index, which current Codex CLIs look
    /// a session up in.
    fn after_pull(
        &self,
        ctx: &SyncContext,
        root: &Path,
        files: &[(StreamName, PathBuf)],
    ) -> Vec<String> {
        files
            .iter()
            .filter_map(|(stream, rollout)| enter_pulled(ctx, root, stream, rollout))
            .collect()
    }
}

/// Enters a rollout pull wrote in Codex's index; a note when it could not.
fn enter_pulled(
    ctx: &SyncContext,
    root: &Path,
    stream: &StreamName,
    rollout: &Path,
) -> Option<String> {
    use index::{Outcome, Thread, enter};
    // No index, nothing to enter: the rollout is not read. Read, it
    // cost a pull a read of the whole file after each page appended to
    // it, and the file in memory (a fresh pull of a 200 MB session:
    // peak RSS 274 MiB, bench/RESULTS.md "agents.sh").
    index::database(root)?;
    let text = std::fs::read(rollout).ok()?;
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let meta = files::meta(lines.iter().copied())?;
    let facts = files::facts(lines.iter().copied());
    let map = ctx.projects.map_for(&ctx.path_map, stream);
    let cwd = here(&map, meta.cwd.as_deref().unwrap_or(""));
    let t = Thread {
        meta: &meta,
        facts: &facts,
        rollout,
        cwd: &cwd,
    };
    let session = &stream.session;
    match enter(root, &t) {
        Ok(Outcome::Added(_) | Outcome::Present | Outcome::NoDatabase) => None,
        Ok(Outcome::UnknownSchema { db, why }) => Some(format!(
            "Codex session {session} is at {}, but Codex's index {} was left alone: {why}; \
                 a Codex that re-indexes its sessions folder lists it, or open the rollout file",
            rollout.display(),
            db.display()
        )),
        Err(e) => Some(format!(
            "Codex session {session} is at {}, but it could not be entered in Codex's \
                 index: {e}",
            rollout.display()
        )),
    }
}

/// A Codex `cwd` as it is here: the file names it so (pull writes it
/// mapped, see [`crate::agents::Agent::localize`]), unless a version
/// before that rewrite wrote it.
fn here(map: &PathMap, cwd: &str) -> String {
    map.local(&map.original(cwd))
}
