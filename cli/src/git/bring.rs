//! Bringing a checkout (or a new worktree of it) to the state a handoff
//! recorded: fetch, switch to the branch at the commit, apply the carried
//! changes. See the promises of [`super`]: nothing here rewrites a branch,
//! resets, cleans or commits, and a checkout with changes of its own is
//! refused before anything is done.

use std::path::{Path, PathBuf};

use super::carry::Carried;
use super::{Git, GitError, observe};
use crate::transcript::git_state::{GitState, short};

/// Where the recorded state goes.
#[derive(Debug, Clone)]
pub enum Target {
    /// The checkout itself (refused when it has changes of its own).
    Checkout,
    /// A new `git worktree` at this path; the checkout is left as it is.
    Worktree(PathBuf),
}

/// What [`bring`] did.
#[derive(Debug, Default)]
pub struct Brought {
    /// The work tree now at the recorded state.
    pub dir: PathBuf,
    /// Where HEAD is now, in words (`branch fix-auth at 3f2a9c1`).
    pub at: String,
    /// Things the user should know (a fetch that failed, another base).
    pub notes: Vec<String>,
    /// Files left with conflict markers.
    pub conflicts: Vec<String>,
    /// What git said of a patch that did not apply even three ways.
    pub unapplied: Vec<String>,
    /// Where the carried patches were kept when they did not apply cleanly.
    pub kept: Option<PathBuf>,
}

fn has_commit(g: &Git, id: &str) -> bool {
    g.ok(&["cat-file", "-e", &format!("{id}^{{commit}}")])
}

fn rev(g: &Git, name: &str) -> Option<String> {
    g.text(&["rev-parse", "-q", "--verify", &format!("{name}^{{commit}}")])
        .ok()
        .filter(|s| !s.is_empty())
}

