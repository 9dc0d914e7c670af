//! The sessions of the home as the viewer reads them, cached.
//!
//! Every request scans the transcripts folder again (it only lists folders),
//! so a session eVi writes meanwhile shows up. What costs a read of a whole
//! session is cached and keyed by its files' days, sizes and mtimes, so any
//! write makes it stale: the tree of the few sessions last opened (their
//! line index: where each entry's line is, no content), and the summary of
//! every session listed. A page then reads only its own lines. Other
//! agents' sessions (those `[agents]` turns on) are listed, summarized and
//! opened the same way, their one file stamped as eVi's day files are.
//! `[agents]` and `[paths]` are read again when config.toml changes (a
//! `stat` per request tells), so a viewer started before an agent was
//! turned on lists its sessions without a restart.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use evi_shared::{Day, SessionId};

use crate::config::Config;
use crate::home::EviHome;
use crate::search::agents::AgentSession;
use crate::source::paths::PathMap;
use crate::source::project::Projects;
use crate::source::{AgentFile, Source};
use crate::transcript::summary::SessionSummary;
use crate::transcript::view::TreeIndex;
use crate::transcript::{Catalog, SessionFile, SessionTree};

/// Trees kept: a 200 MB session's index is tens of MB.
const TREES: usize = 4;

/// What a session's files looked like when something was read from them.
type Stamp = Vec<(Day, u64, SystemTime)>;

fn stamp(files: &[SessionFile]) -> Stamp {
    files.iter().map(|f| (f.day, f.len, f.mtime)).collect()
}

/// A session the list shows: eVi's, by its id in the catalog, or another
/// agent's.
#[derive(Debug, Clone, Copy)]
pub enum Listed<'a> {
    Evi(&'a SessionId),
    Agent(&'a AgentSession),
}

pub struct Library {
    home: EviHome,
    /// What config.toml says of other agents, as last read.
    settings: Mutex<AgentSettings>,
    /// Most recently used last, by stream name (an eVi session's is its id).
    trees: Mutex<Vec<(String, Stamp, Arc<TreeIndex>)>>,
    summaries: Mutex<HashMap<SessionId, (Stamp, SessionSummary)>>,
    /// Other agents' sessions' summaries, by stream name.
    agent_summaries: Mutex<HashMap<String, (Stamp, SessionSummary)>>,
}

/// Other agents' folders turned on, and where their projects are here, as
/// config.toml said when it looked like `stamp`.
struct AgentSettings {
    stamp: Option<ConfigStamp>,
    agents: Arc<Vec<Source>>,
    map: Arc<PathMap>,
}

/// config.toml's size, mtime and inode (`None` in [`AgentSettings`]: absent).
type ConfigStamp = (u64, SystemTime, u64);

fn config_stamp(path: &std::path::Path) -> Option<ConfigStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?, m.ino()))
}

impl AgentSettings {
    fn of(config: &Config, stamp: Option<ConfigStamp>) -> Self {
        Self {
            stamp,
            agents: Arc::new(crate::source::enabled(config)),
            map: Arc::new(PathMap::new(&config.paths.map)),
        }
    }
}

/// How another agent's session file looks now (its one "day file").
fn agent_stamp(path: &std::path::Path) -> io::Result<Stamp> {
    let meta = std::fs::metadata(path)?;
    Ok(vec![(
        crate::source::agent_day(),
        meta.len(),
        meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    )])
}

impl Library {
    pub fn new(home: EviHome, config: &Config) -> Self {
        let stamp = config_stamp(&home.config_file());
        Self {
            settings: Mutex::new(AgentSettings::of(config, stamp)),
            home,
            trees: Mutex::new(Vec::new()),
            summaries: Mutex::new(HashMap::new()),
            agent_summaries: Mutex::new(HashMap::new()),
        }
    }

    pub fn home(&self) -> &EviHome {
        &self.home
    }

    /// The agents turned on and the path map, read again from config.toml
    /// when it changed since. A config that does not parse now (an edit
    /// half saved) leaves the last good one in force, said once on stderr.
    fn settings(&self) -> (Arc<Vec<Source>>, Arc<PathMap>) {
        let path = self.home.config_file();
        let now = config_stamp(&path);
        let mut s = self.settings.lock().unwrap_or_else(PoisonError::into_inner);
        if s.stamp != now {
            match Config::load(&path) {
                Ok(loaded) => *s = AgentSettings::of(&loaded.config, now),
                Err(e) => {
                    eprintln!("warning: {e}; the viewer keeps the settings it had");
                    s.stamp = now;
                }
            }
        }
        (s.agents.clone(), s.map.clone())
    }

    /// The sessions as they are on disk now.
    pub fn catalog(&self) -> io::Result<Catalog> {
        Catalog::scan(&self.home.transcripts_dir())
    }

