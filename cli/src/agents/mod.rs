//! The agents whose sessions sync, one folder each behind [`AgentKind`].
//!
//! An agent's folder holds everything that is particular to it: where its
//! sessions live on a device and where pull writes one it does not have
//! ([`AgentKind::sessions`], [`AgentKind::target`]), how a line maps to an
//! entry's ids ([`AgentKind::explicit_ids`]), which of its fields name a
//! path that `[paths]` maps ([`AgentKind::map_paths`]), how a line reads as
//! a message ([`AgentKind::reader`]), the project a session names and the
//! command that resumes it. Everything else (sync, the tree, show, search,
//! the web viewer, handoff) asks an [`Agent`] through its [`AgentKind`] and
//! never names one: a new agent is a new folder and one line in
//! [`registry!`]'s list below. `docs/agents.md` gives each agent's rules.

pub mod claude_code;
pub mod codex;
pub mod cwd;
pub mod evi;
pub mod gemini;
pub mod opencode;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::Config;
use crate::message::Reading;
use crate::message::outline::LineOutline;
use crate::source::paths::PathMap;
use crate::source::{AgentFile, StreamName};
use crate::sync::state::context::SyncContext;
use crate::transcript::entry_id::ExplicitIds;

/// What one agent is to this tool. Every method but the names has the
/// answer of an agent that keeps eVi's own line format, so an agent states
/// only where it differs.
pub trait AgentKind: Sync {
    /// How people call it ("Claude Code").
    fn title(&self) -> &'static str;

    /// Where its folder is when `[agents] <name>-dir` does not say, as
    /// the agent itself finds it (most read an environment variable, else
    /// a folder in `$HOME`: [`env_or_home`]); `None` when that cannot be
    /// told here (no `$HOME`), and for eVi, whose sessions are in eVi's home.
    fn default_folder(&self) -> Option<PathBuf> {
        None
    }

    /// Every session file under `root` (none when it is absent).
    fn sessions(&self, _root: &Path) -> Vec<AgentFile> {
        Vec::new()
    }

    /// The folder under `root` that holds the sessions (what `evi sync
    /// watch` watches).
    fn sessions_dir(&self, root: &Path) -> PathBuf {
        root.to_path_buf()
    }

    /// Where pull writes a session this device has none of (`None`: what
    /// it knows does not say yet, the entries wait).
    fn target(&self, _at: &Landing<'_>) -> Option<PathBuf> {
        None
    }

    /// The project folder of a session file as it is here, for an agent
    /// whose lines name none (Gemini CLI: the folder its chats folder is
    /// kept for). Push sends it in the session's project entry (`dir`).
    fn project_of_file(&self, _path: &Path) -> Option<String> {
        None
    }

    /// Whether its sessions keep other transcripts beside them, each a
    /// stream of its own (`<agent>/<session>/<stem>`): Claude Code's
    /// subagents.
    fn has_side_transcripts(&self) -> bool {
        false
    }

    /// A line's own id and parent (eVi's `id`/`parentId` that pull added,
    /// else none: derived), read as eVi's are: parsed only when the line
    /// could hold them (a parse of every Codex line was a seventh of its
    /// push).
    fn explicit_ids(&self, raw: &[u8]) -> ExplicitIds {
        crate::transcript::line::explicit_ids(raw)
    }

    /// `e`'s line as pull writes it when it would not read back with its
    /// id and parent (with a newline): eVi's `id`/`parentId` in front, or
    /// whatever form of them the agent's own reader leaves alone.
    fn with_ids(&self, e: &crate::sync::Entry, has_id: bool, is_object: bool) -> Vec<u8> {
        crate::sync::engine::apply::with_ids(e, has_id, is_object)
    }

