//! `evi sync push`, `pull` and `status`.

use std::io::Write;

use clap::Args;
use serde::Serialize;

use super::Ctx;
use crate::command_error::CommandResult;
use crate::command_error::user_error;
use crate::commands::shared::one_session;
use crate::commands::shared::{
    client_error, finish, fmt_minute, open_sync, print_json, progress, scan, stdout, sync_error,
    sync_error_in, warn,
};
use crate::sync::engine::pull::{PullOptions, pull};
use crate::sync::engine::push::{changed_files, push};
use crate::sync::state::damaged::DamagedRecord;
use crate::transcript::line::parse_ts;

#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Print JSON (stable, documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// Print JSON (stable, documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Fetch every record again, this device's own too, and add what is
    /// missing here (after restoring an old backup); nothing is applied twice.
    #[arg(long)]
    pub all: bool,
    /// Fetch this one session alone (its whole id, or a prefix of one on
    /// this device), not the whole history; the next full pull fetches the
    /// rest.
    #[arg(long, value_name = "ID", conflicts_with = "all")]
    pub session: Option<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON (stable, documented in docs/json.md; times in RFC 3339).
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_sync_push(ctx: &Ctx, args: JsonArgs) -> CommandResult {
    let mut sync = open_sync(ctx)?;
    let r = push(&mut sync, progress(args.json).as_ref()).map_err(|e| sync_error_in(ctx, e))?;
    drop(sync);
    refresh_search(ctx);
    if args.json {
        print_json(&r)?;
    } else {
        println!(
            "pushed {} entries in {} sessions, {} journal lines, {} blobs ({} new records, {} already on the server)",
            r.entries,
            r.sessions,
            r.journal_lines,
            r.blobs_uploaded,
            r.segments_stored,
            r.segments_dropped
        );
        if r.redacted_lines > 0 {
            println!(
                "redacted {} secrets in {} lines before sealing ({}); the files here are unchanged",
                r.redactions.values().sum::<u64>(),
                r.redacted_lines,
                by_rule(&r.redactions)
            );
        }
        for note in r.forget.notes() {
            eprintln!("note: {note}");
        }
        for note in r.checkpoint_forget.notes() {
            eprintln!("note: {note}");
        }
        for note in &r.agent_notes {
            eprintln!("note: {note}");
        }
    }
    if r.failed.is_empty() {
        return Ok(());
    }
    for f in &r.failed {
        eprintln!("error: not pushed: {f}");
    }
    Err(user_error(format!(
        "{} items could not be pushed; everything else was",
        r.failed.len()
    ))
    .hinted("fix what is named above and run `evi sync push` again"))
}

