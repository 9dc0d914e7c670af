//! The viewer's only write: the pull button fetches the session the page
//! asked for alone, as `evi sync pull --session` and `evi sessions resume`
//! do (everything, for a prefix the server cannot look up), under the home's sync lock, with every guarantee pull gives (it only
//! appends, never outside the eVi home).

use crate::command_error::CommandError;
use crate::commands::shared::sync_error;
use crate::home::EviHome;
use crate::sync::engine::one_session::{self, Wanted};
use crate::sync::engine::pull::{PullOptions, PullReport, pull as sync_pull};
use crate::sync::progress::Quiet;
use crate::sync::state::context::SyncContext;

/// Fetches the session the page asked for alone from the account's
/// server. A session not here that the server has no record of under that
/// whole id is most likely a prefix (typed into the URL): the button then
/// pulls everything, as it says it does, so the prefix can resolve.
pub fn pull(home: &EviHome, wanted: &Wanted) -> Result<PullReport, CommandError> {
    // Waits and retries show on the terminal that runs the viewer.
    crate::sync::notice::set_sink(|msg| eprintln!("evi web: {msg}"));
    let mut sync = SyncContext::open(home).map_err(sync_error)?;
    let r = one_session::fetch(&mut sync, &Quiet, &wanted.id).map_err(sync_error)?;
    if wanted.here || r.records > 0 {
        return Ok(r);
    }
    sync_pull(&mut sync, &Quiet, PullOptions::default()).map_err(sync_error)
}
