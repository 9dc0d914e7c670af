//! `evi sessions resume ID` and `evi sessions continue`: rebuild a session's
//! active branch and hand it to the configured agent (or print it).

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use clap::Args;
use evi_shared::SessionId;

use super::Ctx;
use super::resume_git::{TreeWanted, show_and_bring};
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::one_session;
use crate::commands::shared::{
    agent_file, client_error, finish, open_sync, path_map, resolve, scan, stdout, sync_error,
    sync_set_up, warn,
};
use crate::resume::rebuild;
use crate::source::AgentFile;
use crate::sync::engine::one_session::{self as engine_one_session, Wanted};
use crate::sync::engine::pull::{PullOptions, PullReport, pull};
use crate::sync::progress::Quiet;
use crate::transcript::recent::most_recent;
use crate::transcript::{Catalog, SessionTree};

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Session id or unambiguous prefix.
    pub id: String,
    /// Print the rebuilt messages as JSON instead of starting the agent
    /// (another agent's session: print the command that resumes it).
    #[arg(long)]
    pub print: bool,
    /// The session's git checkout on this device (default: the current directory).
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
    /// Bring the checkout to the working tree the handoff recorded (refused
    /// when it has changes of its own).
    #[arg(long, conflicts_with = "worktree")]
    pub checkout: bool,
    /// Make a new git worktree at PATH with the recorded working tree (the
    /// checkout stays as it is).
    #[arg(long, value_name = "PATH")]
    pub worktree: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ContinueArgs {
    /// Print the rebuilt messages as JSON instead of starting the agent.
    #[arg(long)]
    pub print: bool,
}

/// How long the pull before resuming a session that is here may take per
/// request: an unreachable server must not hold the resume up.
const QUICK_PULL_TIMEOUT: Duration = Duration::from_secs(5);

/// Pulls, quietly: the catalog after it, and what it brought in.
fn pull_now(ctx: &Ctx, quick: bool) -> Result<(Catalog, PullReport), CommandError> {
    let mut sync = open_sync(ctx)?;
    if quick {
        sync.client = sync
            .client
            .fail_fast(QUICK_PULL_TIMEOUT)
            .map_err(client_error)?;
    }
    let r = pull(&mut sync, &Quiet, PullOptions::default()).map_err(sync_error)?;
    drop(sync);
    // Scanned again without repeating the warnings the first scan printed.
    let dir = ctx.home.transcripts_dir();
    let catalog = Catalog::scan(&dir)
        .map_err(|e| user_error(format!("cannot read {}: {e}", dir.display())))?;
    Ok((catalog, r))
}

/// The catalog to resume from: when sync is set up, pulled first, so that a
/// session another device went on with resumes in its newest state. `here`
/// says whether what is wanted is on this device already: then a failed pull
/// is a warning and the local copy is resumed; else it is the error.
fn pulled_first(ctx: &Ctx, catalog: Catalog, here: bool) -> Result<Catalog, CommandError> {
    if !sync_set_up(ctx) {
        return Ok(catalog);
    }
    match pull_now(ctx, here) {
        Ok((catalog, r)) => {
            if let Some(back) = &r.server_went_back {
                warn(back);
            }
            if r.entries > 0 {
                eprintln!("pulled {} entries in {} sessions", r.entries, r.sessions);
            }
            Ok(catalog)
        }
        Err(e) if here => {
            warn(&format!(
                "could not pull first ({}): resuming the copy on this device, which may be older",
                e.message
            ));
            Ok(catalog)
        }
        Err(e) => Err(e),
    }
}

/// Fetches `wanted` alone, quietly (quickly when it is here), and scans
/// again: the catalog after it, and what it brought in.
fn fetch_now(ctx: &Ctx, wanted: &Wanted) -> Result<(Catalog, PullReport), CommandError> {
    let mut sync = open_sync(ctx)?;
    if wanted.here {
        sync.client = sync
            .client
            .fail_fast(QUICK_PULL_TIMEOUT)
            .map_err(client_error)?;
    }
    let r = engine_one_session::fetch(&mut sync, &Quiet, &wanted.id).map_err(sync_error)?;
    drop(sync);
    let dir = ctx.home.transcripts_dir();
    let catalog = Catalog::scan(&dir)
        .map_err(|e| user_error(format!("cannot read {}: {e}", dir.display())))?;
    Ok((catalog, r))
}

