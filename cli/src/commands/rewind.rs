//! `evi rewind`: undo eVi's latest writes from the checkpoint journal, or
//! list the checkpoints (this device's, or another device's as pulled). An
//! undo asks first (`confirm`: on a terminal, or `--yes`), naming the
//! writes; `--list` and `--dry-run` do not.

use std::io::Write;
use std::path::Path;

use chrono::{Local, TimeZone};
use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::checkpoints::journal::{Journal, Unreadable};
use crate::checkpoints::rewind::{Outcome, Report, RewindError, Target, Undone, rewind};
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{confirm, finish, journal_of, stdout, warn};

#[derive(Debug, Args)]
pub struct RewindArgs {
    /// Undo every write with this seq or a later one, newest first (none or
    /// 0: only the latest write).
    #[arg(conflicts_with = "list")]
    pub seq: Option<u64>,
    /// List the recent checkpoints, newest first, instead of undoing.
    #[arg(short, long)]
    pub list: bool,
    /// With --list: another device's journal as pulled here, by its device
    /// name or journal folder (`evi sync devices` names them).
    #[arg(long, requires = "list", value_name = "NAME")]
    pub device: Option<String>,
    /// With --list: at most this many checkpoints (0: all).
    #[arg(long, default_value_t = 20, requires = "list")]
    pub limit: usize,
    /// With --list: print JSON (stable, documented in docs/json.md).
    #[arg(long, requires = "list")]
    pub json: bool,
    /// Print what would be undone and change nothing.
    #[arg(long, conflicts_with = "list")]
    pub dry_run: bool,
    /// Do not ask first (needed without a terminal: scripts).
    #[arg(long, short = 'y', conflicts_with = "list")]
    pub yes: bool,
}

pub fn cmd_rewind(ctx: &Ctx, args: RewindArgs) -> CommandResult {
    if args.list {
        return list(ctx, &args);
    }
    let target = match args.seq {
        None | Some(0) => Target::Latest,
        Some(seq) => Target::From(seq),
    };
    let checkpoints = ctx.home.checkpoints_dir();
    if args.dry_run {
        eprintln!("dry run: nothing is changed");
    } else if !args.yes && !confirm_rewind(&checkpoints, target)? {
        eprintln!("nothing undone");
        return Ok(());
    }
    let mut out = stdout();
    let mut printed = Ok(());
    let result = rewind(&checkpoints, target, args.dry_run, |u| {
        if printed.is_ok() {
            printed = writeln!(out, "{}", outcome_line(u)).and_then(|()| out.flush());
        }
    });
    printed?;
    finish(out)?;
    let report = result.map_err(rewind_error)?;
    let journal = checkpoints.join("journal.jsonl");
    for u in &report.unreadable {
        warn(&unreadable_text(&journal, u));
    }
    summarise(&report, args.dry_run)
}

/// Whether to undo what `target` names: asked with the writes a dry run
/// finds (see `confirm`). Nothing to undo, or a journal the dry run
/// refuses, is not asked about: the rewind itself says so, changing nothing.
fn confirm_rewind(checkpoints: &Path, target: Target) -> Result<bool, CommandError> {
    let Ok(report) = rewind(checkpoints, target, true, |_| {}) else {
        return Ok(true);
    };
    let paths: Vec<&str> = (report.undone.iter())
        .filter(|u| !matches!(u.outcome, Outcome::Failed(_)))
        .map(|u| u.checkpoint.path.as_str())
        .collect();
    let shown = 3;
    let list = match paths.as_slice() {
        [] => return Ok(true),
        [one] => format!("the write to {one}"),
        all if all.len() <= shown => format!("{} writes, to {}", all.len(), all.join(", ")),
        all => format!(
            "{} writes, to {} and {} more",
            all.len(),
            all[..shown].join(", "),
            all.len() - shown
        ),
    };
    let what = format!(
        "this undoes {list}: each file gets back the bytes it had before (one eVi created is \
         deleted), and the journal forgets {}",
        if paths.len() == 1 { "it" } else { "them" }
    );
    confirm(false, &what, "Undo?", "undo anyway")
}

/// `✓ restored — PATH`, one line per write.
fn outcome_line(u: &Undone) -> String {
    let path = &u.checkpoint.path;
    match &u.outcome {
        Outcome::Restored { .. } => format!("✓ restored — {path}"),
        Outcome::Deleted => format!("✓ deleted (was newly created) — {path}"),
        Outcome::AlreadyGone => format!("✓ already gone (was newly created) — {path}"),
        Outcome::WouldRestore => format!("would restore — {path}"),
        Outcome::WouldDelete => format!("would delete (was newly created) — {path}"),
        Outcome::Failed(e) => format!("✗ could not restore ({e}) — {path}"),
    }
}

