//! `evi sessions forget ID…` (and `--older-than AGE`, `--agent NAME`,
//! `--undo`, `--dry-run`, `--yes`, `--json`): takes sessions back from every
//! device (see [`crate::sync::engine::forget`] for what that promises and
//! what it cannot). A forget asks first (`confirm`: on a terminal, or
//! `--yes`); an undo and a dry run do not.

use std::io::Write;
use std::time::{Duration, SystemTime};

use clap::Args;
use serde::Serialize;

use super::Ctx;
use super::forget_targets::{self as targets, Target};
use crate::command_error::{CommandError, CommandResult, usage_error, user_error};
use crate::commands::shared::{confirm, finish, open_sync, scan, stdout, sync_error, warn};
use crate::source::Agent;
use crate::sync::engine::forget::Applied;
use crate::sync::engine::forget::local::{forget_here, send_outbox, undo_here};
use crate::sync::progress::Quiet;

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// Sessions to forget (ids or unambiguous prefixes; another agent's
    /// as its id or `claude-code/<id>`, `codex/<id>`; with --undo, ids of
    /// sessions in the trash).
    pub ids: Vec<String>,
    /// Forget every session last written longer ago than AGE too (`180d`,
    /// `12w`, `48h`): eVi's, or with --agent that agent's.
    #[arg(long, value_name = "AGE")]
    pub older_than: Option<String>,
    /// Only sessions of this agent: evi, claude-code, codex, gemini or opencode (with ids or
    /// --older-than). A Claude Code session goes with its subagents'
    /// transcripts.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Bring the sessions back from the trash (within 7 days of the
    /// forget), and tell every other device to do the same.
    #[arg(long, conflicts_with = "older_than")]
    pub undo: bool,
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

/// One session, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Item {
    session: String,
    agent: Agent,
    files: u64,
    bytes: u64,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Outcome {
    /// `forget` or `undo`.
    action: &'static str,
    dry_run: bool,
    sessions: Vec<Item>,
    /// Whether the tombstones (or undos) reached the server; when not, the
    /// next push sends them.
    sent: bool,
    /// What the command did on this device (absent with --dry-run).
    #[serde(skip_serializing_if = "Option::is_none")]
    applied: Option<Applied>,
}

pub fn cmd_sessions_forget(ctx: &Ctx, args: ForgetArgs) -> CommandResult {
    let agent = args
        .agent
        .as_deref()
        .map(crate::commands::shared::agent_arg)
        .transpose()?;
    if args.ids.is_empty() && args.older_than.is_none() {
        return Err(match &args.agent {
            Some(name) => usage_error(format!(
                "--agent {name} names no session by itself: add the ids to forget, \
                 or --older-than AGE (like `evi sessions forget --agent {name} --older-than 180d`)"
            )),
            None => usage_error("name the sessions to forget (or --older-than AGE)"),
        });
    }
    if args.undo {
        return undo(ctx, &args, agent);
    }
    let catalog = scan(ctx)?;
    let mut chosen: Vec<Target> = Vec::new();
    let add = |t: Target, chosen: &mut Vec<Target>| {
        if !chosen.iter().any(|c| c.streams == t.streams) {
            chosen.push(t);
        }
    };
    for prefix in &args.ids {
        add(targets::by_id(ctx, &catalog, agent, prefix)?, &mut chosen);
    }
    if let Some(age) = &args.older_than {
        let age = parse_age(age)?;
        let cutoff = SystemTime::now()
            .checked_sub(age)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let of = agent.unwrap_or(Agent::Evi);
        for t in targets::older_than(ctx, &catalog, of, cutoff)? {
            add(t, &mut chosen);
        }
    }
    let items: Vec<Item> = chosen.iter().map(item).collect();
    if args.dry_run {
        return print(&args, "forget", items, false, None);
    }
    if !items.is_empty() && !confirm(args.yes, &what(&items), "Forget?", "forget anyway")? {
        eprintln!("nothing forgotten");
        return Ok(());
    }
    let mut sync = open_sync(ctx)?;
    let mut applied = Applied::default();
    for stream in chosen.iter().flat_map(|t| &t.streams) {
        forget_here(&mut sync, stream, &mut applied).map_err(sync_error)?;
    }
    let sent = match send_outbox(&mut sync, &mut applied) {
        Ok(()) => true,
        Err(e) => {
            warn(&format!(
                "the server was not told yet ({e}): the next `evi sync push` tells it"
            ));
            false
        }
    };
    print(&args, "forget", items, sent, Some(applied))
}

