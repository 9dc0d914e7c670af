//! How commands write: warnings on stderr, data on buffered stdout, the
//! width of a line, and the engine's progress drawn (or not).

use std::io::{self, IsTerminal, Write};

use serde::Serialize;

use crate::command_error::{CommandError, CommandResult};
use crate::sync::progress::{Bar, Progress, Quiet};

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

/// The bar on a terminal, nothing with `--json` or in a pipe.
pub fn progress(json: bool) -> Box<dyn Progress> {
    if json || !std::io::stderr().is_terminal() {
        Box::new(Quiet)
    } else {
        Box::new(Bar::default())
    }
}

/// `value` as pretty JSON on stdout, the whole output of a `--json` command.
pub fn print_json(value: &impl Serialize) -> CommandResult {
    let mut out = stdout();
    serde_json::to_writer_pretty(&mut out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    finish(out)
}
