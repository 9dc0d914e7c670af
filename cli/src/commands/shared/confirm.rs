//! One rule for the commands that take away what running them again cannot
//! bring back (revoking this device, rotating the key, pairing a device,
//! forgetting sessions or checkpoints, rewinding files): on a terminal they
//! say what they are about to do and ask `[y/N]`, anything but yes doing
//! nothing; without a terminal (a script, a pipe, a test) they refuse with a
//! usage error (exit 2) before changing anything, unless `--yes` (`-y`)
//! says it is meant.

use std::io::{BufRead, IsTerminal, Write};

use crate::command_error::{CommandError, usage_error};

/// Whether to go on: `yes` goes on without asking; on a terminal, `what`
/// (a sentence, without its full stop) and `question` are asked; without
/// one, `what` is the error, with the hint to pass `--yes` to `anyway`.
pub fn confirm(yes: bool, what: &str, question: &str, anyway: &str) -> Result<bool, CommandError> {
    if yes {
        return Ok(true);
    }
    needs_terminal(what, anyway)?;
    ask(&format!("{what}. {question}"))
}

/// The refusal without a terminal, for a command that asks later (once it
/// knows what to ask): `Ok` on a terminal.
pub fn needs_terminal(what: &str, anyway: &str) -> Result<(), CommandError> {
    if std::io::stdin().is_terminal() {
        return Ok(());
    }
    Err(usage_error(what).hinted(format!(
        "run it on a terminal to be asked, or pass --yes to {anyway}"
    )))
}

/// Asks `question [y/N]` on stderr; whether the answer is yes.
pub fn ask(question: &str) -> Result<bool, CommandError> {
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES"))
}
