//! `evi sessions handoff`: make sure a session is on the server, with the
//! state of its git checkout (see `handoff_git`), then print the exact steps
//! (and URL) that reopen it on another device.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use super::Ctx;
use super::handoff_git::{self, Wanted};
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{
    agent_file, finish, open_sync, path_map, require_sync, resolve, scan, stdout, sync_error, warn,
    web_url,
};
use crate::sync::engine::push::{push, session_pushed};
use crate::sync::progress::Quiet;
use crate::transcript::SessionTree;
use crate::transcript::git_state::{GitState, left_out_list};
use crate::transcript::recent::most_recent;

#[derive(Debug, Args)]
pub struct HandoffArgs {
    /// Session id or prefix (default: the most recently active session).
    pub id: Option<String>,
    /// Do not push first (print the steps only).
    #[arg(long)]
    pub no_push: bool,
    /// Print JSON (stable, documented in docs/json.md).
    #[arg(long)]
    pub json: bool,
    /// Also draw the URL as a QR code.
    #[arg(long)]
    pub qr: bool,
    /// The session's git checkout (default: the current directory).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// Hand off the conversation alone, not the working tree.
    #[arg(long, conflicts_with_all = ["repo", "push_branch", "bundle"])]
    pub no_git: bool,
    /// Push the branch first when HEAD is on no remote (never forced).
    #[arg(long)]
    pub push_branch: bool,
    /// Carry the commits no remote has as a `git bundle` in the handoff.
    #[arg(long)]
    pub bundle: bool,
}

/// `--json` output.
#[derive(Debug, Serialize)]
struct Handoff {
    session: String,
    messages: usize,
    /// `done`, `skipped`, or `watcher` (with `[sync] auto`: the watcher had
    /// pushed the session's tip already, so nothing was pushed).
    push: &'static str,
    pull_command: &'static str,
    resume_command: String,
    url: String,
    deep_link: String,
    /// The working tree carried (absent: none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    git: Option<GitState>,
}

/// The web UI's address of one session, whatever its agent.
fn session_url(ctx: &Ctx, id: &impl std::fmt::Display) -> String {
    format!("{}/?session={id}", web_url(ctx))
}

pub fn cmd_sessions_handoff(ctx: &Ctx, args: HandoffArgs) -> CommandResult {
    require_sync(ctx, "handoff")?;
    let catalog = scan(ctx)?;
    let (id, files) = match &args.id {
        Some(p) if catalog.matching(p).is_empty() && agent_session(ctx, p)?.is_some() => {
            let (file, summary) = agent_session(ctx, p)?.expect("just found");
            return agent_handoff(ctx, &args, &file, &summary);
        }
        Some(p) => resolve(&catalog, p)?,
        None => {
            let id = most_recent(&catalog)?
                .ok_or_else(|| user_error("there is no session to hand off in this eVi home"))?;
            let files = catalog.sessions[&id].clone();
            (id, files)
        }
    };
    let tree = SessionTree::load(id.clone(), files)?;
    let messages = tree.active_branch().len();
    let auto = ctx.config.sync.auto;
    if args.no_push && (args.repo.is_some() || args.push_branch || args.bundle) {
        return Err(crate::command_error::usage_error(
            "--no-push hands off nothing of the working tree: --repo, --push-branch \
             and --bundle need the push",
        ));
    }
    let mut git = None;
    let pushed = if args.no_push {
        "skipped"
    } else {
        let mut sync = open_sync(ctx)?;
        if !args.no_git {
            let want = Wanted {
                repo: args.repo.as_deref(),
                push_branch: args.push_branch,
                bundle: args.bundle,
            };
            git = handoff_git::record(&sync, &tree, &want)?;
        }
        let files = &catalog.sessions[&id];
        if git.is_none() && auto && session_pushed(&sync, &id, files).map_err(sync_error)? {
            "watcher"
        } else {
            push_session_first(&mut sync, &id)?
        }
    };

    let h = Handoff {
        session: id.to_string(),
        messages,
        push: pushed,
        pull_command: "evi sync pull",
        resume_command: format!("evi sessions resume {id}"),
        url: session_url(ctx, &id),
        deep_link: format!("evi://session/{id}"),
        git,
    };
    let mut out = stdout();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &h).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        writeln!(out, "handoff {} ({} messages)", h.session, h.messages)?;
        if let Some(g) = &h.git {
            writeln!(out, "  working tree: {}", g.summary())?;
            if !g.left_out.is_empty() {
                writeln!(out, "  left on this device: {}", left_out_list(&g.left_out))?;
            }
        }
        match pushed {
            "skipped" => writeln!(
                out,
                "  1. sync this device:   evi sync push   (skipped: --no-push)"
            )?,
            "watcher" => writeln!(
                out,
                "  1. sync this device:   evi sync watch   (already pushed)"
            )?,
            _ => writeln!(out, "  1. sync this device:   evi sync push   (done)")?,
        }
        if auto && pushed != "skipped" {
            writeln!(
                out,
                "  2. on the other device: nothing if it runs `evi sync watch` (it has the \
                 session already); else evi sync pull, then either"
            )?;
        } else {
            writeln!(out, "  2. on the other device: evi sync pull, then either")?;
        }
        writeln!(out, "       {}", h.resume_command)?;
        writeln!(out, "       or open {} in the web UI", h.url)?;
        writeln!(out, "  deep link: {}", h.deep_link)?;
    }
    if args.qr {
        qr(&mut out, &h.url)?;
    }
    finish(out)
}

