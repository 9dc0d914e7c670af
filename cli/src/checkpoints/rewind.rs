//! Undoing eVi's latest writes from this device's journal.
//!
//! # Promises
//!
//! - Writes are undone newest first, each on its own: a `modify` gets its
//!   saved bytes back, a `create` is deleted, a `skip` cannot be undone
//!   (nothing was saved) and says so. One that fails (a blob that is not
//!   here, a path that cannot be written) does not stop the others.
//! - Only then is the journal trimmed ([`super::trim`], atomic): the lines
//!   of writes that were undone or can never be (`skip`, a line naming no
//!   blob) leave it, so the next rewind goes further back. A write that
//!   failed for a reason that may pass stays in the journal, to be tried
//!   again; nothing is lost. A process killed before the trim leaves every
//!   line in place, and undoing them again gives the same files.
//! - A dry run reads and checks, and writes nothing at all.

use std::path::{Path, PathBuf};

use super::journal::{Checkpoint, Journal, Op, Unreadable};
use super::lock::{LockError, RewindLock};
use super::restore::{self, Overwrite, Removed, RestoreError};
use super::trim::{TrimError, trim};

/// Which writes to undo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The latest write only.
    Latest,
    /// Every write with this seq or a later one.
    From(u64),
}

/// What undoing one write did (or, in a dry run, would do).
#[derive(Debug)]
pub enum Outcome {
    Restored {
        bytes: u64,
    },
    Deleted,
    /// eVi created the file and it is not there any more.
    AlreadyGone,
    WouldRestore,
    WouldDelete,
    /// Not undone: why (a `skip` is [`RestoreError::NotSnapshotted`]).
    Failed(RestoreError),
}

impl Outcome {
    /// The write is undone (or would be).
    pub fn ok(&self) -> bool {
        matches!(
            self,
            Self::Restored { .. }
                | Self::Deleted
                | Self::AlreadyGone
                | Self::WouldRestore
                | Self::WouldDelete
        )
    }

    /// The line leaves the journal: there is nothing more to do for it.
    fn settled(&self) -> bool {
        self.ok()
            || matches!(
                self,
                Self::Failed(RestoreError::NotSnapshotted | RestoreError::NoBlob)
            )
    }
}

/// One write and what became of it.
#[derive(Debug)]
pub struct Undone {
    pub checkpoint: Checkpoint,
    pub outcome: Outcome,
}

/// What a rewind did, for its summary.
#[derive(Debug, Default)]
pub struct Report {
    /// Newest first.
    pub undone: Vec<Undone>,
    /// Checkpoints left in the journal after it.
    pub left: usize,
    /// Lines of the journal that are not checkpoints (left as they are).
    pub unreadable: Vec<Unreadable>,
    /// The [`digest`] of the writes picked: what a plan (a dry run) shows,
    /// and what [`rewind_planned`] checks before it undoes anything.
    pub digest: String,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.undone.iter().filter(|u| !u.outcome.ok()).count()
    }

    /// Writes not undone that stay in the journal, to be tried again.
    pub fn kept(&self) -> usize {
        self.undone.iter().filter(|u| !u.outcome.settled()).count()
    }
}

/// Why a rewind could not start, or could not trim the journal.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("there is no checkpoint to rewind in {}", .0.display())]
    Empty(PathBuf),
    #[error("no checkpoint has seq {seq} or later (the latest is {latest})")]
    NoSuchSeq { seq: u64, latest: u64 },
    #[error("{} ends in a line eVi is still writing", .0.display())]
    Pending(PathBuf),
    #[error(
        "the checkpoint journal changed since the plan was made (it now picks {now} writes \
         to undo): nothing was undone"
    )]
    Changed { now: usize },
    #[error(transparent)]
    Trim(#[from] TrimError),
}

