//! `sync/forget.json`: what this device knows of forgotten sessions.
//!
//! Per session: whether it is forgotten or was brought back, when the
//! user asked, the tombstone's keyed entry id, and whether this device
//! still has to send it (a forget made offline goes up with the next
//! push). Beside that, the entry ids of every tombstone applied here, so
//! one pulled again (`pull --all`, a session fetched alone) changes
//! nothing; and what each of them says (stream, action, time, device),
//! which no key changes: a key rotation seals every tombstone again under
//! new ids, and a forget the user undid before it must not apply again
//! when it comes back under its new id, after its undo or before it.
//! Replaced atomically, like the sync state.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::tombstone::{Action, Tombstone};
use crate::source::StreamName;

const FILE: &str = "forget.json";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionMark {
    pub action: Action,
    /// When the user asked, in ms since the epoch.
    pub at_ms: i64,
    /// The device that asked (the server's id).
    pub device: String,
    /// The tombstone's keyed entry id.
    pub tombstone: String,
    /// Made here and not acknowledged by the server yet.
    #[serde(default)]
    pub unsent: bool,
}

impl SessionMark {
    pub fn forgotten(&self) -> bool {
        self.action == Action::Forget
    }
}

/// What a tombstone says, whatever ids it is stored under.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Known {
    pub stream: String,
    pub action: Action,
    pub at_ms: i64,
    pub device: String,
}

impl From<&Tombstone> for Known {
    fn from(t: &Tombstone) -> Self {
        Self {
            stream: t.stream.clone(),
            action: t.action,
            at_ms: t.at_ms,
            device: t.device.clone(),
        }
    }
}

impl Known {
    pub fn tombstone(&self) -> Tombstone {
        Tombstone {
            action: self.action,
            stream: self.stream.clone(),
            at_ms: self.at_ms,
            device: self.device.clone(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub sessions: BTreeMap<String, SessionMark>,
    #[serde(default)]
    pub applied: BTreeSet<String>,
    /// Every tombstone applied or made here, by what it says.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub known: BTreeSet<Known>,
    /// Streams whose undo this device applied before it kept [`Self::known`]
    /// (a ledger from an older evi), by the undo's time: when a key
    /// changed, a forget of the stream asked before that time is the one
    /// the undo took back.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub undone_before: BTreeMap<String, i64>,
}

impl Ledger {
    fn path(sync_dir: &Path) -> PathBuf {
        sync_dir.join(FILE)
    }

    /// The ledger, or an empty one when there is none yet.
    pub fn load(sync_dir: &Path) -> io::Result<Self> {
        crate::sync::state::json_file::load(&Self::path(sync_dir))
    }

    pub fn save(&self, sync_dir: &Path) -> io::Result<()> {
        crate::sync::state::json_file::save(&Self::path(sync_dir), self)
    }

    /// Whether stream `stream` (an eVi session's id, another agent's stream
    /// name) is forgotten here: by its own tombstone, or by its session's
    /// (a subagent transcript's, see [`StreamName::covers`]).
    pub fn is_forgotten(&self, stream: &str) -> bool {
        let marked = |s: &str| self.sessions.get(s).is_some_and(SessionMark::forgotten);
        marked(stream)
            || StreamName::parse(stream)
                .filter(|s| s.sub.is_some())
                .is_some_and(|s| marked(&s.session_stream().to_string()))
    }

    /// Whether `stream` is forgotten here by a tombstone of its own.
    pub fn is_forgotten_alone(&self, stream: &str) -> bool {
        self.sessions
            .get(stream)
            .is_some_and(SessionMark::forgotten)
    }

    /// Whether `t` was applied or made here already, under whatever ids.
    pub fn knows(&self, t: &Tombstone) -> bool {
        let mark_says = self
            .sessions
            .get(&t.stream)
            .is_some_and(|m| m.action == t.action && m.at_ms == t.at_ms && m.device == t.device);
        let undone = t.action == Action::Forget
            && (self.undone_before.get(&t.stream)).is_some_and(|u| t.at_ms <= *u);
        mark_says || undone || self.known.contains(&Known::from(t))
    }

    /// Notes `t` as applied or made here.
    pub fn remember(&mut self, t: &Tombstone) {
        self.known.insert(Known::from(t));
    }

    /// Every tombstone this device knows the content of: those it keeps,
    /// and each session's newest (a ledger from an older evi kept only
    /// that).
    pub fn contents(&self) -> BTreeSet<Known> {
        let mut all = self.known.clone();
        for (stream, m) in &self.sessions {
            all.insert(Known {
                stream: stream.clone(),
                action: m.action,
                at_ms: m.at_ms,
                device: m.device.clone(),
            });
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(action: Action, at_ms: i64) -> Tombstone {
        Tombstone {
            action,
            stream: "s".into(),
            at_ms,
            device: "d".into(),
        }
    }

    #[test]
    fn a_tombstone_is_known_by_what_it_says() {
        let mut l = Ledger::default();
        let (forget, undo) = (t(Action::Forget, 10), t(Action::Undo, 20));
        assert!(!l.knows(&forget));
        l.remember(&forget);
        l.remember(&undo);
        assert!(l.knows(&forget) && l.knows(&undo));
        assert!(!l.knows(&t(Action::Forget, 30)), "a later forget is new");
        // A ledger from before: only the undo's mark, and the time it
        // guards.
        let mut old = Ledger::default();
        old.sessions.insert(
            "s".into(),
            SessionMark {
                action: Action::Undo,
                at_ms: 20,
                device: "d".into(),
                tombstone: String::new(),
                unsent: false,
            },
        );
        assert!(old.knows(&undo) && !old.knows(&forget));
        old.undone_before.insert("s".into(), 20);
        assert!(old.knows(&forget));
        assert!(!old.knows(&t(Action::Forget, 30)));
        assert_eq!(old.contents().len(), 1);
    }

    #[test]
    fn a_forgotten_session_takes_its_subagents_streams() {
        let mut l = Ledger::default();
        let mark = |action| SessionMark {
            action,
            at_ms: 1,
            device: "d".into(),
            tombstone: String::new(),
            unsent: false,
        };
        l.sessions
            .insert("claude-code/s".into(), mark(Action::Forget));
        assert!(l.is_forgotten("claude-code/s/agent-1"));
        assert!(!l.is_forgotten_alone("claude-code/s/agent-1"));
        assert!(!l.is_forgotten("claude-code/t/agent-1"));
        l.sessions
            .insert("claude-code/s".into(), mark(Action::Undo));
        assert!(!l.is_forgotten("claude-code/s/agent-1"));
        l.sessions
            .insert("claude-code/s/agent-2".into(), mark(Action::Forget));
        assert!(l.is_forgotten("claude-code/s/agent-2"));
        assert!(!l.is_forgotten("claude-code/s"));
    }
}
