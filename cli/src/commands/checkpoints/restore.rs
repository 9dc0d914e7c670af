//! `evi checkpoints restore SEQ [--device NAME] [--to PATH] [--force]`:
//! one checkpoint's saved bytes, written to a file.
//!
//! The path in another device's journal is that device's: it is written
//! only when asked for with `--force`; `--to` writes anywhere else. An
//! existing file is never replaced without `--force`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::Ctx;
use crate::checkpoints::restore::recorded_path;
use crate::checkpoints::{Journal, Overwrite, RestoreError, restore_checkpoint};
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{finish, journal_of, stdout};

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The checkpoint's seq (`evi rewind --list` shows them).
    pub seq: u64,
    /// From another device's journal as pulled here, by its device name or
    /// journal folder.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Write the bytes to this path instead of the one in the journal.
    #[arg(long, value_name = "PATH")]
    pub to: Option<PathBuf>,
    /// Replace an existing file; with --device and no --to, write the path
    /// the other device recorded.
    #[arg(long)]
    pub force: bool,
}

pub fn cmd_checkpoints_restore(ctx: &Ctx, args: RestoreArgs) -> CommandResult {
    let checkpoints = ctx.home.checkpoints_dir();
    let (path, device) = journal_of(ctx, args.device.as_deref())?;
    let whose = device.as_deref().unwrap_or("this device");
    let journal = Journal::read(&path)
        .map_err(|e| user_error(format!("cannot read {}: {e}", path.display())))?;
    let same: Vec<_> = journal
        .checkpoints
        .iter()
        .filter(|c| c.seq == args.seq)
        .collect();
    let list = match &device {
        Some(d) => format!("`evi rewind --list --device {d}`"),
        None => "`evi rewind --list`".to_owned(),
    };
    let Some(c) = same.last() else {
        return Err(
            user_error(format!("{whose}'s journal has no checkpoint {}", args.seq))
                .hinted(format!("{list} shows them")),
        );
    };
    if same.len() > 1 {
        eprintln!(
            "note: seq {} appears {} times in {whose}'s journal (a rewind there reused the \
             number): writing the newest",
            args.seq,
            same.len()
        );
    }
    let dest = match &args.to {
        Some(to) => to.clone(),
        None => {
            let recorded = recorded_path(&c.path)
                .map_err(|e| user_error(format!("cannot write `{}`: {e}", c.path)))?;
            if device.is_some() && !args.force {
                return Err(user_error(format!(
                    "checkpoint {} is of {} on {whose}, a path of that device",
                    c.seq, c.path
                ))
                .hinted("pass --to PATH to write it here, or --force to write that same path on this machine"));
            }
            recorded
        }
    };
    let overwrite = if args.force {
        Overwrite::Replace
    } else {
        Overwrite::Never
    };
    let bytes = restore_checkpoint(&checkpoints, c, &dest, overwrite).map_err(|e| {
        let err = user_error(format!(
            "cannot restore checkpoint {} to {}: {e}",
            c.seq,
            dest.display()
        ));
        match e {
            RestoreError::NoFolder(_) if args.to.is_none() => {
                err.hinted("pass --to PATH for a place that exists on this machine")
            }
            RestoreError::MissingBlob(_) => {
                err.hinted("`evi sync pull` brings the blobs other devices pushed")
            }
            _ => err,
        }
    })?;
    let mut out = stdout();
    writeln!(
        out,
        "✓ restored — {} ({bytes} bytes, checkpoint {} of {whose})",
        dest.display(),
        c.seq
    )?;
    finish(out)
}
