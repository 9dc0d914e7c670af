//! `evi checkpoints …`: eVi's checkpoints beyond undoing the latest writes
//! (`evi rewind` does that).

mod forget;
mod restore;

use clap::Subcommand;

use super::Ctx;
use crate::command_error::CommandResult;

pub use forget::ForgetArgs;
pub use restore::RestoreArgs;

#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// Write one checkpoint's saved bytes to a file (this device's, or
    /// another device's after a pull).
    Restore(RestoreArgs),
    /// Take checkpoints of this device back, here, on the server and on
    /// every other device (their saved file contents too).
    Forget(ForgetArgs),
}

pub fn run(ctx: &Ctx, cmd: CheckpointsCommand) -> CommandResult {
    match cmd {
        CheckpointsCommand::Restore(a) => restore::cmd_checkpoints_restore(ctx, a),
        CheckpointsCommand::Forget(a) => forget::cmd_checkpoints_forget(ctx, a),
    }
}
