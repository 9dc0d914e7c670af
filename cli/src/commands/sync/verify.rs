//! `evi sync verify [--repair]`: the read-all check of what the server
//! holds, and the mending of what it finds.

use std::io::Write;

use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{finish, open_sync, print_json, progress, stdout, sync_error_in};
use crate::sync::engine::verify::{Problem, Repaired, VerifyReport, repair, verify};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Send what the server lacks and apply what this device lacks (by
    /// entry id, as push and pull do), then check again.
    #[arg(long)]
    pub repair: bool,
    /// Print JSON (stable, documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
}

/// `--json`: the first check, and with `--repair` what it did and the
/// check after.
#[derive(Debug, Serialize)]
struct Output {
    #[serde(flatten)]
    checked: VerifyReport,
    repair: Option<RepairOutput>,
}

#[derive(Debug, Serialize)]
struct RepairOutput {
    #[serde(flatten)]
    done: Repaired,
    after: VerifyReport,
}

pub fn cmd_sync_verify(ctx: &Ctx, args: VerifyArgs) -> CommandResult {
    let mut sync = open_sync(ctx)?;
    let progress = progress(args.json);
    let checked = verify(&sync, progress.as_ref()).map_err(|e| sync_error_in(ctx, e))?;
    let mut out = Output {
        checked,
        repair: None,
    };
    if !args.json {
        print_report(&out.checked)?;
    }
    if args.repair && out.checked.problems.iter().any(Problem::repairable) {
        let done = repair(&mut sync, &out.checked, progress.as_ref())
            .map_err(|e| sync_error_in(ctx, e))?;
        if !args.json {
            print_repaired(&done)?;
        }
        let after = verify(&sync, progress.as_ref()).map_err(|e| sync_error_in(ctx, e))?;
        if !args.json {
            print_report(&after)?;
        }
        out.repair = Some(RepairOutput { done, after });
    }
    if args.json {
        print_json(&out)?;
    }
    let last = out.repair.as_ref().map_or(&out.checked, |r| &r.after);
    let n = last.problems.len();
    if n == 0 {
        return Ok(());
    }
    let err = user_error(format!(
        "{n} problem{} found",
        if n == 1 { "" } else { "s" }
    ));
    let damaged = last
        .problems
        .iter()
        .any(|p| matches!(p, Problem::BadRecord { .. } | Problem::BadBlob { .. }));
    let elsewhere = last
        .problems
        .iter()
        .any(|p| matches!(p, Problem::BlobNotOnServer { here: false, .. }));
    let mut err = err;
    if !args.repair && last.problems.iter().any(Problem::repairable) {
        err = err.hinted(
            "`evi sync verify --repair` sends what the server lacks and applies what this \
             device lacks",
        );
    }
    if damaged {
        err = err.hinted(
            "a record or blob the server holds is damaged or was altered; what this device holds \
             is intact. `evi sync verify --repair` on a device that has the record's session \
             sends its entries again (a damaged blob cannot be replaced that way)",
        );
    }
    if elsewhere {
        err = err.hinted(
            "a blob no device sent is not here either: `evi sync push` on the device whose \
             journal names it sends it",
        );
    }
    Err(err)
}

fn print_report(r: &VerifyReport) -> CommandResult {
    let mb = |b: u64| b as f64 / 1e6;
    let mut out = stdout();
    writeln!(
        out,
        "checked {} records ({:.1} MB) and {} blobs ({:.1} MB) in {:.1} s: {:.1} MB/s",
        r.records,
        mb(r.record_bytes),
        r.blobs,
        mb(r.blob_bytes),
        r.seconds,
        r.mb_per_s
    )?;
    writeln!(
        out,
        "here: {} entries and {} journal lines, held against the server",
        r.local_entries, r.journal_lines
    )?;
    if r.tombstones > 0 {
        writeln!(
            out,
            "forgotten: {} forgets and undos on the server, each verified",
            r.tombstones
        )?;
    }
    for a in &r.agents {
        if !a.enabled {
            writeln!(
                out,
                "{}: {} records on the server, not turned on here (`[agents] {} = true` in \
                 config.toml syncs them)",
                a.agent.name(),
                a.records,
                a.agent.name()
            )?;
            continue;
        }
        writeln!(
            out,
            "{}: {} sessions, {} entries here; {} records on the server, {} verified",
            a.agent.name(),
            a.sessions,
            a.entries,
            a.records,
            a.verified
        )?;
    }
    // Not synced yet is not wrong: said, and no part of the exit status.
    for p in &r.pending {
        writeln!(out, "pending: {p}")?;
    }
    for p in &r.problems {
        writeln!(out, "problem: {p}")?;
    }
    if r.problems.is_empty() {
        writeln!(out, "no problems found")?;
    }
    finish(out)
}

fn print_repaired(done: &Repaired) -> CommandResult {
    let mut out = stdout();
    if let Some(p) = &done.pushed {
        writeln!(
            out,
            "repair: sent {} entries, {} journal lines, {} blobs",
            p.entries, p.journal_lines, p.blobs_uploaded
        )?;
        for f in &p.failed {
            eprintln!("error: not sent: {f}");
        }
    }
    if let Some(p) = &done.pulled {
        writeln!(
            out,
            "repair: applied {} entries, {} journal lines, {} blobs",
            p.entries, p.journal_lines, p.blobs
        )?;
    }
    finish(out)
}
