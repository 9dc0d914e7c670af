//! One branch of a session as readers show it, a page at a time: what
//! `evi sessions show --json` prints and what the web viewer's
//! `/api/sessions/ID` answers, one type for both.
//!
//! A branch is named by any entry on it: the branch shown is root → the
//! newest leaf under that entry, so a fork's switch only needs the id of the
//! child it leads to. Only the lines of the requested page are read (the
//! tree holds where each line is), and with a text limit no message in a
//! page is larger than that: a 200 MB session never has to be held whole.

use evi_shared::Day;
use serde::Serialize;

use super::line::LineFault;
use super::summary::{SessionSummary, rfc3339};
use super::tree::SessionTree;
use crate::message::{Message, ToolCall, one_line};

/// A page of one branch (`sessions show --json`, `GET /api/sessions/ID`).
#[derive(Debug, Clone, Serialize)]
pub struct SessionPage {
    pub session: SessionSummary,
    /// The leaf of the branch shown (null for a session with no entry).
    pub leaf: Option<String>,
    /// The leaf of the active branch (the newest one).
    pub active_leaf: Option<String>,
    /// Entries root → `leaf`.
    pub branch_messages: usize,
    /// Where the conversation starts more than once (separate roots): one
    /// choice per root, else empty.
    pub roots: Vec<ForkChoice>,
    /// Position of the first message of this page on the branch (0-based).
    pub offset: usize,
    pub messages: Vec<MessageView>,
    /// Offset of the next page, null on the last.
    pub next_offset: Option<usize>,
    /// Bytes of a line still being written (not an entry yet).
    pub pending_bytes: u64,
}

/// One entry of a branch, readable.
#[derive(Debug, Clone, Serialize)]
pub struct MessageView {
    /// 1-based position on the branch.
    pub n: usize,
    pub id: String,
    #[serde(rename = "parentId")]
    pub parent_id: Option<String>,
    pub day: Day,
    pub ts: Option<String>,
    /// `user`, `assistant`, `tool`, `system`, `other`, or `invalid` (a line
    /// that is not a JSON object; `text` is then its raw text).
    pub role: String,
    pub text: String,
    /// Size of the whole text in bytes (more than `text` holds when cut).
    pub text_bytes: usize,
    /// `text` or a call's arguments were cut to the page's text limit.
    pub truncated: bool,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Plain-text reasoning (Claude Code's thinking, Codex's reasoning
    /// summaries; absent when there is none). Encrypted reasoning is never
    /// shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    pub fault: Option<LineFault>,
    /// Where the conversation branches after this entry: one choice per
    /// child when there is more than one, else empty.
    pub forks: Vec<ForkChoice>,
}

/// One way a fork can go.
#[derive(Debug, Clone, Serialize)]
pub struct ForkChoice {
    /// The first entry of this way.
    pub entry: String,
    /// The newest leaf that way: the branch the switch opens.
    pub leaf: String,
    /// Entries root → `leaf`.
    pub messages: usize,
    /// The first entry's text, on one line, cut short.
    pub preview: String,
    /// The branch shown goes this way.
    pub current: bool,
    /// The active branch goes this way.
    pub active: bool,
}

/// What the view needs of a tree besides the tree, computed once per tree.
#[derive(Debug)]
pub struct TreeIndex {
    pub tree: SessionTree,
    pub summary: SessionSummary,
    children: Vec<Vec<usize>>,
    newest_leaf: Vec<usize>,
    roots: Vec<usize>,
    active_leaf: Option<usize>,
}

/// Which page of which branch.
#[derive(Debug, Clone, Default)]
pub struct PageRequest<'a> {
    /// Any entry id (or unambiguous prefix) on the wanted branch; `None`:
    /// the active branch.
    pub through: Option<&'a str>,
    pub offset: usize,
    /// At most this many messages (`None`: all).
    pub limit: Option<usize>,
    /// Cut texts and arguments to about this many bytes (`None`: whole).
    pub text_limit: Option<usize>,
}

/// A page that cannot be made from the request.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("session {session} has no entry `{entry}`")]
    NoEntry { session: String, entry: String },
    #[error("`{entry}` matches {count} entries of session {session}")]
    AmbiguousEntry {
        session: String,
        entry: String,
        count: usize,
    },
    #[error("cannot read session {session}: {source}")]
    Io {
        session: String,
        source: std::io::Error,
    },
}

/// Characters of a fork's preview.
const PREVIEW_CHARS: usize = 80;

impl TreeIndex {
    pub fn new(tree: SessionTree, short_id: String) -> std::io::Result<Self> {
        let summary = SessionSummary::of(&tree, short_id)?;
        let children = tree.children();
        let newest_leaf = tree.newest_leaf_under();
        let roots = (0..tree.entries.len())
            .filter(|&i| tree.parent_of(i).is_none())
            .collect();
        let active_leaf = tree.active_leaf();
        Ok(Self {
            tree,
            summary,
            children,
            newest_leaf,
            roots,
            active_leaf,
        })
    }

