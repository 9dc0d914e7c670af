//! `evi sessions …`: tree-aware reading of the transcripts.

mod export;
pub(crate) mod forget;
mod forget_targets;
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

use clap::Subcommand;

use super::Ctx;
use crate::command_error::CommandResult;

pub use export::ExportArgs;
pub use forget::ForgetArgs;
pub use fork::ForkArgs;
pub use handoff::HandoffArgs;
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
