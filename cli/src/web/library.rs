//! The sessions of the home as the viewer reads them, cached.
//!
//! Every request scans the transcripts folder again (it only lists folders),
//! so a session eVi writes meanwhile shows up. What costs a read of a whole
//! session is cached and keyed by its files' days, sizes and mtimes, so any
//! write makes it stale: the tree of the few sessions last opened (their
//! line index: where each entry's line is, no content), and the summary of
//! every session listed. A page then reads only its own lines. Other
//! agents' sessions (those `[agents]` turns on) open the same way, by id.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use evi_shared::{Day, SessionId};

use crate::config::Config;
use crate::home::EviHome;
use crate::source::paths::PathMap;
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

pub struct Library {
    home: EviHome,
    /// Other agents' folders turned on, and where their projects are here.
    agents: Vec<Source>,
    map: PathMap,
    /// Most recently used last, by stream name (an eVi session's is its id).
    trees: Mutex<Vec<(String, Stamp, Arc<TreeIndex>)>>,
    summaries: Mutex<HashMap<SessionId, (Stamp, SessionSummary)>>,
}

impl Library {
    pub fn new(home: EviHome, config: &Config) -> Self {
        Self {
            home,
            agents: crate::source::enabled(config),
            map: PathMap::new(&config.paths.map),
            trees: Mutex::new(Vec::new()),
            summaries: Mutex::new(HashMap::new()),
        }
    }

    pub fn home(&self) -> &EviHome {
        &self.home
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
        crate::source::matching(&self.agents, prefix)
    }

    /// Another agent's session's tree and view index, cached as eVi's.
    pub fn agent_index(&self, file: &AgentFile) -> io::Result<Arc<TreeIndex>> {
        let meta = std::fs::metadata(&file.path)?;
        let now = vec![(
            crate::source::agent_day(),
            meta.len(),
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        )];
        self.cached(&file.stream.to_string(), &now, || {
            // The session's own map, as every reader and push use it: a
            // session pull placed by its git remote reads back through its pair.
            let projects = crate::source::project::Projects::load(&self.home.sync_dir());
            let tree = SessionTree::load_agent(file, &projects.map_for(&self.map, &file.stream))?;
            let short = file.stream.session.as_str().chars().take(8).collect();
            TreeIndex::new(tree, short)
        })
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

    /// Summaries of `ids`, read on every core (a search reads them all once).
    pub fn summaries(
        &self,
        catalog: &Catalog,
        ids: &[&SessionId],
    ) -> io::Result<Vec<SessionSummary>> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = ids.len().div_ceil(workers).max(1);
        std::thread::scope(|s| {
            let parts: Vec<_> = ids
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        part.iter()
                            .map(|id| self.summary(catalog, id))
                            .collect::<io::Result<Vec<_>>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(ids.len());
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
