//! Taking checkpoint journal lines back: which lines a forget picks
//! ([`select`]), taking them out of a journal ([`take_out`], through
//! [`super::trim`], so the journal is replaced whole or not at all), and
//! removing the blobs no line of any journal here names any more
//! ([`remove_unnamed_blobs`]). Sync's side (the tombstone other devices and
//! the server act on) is `sync::engine::checkpoint_forget`.
//!
//! # Promises
//!
//! - A blob in `checkpoints/blobs/` is removed only when no line of this
//!   device's journal nor of any pulled journal (`devices/*/journal.jsonl`)
//!   names it, read after the lines were taken out. A line being written
//!   (no newline yet) is read as naming its blob too, so a checkpoint eVi
//!   is writing never loses its earlier contents.
//! - Lines eVi appends while a forget runs are kept (see [`super::trim`]).

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::journal::{Checkpoint, Journal, is_blob_name};
use super::trim::{TrimError, trim};

/// What a forget was asked to pick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pick {
    /// Lines with these seqs (every one, if a seq repeats).
    pub seqs: Vec<u64>,
    /// And every line whose `ts` is before this (ms since the epoch). A
    /// line without a readable time is never picked by age.
    pub before_ms: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    #[error("no checkpoint with seq {} in {path}", .seqs.iter().map(u64::to_string).collect::<Vec<_>>().join(", "))]
    UnknownSeqs { seqs: Vec<u64>, path: String },
    #[error(transparent)]
    Trim(#[from] TrimError),
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error(transparent)]
    Lock(#[from] super::lock::LockError),
    /// The caller's step before the journal is rewritten failed (nothing
    /// was changed).
    #[error("{0}")]
    Announce(String),
}

/// One line a forget took out (or would, with a dry run).
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct ForgottenLine {
    pub seq: u64,
    pub ts: Option<serde_json::Value>,
    pub path: String,
    pub op: String,
    pub blob: Option<String>,
}

/// What a forget did here.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq, Eq)]
pub struct Forgotten {
    pub lines: Vec<ForgottenLine>,
    /// Blobs removed from `checkpoints/blobs/` (with a dry run: that would be).
    pub blobs: Vec<String>,
}

/// What the caller is handed before the journal is rewritten, to tell
/// other devices (see [`forget`]).
pub struct Announce {
    /// The bytes of each line taken out.
    pub lines: Vec<Vec<u8>>,
    /// The blobs no journal line here will name once they are out.
    pub unnamed: BTreeSet<String>,
}

/// Forgets the lines of this device's journal under `checkpoints` that
/// `pick` names, holding the rewind lock: `announce` first (sync queues
/// its tombstone there, so a crash after the rewrite never leaves other
/// devices untold), then the journal rewritten, then the blobs no line
/// names removed. With `dry_run`, says what it would do and changes nothing.
pub fn forget(
    checkpoints: &Path,
    pick: &Pick,
    dry_run: bool,
    announce: impl FnOnce(&Announce) -> Result<(), String>,
) -> Result<Forgotten, ForgetError> {
    if !checkpoints.is_dir() {
        if pick.seqs.is_empty() {
            return Ok(Forgotten::default());
        }
        return Err(ForgetError::UnknownSeqs {
            seqs: pick.seqs.clone(),
            path: checkpoints.join("journal.jsonl").display().to_string(),
        });
    }
    let _lock = super::lock::RewindLock::acquire(checkpoints)?;
    let path = checkpoints.join("journal.jsonl");
    let journal = Journal::read(&path).map_err(|source| ForgetError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let picked = select(&journal, pick)?;
    let gone: HashSet<u64> = picked.iter().map(|c| c.span.start).collect();
    let named = blobs_named(checkpoints, &gone)?;
    let unnamed: BTreeSet<String> = (picked.iter())
        .filter_map(|c| c.blob.clone())
        .filter(|b| !named.contains(b))
        .collect();
    let mut out = Forgotten {
        lines: picked
            .iter()
            .map(|c| ForgottenLine {
                seq: c.seq,
                ts: c.ts.clone(),
                path: c.path.clone(),
                op: c.op.as_str().to_owned(),
                blob: c.blob.clone(),
            })
            .collect(),
        blobs: unnamed.iter().cloned().collect(),
    };
    if dry_run || picked.is_empty() {
        return Ok(out);
    }
    let lines = line_bytes(&journal, &picked)?;
    announce(&Announce {
        lines,
        unnamed: unnamed.clone(),
    })
    .map_err(ForgetError::Announce)?;
    take_out(&journal, &picked)?;
    out.blobs = remove_unnamed_blobs(checkpoints, &unnamed)?;
    Ok(out)
}

/// The checkpoints of `journal` that `pick` names, in file order. A seq
/// that names no line is an error (nothing is picked then).
pub fn select<'a>(journal: &'a Journal, pick: &Pick) -> Result<Vec<&'a Checkpoint>, ForgetError> {
    let wanted: BTreeSet<u64> = pick.seqs.iter().copied().collect();
    let unknown: Vec<u64> = wanted
        .iter()
        .copied()
        .filter(|s| !journal.checkpoints.iter().any(|c| c.seq == *s))
        .collect();
    if !unknown.is_empty() {
        return Err(ForgetError::UnknownSeqs {
            seqs: unknown,
            path: journal.path.display().to_string(),
        });
    }
    Ok(journal
        .checkpoints
        .iter()
        .filter(|c| {
            wanted.contains(&c.seq)
                || pick
                    .before_ms
                    .is_some_and(|b| c.ts_ms.is_some_and(|t| t < b))
        })
        .collect())
}

