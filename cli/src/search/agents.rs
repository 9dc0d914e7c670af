//! Other agents' sessions as the index reads them: each file of the agents
//! turned on here (subagent transcripts too), with the path map its lines
//! are read back through, the one `show` and push use, so a hit's entry id
//! is the id every reader gives that line.

use std::collections::HashMap;

use crate::home::EviHome;
use crate::source::paths::PathMap;
use crate::source::project::Projects;
use crate::source::{Agent, AgentFile, Source, StreamName};

/// One session file of another agent, and how its lines read here.
#[derive(Debug, Clone)]
pub struct AgentSession {
    pub file: AgentFile,
    pub map: PathMap,
}

/// Every session file of `sources`, each with its map on this device
/// (`base`, and the pair of a session pull placed by its git remote).
pub fn sessions(sources: &[Source], base: &PathMap, home: &EviHome) -> Vec<AgentSession> {
    if sources.is_empty() {
        return Vec::new();
    }
    let projects = Projects::load(&home.sync_dir());
    sources
        .iter()
        .flat_map(Source::sessions)
        .map(|file| AgentSession {
            map: projects.map_for(base, &file.stream).into_owned(),
            file,
        })
        .collect()
}

/// The sessions of the agents `config` turns on, as [`sessions`] reads them.
pub fn enabled(config: &crate::config::Config, home: &EviHome) -> Vec<AgentSession> {
    sessions(
        &crate::source::enabled(config),
        &PathMap::new(&config.paths.map),
        home,
    )
}

/// `sessions` by stream name, to find a hit's file again.
pub fn by_stream(sessions: &[AgentSession]) -> HashMap<String, &AgentSession> {
    sessions
        .iter()
        .map(|s| (s.file.stream.to_string(), s))
        .collect()
}

/// How a hit names its session to people and pages.
#[derive(Debug, Clone)]
pub struct HitSession {
    /// An eVi session's id; another agent's as `evi sessions list --json`
    /// gives it (its id; a subagent transcript its stream name).
    pub id: String,
    /// Another agent's session's first 8 characters (an eVi session's
    /// short id needs its catalog).
    pub short_id: Option<String>,
    pub agent: Agent,
}

/// The session a hit's index name (an eVi id or a stream name) stands for.
pub fn hit_session(name: &str) -> HitSession {
    match StreamName::parse(name).filter(|s| s.agent != Agent::Evi) {
        Some(s) => HitSession {
            short_id: Some(s.session.as_str().chars().take(8).collect()),
            id: match s.sub {
                Some(_) => s.to_string(),
                None => s.session.to_string(),
            },
            agent: s.agent,
        },
        None => HitSession {
            id: name.to_owned(),
            short_id: None,
            agent: Agent::Evi,
        },
    }
}