fn summarise(report: &Report, dry_run: bool) -> CommandResult {
    let n = report.undone.len();
    let failed = report.failed();
    let writes = if n == 1 { "write" } else { "writes" };
    if dry_run {
        eprintln!(
            "would undo {} of {n} {writes}; the journal holds {} checkpoints",
            n - failed,
            report.left
        );
    } else {
        eprintln!(
            "undid {} of {n} {writes}; {} checkpoints left in the journal",
            n - failed,
            report.left
        );
    }
    if failed == 0 {
        return Ok(());
    }
    let e = user_error(format!(
        "{failed} write{} could not be undone",
        if failed == 1 { "" } else { "s" }
    ));
    let kept = report.kept();
    Err(if dry_run || kept == 0 {
        e
    } else {
        e.hinted(format!(
            "{kept} of them stay{} in the journal: fix the cause (`evi sync pull` brings blobs \
             pushed elsewhere) and run `evi rewind` again",
            if kept == 1 { "s" } else { "" }
        ))
    })
}

fn rewind_error(e: RewindError) -> CommandError {
    let hint = match &e {
        RewindError::Pending(_) => Some(
            "wait for eVi to finish the write; if eVi is not running, that line was left by a \
             crash: remove it from the journal",
        ),
        RewindError::NoSuchSeq { .. } => Some("`evi rewind --list` shows the checkpoints"),
        RewindError::Trim(_) => Some(
            "the files were put back, but the journal still lists those writes: \
             `evi rewind --list` shows them, and rewinding them again writes the same bytes",
        ),
        _ => None,
    };
    let err = user_error(&e);
    match hint {
        Some(h) => err.hinted(h),
        None => err,
    }
}

fn unreadable_text(journal: &Path, u: &Unreadable) -> String {
    format!(
        "{}:{}: not a checkpoint ({}); left as it is",
        journal.display(),
        u.line,
        u.why
    )
}

/// One checkpoint as `--list --json` prints it.
#[derive(Debug, Serialize)]
struct Listed<'a> {
    seq: u64,
    /// RFC 3339 in UTC, or null when the line's `ts` is not a time.
    ts: Option<String>,
    path: &'a str,
    op: &'a str,
    blob: Option<&'a str>,
    size: Option<u64>,
    /// Whether the checkpoint's blob is on this device.
    blob_here: bool,
    restorable: bool,
    /// Why not, when it is not.
    not_restorable: Option<&'static str>,
    /// Its line in the journal file.
    line: usize,
}

#[derive(Debug, Serialize)]
struct Listing<'a> {
    journal: String,
    /// The pulled journal's name, null for this device's.
    device: Option<&'a str>,
    /// Checkpoints in the journal.
    total: usize,
    /// Newest first.
    checkpoints: Vec<Listed<'a>>,
    unreadable_lines: &'a [Unreadable],
    pending_bytes: u64,
}

fn list(ctx: &Ctx, args: &RewindArgs) -> CommandResult {
    let checkpoints = ctx.home.checkpoints_dir();
    let (path, device) = journal_of(ctx, args.device.as_deref())?;
    let journal = Journal::read(&path)
        .map_err(|e| user_error(format!("cannot read {}: {e}", path.display())))?;
    for u in &journal.unreadable {
        warn(&unreadable_text(&path, u));
    }
    let blobs = checkpoints.join("blobs");
    let take = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    let rows: Vec<Listed> = journal
        .checkpoints
        .iter()
        .rev()
        .take(take)
        .map(|c| {
            let blob_here = c.blob.as_ref().is_some_and(|b| blobs.join(b).is_file());
            let why = c.not_restorable(blob_here);
            Listed {
                seq: c.seq,
                ts: c.ts_ms.and_then(crate::transcript::summary::rfc3339),
                path: &c.path,
                op: c.op.as_str(),
                blob: c.blob.as_deref(),
                size: c.size,
                blob_here,
                restorable: why.is_none(),
                not_restorable: why,
                line: c.line,
            }
        })
        .collect();
    let mut out = stdout();
    if args.json {
        let listing = Listing {
            journal: path.display().to_string(),
            device: device.as_deref(),
            total: journal.checkpoints.len(),
            checkpoints: rows,
            unreadable_lines: &journal.unreadable,
            pending_bytes: journal.pending_bytes,
        };
        serde_json::to_writer_pretty(&mut out, &listing).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return finish(out);
    }
    if let Some(d) = &device {
        eprintln!("checkpoints of {d} (pulled; the paths are that device's)");
    }
    if rows.is_empty() {
        eprintln!("no checkpoints in {}", path.display());
    }
    let today = Local::now().date_naive();
    for (r, c) in rows.iter().zip(journal.checkpoints.iter().rev()) {
        let when = c
            .ts_ms
            .map_or_else(|| "?".to_owned(), |ms| clock(ms, today));
        let note = r
            .not_restorable
            .map(|why| format!("  (not restorable: {why})"))
            .unwrap_or_default();
        writeln!(out, "{:>6} {when:>8} {:<6} {}{note}", r.seq, r.op, r.path)?;
    }
    if rows.len() < journal.checkpoints.len() {
        eprintln!(
            "({} older checkpoints not shown: --limit 0 lists all)",
            journal.checkpoints.len() - rows.len()
        );
    }
    finish(out)
}

/// A checkpoint's time as eVi shows it: `21:40:11` today, with the date on
/// other days.
fn clock(ms: i64, today: chrono::NaiveDate) -> String {
    match Local.timestamp_millis_opt(ms).single() {
        Some(t) if t.date_naive() == today => t.format("%H:%M:%S").to_string(),
        Some(t) => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => "?".to_owned(),
    }
}
