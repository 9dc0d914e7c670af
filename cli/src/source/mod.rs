//! Sources: the agents whose sessions sync. eVi's home is one; Claude Code's
//! and Codex's folders are others, each opt-in in `[agents]` because they
//! are another program's data (`docs/agents.md` gives the rules).
//!
//! A source says where its sessions live ([`Source::sessions`]), how a line
//! maps to an entry id ([`Agent::explicit_ids`]), where pull writes a session
//! this device does not have yet ([`Source::target`]) and what its agent
//! needs to resume one ([`Agent::resume_command`]). eVi's own layout (day
//! folders) stays in [`crate::transcript`]; the sources here are the
//! single-file layouts of other agents, which [`apply`] appends to.

pub mod apply;
pub mod checkouts;
pub mod claude_code;
pub mod codex;
pub mod codex_index;
pub mod paths;
pub mod project;
pub mod stream;
pub mod summary;

use std::path::{Path, PathBuf};

use evi_shared::Day;

use crate::config::Config;
use crate::transcript::entry_id::ExplicitIds;
pub use stream::StreamName;

/// An agent whose sessions this tool reads and syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Agent {
    #[serde(rename = "evi")]
    Evi,
    #[serde(rename = "claude-code")]
    ClaudeCode,
    #[serde(rename = "codex")]
    Codex,
}

impl Agent {
    pub const ALL: [Agent; 3] = [Agent::Evi, Agent::ClaudeCode, Agent::Codex];

    /// The name in config, `--agent`, JSON and stream names.
    pub fn name(self) -> &'static str {
        match self {
            Self::Evi => "evi",
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }

    /// A line's own id and parent. Claude Code's `uuid` is an explicit id and
    /// its `parentUuid` (or `null` when absent) the parent, so such a line
    /// never moves the implicit chain; every other line reads as eVi's do
    /// (`id`/`parentId` that pull added, else derived).
    pub fn explicit_ids(self, raw: &[u8]) -> ExplicitIds {
        if self == Self::ClaudeCode
            && let Some(ids) = claude_code::uuid_ids(raw)
        {
            return ids;
        }
        crate::transcript::line::parse_head(raw).ids
    }