    /// `raw` with every path field the agent resumes by passed through `f`
    /// (bytes untouched where `f` leaves a path as it is).
    fn map_paths<'a>(&self, raw: &'a [u8], _f: &dyn Fn(&str) -> String) -> Cow<'a, [u8]> {
        Cow::Borrowed(raw)
    }

    /// The session's project directory, as its lines name it.
    fn project(&self, _lines: &mut dyn Iterator<Item = &[u8]>) -> Option<String> {
        None
    }

    /// The project one line names, read the long way (what a line's
    /// outline says as `project`): `Some(None)` when it says there is none.
    fn line_project(&self, _raw: &[u8]) -> Option<Option<String>> {
        None
    }

    /// The project a line's outline named, as it is on this device (`Some`
    /// of an empty string: the session says it has none).
    fn project_here(&self, named: Option<Option<String>>, _map: &PathMap) -> Option<String> {
        named.flatten()
    }

    /// How its lines read as messages through a [`Reader`] (`None`: as
    /// eVi's, unless [`Self::read_line`] reads them).
    fn reader(&self) -> Option<&'static Reader> {
        None
    }

    /// A line as a message, for an agent that reads its lines from their
    /// bytes rather than through a [`Reader`] (`None`: it does not).
    fn read_line(&self, _raw: &[u8]) -> Option<Reading> {
        None
    }

    /// The program and first arguments that resume a session (the session
    /// id follows).
    fn resume_program(&self) -> &'static [&'static str];

    /// Whether its resume command runs from the session's project.
    fn resumes_in_project(&self) -> bool {
        true
    }

    /// Whether lines written to a session after a forget can live on as a
    /// session of their own, in a file of another name beside it (the
    /// agent finds sessions by file and takes the name as the id).
    fn lives_on_after_forget(&self) -> bool {
        false
    }

    /// After a forget (made here or pulled) moved `stream`'s files into
    /// eVi's trash (`moved`: where each file was, and where it is in the
    /// trash now): what the agent's own store needs so that it no longer
    /// holds the session (a note for the user when it could not be done).
    fn after_trash(
        &self,
        _root: &Path,
        _stream: &StreamName,
        _moved: &[(PathBuf, PathBuf)],
    ) -> Option<String> {
        None
    }

    /// After an undo put `stream`'s files back from eVi's trash: what the
    /// agent's own store needs to hold the session again (a note when it
    /// could not be done).
    fn after_restore(&self, _root: &Path, _stream: &StreamName) -> Option<String> {
        None
    }

    /// After a command's pull appended to `files` of these streams, once
    /// per command and only once they are durable: what the agent's own
    /// index of sessions needs (a note for the user for each that could not
    /// be done).
    fn after_pull(
        &self,
        _ctx: &SyncContext,
        _root: &Path,
        _files: &[(StreamName, PathBuf)],
    ) -> Vec<String> {
        Vec::new()
    }
}

/// What pull knows of a session it is about to write for the first time
/// ([`AgentKind::target`]).
pub struct Landing<'a> {
    /// The agent's folder on this device.
    pub root: &'a Path,
    pub stream: &'a StreamName,
    /// The lines of its first entries.
    pub lines: &'a [&'a [u8]],
    /// `[paths]` for its project.
    pub map: &'a PathMap,
    /// Its project folder as its project entry names it, for an agent
    /// whose lines name none.
    pub dir: Option<&'a str>,
}

/// How an agent's lines read as messages.
pub struct Reader {
    /// A line as a message, from its JSON value.
    pub read: fn(&Value) -> Reading,
    /// The keys [`Self::read`] looks at: a line is parsed for these only.
    pub keys: &'static [&'static str],
    /// Whether the value trimmed to [`Self::keys`] is enough to read
    /// (else the line is read whole).
    pub trimmed_enough: fn(&Value) -> bool,
    /// What the tree needs of a line, in one pass (`None`: read it whole).
    pub outline: fn(&[u8]) -> Option<LineOutline>,
}

/// The files from `depth.start()` to `depth.end()` folders below `dir`, in
/// name order (none when it is absent): where an agent's sessions are.
pub fn files_below(
    dir: &Path,
    depth: std::ops::RangeInclusive<usize>,
) -> impl Iterator<Item = walkdir::DirEntry> {
    walkdir::WalkDir::new(dir)
        .min_depth(*depth.start())
        .max_depth(*depth.end())
        .sort_by_file_name()
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
}

/// The folder the environment variable `var` names (`CODEX_HOME`), else
/// `in_home` in `$HOME` (`.codex`): where most agents keep theirs.
pub fn env_or_home(var: &str, in_home: &str) -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(v));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(in_home))
}

