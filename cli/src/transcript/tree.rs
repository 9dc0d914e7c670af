//! A session as a tree of entries, built in one streaming pass that keeps only
//! each entry's metadata (ids, time, role, where its line is), never content.
//!
//! The active branch runs from the root to the newest leaf: newest by the
//! latest `ts` on its path, ties broken by id. Every other leaf is another
//! branch, named by where it forks from the active one.

use std::collections::HashMap;
use std::io;
use std::ops::ControlFlow;

use evi_shared::{Day, SessionId};

use super::agent_line::AgentLine;
use super::catalog::SessionFile;
use super::entry_id::IdChain;
use super::line::{LineFault, Role, parse_head};
use super::lines::{LineAt, LineFetcher, walk};
use crate::message::outline::Outline;
use crate::message::{Message, Reading};
use crate::source::paths::PathMap;
use crate::source::{Agent, AgentFile};

/// One entry's place in the tree, without its content.
#[derive(Debug, Clone)]
pub struct EntryMeta {
    pub id: String,
    pub parent: Option<String>,
    pub day: Day,
    pub at: LineAt,
    pub ts: Option<i64>,
    pub role: Role,
    pub fault: Option<LineFault>,
}

/// Another branch than the active one.
#[derive(Debug, Clone)]
pub struct Branch {
    /// Index of its leaf.
    pub leaf: usize,
    /// Index of the last entry it shares with the active branch (`None`: it
    /// shares nothing, a separate root).
    pub fork: Option<usize>,
    /// Entries after the fork point.
    pub len: usize,
}

/// A line of the session that is not a message: a title (see
/// [`super::title`]) or a git state (see [`super::git_state`]).
#[derive(Debug, Clone)]
pub struct TitleMeta {
    pub id: String,
    pub ts: Option<i64>,
    pub at: LineAt,
}

/// A whole session tree.
#[derive(Debug)]
pub struct SessionTree {
    pub id: SessionId,
    /// Whose session it is: how its lines read.
    pub agent: Agent,
    /// Its project as it is on this device (other agents' sessions).
    pub project: Option<String>,
    pub files: Vec<SessionFile>,
    /// In reading order, duplicates of an id dropped (first one kept).
    /// Title and git state lines are not entries of the tree: they are in
    /// `titles` and `git_states`.
    pub entries: Vec<EntryMeta>,
    pub titles: Vec<TitleMeta>,
    pub git_states: Vec<TitleMeta>,
    /// Parent index of each entry (`None` for roots and orphans).
    parents: Vec<Option<usize>>,
    pub pending_bytes: u64,
}

