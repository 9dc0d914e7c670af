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

use crate::command_error::{CommandError, user_error};
use crate::commands::shared::{resolve, sync_error};
use crate::sync::engine::pull::{PullOptions, PullReport, pull, pull_session};
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

/// The session `id` names: the local one it matches (a whole id or an
/// unambiguous prefix), else `id` itself taken as a whole id.
pub fn wanted(catalog: &Catalog, id: &str) -> Result<Wanted, CommandError> {
    match catalog.matching(id).as_slice() {
        [one] => Ok(Wanted {
            id: (*one).clone(),
            here: true,
        }),
        [] => SessionId::from_str(id)
            .map(|id| Wanted { id, here: false })
            .map_err(|e| user_error(format!("`{id}` is not a session id: {e}"))),
        _ => resolve(catalog, id).map(|(id, _)| Wanted { id, here: true }),
    }
}

/// Fetches `session`'s records alone and applies them (a server too old to
/// answer for one stream gets a whole pull instead).
pub fn fetch(
    sync: &mut SyncContext,
    progress: &dyn Progress,
    session: &SessionId,
) -> Result<PullReport, CommandError> {
    match pull_session(sync, progress, session).map_err(sync_error)? {
        Some(r) => Ok(r),
        None => pull(sync, progress, PullOptions::default()).map_err(sync_error),
    }
}

/// A session that is neither on this device nor, under that whole id, on
/// the server.
pub fn not_found(id: &str) -> CommandError {
    user_error(format!("no session `{id}` on this device or on the server")).hinted(
        "the server finds a session by its whole id only (as `evi sessions handoff` prints \
         it); for a prefix, run `evi sync pull` first to fetch every session",
    )
}
