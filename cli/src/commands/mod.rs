//! One module per command group, one file per subcommand.

pub mod checkpoints;
pub mod completions;
pub mod link;
pub mod rewind;
pub mod sessions;
pub mod sync;
pub mod web;

use std::io::{self, IsTerminal, Write};

use crate::command_error::CommandError;
use crate::config::Config;
use crate::home::EviHome;

/// What every command starts from: the home and its config.
pub struct Ctx {
    pub home: EviHome,
    pub config: Config,
}

impl Ctx {
    /// Finds the home and reads its config, printing config warnings.
    pub fn load() -> Result<Self, CommandError> {
        let home = EviHome::from_env().map_err(|e| {
            let hint = e.hint();
            crate::command_error::user_error(e).hinted(hint)
        })?;
        let loaded = Config::load(&home.config_file()).map_err(|e| {
            let hint = e.hint();
            crate::command_error::user_error(e).hinted(hint)
        })?;
        for w in &loaded.warnings {
            warn(w);
        }
        Ok(Self {
            home,
            config: loaded.config,
        })
    }
}

/// A warning on stderr.
pub fn warn(msg: &str) {
    eprintln!("warning: {msg}");
}

/// Columns available for one line of output: the terminal's, else `$COLUMNS`,
/// else 100.
pub fn width() -> usize {
    if io::stdout().is_terminal()
        && let Some((w, _)) = terminal_size::terminal_size()
    {
        return w.0 as usize;
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c: &usize| c >= 20)
        .unwrap_or(100)
}

/// Buffered stdout.
pub fn stdout() -> io::BufWriter<io::StdoutLock<'static>> {
    io::BufWriter::with_capacity(64 * 1024, io::stdout().lock())
}

/// Flushes `out`, the last step of a command that printed data.
pub fn finish(mut out: impl Write) -> Result<(), CommandError> {
    out.flush().map_err(Into::into)
}
