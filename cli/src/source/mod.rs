//! Sources: the folders whose sessions sync. eVi's home is one; each other
//! agent's folder is another, opt-in in `[agents]` because it is another
//! program's data (`docs/agents.md` gives the rules).
//!
//! What is particular to an agent lives in its folder under
//! [`crate::agents`]; this module holds what every source shares: a
//! folder on this device ([`Source`]), the name a session travels under
//! ([`StreamName`]), how pull appends to a session file ([`apply`]) and
//! how a project is found at another path ([`paths`], [`project`]).

pub mod apply;
pub mod checkouts;
pub mod paths;
pub mod project;
pub mod stream;
pub mod summary;

use std::path::PathBuf;

use evi_shared::Day;

pub use crate::agents::Agent;
use crate::config::Config;
pub use stream::StreamName;

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
        self.agent.kind().sessions(&self.root)
    }

    /// The folder that holds the sessions (what `evi sync watch` watches).
    pub fn sessions_dir(&self) -> PathBuf {
        self.agent.kind().sessions_dir(&self.root)
    }

    /// Where pull writes a session this device has none of, from the first
    /// entries' lines and, for an agent whose lines name no folder, `dir`
    /// from the session's project entry (`None`: they do not say yet, the
    /// entries wait).
    pub fn target(
        &self,
        stream: &StreamName,
        lines: &[&[u8]],
        map: &paths::PathMap,
        dir: Option<&str>,
    ) -> Option<PathBuf> {
        let at = crate::agents::Landing {
            root: &self.root,
            stream,
            lines,
            map,
            dir,
        };
        self.agent.kind().target(&at)
    }
}

/// The folder of `agent` on this device (see [`Agent::folder`]).
pub fn folder(agent: Agent, config: &Config) -> Option<PathBuf> {
    agent.folder(config)
}

/// Whether `[agents]` turns `agent` on.
pub fn is_enabled(agent: Agent, config: &Config) -> bool {
    agent.enabled(config)
}

/// The other agents' sources turned on in `config`.
pub fn enabled(config: &Config) -> Vec<Source> {
    Agent::others()
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