/// Resumes the session `args.id` names. With sync set up, that session's
/// records are fetched first, alone (not the whole history): a session
/// another device went on with resumes in its newest state, and one that
/// is not here at all arrives in the time its own records take.
pub fn cmd_sessions_resume(ctx: &Ctx, args: ResumeArgs) -> CommandResult {
    let catalog = scan(ctx)?;
    let agents = !crate::source::enabled(&ctx.config).is_empty();
    let asked = Asked {
        print: args.print,
        git: args.repo.is_some() || args.checkout || args.worktree.is_some(),
    };
    if agents
        && catalog.matching(&args.id).is_empty()
        && let Some(file) = agent_file(ctx, &args.id)?
    {
        return resume_agent(ctx, asked, file, false);
    }
    // An eVi session (here, or wherever it is when no other agent is on)
    // needs the agent command: without one, fail before pulling or
    // bringing the checkout anywhere.
    if !args.print && (!agents || !catalog.matching(&args.id).is_empty()) {
        agent_command(ctx)?;
    }
    let tree = TreeWanted {
        repo: args.repo,
        checkout: args.checkout,
        worktree: args.worktree,
    };
    if !sync_set_up(ctx) {
        let (id, _) = resolve(&catalog, &args.id)?;
        return resume(ctx, &catalog, id, args.print, Some(&tree));
    }
    let wanted = one_session::wanted(&catalog, &args.id)?;
    if !wanted.here {
        eprintln!(
            "session {} is not on this device; fetching it from the server",
            wanted.id
        );
    }
    let catalog = match fetch_now(ctx, &wanted) {
        Ok((catalog, r)) => {
            if let Some(back) = &r.server_went_back {
                warn(back);
            }
            if r.entries > 0 {
                eprintln!("pulled {} entries in {} sessions", r.entries, r.sessions);
            }
            catalog
        }
        Err(e) if wanted.here => {
            warn(&format!(
                "could not pull first ({}): resuming the copy on this device, which may be older",
                e.message
            ));
            catalog
        }
        Err(e) => return Err(e),
    };
    if !catalog.sessions.contains_key(&wanted.id) {
        // Perhaps another agent's session: those come with a whole pull.
        if agents {
            pull_now(ctx, false)?;
            if let Some(file) = agent_file(ctx, &args.id)? {
                return resume_agent(ctx, asked, file, true);
            }
        }
        return Err(one_session::not_found(&args.id));
    }
    resume(ctx, &catalog, wanted.id, args.print, Some(&tree))
}

pub fn cmd_sessions_continue(ctx: &Ctx, args: ContinueArgs) -> CommandResult {
    if !args.print {
        agent_command(ctx)?;
    }
    let catalog = scan(ctx)?;
    let here = !catalog.sessions.is_empty();
    let catalog = pulled_first(ctx, catalog, here)?;
    let id = most_recent(&catalog)?
        .ok_or_else(|| user_error("there is no session to continue in this eVi home"))?;
    resume(ctx, &catalog, id, args.print, None)
}

/// Resumes `id`; with `git`, first shows (and brings, when asked) the
/// working tree its last handoff recorded.
fn resume(
    ctx: &Ctx,
    catalog: &Catalog,
    id: SessionId,
    print: bool,
    git: Option<&TreeWanted>,
) -> CommandResult {
    let template = if print {
        None
    } else {
        Some(agent_command(ctx)?)
    };
    let files = catalog.sessions[&id].clone();
    let tree = SessionTree::load(id.clone(), files)?;
    let workdir = match git {
        Some(want) => show_and_bring(ctx, &tree, want)?,
        None => None,
    };
    let resumed = rebuild(&tree)?;
    let n = resumed.messages.len();
    let Some(template) = template else {
        let mut out = stdout();
        serde_json::to_writer_pretty(&mut out, &resumed).map_err(std::io::Error::from)?;
        writeln!(out)?;
        finish(out)?;
        eprintln!("resumed {id} ({n} messages restored)");
        return Ok(());
    };
    eprintln!("resumed {id} ({n} messages restored)");
    let home = ctx.home.root().display().to_string();
    let line = template
        .replace("{session}", id.as_str())
        .replace("{home}", &shell_quote(&home));
    let mut agent = Command::new("sh");
    if let Some(dir) = &workdir {
        // The agent works where the handed-off tree now is.
        agent.current_dir(dir);
    }
    let status = agent
        .arg("-c")
        .arg(&line)
        .env("EVI_HOME", &home)
        .env("EVI_SESSION_ID", id.as_str())
        .status()
        .map_err(|e| user_error(format!("cannot start the agent ({line}): {e}")))?;
    if status.success() {
        Ok(())
    } else {
        let mut e = user_error(format!("the agent exited with {status}"));
        e.exit_code = status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1);
        Err(e)
    }
}

