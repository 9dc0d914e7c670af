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

/// The session files (not subagent transcripts) of the agents turned on in
/// `config` that `keep` keeps.
fn files(config: &crate::config::Config, keep: impl Fn(&AgentFile) -> bool) -> Vec<AgentFile> {
    super::enabled(config)
        .iter()
        .flat_map(|s| s.sessions())
        .filter(|f| f.stream.sub.is_none() && keep(f))
        .collect()
}

/// Reads `files` with the paths of `home`'s device.
struct Reader {
    map: PathMap,
    projects: super::project::Projects,
}

impl Reader {
    fn new(config: &crate::config::Config, home: &crate::home::EviHome) -> Self {
        Self {
            map: PathMap::new(&config.paths.map),
            projects: super::project::Projects::load(&home.sync_dir()),
        }
    }

    fn summarize(&self, f: &AgentFile) -> io::Result<SessionSummary> {
        summarize(f, &self.projects.map_for(&self.map, &f.stream))
    }
}

/// Every session of the agents turned on in `config`, `--agent` aside,
/// each read with the paths of `home`'s device.
pub fn all(
    config: &crate::config::Config,
    home: &crate::home::EviHome,
) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    by_prefix(config, home, "")
}

/// The sessions whose id starts with `prefix`, summarized (only those:
/// the others are not opened).
pub fn by_prefix(
    config: &crate::config::Config,
    home: &crate::home::EviHome,
    prefix: &str,
) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    let r = Reader::new(config, home);
    files(config, |f| f.stream.session.as_str().starts_with(prefix))
        .into_iter()
        .map(|f| {
            let s = r.summarize(&f);
            (f, s)
        })
        .collect()
}

/// The newest sessions (by their last time) of `agent`, or of every agent
/// turned on, that `keep` keeps: at least `limit` of them when there are,
/// newest first. An agent only appends, so a file's last line is no newer
/// than its modification time: files are read newest first by that time,
/// and reading stops once `limit` sessions are kept that are all newer
/// than the next file was modified, so a list reads the few sessions it
/// shows and not the whole folder.
pub fn recent(
    config: &crate::config::Config,
    home: &crate::home::EviHome,
    agent: Option<super::Agent>,
    limit: usize,
    keep: impl Fn(&SessionSummary) -> bool,
) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    let r = Reader::new(config, home);
    let mut by_time: Vec<(Option<std::time::SystemTime>, AgentFile)> =
        files(config, |f| agent.is_none_or(|a| a == f.stream.agent))
            .into_iter()
            .map(|f| {
                (
                    std::fs::metadata(&f.path).and_then(|m| m.modified()).ok(),
                    f,
                )
            })
            .collect();
    by_time.sort_by_key(|f| std::cmp::Reverse(f.0));
    let mut out: Vec<(AgentFile, io::Result<SessionSummary>)> = Vec::new();
    // The last times of the kept sessions, newest first.
    let mut ends: Vec<i64> = Vec::new();
    for (modified, f) in by_time {
        if ends.len() >= limit
            && let Some(m) = modified
        {
            let m = chrono::DateTime::<chrono::Utc>::from(m).timestamp_millis();
            // A second of slack for file times coarser than the lines'.
            if m + 1000 < ends[limit - 1] {
                break;
            }
        }
        let s = r.summarize(&f);
        match &s {
            Ok(sum) if !keep(sum) => continue,
            Ok(sum) => {
                let end = sum
                    .end
                    .as_deref()
                    .and_then(crate::transcript::line::parse_ts)
                    .unwrap_or(i64::MIN);
                let at = ends.partition_point(|&e| e >= end);
                ends.insert(at, end);
            }
            Err(_) => {}
        }
        out.push((f, s));
    }
    out
}
