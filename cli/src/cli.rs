//! Argument parsing and dispatch: the only place that knows about exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::command_error::{CommandError, is_broken_pipe};
use crate::commands::checkpoints::CheckpointsCommand;
use crate::commands::completions::{self, CompletionsArgs, ManArgs};
use crate::commands::link::LinkArgs;
use crate::commands::rewind::RewindArgs;
use crate::commands::web::WebArgs;
use crate::commands::{self, Ctx, sessions::SessionsCommand, sync::SyncCommand};

/// Sessions, sync and handoff for eVi transcripts.
#[derive(Debug, Parser)]
#[command(
    name = "evi",
    version,
    propagate_version = true,
    after_help = "\
Environment:
  EVI_HOME            the eVi home: transcripts, checkpoints, config.toml, sync/ [default: ~/.evi]
  EVI_SYNC_PASSWORD   the account password, for init and login without a prompt
  EVI_KEY_PASSPHRASE  the key file's passphrase, for key export and import without a prompt
  EVI_SYNC_INVITE     an invite code for init (--invite)
  EVI_SYNC_LOCK_WAIT  seconds to wait for another sync command of this home [default: 10]
  EVI_SYNC_RETRIES    attempts of a request the server could not answer [default: 5]
Commands that take away what cannot be brought back ask first, and without a terminal
refuse unless --yes. Exit codes: 0 success, 1 failure, 2 usage error."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List, show, export and fork sessions; handoff and resume carry one to another device.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Sync transcripts and checkpoints with an evi-server, end-to-end encrypted.
    #[command(subcommand)]
    Sync(SyncCommand),
    /// Undo eVi's latest file writes from its checkpoints, or list them (--list).
    Rewind(RewindArgs),
    /// Restore one checkpoint's saved bytes, from this device or another.
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// Print a session's evi://session/ID deep link (--open: hand it to the desktop).
    Link(LinkArgs),
    /// Serve the local web viewer of the sessions (http://127.0.0.1:7878/).
    Web(WebArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(CompletionsArgs),
    /// Write man pages for evi and every subcommand into a folder.
    Man(ManArgs),
}

/// Parses the process arguments, runs the command, reports errors.
pub fn main() -> ExitCode {
    crate::malloc::tune_allocator();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => report(e),
    }
}

fn run(cli: Cli) -> Result<(), CommandError> {
    match cli.command {
        Command::Sessions(cmd) => commands::sessions::run(&Ctx::load()?, cmd),
        Command::Sync(cmd) => commands::sync::run(&Ctx::load()?, cmd),
        Command::Rewind(a) => commands::rewind::cmd_rewind(&Ctx::load()?, a),
        Command::Checkpoints(cmd) => commands::checkpoints::run(&Ctx::load()?, cmd),
        Command::Link(a) => commands::link::cmd_link(&Ctx::load()?, a),
        Command::Web(a) => commands::web::cmd_web(&Ctx::load()?, a),
        // Generated from the arguments alone: no eVi home needed.
        Command::Completions(a) => completions::cmd_completions(a),
        Command::Man(a) => completions::cmd_man(a),
    }
}

fn report(e: CommandError) -> ExitCode {
    eprintln!("error: {}", e.message);
    for h in &e.hints {
        eprintln!("hint: {h}");
    }
    ExitCode::from(e.exit_code)
}
