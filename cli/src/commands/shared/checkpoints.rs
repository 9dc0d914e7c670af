//! The checkpoint journal a command's `--device` names.

use std::path::PathBuf;

use crate::checkpoints::devices::journal_path;
use crate::command_error::{CommandError, user_error};
use crate::commands::Ctx;

/// The journal `--device` asks for (none: this device's), and its name.
pub fn journal_of(
    ctx: &Ctx,
    device: Option<&str>,
) -> Result<(PathBuf, Option<String>), CommandError> {
    journal_path(&ctx.home.checkpoints_dir(), device)
        .map_err(|e| user_error(e).hinted("`evi sync pull` brings the other devices' checkpoints"))
}
