//! Records that arrived whole and failed their checks (age, the MAC, the
//! ids they were served under, the formats of what they hold): "damaged",
//! as one byte flipped on the server's disk makes one, or a server that
//! forges, swaps or replays.
//!
//! # Promises
//!
//! - A damaged record is never applied, not even in part.
//! - It never stops the others: pull applies every other verified record
//!   and moves its cursor past the damaged one only in the same atomic state
//!   save that records it here (`SyncState::damaged`), so it cannot be
//!   passed over and forgotten.
//! - Every later pull fetches it again, alone, by its stream from its seq:
//!   once it opens (a device that has it re-sent it, the server's copy was
//!   mended, a lying proxy went away) it is applied and leaves the list; it
//!   leaves it too when the server no longer holds a record of that seq
//!   (nothing left to heal: a record sent again under a new seq replaced
//!   it).
//! - A transient failure is not damage: a page that does not arrive (a
//!   network cut, a 5xx) fails the pull as before and is retried, with the
//!   cursor unmoved. Only a body that arrived and fails its checks is here.
//! - A wrong key is not damage: pull checks the account's key check value
//!   before it opens anything, and under another key fails without
//!   recording a record here (see [`SyncContext::check_key`]).
//!
//! [`SyncContext::check_key`]: crate::sync::state::context::SyncContext::check_key

use evi_shared::{KeyedId, SessionId};
use serde::{Deserialize, Serialize};

use crate::home::EviHome;
use crate::sync::SyncKeys;
use crate::sync::error::SyncError;
use crate::sync::remote::client::Client;
use crate::sync::remote::records::PulledRecord;
use crate::transcript::Catalog;

/// One record this device refused, as it remembers it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DamagedRecord {
    pub seq: u64,
    /// The keyed stream id it was served under.
    pub stream: KeyedId,
    /// The session that stream belongs to, when a session here (or another
    /// record of it that opened) says so; the server only knows the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// What its check said, for people.
    pub error: String,
}

impl DamagedRecord {
    pub fn new(r: &PulledRecord, e: &SyncError) -> Self {
        let error = match e {
            SyncError::Segment { source, .. } => source.to_string(),
            e => e.to_string(),
        };
        Self {
            seq: r.head.seq,
            stream: r.head.stream.clone(),
            session: None,
            error,
        }
    }
}

impl std::fmt::Display for DamagedRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.session {
            Some(s) => write!(f, "session {s}, record {}", self.seq)?,
            None => write!(
                f,
                "record {} (stream {}, a session not on this device)",
                self.seq, self.stream
            )?,
        }
        write!(f, ": {}", self.error)
    }
}

/// Records `found` in the state's list `list` (replacing what it said of
/// the same seq) and forgets `healed`; the caller saves the state with the
/// cursor. These take the state's parts, not the context, so the state
/// imports nothing that imports it back.
pub(crate) fn note(list: &mut Vec<DamagedRecord>, found: Vec<DamagedRecord>, healed: &[u64]) {
    list.retain(|d| !healed.contains(&d.seq) && !found.iter().any(|f| f.seq == d.seq));
    list.extend(found);
    list.sort_by_key(|d| d.seq);
}

/// Names the session of every damaged record whose stream is a session
/// here (sessions pulled since included).
pub(crate) fn name_sessions(list: &mut [DamagedRecord], home: &EviHome, keys: &SyncKeys) {
    if list.iter().all(|d| d.session.is_some()) {
        return;
    }
    let Ok(catalog) = Catalog::scan(&home.transcripts_dir()) else {
        return;
    };
    let keyed: Vec<(KeyedId, &SessionId)> = catalog
        .sessions
        .keys()
        .map(|s| (keys.session_key(s), s))
        .collect();
    for d in list.iter_mut().filter(|d| d.session.is_none()) {
        d.session = keyed
            .iter()
            .find(|(k, _)| *k == d.stream)
            .map(|(_, s)| s.to_string());
    }
}

/// Fetches each damaged record of `stream` (all streams when `None`) again,
/// alone: `Some(record)` as the server serves it now, `None` when it holds
/// no record of that seq any more.
pub(crate) fn refetch(
    list: &[DamagedRecord],
    client: &Client,
    stream: Option<&KeyedId>,
    framed: bool,
) -> Result<Vec<(u64, Option<PulledRecord>)>, SyncError> {
    let mut out = Vec::new();
    for d in list {
        if stream.is_some_and(|s| *s != d.stream) {
            continue;
        }
        let after = d.seq.saturating_sub(1);
        let page = client.pull_stream(&d.stream, after, framed)?;
        let mut found =
            (page.records.into_iter()).find(|r| r.head.seq == d.seq && r.head.stream == d.stream);
        if found.is_none() {
            // The stream it was served under may have been a lie (a record
            // swapped into another stream): by seq alone, from every stream.
            let page = client.pull(after, framed)?;
            found = page.records.into_iter().find(|r| r.head.seq == d.seq);
        }
        out.push((d.seq, found));
    }
    Ok(out)
}
