//! Claude Code (`claude`): sessions in `$CLAUDE_CONFIG_DIR` (default
//! `~/.claude`), one JSONL file each under the project's folder, lines with
//! their own `uuid`/`parentUuid`, subagent transcripts beside their session
//! ([`files`]); read as messages by [`message`].

pub mod files;
mod message;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::{AgentKind, Landing, Reader};
use crate::source::AgentFile;
use crate::transcript::entry_id::ExplicitIds;

pub struct ClaudeCode;

static READER: Reader = Reader {
    read: message::read,
    keys: message::KEYS,
    trimmed_enough: |_| true,
    outline: message::outline,
};

impl AgentKind for ClaudeCode {
    fn title(&self) -> &'static str {
        "Claude Code"
    }

    fn default_folder(&self) -> Option<PathBuf> {
        super::env_or_home("CLAUDE_CONFIG_DIR", ".claude")
    }

    fn sessions(&self, root: &Path) -> Vec<AgentFile> {
        files::sessions(root)
    }

    fn sessions_dir(&self, root: &Path) -> PathBuf {
        root.join("projects")
    }

    fn target(&self, at: &Landing<'_>) -> Option<PathBuf> {
        files::target(at.root, at.stream, at.lines, at.map)
    }

    fn has_side_transcripts(&self) -> bool {
        true
    }

    /// `uuid` is an explicit id and `parentUuid` (or `null` when absent)
    /// the parent, so such a line never moves the implicit chain; a line
    /// without (a summary, a file-history snapshot) reads as eVi's do.
    fn explicit_ids(&self, raw: &[u8]) -> ExplicitIds {
        files::uuid_ids(raw).unwrap_or_else(|| crate::transcript::line::explicit_ids(raw))
    }

    fn map_paths<'a>(&self, raw: &'a [u8], f: &dyn Fn(&str) -> String) -> Cow<'a, [u8]> {
        super::cwd::map_cwd(raw, f)
    }

    fn project(&self, lines: &mut dyn Iterator<Item = &[u8]>) -> Option<String> {
        files::cwd(lines)
    }

    fn line_project(&self, raw: &[u8]) -> Option<Option<String>> {
        files::cwd([raw]).map(Some)
    }

    fn reader(&self) -> Option<&'static Reader> {
        Some(&READER)
    }

    fn resume_program(&self) -> &'static [&'static str] {
        &["claude", "--resume"]
    }

    fn lives_on_after_forget(&self) -> bool {
        true
    }
}