/// Brings the checkout at `checkout` to `state`, applying `carried`.
/// `short_id` names the branch made when the local one has diverged.
pub fn bring(
    checkout: &Path,
    state: &GitState,
    carried: &Carried,
    target: &Target,
    short_id: &str,
) -> Result<Brought, GitError> {
    let obs = observe(checkout)?;
    if matches!(target, Target::Checkout) && !obs.clean() {
        let mut lines: Vec<String> = obs.changed.iter().map(|l| format!("  {l}")).collect();
        lines.extend(obs.untracked.iter().map(|p| format!("  ?? {p}")));
        return Err(GitError::Busy {
            path: obs.top,
            lines,
        });
    }
    let g = Git::new(&obs.top);
    let mut out = Brought::default();
    let same_remote = state
        .remotes
        .iter()
        .any(|r| obs.remotes.iter().any(|l| l.url == r.url));
    if !same_remote && !state.remotes.is_empty() {
        let urls = |rs: &[crate::transcript::git_state::Remote]| {
            rs.iter()
                .map(|r| r.url.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.notes.push(format!(
            "this checkout's remotes ({}) are not the ones the handoff recorded ({}): \
             is it the same repository? (--repo PATH names another checkout)",
            if obs.remotes.is_empty() {
                "none".into()
            } else {
                urls(&obs.remotes)
            },
            urls(&state.remotes)
        ));
    }
    let base = commit_here(&g, &obs, state, carried, short_id, &mut out.notes)?;
    if !carried.objects.is_empty() {
        g.run_with(&["unpack-objects", "-q"], &carried.objects)?;
    }
    out.dir = match target {
        Target::Checkout => obs.top.clone(),
        Target::Worktree(p) => {
            let p = std::path::absolute(p).map_err(|source| GitError::Io {
                context: format!("cannot find {}", p.display()),
                source,
            })?;
            g.run(&[
                "worktree",
                "add",
                "-q",
                "--detach",
                &p.to_string_lossy(),
                &base,
            ])?;
            // Said as the user will `cd` there, without `..` in it.
            p.canonicalize().unwrap_or(p)
        }
    };
    let w = Git::new(&out.dir);
    out.at = place(&w, &out.dir, state, &base, short_id, target, &mut out.notes)?;
    apply(&w, carried, short_id, &mut out)?;
    Ok(out)
}

/// The commit to build on: the recorded HEAD, fetched or unbundled when
/// it is not here; else (it went nowhere) the branch's tip as this
/// checkout knows it, said in a note.
fn commit_here(
    g: &Git,
    obs: &super::Observed,
    state: &GitState,
    carried: &Carried,
    short_id: &str,
    notes: &mut Vec<String>,
) -> Result<String, GitError> {
    if has_commit(g, &state.head) {
        return Ok(state.head.clone());
    }
    for r in &obs.remotes {
        if let Err(e) = g.run(&["fetch", "-q", &r.name]) {
            notes.push(format!("could not fetch {}: {e}", r.name));
        }
    }
    if !has_commit(g, &state.head) && !carried.bundle.is_empty() {
        let dir = PathBuf::from(g.text(&["rev-parse", "--absolute-git-dir"])?);
        let path = dir.join(format!("evi-handoff-{short_id}.bundle"));
        std::fs::write(&path, &carried.bundle).map_err(|source| GitError::Io {
            context: format!("cannot write {}", path.display()),
            source,
        })?;
        let unbundled = g.run(&["bundle", "unbundle", &path.to_string_lossy()]);
        let _ = std::fs::remove_file(&path);
        unbundled?;
    }
    if has_commit(g, &state.head) {
        return Ok(state.head.clone());
    }
    let mut candidates: Vec<String> = Vec::new();
    if let Some(b) = &state.branch {
        candidates.extend(
            obs.remotes
                .iter()
                .map(|r| format!("refs/remotes/{}/{b}", r.name)),
        );
        candidates.push(format!("refs/heads/{b}"));
    }
    candidates.push("HEAD".into());
    let (name, base) = candidates
        .iter()
        .find_map(|c| rev(g, c).map(|id| (c.clone(), id)))
        .ok_or_else(|| GitError::Unborn(obs.top.clone()))?;
    let name = name
        .strip_prefix("refs/remotes/")
        .or_else(|| name.strip_prefix("refs/heads/"))
        .unwrap_or(&name)
        .to_owned();
    notes.push(format!(
        "commit {} is not here and no remote has it (it was handed off without \
         --push-branch or --bundle): the changes go onto {name} at {} instead, and may conflict",
        short(&state.head),
        short(&base)
    ));
    Ok(base)
}

/// The worktrees other than `dir` that have `branch` checked out.
fn checked_out_elsewhere(w: &Git, dir: &Path, branch: &str) -> Result<bool, GitError> {
    let list = w.text(&["worktree", "list", "--porcelain"])?;
    let here = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
    let mut path = PathBuf::new();
    for line in list.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = PathBuf::from(p);
        } else if line.strip_prefix("branch refs/heads/") == Some(branch) {
            let there = path.canonicalize().unwrap_or_else(|_| path.clone());
            if there != here {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Switches `w` to the recorded branch at `base` without moving any
/// branch backwards or sideways; a new `evi/handoff-<id>` when it cannot.
fn place(
    w: &Git,
    dir: &Path,
    state: &GitState,
    base: &str,
    short_id: &str,
    target: &Target,
    notes: &mut Vec<String>,
) -> Result<String, GitError> {
    let at = short(base);
    let Some(b) = &state.branch else {
        if matches!(target, Target::Checkout) {
            w.run(&["switch", "-q", "--detach", base])?;
        }
        return Ok(format!("detached HEAD at {at}"));
    };
    let why = match rev(w, &format!("refs/heads/{b}")) {
        None => {
            w.run(&["switch", "-q", "-c", b, base])?;
            let upstream = w
                .text(&[
                    "for-each-ref",
                    "--format=%(refname:short)",
                    &format!("refs/remotes/*/{b}"),
                ])
                .unwrap_or_default();
            if let Some(u) = upstream.lines().next().filter(|u| !u.is_empty()) {
                let _ = w.run(&["branch", "-q", "--set-upstream-to", u, b]);
            }
            return Ok(format!("new branch {b} at {at}"));
        }
        Some(_) if checked_out_elsewhere(w, dir, b)? => {
            format!("{b} is checked out in another worktree")
        }
        Some(tip) if tip == base => {
            w.run(&["switch", "-q", b])?;
            return Ok(format!("branch {b} at {at}"));
        }
        Some(tip) if w.ok(&["merge-base", "--is-ancestor", &tip, base]) => {
            w.run(&["switch", "-q", b])?;
            w.run(&["merge", "-q", "--ff-only", base])?;
            return Ok(format!(
                "branch {b} at {at} (fast-forwarded from {})",
                short(&tip)
            ));
        }
        Some(tip) => format!("your {b} (at {}) has diverged from it", short(&tip)),
    };
    let mut n = 1;
    let name = loop {
        let name = if n == 1 {
            format!("evi/handoff-{short_id}")
        } else {
            format!("evi/handoff-{short_id}-{n}")
        };
        match rev(w, &format!("refs/heads/{name}")) {
            None => {
                w.run(&["switch", "-q", "-c", &name, base])?;
                break name;
            }
            Some(tip) if tip == base && !checked_out_elsewhere(w, dir, &name)? => {
                w.run(&["switch", "-q", &name])?;
                break name;
            }
            Some(_) => n += 1,
        }
    };
    notes.push(format!("{why}: the handoff is on a new branch {name}"));
    Ok(format!("new branch {name} at {at}"))
}

/// Applies the staged patch to index and work tree, then the unstaged one
/// to the work tree; three ways (conflicts marked) only when a patch does
/// not apply as it is, and then the patches are kept in the git folder.
fn apply(w: &Git, carried: &Carried, short_id: &str, out: &mut Brought) -> Result<(), GitError> {
    let mut trouble = false;
    for (patch, index) in [(&carried.staged, true), (&carried.unstaged, false)] {
        if patch.is_empty() {
            continue;
        }
        let mut plain = vec!["apply"];
        if index {
            plain.push("--index");
        }
        let mut check = plain.clone();
        check.push("--check");
        if w.run_with(&check, patch).is_ok() {
            w.run_with(&plain, patch)?;
            continue;
        }
        trouble = true;
        if let Err(e) = w.run_with(&["apply", "--3way"], patch) {
            out.unapplied.push(e.to_string());
        }
    }
    let u = w.run(&["diff", "--name-only", "--diff-filter=U", "-z"])?;
    out.conflicts = u
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if !out.conflicts.is_empty() {
        // git's message for a patch that merged with conflicts is not a failure.
        out.unapplied.clear();
    }
    if trouble {
        let dir =
            PathBuf::from(w.text(&["rev-parse", "--path-format=absolute", "--git-common-dir"])?)
                .join("evi-handoff")
                .join(short_id);
        let io = |source| GitError::Io {
            context: format!("cannot keep the patches in {}", dir.display()),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        std::fs::write(dir.join("staged.patch"), &carried.staged).map_err(io)?;
        std::fs::write(dir.join("unstaged.patch"), &carried.unstaged).map_err(io)?;
        out.kept = Some(dir);
    }
    Ok(())
}
