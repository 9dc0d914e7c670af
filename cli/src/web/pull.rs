//! The viewer's only write: the pull button runs the same pull as
//! `evi sync pull` (and as `evi sessions resume` does for a session that is
//! not here), under the home's sync lock, with every guarantee pull gives
//! (it only appends, never outside the eVi home).

use crate::command_error::CommandError;
use crate::commands::sync::sync_error;
use crate::home::EviHome;
use crate::sync::context::SyncContext;
use crate::sync::progress::Quiet;
use crate::sync::pull::{PullOptions, PullReport, pull as sync_pull};

/// Pulls everything new from the account's server.
pub fn pull(home: &EviHome) -> Result<PullReport, CommandError> {
    // Waits and retries show on the terminal that runs the viewer.
    crate::sync::notice::set_sink(|msg| eprintln!("evi web: {msg}"));
    let mut sync = SyncContext::open(home).map_err(sync_error)?;
    sync_pull(&mut sync, &Quiet, PullOptions::default()).map_err(sync_error)
}