    /// A session's tree and view index, from the cache while its files are
    /// unchanged.
    pub fn index(&self, catalog: &Catalog, id: &SessionId) -> io::Result<Arc<TreeIndex>> {
        let files = &catalog.sessions[id];
        let now = stamp(files);
        let index = self.cached(id.as_str(), &now, || {
            let tree = SessionTree::load(id.clone(), files.clone())?;
            TreeIndex::new(tree, catalog.short_id(id))
        })?;
        self.summaries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), (now, index.summary.clone()));
        Ok(index)
    }

    /// The sessions of other agents turned on here that `prefix` names
    /// (see [`crate::source::matching`]).
    pub fn agent_sessions(&self, prefix: &str) -> Vec<AgentFile> {
        crate::source::matching(&self.settings().0, prefix)
    }

    /// The agents turned on here, eVi first: what the list can filter by.
    pub fn agent_names(&self) -> Vec<crate::source::Agent> {
        std::iter::once(crate::source::Agent::Evi)
            .chain(self.settings().0.iter().map(|s| s.agent))
            .collect()
    }

    /// Every session file of the agents turned on here, subagent
    /// transcripts too, with the map its lines read back through: what the
    /// search index reads.
    pub fn agent_search_sessions(&self) -> Vec<AgentSession> {
        let (agents, map) = self.settings();
        crate::search::agents::sessions(&agents, &map, &self.home)
    }

    /// The sessions (not subagent transcripts) of the agents turned on
    /// here, each with its map: what the list shows beside eVi's.
    pub fn agent_list_sessions(&self) -> Vec<AgentSession> {
        let mut v = self.agent_search_sessions();
        v.retain(|a| a.file.stream.sub.is_none());
        v
    }

    /// Another agent's session's tree and view index, cached as eVi's.
    pub fn agent_index(&self, file: &AgentFile) -> io::Result<Arc<TreeIndex>> {
        let now = agent_stamp(&file.path)?;
        self.cached(&file.stream.to_string(), &now, || {
            // The session's own map, as every reader and push use it: a
            // session pull placed by its git remote reads back through its pair.
            let projects = Projects::load(&self.home.sync_dir());
            let map = self.settings().1;
            let tree = SessionTree::load_agent(file, &projects.map_for(&map, &file.stream))?;
            let short = file.stream.session.as_str().chars().take(8).collect();
            TreeIndex::new(tree, short)
        })
    }

    /// Another agent's session's summary (`map`: its map here), as
    /// `evi sessions list --json` gives it, from the cache while its file is
    /// unchanged.
    pub fn agent_summary(&self, file: &AgentFile, map: &PathMap) -> io::Result<SessionSummary> {
        let key = file.stream.to_string();
        let now = agent_stamp(&file.path)?;
        let cache = || {
            self.agent_summaries
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if let Some((_, s)) = cache().get(&key).filter(|(st, _)| *st == now) {
            return Ok(s.clone());
        }
        let s = crate::source::summary::summarize(file, map)?;
        cache().insert(key, (now, s.clone()));
        Ok(s)
    }

    /// The index cached under `key` while its files look like `now`, else
    /// what `load` makes (then cached).
    fn cached(
        &self,
        key: &str,
        now: &Stamp,
        load: impl FnOnce() -> io::Result<TreeIndex>,
    ) -> io::Result<Arc<TreeIndex>> {
        {
            let mut trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(pos) = trees.iter().position(|(i, s, _)| i == key && s == now) {
                let hit = trees.remove(pos);
                let index = hit.2.clone();
                trees.push(hit);
                return Ok(index);
            }
        }
        let index = Arc::new(load()?);
        let mut trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
        trees.retain(|(i, _, _)| i != key);
        if trees.len() >= TREES {
            trees.remove(0);
        }
        trees.push((key.to_owned(), now.clone(), index.clone()));
        Ok(index)
    }

    /// A session's summary, from the cache while its files are unchanged
    /// (reading it does not keep its tree).
    pub fn summary(&self, catalog: &Catalog, id: &SessionId) -> io::Result<SessionSummary> {
        let files = &catalog.sessions[id];
        let now = stamp(files);
        let cached = self
            .summaries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .filter(|(s, _)| *s == now)
            .map(|(_, summary)| summary.clone());
        let mut summary = match cached {
            Some(s) => s,
            None => {
                let tree = SessionTree::load(id.clone(), files.clone())?;
                let s = SessionSummary::of(&tree, String::new())?;
                self.summaries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(id.clone(), (now, s.clone()));
                s
            }
        };
        // Another session may have appeared since, sharing a longer prefix.
        summary.short_id = catalog.short_id(id);
        Ok(summary)
    }

    /// Summaries of `items`, in their order, read on every core (a
    /// filter reads them all once).
    pub fn summaries(
        &self,
        catalog: &Catalog,
        items: &[Listed<'_>],
    ) -> io::Result<Vec<SessionSummary>> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = items.len().div_ceil(workers).max(1);
        std::thread::scope(|s| {
            let parts: Vec<_> = items
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .map(|item| match item {
                                Listed::Evi(id) => self.summary(catalog, id),
                                Listed::Agent(a) => self.agent_summary(&a.file, &a.map),
                            })
                            .collect::<io::Result<Vec<_>>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(items.len());
            for p in parts {
                out.extend(
                    p.join()
                        .map_err(|_| io::Error::other("a reader panicked"))??,
                );
            }
            Ok(out)
        })
    }
}
