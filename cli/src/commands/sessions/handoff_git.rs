//! The working tree a handoff carries: observe the session's checkout,
//! push or bundle what no remote has when asked, seal and upload what is
//! not committed (less the files that are secrets, with the redaction rules
//! `[sync]` turns on: see `git::carry`), and record it all as a
//! `git_state` entry of the session.

use std::path::Path;

use crate::command_error::{CommandError, user_error};
use crate::commands::shared::{git_error, sync_error, warn};
use crate::git::{self, Git, GitError, carry};
use crate::sync::engine::blobs::upload_one;
use crate::sync::state::context::SyncContext;
use crate::transcript::SessionTree;
use crate::transcript::git_state::{CarriedBlob, GitState, git_state_line, short};
use crate::transcript::title::append_line;

/// What to do about the working tree.
pub struct Wanted<'a> {
    pub repo: Option<&'a Path>,
    pub push_branch: bool,
    pub bundle: bool,
}

/// Records the checkout of `tree`'s session; `None` when there is none to
/// record (no `--repo` and the current directory is not a checkout).
pub fn record(
    sync: &SyncContext,
    tree: &SessionTree,
    want: &Wanted<'_>,
) -> Result<Option<GitState>, CommandError> {
    let dir = git::checkout_for(want.repo)?;
    let named = want.repo.is_some();
    if let Err(e) = git::check_git() {
        if named {
            return Err(git_error(e));
        }
        warn(&format!("{e}: the working tree is not carried"));
        return Ok(None);
    }
    let mut obs = match git::observe(&dir) {
        Ok(o) => o,
        Err(GitError::NotACheckout(_)) if !named => {
            eprintln!(
                "note: {} is not in a git checkout, so only the conversation is handed off \
                 (--repo PATH names the session's checkout)",
                dir.display()
            );
            return Ok(None);
        }
        Err(e) => return Err(git_error(e)),
    };
    let unmerged: Vec<&str> = obs
        .changed
        .iter()
        .filter(|l| {
            let xy = l.get(..2).unwrap_or_default();
            xy.contains('U') || xy == "AA" || xy == "DD"
        })
        .map(|l| l.get(3..).unwrap_or_default())
        .collect();
    if !unmerged.is_empty() {
        return Err(user_error(format!(
            "{} is in the middle of a merge, with conflicts in {}",
            obs.top.display(),
            unmerged.join(", ")
        ))
        .hinted("resolve them (or abort the merge) and hand off again; --no-git hands off the conversation alone"));
    }
    if !obs.pushed && want.push_branch {
        push_branch(&obs)?;
        obs = git::observe(&obs.top).map_err(git_error)?;
        if !obs.pushed {
            return Err(user_error(format!(
                "pushed, yet HEAD {} is on no remote-tracking branch here",
                short(&obs.head)
            ))
            .hinted("run `git fetch`, then hand off again; or use --bundle"));
        }
    }
    if !obs.pushed && !want.bundle {
        let what = match &obs.branch {
            Some(b) => format!("--push-branch (pushes {b} first)"),
            None => "--push-branch (after `git switch -c NAME`: HEAD is detached)".into(),
        };
        warn(&format!(
            "HEAD {} is on no remote, so the other device cannot fetch it: hand off with \
             {what} or --bundle (carries the commits in the handoff)",
            short(&obs.head)
        ));
    }
    let carry = carry::build(&obs, want.bundle, &sync.paths.dir, sync.redactor.as_deref())
        .map_err(git_error)?;
    let built = carry.built;
    let blob = match &built {
        Some(b) => {
            upload_one(sync, &b.sha256, b.file.path())
                .map_err(|e| sync_error(e).hinted("the session was not handed off; try again"))?;
            Some(CarriedBlob {
                sha256: b.sha256.clone(),
                size: b.size,
            })
        }
        None => None,
    };
    // What the other device gets: the counts leave out what stays here.
    let left = |path: &str| carry.left_out.iter().any(|l| l.path == path);
    let files_changed = (obs.changed.iter())
        .filter(|l| !left(l.get(3..).unwrap_or_default()))
        .count();
    let untracked = obs.untracked.iter().filter(|p| !left(p)).count();
    let state = GitState {
        remotes: obs.remotes,
        branch: obs.branch,
        head: obs.head,
        pushed: obs.pushed,
        files_changed,
        untracked,
        bundled: built.as_ref().is_some_and(|b| b.bundled),
        blob,
        left_out: carry.left_out,
    };
    append_line(tree, |parent| git_state_line(&state, parent))
        .map_err(|e| user_error(format!("cannot record the working tree: {e}")))?;
    Ok(Some(state))
}

/// `git push REMOTE HEAD:BRANCH`: the branch's upstream when it has one,
/// else `origin` (or the only remote). Never forced.
fn push_branch(obs: &git::Observed) -> Result<(), CommandError> {
    let Some(b) = &obs.branch else {
        return Err(user_error("HEAD is detached: there is no branch to push")
            .hinted("`git switch -c NAME` first, or hand off with --bundle"));
    };
    let g = Git::new(&obs.top);
    let remote = g
        .text(&["config", &format!("branch.{b}.remote")])
        .ok()
        .filter(|r| !r.is_empty() && r != ".")
        .or_else(|| {
            obs.remotes
                .iter()
                .find(|r| r.name == "origin")
                .map(|r| r.name.clone())
        })
        .or_else(|| match obs.remotes.as_slice() {
            [one] => Some(one.name.clone()),
            _ => None,
        })
        .ok_or_else(|| {
            user_error(format!(
                "{b} has no upstream and there is no single remote to push it to"
            ))
            .hinted("`git push -u REMOTE {b}` yourself, or hand off with --bundle")
        })?;
    let dest = g
        .text(&["config", &format!("branch.{b}.merge")])
        .ok()
        .filter(|m| m.starts_with("refs/heads/"))
        .unwrap_or_else(|| format!("refs/heads/{b}"));
    eprintln!("pushing {b} to {remote}");
    g.run(&["push", "-q", &remote, &format!("HEAD:{dest}")])
        .map_err(|e| git_error(e).hinted("push it yourself, or hand off with --bundle"))?;
    Ok(())
}