/// The `[agent] command` that resumes an eVi session, or the error that
/// says what to do without one. Asked before anything is pulled, fetched or
/// brought: a resume that cannot start the agent changes nothing.
fn agent_command(ctx: &Ctx) -> Result<&str, CommandError> {
    ctx.config.agent.command.as_deref().ok_or_else(|| {
        user_error("no agent command is configured: there is nothing to resume the session in")
            .hinted(
                "pass --print for its messages as JSON (the checkout comes along with \
                 --checkout), or set `[agent] command = \"your-agent --resume {session}\"` \
                 in config.toml",
            )
    })
}

/// What `resume` was asked for, of what matters to another agent's session.
#[derive(Debug, Clone, Copy)]
struct Asked {
    print: bool,
    /// `--repo`, `--checkout` or `--worktree`.
    git: bool,
}

/// Resumes another agent's session in that agent, from its project as it
/// is here: the command `evi sessions handoff` prints, run (or, with
/// `--print`, printed). With sync set up and nothing pulled yet, a quick
/// pull first, as for eVi's, so it resumes in its newest state.
fn resume_agent(ctx: &Ctx, args: Asked, file: AgentFile, pulled: bool) -> CommandResult {
    if args.git {
        return Err(crate::command_error::usage_error(
            "--repo, --checkout and --worktree bring the working tree an eVi handoff \
             recorded; another agent's session has none",
        ));
    }
    if !pulled
        && sync_set_up(ctx)
        && let Err(e) = pull_now(ctx, true)
    {
        warn(&format!(
            "could not pull first ({}): resuming the copy on this device, which may be older",
            e.message
        ));
    }
    let map = path_map(ctx, &file.stream);
    let tree = SessionTree::load_agent(&file, &map)
        .map_err(|e| user_error(format!("cannot read {}: {e}", file.path.display())))?;
    let agent = file.stream.agent;
    let id = file.stream.session.as_str();
    let project = tree.project.as_deref();
    let line = agent.resume_command(id, project);
    if args.print {
        let mut out = stdout();
        writeln!(out, "{line}")?;
        return finish(out);
    }
    let argv = agent.resume_argv(id);
    let mut run = Command::new(&argv[0]);
    run.args(&argv[1..]);
    if let Some(dir) = project {
        if !std::path::Path::new(dir).is_dir() {
            return Err(user_error(format!(
                "the project of {} session {id}, {dir}, is not a folder on this device",
                agent.name()
            ))
            .hinted(
                "check it out there, or map the other device's path to this one's in \
                 `[paths]` of config.toml and pull again; `--print` prints the command",
            ));
        }
        run.current_dir(dir);
    }
    eprintln!("resuming {} session {id}: {line}", agent.name());
    let status = run.status().map_err(|e| {
        let err = user_error(format!("cannot start `{}` ({line}): {e}", argv[0]));
        if e.kind() == std::io::ErrorKind::NotFound {
            err.hinted(format!(
                "install {} or put it on PATH; `--print` prints the command",
                argv[0]
            ))
        } else {
            err
        }
    })?;
    if status.success() {
        Ok(())
    } else {
        let mut e = user_error(format!("{} exited with {status}", argv[0]));
        e.exit_code = status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1);
        Err(e)
    }
}

/// `s` as one word for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
