//! One session fetched alone, for `evi sessions resume`, `evi sync pull
//! --session` and the viewer's pull button.
//!
//! The server finds a session by its keyed stream id, which this device
//! computes from the session's whole id: a prefix of an id that is not on
//! this device cannot be looked up there. A prefix that matches a local
//! session stands for that session's id; anything else is taken as a whole
//! id.

use std::str::FromStr;

use evi_shared::SessionId;

use crate::sync::engine::pull::{PullOptions, PullReport, pull, pull_session};
use crate::sync::error::SyncError;
use crate::sync::progress::Progress;
use crate::sync::state::context::SyncContext;
use crate::transcript::Catalog;

/// The session a command asks for.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub id: SessionId,
    /// Whether this device holds it already.
    pub here: bool,
}

/// Why an id names no session to fetch.
#[derive(Debug, thiserror::Error)]
pub enum WantedError {
    /// Not on this device, and not a whole id either.
    #[error("`{id}` is not a session id: {reason}")]
    NotAnId { id: String, reason: String },
    /// A prefix of more than one session here.
    #[error("{}", ambiguous(.prefix, .matches))]
    Ambiguous {
        prefix: String,
        matches: Vec<SessionId>,
    },
}

/// `` `PREFIX` matches N sessions: `` and the first 20 of them, one a line.
fn ambiguous(prefix: &str, matches: &[SessionId]) -> String {
    let mut msg = format!("`{prefix}` matches {} sessions:", matches.len());
    for id in matches.iter().take(20) {
        msg.push_str(&format!("\n  {id}"));
    }
    msg
}

/// The session `id` names: the local one it matches (a whole id or an
/// unambiguous prefix), else `id` itself taken as a whole id.
pub fn wanted(catalog: &Catalog, id: &str) -> Result<Wanted, WantedError> {
    match catalog.matching(id).as_slice() {
        [one] => Ok(Wanted {
            id: (*one).clone(),
            here: true,
        }),
        [] => SessionId::from_str(id)
            .map(|id| Wanted { id, here: false })
            .map_err(|e| WantedError::NotAnId {
                id: id.to_owned(),
                reason: e.to_string(),
            }),
        many => Err(WantedError::Ambiguous {
            prefix: id.to_owned(),
            matches: many.iter().map(|s| (*s).clone()).collect(),
        }),
    }
}

/// Fetches `session`'s records alone and applies them (a server too old to
/// answer for one stream gets a whole pull instead).
pub fn fetch(
    sync: &mut SyncContext,
    progress: &dyn Progress,
    session: &SessionId,
) -> Result<PullReport, SyncError> {
    match pull_session(sync, progress, session)? {
        Some(r) => Ok(r),
        None => pull(sync, progress, PullOptions::default()),
    }
}
