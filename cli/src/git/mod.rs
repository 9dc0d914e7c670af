//! The git checkout a session's work lives in, and carrying its state from
//! one device to another with a handoff.
//!
//! # Promises
//!
//! Git is driven as the `git` command ([`run`]). Recording a checkout
//! ([`observe`], [`carry::build`]) only reads it: it writes a temporary
//! index outside the repository and never changes the user's index, refs or
//! files (`--push-branch` pushes, with the user's own git, only when asked).
//! Bringing a checkout to a recorded state ([`bring`]) never rewrites a
//! branch, never runs `git reset --hard` or `git clean`, never commits, and
//! refuses a checkout with changes of its own; what it cannot apply cleanly
//! is left marked as conflicts, with the carried patches kept in the git
//! folder, so nothing of either side is lost.

pub mod bring;
pub mod carry;
mod observe;
pub mod remote;
mod run;

use std::path::{Path, PathBuf};

pub use observe::{Observed, observe, toplevel};
pub use run::{Git, MIN_GIT, check_git};

/// Why a git step failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot run `git` ({0}); the working tree travels through the git command")]
    Missing(String),
    #[error(
        "{0} is too old: the working tree needs git {major}.{minor} or later",
        major = MIN_GIT.0,
        minor = MIN_GIT.1
    )]
    TooOld(String),
    #[error("{0} is not in a git checkout")]
    NotACheckout(PathBuf),
    #[error("the repository at {0} has no commit yet")]
    Unborn(PathBuf),
    #[error("`{command}` failed: {}", if stderr.is_empty() { stdout } else { stderr })]
    Failed {
        command: String,
        stderr: String,
        stdout: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    /// What a handoff would carry is past [`carry::MAX_CARRIED_BYTES`].
    #[error(
        "the {what} come to more than the {} MiB a handoff carries",
        carry::MAX_CARRIED_BYTES >> 20
    )]
    TooLarge { what: String },
    /// What was carried cannot be read back (a damaged or foreign blob).
    #[error("the carried working tree cannot be read: {0}")]
    BadCarry(String),
    /// The checkout has changes of its own: bringing it anywhere could lose them.
    #[error("{} has changes of its own:\n{}", path.display(), lines.join("\n"))]
    Busy { path: PathBuf, lines: Vec<String> },
}

/// The local checkout a session's work is in on this device: `repo` when
/// given, else the current directory. eVi's lines carry no directory; when
/// sessions of other agents record their `cwd` and the project map turns
/// it into a path here, that answer goes first, before the current
/// directory.
pub fn checkout_for(repo: Option<&Path>) -> std::io::Result<PathBuf> {
    match repo {
        Some(p) => Ok(p.to_owned()),
        None => std::env::current_dir(),
    }
}