impl SessionTree {
    /// Reads a session's files once.
    pub fn load(id: SessionId, files: Vec<SessionFile>) -> io::Result<Self> {
        let mut chain = IdChain::default();
        let mut entries = Vec::new();
        let mut titles = Vec::new();
        let mut git_states = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let end = walk(&files, |at, raw| {
            let head = parse_head(raw);
            // Placed all the same: the chain reads every line as sync does.
            let placed = chain.place(raw, head.ids);
            if head.title {
                titles.push(TitleMeta {
                    id: placed.id,
                    ts: head.ts,
                    at,
                });
            } else if head.git_state {
                git_states.push(TitleMeta {
                    id: placed.id,
                    ts: head.ts,
                    at,
                });
            } else if !index.contains_key(&placed.id) {
                index.insert(placed.id.clone(), entries.len());
                entries.push(EntryMeta {
                    id: placed.id,
                    parent: placed.parent,
                    day: files[at.file].day,
                    at,
                    ts: head.ts,
                    role: head.role,
                    fault: head.fault,
                });
            }
            ControlFlow::Continue(())
        })?;
        let parents = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let p = e.parent.as_ref().and_then(|p| index.get(p).copied());
                p.filter(|&p| p != i)
            })
            .collect();
        let mut tree = Self {
            id,
            agent: Agent::Evi,
            project: None,
            files,
            entries,
            titles,
            git_states,
            parents,
            pending_bytes: end.pending_bytes,
        };
        tree.break_cycles();
        Ok(tree)
    }

    /// Reads another agent's session file once. Its ids are sync's (taken
    /// from the line as every device agrees on it, `map` undone); its
    /// entries are the lines that read as messages ([`Message::read`]),
    /// each shown under its nearest ancestor that is one, so the agent's
    /// bookkeeping lines neither show nor break a branch. Each line is read
    /// once, for what the tree keeps ([`AgentLine`]); messages are built
    /// only for the lines a reader shows.
    pub fn load_agent(file: &AgentFile, map: &PathMap) -> io::Result<Self> {
        let agent = file.stream.agent;
        let meta = std::fs::metadata(&file.path)?;
        let files = vec![SessionFile {
            day: crate::source::agent_day(),
            path: file.path.clone(),
            len: meta.len(),
            mtime: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
        }];
        let mut chain = IdChain::default();
        let mut entries = Vec::new();
        let mut titles = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        // Lines that are no message: their parent, to show their children
        // under.
        let mut hidden: HashMap<String, Option<String>> = HashMap::new();
        let mut project = None;
        // Where each entry is shown: its parent, unless the line says
        // otherwise (a compaction boundary).
        let mut shown: Vec<Option<String>> = Vec::new();
        let end = walk(&files, |at, raw| {
            let canon = agent.canonical(raw, map);
            let line = AgentLine::read(agent, raw, &canon, map, project.is_none());
            let placed = chain.place(&canon, line.ids);
            if project.is_none() {
                project = line.project;
            }
            match line.outline {
                Outline::Title => titles.push(TitleMeta {
                    id: placed.id,
                    ts: None,
                    at,
                }),
                Outline::Hidden => {
                    hidden.entry(placed.id).or_insert(placed.parent);
                }
                Outline::Message {
                    role,
                    ts,
                    fault,
                    shown_parent,
                } => {
                    if !index.contains_key(&placed.id) {
                        index.insert(placed.id.clone(), entries.len());
                        shown.push(shown_parent.or_else(|| placed.parent.clone()));
                        entries.push(EntryMeta {
                            id: placed.id,
                            parent: placed.parent,
                            day: files[at.file].day,
                            at,
                            ts,
                            role,
                            fault,
                        });
                    }
                }
            }
            ControlFlow::Continue(())
        })?;
        let project = project
            .filter(|p| !p.is_empty())
            .or_else(|| agent.project_of_file(&file.path));
        // Each entry under its nearest ancestor that is one (a chain of
        // hidden lines is followed at most as far as there are of them).
        let parents = shown
            .into_iter()
            .enumerate()
            .map(|(i, mut at)| {
                for _ in 0..=hidden.len() {
                    match at.as_ref().map(|p| (index.get(p), hidden.get(p))) {
                        Some((Some(&p), _)) => return Some(p).filter(|&p| p != i),
                        Some((None, Some(up))) => at = up.clone(),
                        _ => return None,
                    }
                }
                None
            })
            .collect();
        let mut tree = Self {
            id: file.stream.session.clone(),
            agent,
            project,
            files,
            entries,
            titles,
            git_states: Vec::new(),
            parents,
            pending_bytes: end.pending_bytes,
        };
        tree.break_cycles();
        Ok(tree)
    }

    /// Explicit ids come from files anyone could edit: a parent loop would
    /// hang every walk up the tree, so the first entry of a loop becomes a root.
    fn break_cycles(&mut self) {
        let n = self.entries.len();
        let mut state = vec![0u8; n]; // 0 new, 1 on current path, 2 done
        for start in 0..n {
            let mut path = Vec::new();
            let mut cur = Some(start);
            while let Some(i) = cur {
                match state[i] {
                    2 => break,
                    1 => {
                        self.parents[i] = None;
                        break;
                    }
                    _ => {
                        state[i] = 1;
                        path.push(i);
                        cur = self.parents[i];
                    }
                }
            }
            for i in path {
                state[i] = 2;
            }
        }
    }

    pub fn parent_of(&self, i: usize) -> Option<usize> {
        self.parents[i]
    }

    /// Indices of entries that no entry names as parent.
    pub fn leaves(&self) -> Vec<usize> {
        let mut has_child = vec![false; self.entries.len()];
        for p in self.parents.iter().flatten() {
            has_child[*p] = true;
        }
        (0..self.entries.len()).filter(|&i| !has_child[i]).collect()
    }

    /// Latest `ts` on the path root→i, for every i (parents may come later in
    /// the file than children, so this resolves recursively with a memo).
    fn path_ts(&self) -> Vec<Option<i64>> {
        let n = self.entries.len();
        let mut memo: Vec<Option<Option<i64>>> = vec![None; n];
        for start in 0..n {
            let mut stack = vec![start];
            while let Some(&i) = stack.last() {
                if memo[i].is_some() {
                    stack.pop();
                    continue;
                }
                match self.parents[i] {
                    Some(p) if memo[p].is_none() => stack.push(p),
                    p => {
                        let up = p.and_then(|p| memo[p].flatten());
                        memo[i] = Some(up.max(self.entries[i].ts));
                        stack.pop();
                    }
                }
            }
        }
        memo.into_iter().map(Option::flatten).collect()
    }

    /// The newest leaf, if the session has any entry.
    pub fn active_leaf(&self) -> Option<usize> {
        let ts = self.path_ts();
        self.leaves()
            .into_iter()
            .max_by(|&a, &b| (ts[a], &self.entries[a].id).cmp(&(ts[b], &self.entries[b].id)))
    }

    /// Children of every entry, in reading order.
    pub fn children(&self) -> Vec<Vec<usize>> {
        let mut children = vec![Vec::new(); self.entries.len()];
        for (i, p) in self.parents.iter().enumerate() {
            if let Some(p) = p {
                children[*p].push(i);
            }
        }
        children
    }

    /// For every entry, the newest leaf below it (itself when it is a leaf),
    /// by the same order as [`Self::active_leaf`]: the newest leaf under a
    /// root that holds the active leaf is the active leaf. A reader that
    /// switches to another branch at a fork shows the newest conversation
    /// that goes that way.
    pub fn newest_leaf_under(&self) -> Vec<usize> {
        let ts = self.path_ts();
        let key = |i: usize| (ts[i], &self.entries[i].id);
        let children = self.children();
        let mut best: Vec<usize> = (0..self.entries.len()).collect();
        // Post-order from every root, without recursion (trees can be
        // 100,000 entries deep).
        let roots = (0..self.entries.len()).filter(|&i| self.parents[i].is_none());
        for root in roots {
            let mut stack = vec![(root, false)];
            while let Some((i, done)) = stack.pop() {
                if !done {
                    stack.push((i, true));
                    stack.extend(children[i].iter().map(|&c| (c, false)));
                    continue;
                }
                if let Some(b) = children[i]
                    .iter()
                    .map(|&c| best[c])
                    .max_by(|&a, &b| key(a).cmp(&key(b)))
                {
                    best[i] = b;
                }
            }
        }
        best
    }

    /// Root→`i`, as indices.
    pub fn path_to(&self, i: usize) -> Vec<usize> {
        let mut path = vec![i];
        let mut cur = i;
        while let Some(p) = self.parents[cur] {
            path.push(p);
            cur = p;
        }
        path.reverse();
        path
    }

    /// The active branch, root to newest leaf.
    pub fn active_branch(&self) -> Vec<usize> {
        self.active_leaf()
            .map(|l| self.path_to(l))
            .unwrap_or_default()
    }

    /// Every branch other than the active one, with its fork point.
    pub fn other_branches(&self, active: &[usize]) -> Vec<Branch> {
        let mut on_active = vec![false; self.entries.len()];
        for &i in active {
            on_active[i] = true;
        }
        let active_leaf = active.last().copied();
        self.leaves()
            .into_iter()
            .filter(|&l| Some(l) != active_leaf)
            .map(|leaf| {
                let mut len = 0;
                let mut cur = Some(leaf);
                while let Some(i) = cur.filter(|&i| !on_active[i]) {
                    len += 1;
                    cur = self.parents[i];
                }
                Branch {
                    leaf,
                    fork: cur,
                    len,
                }
            })
            .collect()
    }

    /// The newest title (by `ts`, then id), if the session has one.
    /// Other agents' titles carry no time: theirs is the last one written.
    pub fn latest_title(&self) -> io::Result<Option<String>> {
        let newest = match self.agent {
            Agent::Evi => self
                .titles
                .iter()
                .max_by(|a, b| (a.ts, &a.id).cmp(&(b.ts, &b.id))),
            _ => self.titles.last(),
        };
        let Some(t) = newest else {
            return Ok(None);
        };
        let raw = self.fetcher().fetch(t.at)?;
        Ok(match self.agent {
            Agent::Evi => super::title::text_of(&raw),
            agent => match Message::read(agent, &raw) {
                Reading::Title(t) => Some(t),
                _ => None,
            },
        })
    }

    /// The newest git state recorded by a handoff (by `ts`, then id), with
    /// its time (epoch milliseconds).
    pub fn latest_git_state(
        &self,
    ) -> io::Result<Option<(Option<i64>, super::git_state::GitState)>> {
        let Some(g) = self
            .git_states
            .iter()
            .max_by(|a, b| (a.ts, &a.id).cmp(&(b.ts, &b.id)))
        else {
            return Ok(None);
        };
        let raw = self.fetcher().fetch(g.at)?;
        Ok(super::git_state::state_of(&raw).map(|s| (g.ts, s)))
    }

    /// A reader that fetches entry lines by position.
    pub fn fetcher(&self) -> LineFetcher<'_> {
        LineFetcher::new(&self.files)
    }

    /// Finds an entry by id or unambiguous id prefix.
    pub fn find_entry(&self, prefix: &str) -> Result<usize, Vec<usize>> {
        if let Some(i) = self.entries.iter().position(|e| e.id == prefix) {
            return Ok(i);
        }
        let found: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].id.starts_with(prefix))
            .collect();
        match found.as_slice() {
            [one] => Ok(*one),
            _ => Err(found),
        }
    }
}
