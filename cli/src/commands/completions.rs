//! `evi completions SHELL` and `evi man`: generated from the
//! argument definitions, so they never drift from `--help`. Neither needs an
//! eVi home.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::Cli;
use crate::command_error::{CommandResult, user_error};
use crate::commands::shared::{finish, stdout};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Folder to write the pages into (created if missing).
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    pub output: PathBuf,
}

/// Prints the completion script for `args.shell` on stdout.
pub fn cmd_completions(args: CompletionsArgs) -> CommandResult {
    let mut cmd = Cli::command();
    let mut out = stdout();
    clap_complete::generate(args.shell, &mut cmd, "evi", &mut out);
    finish(out)
}

/// Writes `evi.1` and one page per subcommand (`evi-sync.1`,
/// `evi-sync-push.1`, …) into `args.output`, naming the folder on stderr.
pub fn cmd_man(args: ManArgs) -> CommandResult {
    let dir = &args.output;
    let failed =
        |e: std::io::Error| user_error(format!("cannot write man pages to {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(failed)?;
    clap_mangen::generate_to(Cli::command(), dir).map_err(failed)?;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "wrote man pages to {}", dir.display());
    Ok(())
}