/// The list of agents: one line each, `Variant => "name", kind`. The
/// name is what config, `--agent`, JSON and stream names say; it never
/// changes once released (stream ids are keyed by it).
macro_rules! registry {
    ($($variant:ident => $name:literal, $kind:expr;)*) => {
        /// An agent whose sessions this tool reads and syncs.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        pub enum Agent {
            $(#[serde(rename = $name)] $variant,)*
        }

        impl Agent {
            /// Every agent, eVi first.
            pub const ALL: &'static [Agent] = &[$(Agent::$variant),*];

            /// The name in config, `--agent`, JSON and stream names.
            pub fn name(self) -> &'static str {
                match self {
                    $(Agent::$variant => $name,)*
                }
            }

            /// What this agent is (see [`AgentKind`]).
            pub fn kind(self) -> &'static dyn AgentKind {
                match self {
                    $(Agent::$variant => &$kind,)*
                }
            }
        }
    };
}

registry! {
    Evi => "evi", evi::Evi;
    ClaudeCode => "claude-code", claude_code::ClaudeCode;
    Codex => "codex", codex::Codex;
    Gemini => "gemini", gemini::Gemini;
    OpenCode => "opencode", opencode::OpenCode;
}

impl Agent {
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|a| a.name() == s)
    }

    /// Every agent's name, for a message: "evi, claude-code, codex,
    /// gemini or opencode".
    pub fn names_in_words() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|a| a.name()).collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// Every agent but eVi: those whose sessions live in a folder of
    /// their own.
    pub fn others() -> impl Iterator<Item = Agent> {
        Self::ALL.iter().copied().filter(|a| *a != Agent::Evi)
    }

    /// How people call it ("Claude Code").
    pub fn title(self) -> &'static str {
        self.kind().title()
    }

    /// Whether `[agents]` turns it on: every agent but eVi is opt-in, its
    /// sessions being another program's data.
    pub fn enabled(self, config: &Config) -> bool {
        self == Agent::Evi || config.agents.on(self.name())
    }

    /// Its folder on this device: `[agents] <name>-dir` when set, else its
    /// [`AgentKind::default_folder`] (`None` for eVi: it has none apart
    /// from eVi's home).
    pub fn folder(self, config: &Config) -> Option<PathBuf> {
        if self == Agent::Evi {
            return None;
        }
        match config.agents.dir(self.name()) {
            Some(dir) => Some(crate::source::paths::expand_home(dir)),
            None => self.kind().default_folder(),
        }
    }

    /// `e`'s line as pull writes it with its ids ([`AgentKind::with_ids`]).
    pub fn with_ids(self, e: &crate::sync::Entry, has_id: bool, is_object: bool) -> Vec<u8> {
        self.kind().with_ids(e, has_id, is_object)
    }

    /// A session file's project when its lines name none
    /// ([`AgentKind::project_of_file`]).
    pub fn project_of_file(self, path: &Path) -> Option<String> {
        self.kind().project_of_file(path)
    }

    /// A line's own id and parent ([`AgentKind::explicit_ids`]).
    pub fn explicit_ids(self, raw: &[u8]) -> ExplicitIds {
        self.kind().explicit_ids(raw)
    }

    /// A line of this device as every device agrees on it: its path fields
    /// mapped back through `[paths]` ([`AgentKind::map_paths`]). Ids are
    /// taken from, and content pushed as, this form.
    pub fn canonical<'a>(self, raw: &'a [u8], map: &PathMap) -> Cow<'a, [u8]> {
        if map.is_empty() {
            return Cow::Borrowed(raw);
        }
        self.kind().map_paths(raw, &|p| map.original(p))
    }

    /// A canonical line as this device writes it: the inverse of
    /// [`Self::canonical`]. An agent resumes a session only as one of the
    /// folder it runs in by the paths its lines name.
    pub fn localize<'a>(self, raw: &'a [u8], map: &PathMap) -> Cow<'a, [u8]> {
        if map.is_empty() {
            return Cow::Borrowed(raw);
        }
        self.kind().map_paths(raw, &|p| map.local(p))
    }

    /// The program and arguments that resume `session` in this agent (run
    /// from its project): what `evi sessions resume` runs.
    pub fn resume_argv(self, session: &str) -> Vec<String> {
        self.kind()
            .resume_program()
            .iter()
            .copied()
            .chain([session])
            .map(str::to_owned)
            .collect()
    }

    /// The command that resumes `session` in this agent, from its project.
    pub fn resume_command(self, session: &str, project: Option<&str>) -> String {
        let run = self
            .resume_argv(session)
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ");
        match project {
            Some(p) if self.kind().resumes_in_project() => {
                format!("cd {} && {run}", shell_quote(p))
            }
            _ => run,
        }
    }
}

/// `s` quoted for a POSIX shell when it needs to be.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%=,".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