/// The bytes of each picked line, without its newline (what its keyed id
/// and its content hash are made of).
pub fn line_bytes(journal: &Journal, picked: &[&Checkpoint]) -> Result<Vec<Vec<u8>>, ForgetError> {
    let bytes = std::fs::read(&journal.path).map_err(|source| ForgetError::Io {
        path: journal.path.display().to_string(),
        source,
    })?;
    picked
        .iter()
        .map(|c| {
            let (s, e) = (c.span.start as usize, c.span.end as usize);
            bytes
                .get(s..e.saturating_sub(1))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| ForgetError::Io {
                    path: journal.path.display().to_string(),
                    source: io::Error::other("the journal is shorter than when it was read"),
                })
        })
        .collect()
}

/// The SHA-256 of a line's bytes: how a forget names the line to devices
/// that hold a copy of the journal.
pub fn line_hash(line: &[u8]) -> [u8; 32] {
    Sha256::digest(line).into()
}

/// Takes the picked lines out of `journal` (replaced atomically).
pub fn take_out(journal: &Journal, picked: &[&Checkpoint]) -> Result<(), ForgetError> {
    if picked.is_empty() {
        return Ok(());
    }
    let spans: Vec<_> = picked.iter().map(|c| c.span.clone()).collect();
    Ok(trim(journal, &spans)?)
}

/// The lines of `journal` whose content hash is in `hashes`.
pub fn lines_with_hashes<'a>(
    journal: &'a Journal,
    hashes: &HashSet<[u8; 32]>,
) -> Result<Vec<&'a Checkpoint>, ForgetError> {
    if journal.checkpoints.is_empty() || hashes.is_empty() {
        return Ok(Vec::new());
    }
    let all: Vec<&Checkpoint> = journal.checkpoints.iter().collect();
    let bytes = line_bytes(journal, &all)?;
    Ok(all
        .into_iter()
        .zip(bytes)
        .filter(|(_, b)| hashes.contains(&line_hash(b)))
        .map(|(c, _)| c)
        .collect())
}

/// Every blob a line of a journal under `checkpoints` names (this device's
/// and the pulled ones), the line being written included, but for the
/// lines of this device's journal that start at `except`.
pub fn blobs_named(
    checkpoints: &Path,
    except: &HashSet<u64>,
) -> Result<BTreeSet<String>, ForgetError> {
    let own = checkpoints.join("journal.jsonl");
    let mut paths = vec![own.clone()];
    if let Ok(devices) = super::devices::pulled(checkpoints) {
        paths.extend(devices.into_iter().map(|d| d.path));
    }
    let mut named = BTreeSet::new();
    for p in paths {
        let skip = |c: &&Checkpoint| p == own && except.contains(&c.span.start);
        let io = |source| ForgetError::Io {
            path: p.display().to_string(),
            source,
        };
        let j = Journal::read(&p).map_err(io)?;
        named.extend(
            (j.checkpoints.iter())
                .filter(|c| !skip(c))
                .filter_map(|c| c.blob.clone()),
        );
        if j.pending_bytes > 0 {
            // A line being written: whatever blob it names stays.
            let bytes = std::fs::read(&p).map_err(io)?;
            let tail = &bytes[bytes.len().saturating_sub(j.pending_bytes as usize)..];
            let text = String::from_utf8_lossy(tail);
            named.extend(
                text.split('"')
                    .filter(|s| is_blob_name(s))
                    .map(str::to_owned),
            );
        }
    }
    Ok(named)
}

