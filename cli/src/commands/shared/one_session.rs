//! The face of a one-session fetch ([`crate::sync::engine::one_session`]):
//! the id a command was given, and the error when nothing has it.

use crate::command_error::{CommandError, user_error};
use crate::commands::shared::resolve;
use crate::sync::engine::one_session::{self, Wanted, WantedError};
use crate::transcript::Catalog;

/// The session `id` names (see [`one_session::wanted`]), or what is wrong
/// with `id` as the user reads it.
pub fn wanted(catalog: &Catalog, id: &str) -> Result<Wanted, CommandError> {
    one_session::wanted(catalog, id).map_err(|e| match e {
        // The resolver's own error, hints and all.
        WantedError::Ambiguous { .. } => match resolve(catalog, id) {
            Err(e) => e,
            Ok(_) => user_error(e),
        },
        e @ WantedError::NotAnId { .. } => user_error(e),
    })
}

/// A session that is neither on this device nor, under that whole id, on
/// the server.
pub fn not_found(id: &str) -> CommandError {
    user_error(format!("no session `{id}` on this device or on the server")).hinted(
        "the server finds a session by its whole id only (as `evi sessions handoff` prints \
         it); for a prefix, run `evi sync pull` first to fetch every session",
    )
}
