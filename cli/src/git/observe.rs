//! What a checkout is now: remotes, branch, HEAD, whether HEAD is on a
//! remote, and which paths have changes. Read only.

use std::path::{Path, PathBuf};

use super::{Git, GitError};
use crate::transcript::git_state::Remote;

/// A checkout as it is.
#[derive(Debug, Clone)]
pub struct Observed {
    pub top: PathBuf,
    pub remotes: Vec<Remote>,
    pub branch: Option<String>,
    pub head: String,
    pub pushed: bool,
    /// `git status --porcelain` lines of staged or unstaged changes.
    pub changed: Vec<String>,
    /// Untracked paths git does not ignore.
    pub untracked: Vec<String>,
}

impl Observed {
    pub fn clean(&self) -> bool {
        self.changed.is_empty() && self.untracked.is_empty()
    }
}

/// The top of the checkout `dir` is in.
pub fn toplevel(dir: &Path) -> Result<PathBuf, GitError> {
    if !dir.is_dir() {
        return Err(GitError::NotACheckout(dir.to_owned()));
    }
    let g = Git::new(dir);
    match g.text(&["rev-parse", "--show-toplevel"]) {
        Ok(t) if !t.is_empty() => Ok(PathBuf::from(t)),
        _ => Err(GitError::NotACheckout(dir.to_owned())),
    }
}

/// Reads the checkout at (or above) `dir`.
pub fn observe(dir: &Path) -> Result<Observed, GitError> {
    let top = toplevel(dir)?;
    let g = Git::new(&top);
    let head = g
        .text(&["rev-parse", "-q", "--verify", "HEAD^{commit}"])
        .map_err(|_| GitError::Unborn(top.clone()))?;
    let branch = g
        .text(&["symbolic-ref", "-q", "--short", "HEAD"])
        .ok()
        .filter(|b| !b.is_empty());
    let mut remotes: Vec<Remote> = Vec::new();
    for line in g.text(&["remote", "-v"])?.lines() {
        let mut parts = line.split_whitespace();
        if let (Some(name), Some(url), Some("(fetch)")) = (parts.next(), parts.next(), parts.next())
        {
            remotes.push(Remote {
                name: name.to_owned(),
                url: url.to_owned(),
            });
        }
    }
    let pushed = !g
        .text(&[
            "for-each-ref",
            "--count=1",
            "--contains",
            &head,
            "refs/remotes",
        ])?
        .is_empty();
    let status = g.run(&["status", "--porcelain=v1", "-z", "--untracked-files=all"])?;
    let (changed, untracked) = parse_status(&status);
    Ok(Observed {
        top,
        remotes,
        branch,
        head,
        pushed,
        changed,
        untracked,
    })
}

/// Splits `git status --porcelain=v1 -z` into changed lines (`XY path`) and
/// untracked paths.
fn parse_status(z: &[u8]) -> (Vec<String>, Vec<String>) {
    let mut changed = Vec::new();
    let mut untracked = Vec::new();
    let mut fields = z.split(|&b| b == 0).filter(|f| !f.is_empty());
    while let Some(f) = fields.next() {
        let text = String::from_utf8_lossy(f).into_owned();
        if let Some(path) = text.strip_prefix("?? ") {
            untracked.push(path.to_owned());
            continue;
        }
        // A rename or copy names its source in the next field.
        if matches!(f.first(), Some(b'R' | b'C')) {
            fields.next();
        }
        changed.push(text);
    }
    (changed, untracked)
}

#[cfg(test)]
mod tests {
    use super::parse_status;

    #[test]
    fn status_fields_split_into_changes_and_untracked() {
        let z = b" M a.txt\0R  new.txt\0old.txt\0?? dir/u v.bin\0A  b\0";
        let (c, u) = parse_status(z);
        assert_eq!(c, [" M a.txt", "R  new.txt", "A  b"]);
        assert_eq!(u, ["dir/u v.bin"]);
    }
}
