//! `evi checkpoints …`: eVi's checkpoints beyond undoing the latest writes
//! (`evi rewind` does that).

mod restore;

use std::path::PathBuf;

use clap::Subcommand;

use super::Ctx;
use crate::checkpoints::devices::journal_path;
use crate::command_error::{CommandError, CommandResult, user_error};

pub use restore::RestoreArgs;

#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// Write one checkpoint's saved bytes to a file (this device's, or
    /// another device's after a pull).
    Restore(RestoreArgs),
}

pub fn run(ctx: &Ctx, cmd: CheckpointsCommand) -> CommandResult {
    match cmd {
        CheckpointsCommand::Restore(a) => restore::cmd_checkpoints_restore(ctx, a),
    }
}

/// The journal `--device` asks for (none: this device's), and its name.
pub fn journal_of(
    ctx: &Ctx,
    device: Option<&str>,
) -> Result<(PathBuf, Option<String>), CommandError> {
    journal_path(&ctx.home.checkpoints_dir(), device)
        .map_err(|e| user_error(e).hinted("`evi sync pull` brings the other devices' checkpoints"))
}
