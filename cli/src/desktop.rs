//! Handing a URL to the desktop: `open` on macOS, `xdg-open` elsewhere,
//! looked for on `PATH` first so that its absence is told as such (a
//! server or a container has none) rather than as a failed start.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// The desktop's opener on this system.
pub const OPENER: &str = if cfg!(target_os = "macos") {
    "open"
} else {
    "xdg-open"
};

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("there is no `{OPENER}` on PATH to hand {url} to (no desktop here?)")]
    NoOpener { url: String },
    #[error("cannot start {}: {source}", .opener.display())]
    Start {
        opener: PathBuf,
        source: std::io::Error,
    },
    #[error("`{OPENER}` could not open {url} ({status}): no application here may handle it")]
    Failed { url: String, status: ExitStatus },
}

/// The opener on `PATH`, if there is one.
pub fn find_opener() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(OPENER))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn command(opener: &Path, url: &str) -> Command {
    let mut c = Command::new(opener);
    c.arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Hands `url` to the opener and waits for its answer (it returns once the
/// application that handles the URL has it).
pub fn open(url: &str) -> Result<(), OpenError> {
    let opener = find_opener().ok_or_else(|| OpenError::NoOpener {
        url: url.to_owned(),
    })?;
    let status = command(&opener, url)
        .status()
        .map_err(|source| OpenError::Start { opener, source })?;
    if status.success() {
        Ok(())
    } else {
        Err(OpenError::Failed {
            url: url.to_owned(),
            status,
        })
    }
}

/// Hands `url` to the opener without waiting (a browser may take its time).
pub fn open_in_background(url: &str) -> Result<(), OpenError> {
    let opener = find_opener().ok_or_else(|| OpenError::NoOpener {
        url: url.to_owned(),
    })?;
    command(&opener, url)
        .spawn()
        .map(drop)
        .map_err(|source| OpenError::Start { opener, source })
}
