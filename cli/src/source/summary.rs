//! One line of `evi sessions list` for another agent's session, read from
//! its file as every reader reads it ([`SessionTree::load_agent`]): the
//! active branch (root to the newest leaf) counted as eVi's is, so `list`,
//! `handoff`, `show` and the web viewer give one count.

use std::io;

use super::AgentFile;
use super::paths::PathMap;
use crate::transcript::SessionTree;
use crate::transcript::summary::SessionSummary;

/// Summarises `file` (read as this device holds it).
pub fn summarize(file: &AgentFile, map: &PathMap) -> io::Result<SessionSummary> {
    let tree = SessionTree::load_agent(file, map)?;
    let short = file.stream.session.as_str().chars().take(8).collect();
    let mut summary = SessionSummary::of(&tree, short)?;
    if file.stream.sub.is_some() {
        summary.id = file.stream.to_string();
    }
    Ok(summary)
}

/// Every session of the agents turned on in `config`, `--agent` aside.
pub fn all(config: &crate::config::Config) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    let map = PathMap::new(&config.paths.map);
    super::enabled(config)
        .iter()
        .flat_map(|s| s.sessions())
        .filter(|f| f.stream.sub.is_none())
        .map(|f| {
            let s = summarize(&f, &map);
            (f, s)
        })
        .collect()
}