/// `rule n, rule n` in rule order.
fn by_rule(counts: &std::collections::BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(rule, n)| format!("{rule} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn cmd_sync_pull(ctx: &Ctx, args: PullArgs) -> CommandResult {
    if let Some(id) = &args.session {
        return pull_one_session(ctx, id, args.json);
    }
    let mut sync = open_sync(ctx)?;
    let opts = PullOptions { all: args.all };
    let r =
        pull(&mut sync, progress(args.json).as_ref(), opts).map_err(|e| sync_error_in(ctx, e))?;
    drop(sync);
    refresh_search(ctx);
    if args.json {
        print_json(&r)?;
        return damaged_error(&r.damaged);
    }
    println!(
        "pulled {} entries in {} sessions, {} blobs; {} sessions diverged (both branches kept)",
        r.entries, r.sessions, r.blobs, r.diverged
    );
    if let Some(why) = &r.deferred {
        eprintln!("note: {why}; the next pull or push applies them once they can be");
    }
    for note in &r.agent_notes {
        eprintln!("note: {note}");
    }
    for note in r.forget.notes() {
        eprintln!("note: {note}");
    }
    for note in r.checkpoint_forget.notes() {
        eprintln!("note: {note}");
    }
    for (agent, n) in &r.agents_not_enabled {
        eprintln!(
            "note: {n} {} sessions passed over: turn them on with `[agents] {} = true` in \
             config.toml, then run `evi sync pull --all`",
            agent.name(),
            agent.name()
        );
    }
    if let Some(back) = &r.server_went_back {
        eprintln!("warning: {back}");
    }
    damaged_error(&r.damaged)
}

/// Fails naming each record pull refused as damaged (it applied the rest).
fn damaged_error(damaged: &[DamagedRecord]) -> CommandResult {
    if damaged.is_empty() {
        return Ok(());
    }
    for d in damaged {
        eprintln!("damaged: {d}");
    }
    Err(user_error(format!(
        "{} records from the server do not verify and were not applied; everything else was",
        damaged.len()
    ))
    .hinted(
        "run `evi sync verify --repair` on a device that has those sessions (or push from it); \
         every pull here fetches them again until they verify",
    ))
}

/// Brings the search index up to date with what a push or pull saw, if
/// there is one (a search builds it). Never fails the command: the sync
/// lock is already released, and a failure is a warning (`crate::search`).
fn refresh_search(ctx: &Ctx) {
    if !crate::search::index_path(&ctx.home).exists() {
        return;
    }
    let Ok(catalog) = crate::transcript::Catalog::scan(&ctx.home.transcripts_dir()) else {
        return;
    };
    if let Some(w) = crate::search::refresh_after_sync(&ctx.home, &catalog) {
        warn(&w);
    }
}

/// `evi sync pull --session ID`.
fn pull_one_session(ctx: &Ctx, id: &str, json: bool) -> CommandResult {
    let wanted = one_session::wanted(&scan(ctx)?, id)?;
    let mut sync = open_sync(ctx)?;
    let r = crate::sync::engine::one_session::fetch(&mut sync, progress(json).as_ref(), &wanted.id)
        .map_err(sync_error)?;
    drop(sync);
    refresh_search(ctx);
    if let Some(back) = &r.server_went_back {
        eprintln!("warning: {back}");
    }
    if !wanted.here && r.records == 0 && r.damaged.is_empty() {
        return Err(one_session::not_found(id));
    }
    if json {
        print_json(&r)?;
        return damaged_error(&r.damaged);
    }
    println!(
        "pulled {} entries of session {}; {} diverged (both branches kept)",
        r.entries,
        wanted.id,
        if r.diverged > 0 { "it" } else { "none" }
    );
    if let Some(why) = &r.deferred {
        eprintln!("note: {why}; the next pull or push applies them once they can be");
    }
    damaged_error(&r.damaged)
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
    /// Records on the server that other devices pushed and this one has not
    /// pulled yet (None when the server is unreachable; from a server older
    /// than `pending_for_device`, every record after the cursor).
    remote_pending_records: Option<u64>,
    cursor: u64,
    server_error: Option<String>,
    /// Pulled entries kept in sync/pending/ (eVi's) and
    /// sync/pending-agents/ (other agents') until they can be appended.
    waiting: Vec<crate::sync::engine::waiting::WaitingGroup>,
    /// Blobs named by a journal here that the server did not have when last
    /// asked; every pull asks again, every push sends those it has.
    missing_blobs: u64,
    /// Set when the server holds less than this device saw it hold before:
    /// what went back, for people.
    server_went_back: Option<String>,
    /// Records pull refused as damaged and passed: every pull fetches them
    /// again until they verify.
    damaged: Vec<DamagedRecord>,
    /// The `evi sync watch` running for this home, if one runs.
    watcher: Option<crate::sync::engine::watch::presence::WatchInfo>,
    /// Other agents' folders: found or not, turned on or not, sessions held.
    agents: Vec<AgentFolder>,
    /// Whether push redacts secrets (`[sync] redact`), and the rules on.
    redact: bool,
    redact_rules: Vec<String>,
    /// Secrets this device's pushes replaced, by rule, and the lines that
    /// held them (`sync/redactions.json`; `evi sessions show --redactions
    /// ID` says where).
    redactions: std::collections::BTreeMap<String, u64>,
    redacted_lines: u64,
}

/// One other agent's folder, for `evi sync status`.
#[derive(Debug, Serialize)]
struct AgentFolder {
    agent: crate::source::Agent,
    folder: String,
    found: bool,
    enabled: bool,
    sessions: usize,
}

fn agent_folders(ctx: &Ctx) -> Vec<AgentFolder> {
    use crate::source::{Agent, is_enabled, source};
    Agent::others()
        .filter_map(|agent| {
            let src = source(agent, &ctx.config)?;
            Some(AgentFolder {
                agent,
                folder: src.root.display().to_string(),
                found: src.root.is_dir(),
                enabled: is_enabled(agent, &ctx.config),
                sessions: src
                    .sessions()
                    .iter()
                    .filter(|f| f.stream.sub.is_none())
                    .count(),
            })
        })
        .collect()
}

pub fn cmd_sync_status(ctx: &Ctx, args: StatusArgs) -> CommandResult {
    let sync = open_sync(ctx)?;
    let changed = changed_files(&sync).map_err(sync_error)?;
    let waiting = crate::sync::engine::waiting::waiting(&sync).map_err(sync_error)?;
    let remote = sync.client.status_after(sync.state.cursor);
    let went_back = remote
        .as_ref()
        .ok()
        .and_then(|s| sync.state.high_water.went_back(s))
        .map(|w| w.to_string());
    let (pending, server_error) = match remote {
        // An older server does not count per device: every record after the
        // cursor, this device's own too.
        Ok(s) => (
            Some(
                s.pending_for_device
                    .unwrap_or_else(|| s.newest_seq.saturating_sub(sync.state.cursor)),
            ),
            None,
        ),
        Err(e) => (None, Some(client_error(e).message)),
    };
    let record = crate::sync::engine::redact::record::RedactionRecord::load(&sync.paths.dir)
        .unwrap_or_default();
    let s = Status {
        redact: sync.redactor.is_some(),
        redact_rules: sync
            .redactor
            .as_ref()
            .map(|r| r.rule_ids().map(str::to_owned).collect())
            .unwrap_or_default(),
        redactions: record.by_rule(),
        redacted_lines: record.lines(),
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
        waiting,
        missing_blobs: sync.state.missing_blobs.len() as u64,
        server_went_back: went_back,
        damaged: sync.state.damaged.clone(),
        watcher: crate::sync::engine::watch::presence::running(&sync.paths),
        agents: agent_folders(ctx),
    };
    if let Some(back) = &s.server_went_back {
        eprintln!("warning: {back}");
    }
    if args.json {
        return print_json(&s);
    }
    // Local time, as `evi sessions list` shows it (`--json` keeps RFC 3339).
    let when = |t: &Option<String>| match t.as_deref() {
        None => "never".to_owned(),
        Some(t) => parse_ts(t).map_or_else(|| t.to_owned(), fmt_minute),
    };
    let mut out = stdout();
    writeln!(out, "server:    {}", s.server)?;
    writeln!(out, "user:      {}", s.user)?;
    writeln!(out, "device:    {}", s.device)?;
    writeln!(
        out,
        "key:       {}",
        s.key_fingerprint.clone().unwrap_or_default()
    )?;
    writeln!(out, "last push: {}", when(&s.last_push))?;
    writeln!(out, "last pull: {}", when(&s.last_pull))?;
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
    if !s.redact {
        writeln!(
            out,
            "redaction: off (`[sync] redact = false` in config.toml): secrets go as they are"
        )?;
    } else if s.redacted_lines > 0 {
        writeln!(
            out,
            "redacted:  {} secrets in {} lines ({})",
            s.redactions.values().sum::<u64>(),
            s.redacted_lines,
            by_rule(&s.redactions)
        )?;
    }
    for d in &s.damaged {
        writeln!(out, "damaged:   {d}")?;
    }
    match &s.watcher {
        None => writeln!(
            out,
            "watcher:   not running (`evi sync watch` keeps this home synced)"
        )?,
        Some(w) => {
            let mut line = format!(
                "watcher:   running (pid {}) since {}, last synced {}",
                w.pid,
                when(&Some(w.started.clone())),
                when(&w.last_sync)
            );
            if let Some(away) = &w.server_away_since {
                line.push_str(&format!(
                    "; the server has not answered since {}",
                    when(&Some(away.clone()))
                ));
            }
            if let Some(since) = &w.waiting_for_login_since {
                line.push_str(&format!(
                    "; the server refuses this device's token since {}: run `evi sync login`",
                    when(&Some(since.clone()))
                ));
            }
            if let Some(since) = &w.waiting_for_join_since {
                line.push_str(&format!(
                    "; the account's key was rotated (told since {}): pair this device again \
                     (`evi sync pair` on a device that has the new key, `evi sync join` here)",
                    when(&Some(since.clone()))
                ));
            }
            writeln!(out, "{line}")?;
        }
    }
    for w in &s.waiting {
        let who = w.agent.title();
        let why = match (w.reason, w.agent) {
            ("partial_line", _) => format!("its file ends in a line {who} is still writing"),
            ("abandoned", crate::source::Agent::Evi) => {
                "its file ends in a line eVi left unfinished over 24 hours ago; the next sync \
                 appends them with ids to the next day's file"
                    .to_owned()
            }
            ("abandoned", _) => format!(
                "its file ends in a line {who} left unfinished over 24 hours ago; the next sync \
                 ends that line where it stopped and appends them after it"
            ),
            ("blob_missing", _) => "the server does not have the line's blob yet".to_owned(),
            ("not_placed", _) if w.session.matches('/').count() > 1 => {
                "its session's file is not here yet (a subagent transcript goes beside it)"
                    .to_owned()
            }
            ("not_placed", _) => {
                "no line naming its project (`cwd`) has arrived yet, so its folder here is not \
                 known"
                    .to_owned()
            }
            ("agent_off", _) => format!(
                "{who} is turned off here (`[agents] {} = true` in config.toml turns it on)",
                w.agent.name()
            ),
            _ => "the next pull or push applies them".to_owned(),
        };
        match &w.day {
            Some(day) => writeln!(
                out,
                "waiting:   {} ({} entries of {day}): {why}",
                w.session, w.entries
            )?,
            None => writeln!(
                out,
                "waiting:   {} ({} entries): {why}",
                w.session, w.entries
            )?,
        }
    }
    for a in &s.agents {
        let name = a.agent.name();
        let line = match (a.found, a.enabled) {
            (false, true) => format!("turned on, but {} does not exist", a.folder),
            (false, false) => continue,
            (true, true) => format!("{} sessions in {} (synced)", a.sessions, a.folder),
            (true, false) => format!(
                "{} sessions in {} (not synced: `[agents] {name} = true` in config.toml turns \
                 them on)",
                a.sessions, a.folder
            ),
        };
        writeln!(out, "agent:     {name}: {line}")?;
    }
    finish(out)
}