    /// A line of this device as every device agrees on it: for Claude Code
    /// and Codex, `cwd` values mapped back through `[paths]` (see
    /// [`claude_code::map_cwd`]); eVi's lines as they are. Ids are taken
    /// from, and content pushed as, this form.
    pub fn canonical<'a>(self, raw: &'a [u8], map: &paths::PathMap) -> std::borrow::Cow<'a, [u8]> {
        match self {
            Self::ClaudeCode | Self::Codex if !map.is_empty() => {
                claude_code::map_cwd(raw, |p| map.original(p))
            }
            _ => std::borrow::Cow::Borrowed(raw),
        }
    }

    /// A canonical line as this device writes it: the inverse of
    /// [`Self::canonical`]. Each agent resumes a session only as one of the
    /// folder it runs in by the `cwd`s its lines name (Claude Code's
    /// `--resume`, Codex's `resume --last` and picker).
    pub fn localize<'a>(self, raw: &'a [u8], map: &paths::PathMap) -> std::borrow::Cow<'a, [u8]> {
        match self {
            Self::ClaudeCode | Self::Codex if !map.is_empty() => {
                claude_code::map_cwd(raw, |p| map.local(p))
            }
            _ => std::borrow::Cow::Borrowed(raw),
        }
    }

    /// The program and arguments that resume `session` in this agent (run
    /// from its project): what `evi sessions resume` runs.
    pub fn resume_argv(self, session: &str) -> Vec<String> {
        let argv: &[&str] = match self {
            Self::Evi => &["evi", "sessions", "resume"],
            Self::ClaudeCode => &["claude", "--resume"],
            Self::Codex => &["codex", "resume"],
        };
        argv.iter()
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
            Some(p) if self != Self::Evi => format!("cd {} && {run}", shell_quote(p)),
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

/// The day every entry of a single-file agent session carries in its
/// segment: those layouts have no day folders, and a constant keeps an
/// entry's (id, parent, day, content) the same on every device.
pub fn agent_day() -> Day {
    "1970-01-01".parse().expect("a valid day")
}

/// One session file of an agent source.
#[derive(Debug, Clone)]
pub struct AgentFile {
    pub stream: StreamName,
    pub path: PathBuf,
}

/// An agent's folder on this device.
#[derive(Debug, Clone)]
pub struct Source {
    pub agent: Agent,
    pub root: PathBuf,
}

impl Source {
    /// Every session file under the folder (none when it is absent).
    pub fn sessions(&self) -> Vec<AgentFile> {
        match self.agent {
            Agent::Evi => Vec::new(),
            Agent::ClaudeCode => claude_code::sessions(&self.root),
            Agent::Codex => codex::sessions(&self.root),
        }
    }

    /// The folder that holds the sessions (what `evi sync watch` watches).
    pub fn sessions_dir(&self) -> PathBuf {
        match self.agent {
            Agent::Evi => self.root.clone(),
            Agent::ClaudeCode => self.root.join("projects"),
            Agent::Codex => self.root.join("sessions"),
        }
    }

    /// Where pull writes a session this device has none of, from the first
    /// entries' lines (`None`: they do not say yet, the entries wait).
    pub fn target(
        &self,
        stream: &StreamName,
        lines: &[&[u8]],
        map: &paths::PathMap,
    ) -> Option<PathBuf> {
        match self.agent {
            Agent::Evi => None,
            Agent::ClaudeCode => claude_code::target(&self.root, stream, lines, map),
            Agent::Codex => codex::target(&self.root, stream, lines),
        }
    }
}

/// The folder of `agent` on this device: `[agents] claude-code-dir` /
/// `codex-dir`, else `$CLAUDE_CONFIG_DIR` / `$CODEX_HOME`, else `~/.claude`
/// / `~/.codex`.
pub fn folder(agent: Agent, config: &Config) -> Option<PathBuf> {
    let (set, var, dot) = match agent {
        Agent::Evi => return None,
        Agent::ClaudeCode => (
            &config.agents.claude_code_dir,
            "CLAUDE_CONFIG_DIR",
            ".claude",
        ),
        Agent::Codex => (&config.agents.codex_dir, "CODEX_HOME", ".codex"),
    };
    if let Some(dir) = set {
        return Some(paths::expand_home(dir));
    }
    if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(v));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(dot))
}

/// Whether `[agents]` turns `agent` on.
pub fn is_enabled(agent: Agent, config: &Config) -> bool {
    match agent {
        Agent::Evi => true,
        Agent::ClaudeCode => config.agents.claude_code,
        Agent::Codex => config.agents.codex,
    }
}

/// The other agents' sources turned on in `config`.
pub fn enabled(config: &Config) -> Vec<Source> {
    [Agent::ClaudeCode, Agent::Codex]
        .into_iter()
        .filter(|a| is_enabled(*a, config))
        .filter_map(|agent| {
            Some(Source {
                agent,
                root: folder(agent, config)?,
            })
        })
        .collect()
}

/// The sessions of `sources` that `prefix` names: an id or prefix of a
/// session (ASCII case ignored, the exact id alone when it is one), or a
/// stream name (`claude-code/<id>`, a subagent transcript
/// `claude-code/<id>/<stem>`, `codex/<id>`).
pub fn matching(sources: &[Source], prefix: &str) -> Vec<AgentFile> {
    let stream = StreamName::parse(prefix).filter(|s| s.agent != Agent::Evi);
    let mut found: Vec<AgentFile> = sources
        .iter()
        .flat_map(Source::sessions)
        .filter(|f| match &stream {
            Some(s) => f.stream == *s,
            None => {
                f.stream.sub.is_none()
                    && crate::transcript::catalog::starts_with_ignore_case(
                        f.stream.session.as_str(),
                        prefix,
                    )
            }
        })
        .collect();
    if found.len() > 1
        && let Some(exact) = found
            .iter()
            .position(|f| f.stream.session.as_str() == prefix)
    {
        return vec![found.swap_remove(exact)];
    }
    found
}

/// The source of `agent`, enabled or not (for status: what it would sync).
pub fn source(agent: Agent, config: &Config) -> Option<Source> {
    Some(Source {
        agent,
        root: folder(agent, config)?,
    })
}
