//! `evi sync push`, `pull` and `status`.

use std::io::{IsTerminal, Write};

use clap::Args;
use serde::Serialize;

use super::{Ctx, client_error, open, sync_error};
use crate::command_error::CommandResult;
use crate::commands::{finish, stdout};
use crate::sync::progress::{Bar, Progress, Quiet};
use crate::sync::pull::pull;
use crate::sync::push::{changed_files, push};

#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Print JSON (stable, documented in README.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

fn progress(json: bool) -> Box<dyn Progress> {
    if json || !std::io::stderr().is_terminal() {
        Box::new(Quiet)
    } else {
        Box::new(Bar::default())
    }
}

fn print_json(value: &impl Serialize) -> CommandResult {
    let mut out = stdout();
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    finish(out)
}

pub fn cmd_sync_push(ctx: &Ctx, args: JsonArgs) -> CommandResult {
    let mut sync = open(ctx)?;
    let r = push(&mut sync, progress(args.json).as_ref()).map_err(sync_error)?;
    if args.json {
        return print_json(&r);
    }
    println!(
        "pushed {} entries in {} sessions, {} journal lines, {} blobs ({} new records, {} already on the server)",
        r.entries,
        r.sessions,
        r.journal_lines,
        r.blobs_uploaded,
        r.segments_stored,
        r.segments_dropped
    );
    Ok(())
}

pub fn cmd_sync_pull(ctx: &Ctx, args: JsonArgs) -> CommandResult {
    let mut sync = open(ctx)?;
    let r = pull(&mut sync, progress(args.json).as_ref()).map_err(sync_error)?;
    if args.json {
        return print_json(&r);
    }
    println!(
        "pulled {} entries in {} sessions, {} blobs; {} sessions diverged (both branches kept)",
        r.entries, r.sessions, r.blobs, r.diverged
    );
    if let Some(why) = &r.deferred {
        eprintln!("note: stopped early: {why}; run `evi sync pull` again once eVi has finished it");
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct Status {
    server: String,
    user: String,
    device: String,
    key_fingerprint: Option<String>,
    last_push: Option<String>,
    last_pull: Option<String>,
    /// Transcript files changed since the last push.
    local_changed_files: u64,
    /// Records on the server not pulled yet (None when the server is unreachable).
    remote_pending_records: Option<u64>,
    cursor: u64,
    server_error: Option<String>,
    /// Blobs named by a journal here that the server did not have when last
    /// asked; every pull asks again, every push sends those it has.
    missing_blobs: u64,
}

pub fn cmd_sync_status(ctx: &Ctx, args: StatusArgs) -> CommandResult {
    let sync = open(ctx)?;
    let changed = changed_files(&sync).map_err(sync_error)?;
    let remote = sync.client.status();
    let (pending, server_error) = match remote {
        Ok(s) => (Some(s.newest_seq.saturating_sub(sync.state.cursor)), None),
        Err(e) => (None, Some(client_error(e).message)),
    };
    let s = Status {
        server: sync.account.server.clone(),
        user: sync.account.user.clone(),
        device: sync.account.device.clone(),
        key_fingerprint: Some(sync.identity.fingerprint()),
        last_push: sync.state.last_push.clone(),
        last_pull: sync.state.last_pull.clone(),
        local_changed_files: changed,
        remote_pending_records: pending,
        cursor: sync.state.cursor,
        server_error,
        missing_blobs: sync.state.missing_blobs.len() as u64,
    };
    if args.json {
        return print_json(&s);
    }
    let never = || "never".to_owned();
    let mut out = stdout();
    writeln!(out, "server:    {}", s.server)?;
    writeln!(out, "user:      {}", s.user)?;
    writeln!(out, "device:    {}", s.device)?;
    writeln!(
        out,
        "key:       {}",
        s.key_fingerprint.clone().unwrap_or_default()
    )?;
    writeln!(
        out,
        "last push: {}",
        s.last_push.clone().unwrap_or_else(never)
    )?;
    writeln!(
        out,
        "last pull: {}",
        s.last_pull.clone().unwrap_or_else(never)
    )?;
    writeln!(
        out,
        "to push:   {} changed transcript files",
        s.local_changed_files
    )?;
    match (s.remote_pending_records, &s.server_error) {
        (Some(n), _) => writeln!(out, "to pull:   {n} records")?,
        (None, Some(e)) => writeln!(out, "to pull:   unknown ({e})")?,
        _ => {}
    }
    writeln!(out, "blobs missing: {}", s.missing_blobs)?;
    finish(out)
}