    fn io(&self, source: std::io::Error) -> ViewError {
        ViewError::Io {
            session: self.tree.id.to_string(),
            source,
        }
    }

    /// The entry an id or unambiguous id prefix names.
    pub fn entry(&self, prefix: &str) -> Result<usize, ViewError> {
        self.tree
            .find_entry(prefix)
            .map_err(|found| match found.len() {
                0 => ViewError::NoEntry {
                    session: self.tree.id.to_string(),
                    entry: prefix.to_owned(),
                },
                count => ViewError::AmbiguousEntry {
                    session: self.tree.id.to_string(),
                    entry: prefix.to_owned(),
                    count,
                },
            })
    }

    /// A page of a branch.
    pub fn page(&self, req: &PageRequest<'_>) -> Result<SessionPage, ViewError> {
        let tree = &self.tree;
        let leaf = match req.through {
            Some(p) => Some(self.newest_leaf[self.entry(p)?]),
            None => self.active_leaf,
        };
        let path = leaf.map(|l| tree.path_to(l)).unwrap_or_default();
        let active = self
            .active_leaf
            .map(|l| tree.path_to(l))
            .unwrap_or_default();
        let mut on = Marks::new(tree.entries.len());
        on.mark(&path, 1);
        on.mark(&active, 2);
        let offset = req.offset.min(path.len());
        let end = req
            .limit
            .map_or(path.len(), |l| offset.saturating_add(l).min(path.len()));
        let mut fetch = tree.fetcher();
        let mut messages = Vec::with_capacity(end - offset);
        for (n, &i) in path.iter().enumerate().take(end).skip(offset) {
            let raw = fetch.fetch(tree.entries[i].at).map_err(|e| self.io(e))?;
            let mut view = self.message(i, n + 1, &raw, req.text_limit);
            if self.children[i].len() > 1 {
                view.forks = self.choices(&self.children[i], &on, &mut fetch)?;
            }
            messages.push(view);
        }
        let roots = if self.roots.len() > 1 {
            self.choices(&self.roots, &on, &mut fetch)?
        } else {
            Vec::new()
        };
        let id = |i: Option<usize>| i.map(|i| tree.entries[i].id.clone());
        Ok(SessionPage {
            session: self.summary.clone(),
            leaf: id(leaf),
            active_leaf: id(self.active_leaf),
            branch_messages: path.len(),
            roots,
            offset,
            messages,
            next_offset: (end < path.len()).then_some(end),
            pending_bytes: tree.pending_bytes,
        })
    }

    /// One entry, whole (its position is that on the branch through it).
    pub fn entry_view(&self, prefix: &str) -> Result<MessageView, ViewError> {
        let i = self.entry(prefix)?;
        let raw = self
            .tree
            .fetcher()
            .fetch(self.tree.entries[i].at)
            .map_err(|e| self.io(e))?;
        Ok(self.message(i, self.tree.path_to(i).len(), &raw, None))
    }

    fn message(&self, i: usize, n: usize, raw: &[u8], text_limit: Option<usize>) -> MessageView {
        let e = &self.tree.entries[i];
        let msg = Message::of(self.tree.agent, raw);
        let text_bytes = msg.text.len();
        let mut truncated = false;
        let mut cut = |s: String| match text_limit {
            Some(limit) if s.len() > limit => {
                truncated = true;
                s[..floor_char_boundary(&s, limit)].to_owned()
            }
            _ => s,
        };
        let text = cut(msg.text);
        let reasoning = msg.reasoning.map(&mut cut);
        let tool_calls = msg
            .tool_calls
            .into_iter()
            .map(|c| ToolCall {
                arguments: cut(c.arguments),
                ..c
            })
            .collect();
        MessageView {
            n,
            id: e.id.clone(),
            parent_id: e.parent.clone(),
            day: e.day,
            ts: e.ts.and_then(rfc3339),
            role: msg.role,
            text,
            text_bytes,
            truncated,
            tool_name: msg.tool_name,
            tool_call_id: msg.tool_call_id,
            tool_calls,
            reasoning,
            fault: msg.fault,
            forks: Vec::new(),
        }
    }

