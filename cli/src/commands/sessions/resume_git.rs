//! The working tree on resume: the state the last handoff recorded next to
//! this device's checkout, and with `--checkout` or `--worktree PATH`,
//! that checkout (or a new worktree of it) brought there.

use std::path::{Path, PathBuf};

use super::Ctx;
use crate::command_error::{CommandError, user_error};
use crate::commands::shared::{fmt_minute, git_error, open_sync, sync_error, warn};
use crate::git::bring::{Target, bring};
use crate::git::carry::Carried;
use crate::git::{self, GitError};
use crate::sync::remote::blob_transfer::BlobTransfer;
use crate::transcript::SessionTree;
use crate::transcript::git_state::{GitState, changes, left_out_list, short};

/// What `resume` was asked to do with the working tree.
#[derive(Debug, Default)]
pub struct TreeWanted {
    pub repo: Option<PathBuf>,
    pub checkout: bool,
    pub worktree: Option<PathBuf>,
}

impl TreeWanted {
    fn brings(&self) -> bool {
        self.checkout || self.worktree.is_some()
    }
}

/// Says what was recorded and what is here, and brings the checkout there
/// when asked: the directory the agent should start in, if it moved.
pub fn show_and_bring(
    ctx: &Ctx,
    tree: &SessionTree,
    want: &TreeWanted,
) -> Result<Option<PathBuf>, CommandError> {
    let recorded = tree
        .latest_git_state()
        .map_err(|e| user_error(format!("cannot read session {}: {e}", tree.id)))?;
    let Some((ts, state)) = recorded else {
        if want.brings() {
            return Err(user_error(format!(
                "session {} has no working tree recorded: it was handed off without one",
                tree.id
            ))
            .hinted(
                "hand it off again from the checkout (`evi sessions handoff ID --repo PATH`)",
            ));
        }
        return Ok(None);
    };
    let when = ts
        .map(|t| format!(" ({})", fmt_minute(t)))
        .unwrap_or_default();
    eprintln!("working tree at handoff{when}: {}", state.summary());
    if !state.left_out.is_empty() {
        eprintln!(
            "left on the other device: {}",
            left_out_list(&state.left_out)
        );
    }
    let dir = git::checkout_for(want.repo.as_deref())?;
    let here = describe_here(&dir);
    eprintln!("this checkout, {}: {here}", dir.display());
    if !want.brings() {
        eprintln!(
            "  (`--checkout` brings this checkout there; `--worktree PATH` makes a new \
             worktree at it)"
        );
        return Ok(None);
    }
    git::check_git().map_err(git_error)?;
    let carried = fetch_carried(ctx, &state)?;
    let target = match &want.worktree {
        Some(p) => Target::Worktree(p.clone()),
        None => Target::Checkout,
    };
    let short_id: String = tree.id.as_str().chars().take(8).collect();
    let brought = bring(&dir, &state, &carried, &target, &short_id).map_err(git_error)?;
    for n in &brought.notes {
        warn(n);
    }
    let kept = brought
        .kept
        .as_ref()
        .map(|k| format!("; the carried patches are kept in {}", k.display()))
        .unwrap_or_default();
    if !brought.conflicts.is_empty() {
        return Err(user_error(format!(
            "{} is at {}, but the carried changes conflict in {}, left marked there: {}{kept}",
            brought.dir.display(),
            brought.at,
            plural_files(brought.conflicts.len()),
            brought.conflicts.join(", ")
        ))
        .hinted("resolve them (`git status` lists them), then resume without --checkout"));
    }
    if !brought.unapplied.is_empty() {
        return Err(user_error(format!(
            "{} is at {}, but the carried changes did not apply: {}{kept}",
            brought.dir.display(),
            brought.at,
            brought.unapplied.join("; ")
        ))
        .hinted("apply them by hand with `git apply --3way`"));
    }
    eprintln!(
        "brought {} to the handoff: {}; {}",
        brought.dir.display(),
        brought.at,
        changes(state.files_changed, state.untracked)
    );
    Ok(Some(brought.dir))
}

fn plural_files(n: usize) -> String {
    if n == 1 {
        "1 file".into()
    } else {
        format!("{n} files")
    }
}

/// `branch main at 1a2b3c4; clean`, or why there is no checkout.
fn describe_here(dir: &Path) -> String {
    if let Err(e) = git::check_git() {
        return e.to_string();
    }
    match git::observe(dir) {
        Ok(o) => {
            let at = match &o.branch {
                Some(b) => format!("branch {b} at {}", short(&o.head)),
                None => format!("detached HEAD at {}", short(&o.head)),
            };
            format!("{at}; {}", changes(o.changed.len(), o.untracked.len()))
        }
        Err(GitError::NotACheckout(_)) => {
            "not a git checkout (--repo PATH names the session's checkout)".into()
        }
        Err(e) => e.to_string(),
    }
}

/// The carried changes, fetched from the server and checked against the
/// name they were recorded under; nothing when the handoff carried none.
fn fetch_carried(ctx: &Ctx, state: &GitState) -> Result<Carried, CommandError> {
    let Some(blob) = &state.blob else {
        return Ok(Carried::default());
    };
    let sync = open_sync(ctx)?;
    let t = BlobTransfer::new(&sync.client, &sync.identity, &sync.keys, &sync.paths.dir);
    let tmp = t
        .fetch_blob_to_temp(&blob.sha256, &sync.paths.dir)
        .map_err(|e| sync_error(e.into()))?
        .ok_or_else(|| {
            user_error(format!(
                "the server does not have the working tree this handoff carried (blob {})",
                blob.sha256
            ))
            .hinted("run `evi sync push` on the device that handed off, then try again")
        })?;
    Carried::read(tmp.path()).map_err(git_error)
}