/// `--qr`: the web URL drawn for a phone's camera.
fn qr(out: &mut impl Write, url: &str) -> CommandResult {
    let code = qrcode::QrCode::new(url.as_bytes())
        .map_err(|e| user_error(format!("cannot draw a QR code: {e}")))?;
    let art = code
        .render::<qrcode::render::unicode::Dense1x2>()
        .quiet_zone(true)
        .build();
    writeln!(out, "{art}")?;
    Ok(())
}

/// The session of another agent turned on here that `prefix` names, if one
/// does (two: an error, as for eVi's).
fn agent_session(
    ctx: &Ctx,
    prefix: &str,
) -> Result<
    Option<(
        crate::source::AgentFile,
        crate::transcript::summary::SessionSummary,
    )>,
    CommandError,
> {
    let Some(file) = agent_file(ctx, prefix)? else {
        return Ok(None);
    };
    let summary = crate::source::summary::summarize(&file, &path_map(ctx, &file.stream))
        .map_err(|e| user_error(format!("cannot read {}: {e}", file.path.display())))?;
    Ok(Some((file, summary)))
}

/// `--json` output of a handoff of another agent's session.
#[derive(Debug, Serialize)]
struct AgentHandoff {
    session: String,
    agent: crate::source::Agent,
    messages: usize,
    push: &'static str,
    pull_command: &'static str,
    /// The project as it is on this device (on another, `[paths]` or its
    /// git remote places it).
    project: Option<String>,
    resume_command: String,
    /// The web viewer opens any agent's session by its id.
    url: String,
}

/// Pushes and prints the steps for a Claude Code or Codex session: the
/// agent's own resume command, from the session's project.
fn agent_handoff(
    ctx: &Ctx,
    args: &HandoffArgs,
    file: &crate::source::AgentFile,
    summary: &crate::transcript::summary::SessionSummary,
) -> CommandResult {
    let id = file.stream.session.to_string();
    let agent = file.stream.agent;
    let pushed = if args.no_push {
        "skipped"
    } else {
        let mut sync = open_sync(ctx)?;
        let r = push(&mut sync, &Quiet)
            .map_err(|e| sync_error(e).hinted("`--no-push` prints the steps without pushing"))?;
        let mine = format!("session {}: ", file.stream);
        for f in &r.failed {
            if f.starts_with(&mine) {
                return Err(user_error(format!("session {id} is not fully pushed: {f}"))
                    .hinted("fix that and run `evi sync push`, then hand off again"));
            }
            warn(&format!("not pushed: {f}"));
        }
        "done"
    };
    let h = AgentHandoff {
        session: id.clone(),
        agent,
        messages: summary.messages,
        push: pushed,
        pull_command: "evi sync pull",
        project: summary.project.clone(),
        resume_command: agent.resume_command(&id, summary.project.as_deref()),
        url: session_url(ctx, &id),
    };
    let mut out = stdout();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &h).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "handoff {} {} ({} messages)",
            agent.name(),
            id,
            h.messages
        )?;
        match pushed {
            "skipped" => writeln!(
                out,
                "  1. sync this device:   evi sync push   (skipped: --no-push)"
            )?,
            _ => writeln!(out, "  1. sync this device:   evi sync push   (done)")?,
        }
        writeln!(
            out,
            "  2. on the other device: evi sync pull (with `[agents] {} = true`), then",
            agent.name()
        )?;
        writeln!(out, "       {}", h.resume_command)?;
        writeln!(out, "       or open {} in the web UI", h.url)?;
        writeln!(
            out,
            "     (there, the project is where `[paths]` or its git remote puts it; \
             `evi sessions handoff {id} --no-push` run there prints its command)"
        )?;
    }
    if args.qr {
        qr(&mut out, &h.url)?;
    }
    finish(out)
}

/// Pushes (the whole home, as `evi sync push` does) so that `id` is on the
/// server; other items that could not go up are warnings, this session not
/// being fully pushed is the error.
fn push_session_first(
    sync: &mut crate::sync::state::context::SyncContext,
    id: &evi_shared::SessionId,
) -> Result<&'static str, CommandError> {
    let r = push(sync, &Quiet)
        .map_err(|e| sync_error(e).hinted("`--no-push` prints the steps without pushing"))?;
    let mine = format!("session {id}: ");
    for f in &r.failed {
        if f.starts_with(&mine) {
            return Err(user_error(format!("session {id} is not fully pushed: {f}"))
                .hinted("fix that and run `evi sync push`, then hand off again"));
        }
        warn(&format!("not pushed: {f}"));
    }
    Ok("done")
}
