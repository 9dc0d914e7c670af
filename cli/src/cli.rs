//! Argument parsing and dispatch: the only place that knows about exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::command_error::{CommandError, is_broken_pipe};
use crate::commands::{self, Ctx, sessions::SessionsCommand, sync::SyncCommand};

/// Sessions, sync and handoff for eVi transcripts.
#[derive(Debug, Parser)]
#[command(name = "evi", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read, export and fork sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Sync transcripts and checkpoints with an evi-server, end-to-end encrypted.
    #[command(subcommand)]
    Sync(SyncCommand),
}

/// Parses the process arguments, runs the command, reports errors.
pub fn main() -> ExitCode {
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
    let ctx = Ctx::load()?;
    match cli.command {
        Command::Sessions(cmd) => commands::sessions::run(&ctx, cmd),
        Command::Sync(cmd) => commands::sync::run(&ctx, cmd),
    }
}

fn report(e: CommandError) -> ExitCode {
    eprintln!("error: {}", e.message);
    for h in &e.hints {
        eprintln!("hint: {h}");
    }
    ExitCode::from(e.exit_code)
}
