//! `evi sessions title ID [--set TEXT]`: give a session a title, written by
//! the `[title] command` or by hand, kept as an entry of the session (see
//! `transcript::title`) so it syncs like the rest.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use super::Ctx;
use crate::command_error::{CommandError, CommandResult, user_error};
use crate::commands::shared::{finish, load_tree, stdout};
use crate::title_command::{TitleCommandError, ask, prompt};
use crate::transcript::title::{TitleError, append_title, clean};

#[derive(Debug, Args)]
pub struct TitleArgs {
    /// Session id or unambiguous prefix.
    pub id: String,
    /// Set this title instead of asking the `[title] command`.
    #[arg(long, value_name = "TEXT")]
    pub set: Option<String>,
}

pub fn cmd_sessions_title(ctx: &Ctx, args: TitleArgs) -> CommandResult {
    let tree = load_tree(ctx, &args.id)?;
    let raw = match &args.set {
        Some(text) => text.clone(),
        None => generate(ctx, &tree)?,
    };
    let title = clean(&raw).map_err(|e| {
        let err = user_error(e);
        if args.set.is_some() {
            err
        } else {
            err.hinted("that is what `[title] command` printed first on stdout")
        }
    })?;
    let file = append_title(&tree, &title).map_err(|e| match e {
        TitleError::Busy(_) => {
            user_error(e).hinted("eVi is writing to the session: run this again in a moment")
        }
        e => user_error(e),
    })?;
    let mut out = stdout();
    writeln!(out, "{title}")?;
    finish(out)?;
    eprintln!(
        "titled session {} (a line appended to {}; `evi sync push` carries it)",
        tree.id,
        file.display()
    );
    Ok(())
}

fn generate(ctx: &Ctx, tree: &crate::transcript::SessionTree) -> Result<String, CommandError> {
    let config = ctx.home.config_file();
    let Some(command) = ctx.config.title.command.as_deref() else {
        return Err(user_error("no title command is configured")
            .hinted(format!(
                "add one to {}, a command that reads the first messages on stdin and prints \
                 a title, e.g.\n  [title]\n  command = \"llm -s 'A title of at most 8 words \
                 for this conversation'\"\n  timeout = 30",
                config.display()
            ))
            .hinted(format!(
                "or give the title yourself: evi sessions title {} --set \"…\"",
                tree.id
            )));
    };
    let input = prompt(tree).map_err(user_error)?;
    let home = ctx.home.root().display().to_string();
    let env = [
        ("EVI_SESSION_ID", tree.id.as_str()),
        ("EVI_HOME", home.as_str()),
    ];
    let timeout = Duration::from_secs(ctx.config.title.timeout);
    ask(command, timeout, &input, &env).map_err(|e| {
        let hint = match &e {
            TitleCommandError::Timeout { .. } | TitleCommandError::NoTime => {
                format!("raise `[title] timeout` (seconds) in {}", config.display())
            }
            _ => format!(
                "it is `[title] command` in {}; run it by hand with a few lines on stdin to see why",
                config.display()
            ),
        };
        user_error(e).hinted(hint)
    })
}
