//! The sessions of the home as the viewer reads them, cached.
//!
//! Every request scans the transcripts folder again (it only lists folders),
//! so a session eVi writes meanwhile shows up. What costs a read of a whole
//! session is cached and keyed by its files' days, sizes and mtimes, so any
//! write makes it stale: the tree of the few sessions last opened (their
//! line index: where each entry's line is, no content), and the summary of
//! every session listed. A page then reads only its own lines.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use evi_shared::{Day, SessionId};

use crate::home::EviHome;
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
    /// Most recently used last.
    trees: Mutex<Vec<(SessionId, Stamp, Arc<TreeIndex>)>>,
    summaries: Mutex<HashMap<SessionId, (Stamp, SessionSummary)>>,
}

impl Library {
    pub fn new(home: EviHome) -> Self {
        Self {
            home,
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
        {
            let mut trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(pos) = trees.iter().position(|(i, s, _)| i == id && *s == now) {
                let hit = trees.remove(pos);
                let index = hit.2.clone();
                trees.push(hit);
                return Ok(index);
            }
        }
        let tree = SessionTree::load(id.clone(), files.clone())?;
        let index = Arc::new(TreeIndex::new(tree, catalog.short_id(id))?);
        self.summaries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), (now.clone(), index.summary.clone()));
        let mut trees = self.trees.lock().unwrap_or_else(PoisonError::into_inner);
        trees.retain(|(i, _, _)| i != id);
        if trees.len() >= TREES {
            trees.remove(0);
        }
        trees.push((id.clone(), now, index.clone()));
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