/// A digest of the checkpoints a rewind would undo, newest first: each
/// one's content (a line is known by its content, not its number, which a
/// trim changes). Equal digests mean the same writes, in the same order.
pub fn digest(picked: &[&Checkpoint]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for c in picked {
        let ts = c.ts.as_ref().map(|v| v.to_string()).unwrap_or_default();
        let size = c.size.map(|n| n.to_string()).unwrap_or_default();
        for part in [
            &c.seq.to_string(),
            &ts,
            &c.path,
            c.op.as_str(),
            c.blob.as_deref().unwrap_or(""),
            &size,
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        h.update([b'\n']);
    }
    hex::encode(h.finalize())
}

/// The checkpoints `target` names, newest first.
pub fn select(journal: &Journal, target: Target) -> Result<Vec<&Checkpoint>, RewindError> {
    let latest = journal
        .latest()
        .ok_or_else(|| RewindError::Empty(journal.path.clone()))?;
    match target {
        Target::Latest => Ok(vec![latest]),
        Target::From(seq) => {
            let picked: Vec<_> = journal
                .checkpoints
                .iter()
                .rev()
                .filter(|c| c.seq >= seq)
                .collect();
            if picked.is_empty() {
                let latest = journal.checkpoints.iter().map(|c| c.seq).max();
                return Err(RewindError::NoSuchSeq {
                    seq,
                    latest: latest.unwrap_or(0),
                });
            }
            Ok(picked)
        }
    }
}

/// Undoes the writes `target` names from the journal in `checkpoints`,
/// telling `each` about every one as it is done, then trims the journal
/// (not in a dry run).
pub fn rewind(
    checkpoints: &Path,
    target: Target,
    dry_run: bool,
    each: impl FnMut(&Undone),
) -> Result<Report, RewindError> {
    run(checkpoints, target, dry_run, None, each)
}

/// [`rewind`] of what a plan (a dry run whose [`Report::digest`] was
/// `planned`) showed: refused with [`RewindError::Changed`], before any
/// file is touched, if the journal now picks other writes. The check is
/// made under the rewind lock, so nothing can change it in between.
pub fn rewind_planned(
    checkpoints: &Path,
    target: Target,
    planned: &str,
    each: impl FnMut(&Undone),
) -> Result<Report, RewindError> {
    run(checkpoints, target, false, Some(planned), each)
}

fn run(
    checkpoints: &Path,
    target: Target,
    dry_run: bool,
    planned: Option<&str>,
    mut each: impl FnMut(&Undone),
) -> Result<Report, RewindError> {
    // A dry run takes no lock: it writes nothing, not even a swept temp.
    let _lock = if dry_run {
        None
    } else {
        Some(RewindLock::acquire(checkpoints).map_err(|e| match e {
            LockError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                RewindError::Empty(checkpoints.join("journal.jsonl"))
            }
            e => e.into(),
        })?)
    };
    let path = checkpoints.join("journal.jsonl");
    let journal = Journal::read(&path).map_err(|source| RewindError::Read {
        path: path.clone(),
        source,
    })?;
    let picked = select(&journal, target)?;
    let now = digest(&picked);
    if let Some(planned) = planned
        && planned != now
    {
        return Err(RewindError::Changed { now: picked.len() });
    }
    if journal.pending_bytes > 0 && !dry_run {
        return Err(RewindError::Pending(path));
    }
    let blobs = checkpoints.join("blobs");
    let mut report = Report {
        unreadable: journal.unreadable.clone(),
        digest: now,
        ..Report::default()
    };
    for c in picked {
        let outcome = undo(&blobs, c, dry_run);
        let undone = Undone {
            checkpoint: c.clone(),
            outcome,
        };
        each(&undone);
        report.undone.push(undone);
    }
    let settled: Vec<_> = report
        .undone
        .iter()
        .filter(|u| u.outcome.settled())
        .map(|u| u.checkpoint.span.clone())
        .collect();
    report.left = journal.checkpoints.len();
    if dry_run || settled.is_empty() {
        return Ok(report);
    }
    trim(&journal, &settled)?;
    report.left -= settled.len();
    Ok(report)
}

fn undo(blobs: &Path, c: &Checkpoint, dry_run: bool) -> Outcome {
    let path = match (&c.op, restore::recorded_path(&c.path)) {
        (Op::Skip, _) => return Outcome::Failed(RestoreError::NotSnapshotted),
        (Op::Other(op), _) => return Outcome::Failed(RestoreError::UnknownOp(op.clone())),
        (_, Err(e)) => return Outcome::Failed(e),
        (_, Ok(p)) => p,
    };
    let result = match (&c.op, c.blob.as_deref()) {
        (Op::Modify, None) => Err(RestoreError::NoBlob),
        (Op::Modify, Some(sha)) if dry_run => {
            restore::check_write(blobs, sha, &path, Overwrite::Replace)
                .map(|()| Outcome::WouldRestore)
        }
        (Op::Modify, Some(sha)) => restore::write_blob(blobs, sha, &path, Overwrite::Replace)
            .map(|bytes| Outcome::Restored { bytes }),
        (_, _) if dry_run => restore::check_remove(&path).map(|r| match r {
            Removed::Deleted => Outcome::WouldDelete,
            Removed::AlreadyGone => Outcome::AlreadyGone,
        }),
        (_, _) => restore::remove_created(&path).map(|r| match r {
            Removed::Deleted => Outcome::Deleted,
            Removed::AlreadyGone => Outcome::AlreadyGone,
        }),
    };
    result.unwrap_or_else(Outcome::Failed)
}
