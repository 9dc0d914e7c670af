//! `evi checkpoints forget SEQ…` (and `--older-than AGE`, `--dry-run`,
//! `--yes`, `--json`): takes checkpoints of this device's journal back, here
//! and on every device and the server (see
//! [`crate::sync::engine::checkpoint_forget`] for what that promises). On a
//! home not set up for sync, only here. It asks first (`confirm`: on a
//! terminal, or `--yes`), a dry run does not.

use std::io::Write;
use std::time::SystemTime;

use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::checkpoints::forget::{Forgotten, Pick};
use crate::command_error::{CommandResult, usage_error, user_error};
use crate::commands::sessions::forget::parse_age;
use crate::commands::shared::{confirm, finish, open_sync, stdout, sync_error, warn};
use crate::sync::progress::Quiet;

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// Seqs of this device's checkpoints to forget (`evi rewind --list`
    /// shows them).
    pub seqs: Vec<u64>,
    /// Forget every checkpoint written longer ago than AGE too (`90d`,
    /// `12w`, `48h`).
    #[arg(long, value_name = "AGE")]
    pub older_than: Option<String>,
    /// Say what would be forgotten, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask first (needed without a terminal: scripts).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Outcome {
    dry_run: bool,
    #[serde(flatten)]
    forgotten: Forgotten,
    /// Whether the server (and so every other device) was told; when not,
    /// the next `evi sync push` tells it. False on a home without sync.
    sent: bool,
}

pub fn cmd_checkpoints_forget(ctx: &Ctx, args: ForgetArgs) -> CommandResult {
    if args.seqs.is_empty() && args.older_than.is_none() {
        return Err(usage_error(
            "name the checkpoints to forget by seq (or --older-than AGE)",
        ));
    }
    let before_ms = match &args.older_than {
        Some(age) => {
            let cutoff = SystemTime::now()
                .checked_sub(parse_age(age)?)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let ms = cutoff
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            Some(ms)
        }
        None => None,
    };
    if !args.dry_run {
        let mut which: Vec<String> = Vec::new();
        if !args.seqs.is_empty() {
            let seqs: Vec<String> = args.seqs.iter().map(u64::to_string).collect();
            which.push(format!("checkpoints {}", seqs.join(", ")));
        }
        if let Some(age) = &args.older_than {
            which.push(format!("every checkpoint older than {age}"));
        }
        let what = format!(
            "this forgets {} of this device's journal here, on the server and on every device \
             that syncs, with the file contents they saved: `evi rewind` can no longer undo \
             those writes",
            which.join(" and ")
        );
        if !confirm(args.yes, &what, "Forget?", "forget anyway")? {
            eprintln!("nothing forgotten");
            return Ok(());
        }
    }
    let pick = Pick {
        seqs: args.seqs.clone(),
        before_ms,
    };
    let synced = crate::sync::state::SyncPaths::new(&ctx.home)
        .state()
        .is_file();
    let (forgotten, sent) = if synced {
        let mut sync = open_sync(ctx)?;
        let f = crate::sync::engine::checkpoint_forget::forget_here(&mut sync, &pick, args.dry_run)
            .map_err(sync_error)?;
        let sent = if args.dry_run || f.lines.is_empty() {
            false
        } else {
            // The forget first (push sends it before anything), then the
            // lines kept from the same records.
            match crate::sync::engine::push::push(&mut sync, &Quiet) {
                Ok(r) => {
                    for f in &r.failed {
                        warn(&format!("not pushed: {f}"));
                    }
                    true
                }
                Err(e) => {
                    warn(&format!(
                        "the server was not told yet ({e}): the next `evi sync push` tells it"
                    ));
                    false
                }
            }
        };
        (f, sent)
    } else {
        let f = crate::checkpoints::forget::forget(
            &ctx.home.checkpoints_dir(),
            &pick,
            args.dry_run,
            |_| Ok(()),
        )
        .map_err(|e| user_error(e.to_string()))?;
        (f, false)
    };
    print(&args, forgotten, sent, synced)
}

fn print(args: &ForgetArgs, forgotten: Forgotten, sent: bool, synced: bool) -> CommandResult {
    let mut out = stdout();
    if args.json {
        let o = Outcome {
            dry_run: args.dry_run,
            forgotten,
            sent,
        };
        serde_json::to_writer_pretty(&mut out, &o).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return finish(out);
    }
    let verb = if args.dry_run {
        "would forget"
    } else {
        "forgot"
    };
    if forgotten.lines.is_empty() {
        writeln!(out, "no checkpoint to forget")?;
        return finish(out);
    }
    for l in &forgotten.lines {
        let ts = l.ts.as_ref().map(|t| t.to_string()).unwrap_or_default();
        writeln!(
            out,
            "{verb} checkpoint {} ({} {}) {}",
            l.seq,
            l.op,
            l.path,
            ts.trim_matches('"')
        )?;
    }
    let blobs = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    writeln!(
        out,
        "  {blobs} {} saved file contents no other checkpoint here names",
        forgotten.blobs.len()
    )?;
    if !args.dry_run {
        let told = match (synced, sent) {
            (false, _) => "this home does not sync: forgotten here only",
            (true, true) => "the server and your other devices were told",
            (true, false) => "the server is told by the next `evi sync push`",
        };
        writeln!(out, "  {told}")?;
    }
    finish(out)
}
