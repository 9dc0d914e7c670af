//! Errors as the command line reports them: a message, hints that say what to
//! do, and the exit code (1 failure, 2 usage). Library errors are turned into
//! these at the edge, with context.

use std::fmt;

/// A failure to report to the user.
#[derive(Debug)]
pub struct CommandError {
    pub message: String,
    pub hints: Vec<String>,
    pub exit_code: u8,
}

impl CommandError {
    pub fn hinted(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }
}

/// A failure caused by what the user asked for (exit 1).
pub fn user_error(message: impl fmt::Display) -> CommandError {
    CommandError {
        message: message.to_string(),
        hints: Vec::new(),
        exit_code: 1,
    }
}

/// Wrong use of the command line (exit 2).
pub fn usage_error(message: impl fmt::Display) -> CommandError {
    CommandError {
        exit_code: 2,
        ..user_error(message)
    }
}

impl From<anyhow::Error> for CommandError {
    fn from(e: anyhow::Error) -> Self {
        user_error(format!("{e:#}"))
    }
}

impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        user_error(e)
    }
}

/// Whether an error is a closed stdout (`evi … | head`), which is not a failure.
pub fn is_broken_pipe(e: &CommandError) -> bool {
    e.message.contains("Broken pipe")
}

pub type CommandResult = Result<(), CommandError>;