    fn choices(
        &self,
        ways: &[usize],
        on: &Marks,
        fetch: &mut super::lines::LineFetcher<'_>,
    ) -> Result<Vec<ForkChoice>, ViewError> {
        let tree = &self.tree;
        ways.iter()
            .map(|&c| {
                let leaf = self.newest_leaf[c];
                let raw = fetch.fetch(tree.entries[c].at).map_err(|e| self.io(e))?;
                let msg = Message::of(tree.agent, &raw);
                let head = if msg.text.trim().is_empty() {
                    msg.tool_calls
                        .first()
                        .map(|c| format!("→ {}", c.name))
                        .unwrap_or_default()
                } else {
                    msg.text
                };
                Ok(ForkChoice {
                    entry: tree.entries[c].id.clone(),
                    leaf: tree.entries[leaf].id.clone(),
                    messages: tree.path_to(leaf).len(),
                    preview: one_line(&head, PREVIEW_CHARS),
                    current: on.has(c, 1),
                    active: on.has(c, 2),
                })
            })
            .collect()
    }
}

/// Which entries lie on the shown (bit 1) and the active (bit 2) branch.
struct Marks(Vec<u8>);

impl Marks {
    fn new(n: usize) -> Self {
        Self(vec![0; n])
    }
    fn mark(&mut self, path: &[usize], bit: u8) {
        for &i in path {
            self.0[i] |= bit;
        }
    }
    fn has(&self, i: usize, bit: u8) -> bool {
        self.0[i] & bit != 0
    }
}

/// The largest char boundary of `s` at or below `at`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Catalog;

    fn index(lines: &str) -> (tempfile::TempDir, TreeIndex) {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("2026-06-08");
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(day.join("s1.jsonl"), lines).unwrap();
        let catalog = Catalog::scan(dir.path()).unwrap();
        let (id, files) = catalog.sessions.iter().next().unwrap();
        let tree = SessionTree::load(id.clone(), files.clone()).unwrap();
        (dir, TreeIndex::new(tree, "s1".into()).unwrap())
    }

    /// r → a → b (active, newer), and r → c, a fork after the root.
    const FORKED: &str = concat!(
        r#"{"id":"r","parentId":null,"role":"user","content":"root","ts":"2026-06-08T10:00:00Z"}"#,
        "\n",
        r#"{"id":"a","parentId":"r","role":"assistant","content":"way a","ts":"2026-06-08T10:01:00Z"}"#,
        "\n",
        r#"{"id":"c","parentId":"r","role":"assistant","content":"way c","ts":"2026-06-08T10:02:00Z"}"#,
        "\n",
        r#"{"id":"b","parentId":"a","role":"user","content":"after a","ts":"2026-06-08T10:03:00Z"}"#,
        "\n",
    );

    #[test]
    fn active_branch_with_a_switch_at_the_fork() {
        let (_d, ix) = index(FORKED);
        let p = ix.page(&PageRequest::default()).unwrap();
        assert_eq!(p.leaf.as_deref(), Some("b"));
        let ids: Vec<_> = p.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["r", "a", "b"]);
        let forks = &p.messages[0].forks;
        assert_eq!(forks.len(), 2);
        assert_eq!((forks[0].entry.as_str(), forks[0].current), ("a", true));
        assert_eq!(
            (forks[1].entry.as_str(), forks[1].leaf.as_str()),
            ("c", "c")
        );
        assert_eq!(forks[1].preview, "way c");
        assert!(p.messages[1].forks.is_empty());
    }

    #[test]
    fn switching_through_an_entry_shows_its_newest_leaf() {
        let (_d, ix) = index(FORKED);
        let p = ix
            .page(&PageRequest {
                through: Some("c"),
                ..PageRequest::default()
            })
            .unwrap();
        let ids: Vec<_> = p.messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["r", "c"]);
        assert_eq!(p.active_leaf.as_deref(), Some("b"));
        let f = &p.messages[0].forks;
        assert!(f[1].current && !f[1].active && f[0].active && !f[0].current);
        // Through the root: its newest leaf, the active one.
        let p = ix
            .page(&PageRequest {
                through: Some("r"),
                ..PageRequest::default()
            })
            .unwrap();
        assert_eq!(p.leaf.as_deref(), Some("b"));
    }

    #[test]
    fn pages_and_text_limit() {
        let (_d, ix) = index(FORKED);
        let p = ix
            .page(&PageRequest {
                offset: 1,
                limit: Some(1),
                text_limit: Some(3),
                ..PageRequest::default()
            })
            .unwrap();
        assert_eq!(p.messages.len(), 1);
        assert_eq!(p.messages[0].n, 2);
        assert_eq!(p.messages[0].text, "way");
        assert!(p.messages[0].truncated);
        assert_eq!(p.messages[0].text_bytes, 5);
        assert_eq!(p.next_offset, Some(2));
        assert!(matches!(
            ix.page(&PageRequest {
                through: Some("zz"),
                ..PageRequest::default()
            }),
            Err(ViewError::NoEntry { .. })
        ));
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(floor_char_boundary("aé", 2), 1);
        assert_eq!(floor_char_boundary("ab", 9), 2);
    }
}