/// Removes those of `candidates` from `checkpoints/blobs/` that no journal
/// line here names; the ones removed (those not there count as removed).
pub fn remove_unnamed_blobs(
    checkpoints: &Path,
    candidates: &BTreeSet<String>,
) -> Result<Vec<String>, ForgetError> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let named = blobs_named(checkpoints, &HashSet::new())?;
    let dir = checkpoints.join("blobs");
    let mut removed = Vec::new();
    for sha in candidates
        .iter()
        .filter(|s| is_blob_name(s) && !named.contains(*s))
    {
        let path = dir.join(sha);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ForgetError::Io {
                    path: path.display().to_string(),
                    source,
                });
            }
        }
        removed.push(sha.clone());
    }
    if !removed.is_empty() {
        let _ = crate::fsutil::sync_dir(&dir);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seq: u64, ts: &str, blob: Option<&str>) -> String {
        match blob {
            Some(b) => format!(
                "{{\"seq\":{seq},\"ts\":\"{ts}\",\"path\":\"/p/{seq}\",\"op\":\"modify\",\"blob\":\"{b}\",\"size\":1}}\n"
            ),
            None => format!(
                "{{\"seq\":{seq},\"ts\":\"{ts}\",\"path\":\"/p/{seq}\",\"op\":\"create\"}}\n"
            ),
        }
    }

    #[test]
    fn picks_by_seq_and_by_age_and_refuses_unknown_seqs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let text = format!(
            "{}{}{}{{\"seq\":4,\"path\":\"/p/4\",\"op\":\"create\"}}\n",
            line(1, "2026-01-01T00:00:00Z", None),
            line(2, "2026-03-01T00:00:00Z", None),
            line(3, "2026-06-01T00:00:00Z", None),
        );
        std::fs::write(&path, text).unwrap();
        let j = Journal::read(&path).unwrap();
        let seqs =
            |p: &Pick| -> Vec<u64> { select(&j, p).unwrap().iter().map(|c| c.seq).collect() };
        assert_eq!(
            seqs(&Pick {
                seqs: vec![3, 1],
                before_ms: None
            }),
            [1, 3]
        );
        let before = crate::transcript::line::parse_ts("2026-04-01T00:00:00Z");
        // Seq 4 has no time: never picked by age.
        assert_eq!(
            seqs(&Pick {
                seqs: vec![],
                before_ms: before
            }),
            [1, 2]
        );
        assert_eq!(
            seqs(&Pick {
                seqs: vec![3],
                before_ms: before
            }),
            [1, 2, 3]
        );
        let err = select(
            &j,
            &Pick {
                seqs: vec![2, 9, 7],
                before_ms: None,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("seq 7, 9"), "{err}");
    }

    #[test]
    fn a_blob_goes_only_when_no_journal_here_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path();
        let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        std::fs::create_dir_all(cp.join("blobs")).unwrap();
        for s in [&a, &b, &c] {
            std::fs::write(cp.join("blobs").join(s), s).unwrap();
        }
        let own = format!(
            "{}{}{}",
            line(1, "2026-01-01T00:00:00Z", Some(&a)),
            line(2, "2026-01-01T00:00:00Z", Some(&b)),
            line(3, "2026-01-01T00:00:00Z", Some(&a)),
        );
        std::fs::write(cp.join("journal.jsonl"), own).unwrap();
        // Another device's journal names c; a line being written names b.
        let other = cp.join("devices").join("laptop-12345678");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(
            other.join("journal.jsonl"),
            line(1, "2026-01-01T00:00:00Z", Some(&c)),
        )
        .unwrap();
        let j = Journal::read(&cp.join("journal.jsonl")).unwrap();
        let picked = select(
            &j,
            &Pick {
                seqs: vec![1, 2],
                before_ms: None,
            },
        )
        .unwrap();
        let lines = line_bytes(&j, &picked).unwrap();
        assert!(lines[0].starts_with(b"{\"seq\":1") && !lines[0].ends_with(b"\n"));
        take_out(&j, &picked).unwrap();
        let all: BTreeSet<String> = [a.clone(), b.clone(), c.clone()].into();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(cp.join("journal.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{{\"seq\":4,\"blob\":\"{b}\"").as_bytes())
            .unwrap();
        assert!(remove_unnamed_blobs(cp, &all).unwrap().is_empty());
        // The line being written is done and then forgotten too: b goes.
        std::fs::write(
            cp.join("journal.jsonl"),
            line(3, "2026-01-01T00:00:00Z", Some(&a)),
        )
        .unwrap();
        assert_eq!(remove_unnamed_blobs(cp, &all).unwrap(), vec![b.clone()]);
        assert!(cp.join("blobs").join(&a).exists() && cp.join("blobs").join(&c).exists());
        assert!(!cp.join("blobs").join(&b).exists());
        // By content hash, as another device names the lines it forgets.
        let j = Journal::read(&other.join("journal.jsonl")).unwrap();
        let h: HashSet<[u8; 32]> = [line_hash(
            line(1, "2026-01-01T00:00:00Z", Some(&c))
                .trim_end()
                .as_bytes(),
        )]
        .into();
        assert_eq!(lines_with_hashes(&j, &h).unwrap().len(), 1);
    }
}