/// What a forget of `items` does, as it is asked (see `confirm`).
fn what(items: &[Item]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<&str> = items
        .iter()
        .take(SHOWN)
        .map(|i| i.session.as_str())
        .collect();
    let more = items.len().saturating_sub(SHOWN).to_string();
    if items.len() > SHOWN {
        names.push(&more);
    }
    let list = match names.as_slice() {
        [one] => format!("session {one}"),
        [first @ .., last] if items.len() > SHOWN => {
            format!(
                "{} sessions ({} and {last} more)",
                items.len(),
                first.join(", ")
            )
        }
        all => format!("{} sessions ({})", items.len(), all.join(", ")),
    };
    format!(
        "this forgets {list} on this device, on the server and on every device that syncs \
         (this device's trash keeps {} 7 days: `evi sessions forget --undo ID`)",
        if items.len() == 1 { "it" } else { "them" }
    )
}

fn undo(ctx: &Ctx, args: &ForgetArgs, agent: Option<Agent>) -> CommandResult {
    let mut chosen = Vec::new();
    for id in &args.ids {
        let (name, streams) = targets::in_trash(ctx, agent, id)?;
        if streams.is_empty() {
            return Err(user_error(format!("session {name} is not in the trash here"))
                .hinted("a forget is kept 7 days in sync/trash/ (in the eVi home); an undo on a device that still has it brings it back everywhere"));
        }
        chosen.push((name, streams));
    }
    let items: Vec<Item> = chosen
        .iter()
        .map(|(name, streams)| Item {
            session: name.clone(),
            agent: streams[0].agent,
            files: 0,
            bytes: 0,
        })
        .collect();
    if args.dry_run {
        return print(args, "undo", items, false, None);
    }
    let mut sync = open_sync(ctx)?;
    let mut applied = Applied::default();
    for stream in chosen.iter().flat_map(|(_, s)| s) {
        undo_here(&mut sync, stream, &mut applied).map_err(sync_error)?;
    }
    // The undo first (push sends it before anything), then the session
    // itself: the server deleted what it held.
    let sent = match crate::sync::engine::push::push(&mut sync, &Quiet) {
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
    };
    print(args, "undo", items, sent, Some(applied))
}

fn item(t: &Target) -> Item {
    Item {
        session: t.name.clone(),
        agent: t.agent,
        files: t.files,
        bytes: t.bytes,
    }
}

fn print(
    args: &ForgetArgs,
    action: &'static str,
    sessions: Vec<Item>,
    sent: bool,
    applied: Option<Applied>,
) -> CommandResult {
    let mut out = stdout();
    if args.json {
        let o = Outcome {
            action,
            dry_run: args.dry_run,
            sessions,
            sent,
            applied,
        };
        serde_json::to_writer_pretty(&mut out, &o).map_err(std::io::Error::from)?;
        writeln!(out)?;
        return finish(out);
    }
    let verb = match (action, args.dry_run) {
        ("forget", true) => "would forget",
        ("forget", false) => "forgot",
        (_, true) => "would bring back",
        _ => "brought back",
    };
    if sessions.is_empty() {
        writeln!(out, "no session to {action}")?;
    }
    for s in &sessions {
        if action == "forget" {
            writeln!(
                out,
                "{verb} {} ({} files, {} bytes)",
                s.session, s.files, s.bytes
            )?;
        } else {
            writeln!(out, "{verb} {}", s.session)?;
        }
    }
    if !args.dry_run && !sessions.is_empty() {
        if action == "forget" {
            writeln!(
                out,
                "  moved to sync/trash/ for 7 days (`evi sessions forget --undo ID` brings it back)"
            )?;
        }
        let told = if sent {
            "the server and your other devices were told"
        } else {
            "the server is told by the next `evi sync push`"
        };
        writeln!(out, "  {told}")?;
    }
    finish(out)
}

/// `180d`, `12w`, `48h`, `30m`: an age (see [`evi_shared::span`]).
pub(crate) fn parse_age(s: &str) -> Result<Duration, CommandError> {
    evi_shared::span::parse_span(s).ok_or_else(|| {
        usage_error(format!(
            "--older-than {s:?}: give a number and a unit, like {}",
            evi_shared::span::SPAN_EXAMPLES
        ))
    })
}
