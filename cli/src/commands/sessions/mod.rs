//! `evi sessions …`: tree-aware reading of the transcripts.

mod export;
mod forget;
mod fork;
mod handoff;
mod handoff_git;
mod list;
mod open;
mod redactions;
mod resume;
mod resume_git;
mod search;
mod show;
mod title;

use chrono::{Local, TimeZone};
use clap::Subcommand;
use evi_shared::SessionId;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::source::paths::PathMap;
use crate::source::{self, AgentFile};
use crate::transcript::{Catalog, SessionFile, SessionTree};

pub use export::ExportArgs;
pub use forget::ForgetArgs;
pub use fork::ForkArgs;
pub use handoff::{HandoffArgs, require_sync};
pub use list::ListArgs;
pub use open::OpenArgs;
pub use resume::{ContinueArgs, ResumeArgs};
pub use search::SearchArgs;
pub use show::ShowArgs;
pub use title::TitleArgs;

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List(ListArgs),
    /// Show a session's active branch (or the branch through an entry).
    Show(ShowArgs),
    /// Search every session's text: words and "quoted phrases".
    Search(SearchArgs),
    /// Export a session as Markdown, HTML or JSON.
    Export(ExportArgs),
    /// Copy a session's path root→entry into a new session.
    Fork(ForkArgs),
    /// Push a session and print how to reopen it on another device.
    Handoff(HandoffArgs),
    /// Open a session in the web viewer (starting `evi web` if needed).
    Open(OpenArgs),
    /// Rebuild a session and start the agent on it (pulls it if needed).
    Resume(ResumeArgs),
    /// Resume the most recently active session.
    Continue(ContinueArgs),
    /// Give a session a title: from the `[title] command`, or --set TEXT.
    Title(TitleArgs),
    /// Forget sessions on every device: here into the trash, elsewhere at
    /// their next pull, on the server deleted (--undo within 7 days).
    Forget(ForgetArgs),
}

pub fn run(ctx: &Ctx, cmd: SessionsCommand) -> CommandResult {
    match cmd {
        SessionsCommand::List(a) => list::cmd_sessions_list(ctx, a),
        SessionsCommand::Show(a) => show::cmd_sessions_show(ctx, a),
        SessionsCommand::Search(a) => search::cmd_sessions_search(ctx, a),
        SessionsCommand::Export(a) => export::cmd_sessions_export(ctx, a),
        SessionsCommand::Fork(a) => fork::cmd_sessions_fork(ctx, a),
        SessionsCommand::Handoff(a) => handoff::cmd_sessions_handoff(ctx, a),
        SessionsCommand::Open(a) => open::cmd_sessions_open(ctx, a),
        SessionsCommand::Resume(a) => resume::cmd_sessions_resume(ctx, a),
        SessionsCommand::Continue(a) => resume::cmd_sessions_continue(ctx, a),
        SessionsCommand::Title(a) => title::cmd_sessions_title(ctx, a),
        SessionsCommand::Forget(a) => forget::cmd_sessions_forget(ctx, a),
    }
}

/// Scans the transcripts folder, printing a warning per skipped path (and
/// one when the home itself does not exist: reading creates nothing).
pub fn scan(ctx: &Ctx) -> Result<Catalog, CommandError> {
    if let Some(why) = ctx.home.absent() {
        super::warn(&format!(
            "there is no eVi home at {} ({why})",
            ctx.home.root().display()
        ));
    }
    let dir = ctx.home.transcripts_dir();
    let catalog = Catalog::scan(&dir)
        .map_err(|e| user_error(format!("cannot read {}: {e}", dir.display())))?;
    for w in &catalog.warnings {
        super::warn(w);
    }
    Ok(catalog)
}

/// The session an id or unambiguous prefix names.
pub fn resolve(
    catalog: &Catalog,
    prefix: &str,
) -> Result<(SessionId, Vec<SessionFile>), CommandError> {
    match catalog.matching(prefix).as_slice() {
        [id] => Ok(((*id).clone(), catalog.sessions[*id].clone())),
        [] => Err(user_error(format!("no session matches `{prefix}`"))
            .hinted("`evi sessions list --days 3650` shows the ids of every session")),
        many => {
            let mut msg = format!("`{prefix}` matches {} sessions:", many.len());
            for id in many.iter().take(20) {
                msg.push_str(&format!("\n  {id}"));
            }
            Err(user_error(msg).hinted("type more characters of the id"))
        }
    }
}

/// Loads the tree of the session `prefix` names.
pub fn load_tree(ctx: &Ctx, prefix: &str) -> Result<SessionTree, CommandError> {
    load(ctx, prefix).map(|(tree, _)| tree)
}

/// Loads the tree of the session `prefix` names (an eVi session's first,
/// else another agent's turned on here), with its shortest unambiguous id.
pub fn load(ctx: &Ctx, prefix: &str) -> Result<(SessionTree, String), CommandError> {
    let catalog = scan(ctx)?;
    if catalog.matching(prefix).is_empty()
        && let Some(file) = agent_file(ctx, prefix)?
    {
        let tree = SessionTree::load_agent(&file, &path_map(ctx, &file.stream))
            .map_err(|e| user_error(format!("cannot read {}: {e}", file.path.display())))?;
        let short = file.stream.session.as_str().chars().take(8).collect();
        return Ok((tree, short));
    }
    let (id, files) = resolve(&catalog, prefix)?;
    let tree = SessionTree::load(id.clone(), files)
        .map_err(|e| user_error(format!("cannot read session {id}: {e}")))?;
    let short = catalog.short_id(&id);
    Ok((tree, short))
}

/// How `stream`'s paths map here: `[paths]`, and the pair its project was
/// placed by when pull found it by its git remote.
pub fn path_map(ctx: &Ctx, stream: &source::StreamName) -> PathMap {
    let base = PathMap::new(&ctx.config.paths.map);
    source::project::Projects::load(&ctx.home.sync_dir())
        .map_for(&base, stream)
        .into_owned()
}

/// The session of another agent turned on here that `prefix` names: an id
/// or prefix of a session, or a stream name (`claude-code/<id>`, a subagent
/// transcript `claude-code/<id>/<stem>`, `codex/<id>`). `None` when none
/// does; more than one is an error, as for eVi's.
pub fn agent_file(ctx: &Ctx, prefix: &str) -> Result<Option<AgentFile>, CommandError> {
    let mut found = source::matching(&source::enabled(&ctx.config), prefix);
    match found.len() {
        0 | 1 => Ok(found.pop()),
        n => {
            let mut msg = format!("`{prefix}` matches {n} sessions of other agents:");
            for f in found.iter().take(20) {
                msg.push_str(&format!("\n  {} ({})", f.stream, f.path.display()));
            }
            Err(user_error(msg).hinted("type more characters of the id"))
        }
    }
}

/// An epoch-millisecond time in local time, as `pattern` (strftime).
fn fmt_local(ms: i64, pattern: &str) -> String {
    Local
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.format(pattern).to_string())
        .unwrap_or_else(|| "?".into())
}

/// Local date and minute.
pub fn fmt_minute(ms: i64) -> String {
    fmt_local(ms, "%Y-%m-%d %H:%M")
}

/// Local date and second.
pub fn fmt_second(ms: i64) -> String {
    fmt_local(ms, "%Y-%m-%d %H:%M:%S")
}

/// RFC 3339 in UTC, for JSON output.
pub fn fmt_rfc3339(ms: i64) -> Option<String> {
    crate::transcript::summary::rfc3339(ms)
}
