//! The checkpoint journal as each device's own stream.
//!
//! A device pushes the lines of its `checkpoints/journal.jsonl` (each keyed by
//! its line number, which an append-only file never changes) and the blobs
//! they name, blobs first, so no device ever pulls a line whose blob is not
//! on the server. Other devices keep pulled journals apart, in
//! `checkpoints/devices/<device>/journal.jsonl`, and their blobs in the shared
//! `checkpoints/blobs/` (named by SHA-256, verified, never rewritten).

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::Deserialize;

use super::client::ClientError;
use super::context::SyncContext;
use super::error::{IoContext, SyncError};
use super::push::{Mark, PushReport, Uploader, prefix_intact};
use super::state::{JournalState, Stat, line_hash};
use super::{BlobWrite, JournalLine, open_blob_to_path, seal_blob, seal_journal};
use crate::transcript::lines::walk_file;

/// The one field of a journal line sync needs.
#[derive(Deserialize)]
struct BlobRef {
    #[serde(default)]
    blob: Option<String>,
}

/// The blob a journal line names, if it is a well-formed SHA-256.
fn blob_of(line: &[u8]) -> Option<String> {
    let b = serde_json::from_slice::<BlobRef>(line).ok()?.blob?;
    let ok = b.len() == 64
        && b.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    ok.then_some(b)
}

fn blob_path(ctx: &SyncContext, sha: &str) -> PathBuf {
    ctx.home.checkpoints_dir().join("blobs").join(sha)
}

pub(super) fn push_journal(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    let path = ctx.home.checkpoints_dir().join("journal.jsonl");
    let Ok(stat) = Stat::of(&path) else {
        return Ok(());
    };
    let prev = ctx.state.journal.clone();
    if stat.matches(&prev.file) {
        return Ok(());
    }
    let mut js = if stat.size >= prev.file.offset && prefix_intact(&path, &prev.file) {
        prev
    } else {
        JournalState::default()
    };
    js.file.size = stat.size;
    js.file.mtime_ns = stat.mtime_ns;
    js.file.ino = stat.ino;
    let budget = up.segment_budget();
    let device = ctx.account.device.clone();
    let mut lines: Vec<JournalLine> = Vec::new();
    let mut bytes = 0;
    let mut failure = None;
    let start = js.file.offset;
    let end = walk_file(&path, start, |offset, raw| {
        js.lines += 1;
        js.file.last_start = offset;
        js.file.offset = offset + raw.len() as u64 + 1;
        js.file.last_hash = Some(line_hash(raw));
        bytes += raw.len();
        lines.push(JournalLine {
            seq: js.lines,
            line: raw.to_vec(),
        });
        if bytes >= budget {
            let mid = JournalState {
                file: js.file.mid_file(),
                ..js.clone()
            };
            if let Err(e) = send_lines(ctx, up, report, &device, &mut lines, mid) {
                failure = Some(e);
                return ControlFlow::Break(());
            }
            bytes = 0;
        }
        ControlFlow::Continue(())
    })
    .ctx(|| format!("cannot read {}", path.display()))?;
    if let Some(e) = failure {
        return Err(e);
    }
    js.file.offset = end.offset;
    send_lines(ctx, up, report, &device, &mut lines, js)
}

/// Uploads the blobs `lines` name, then queues the lines as one segment.
fn send_lines(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    device: &str,
    lines: &mut Vec<JournalLine>,
    mark: JournalState,
) -> Result<(), SyncError> {
    if lines.is_empty() {
        up.mark(vec![Mark::Journal(mark)]);
        return Ok(());
    }
    let shas: BTreeSet<String> = lines.iter().filter_map(|l| blob_of(&l.line)).collect();
    upload_blobs(ctx, report, shas)?;
    let sealed =
        seal_journal(&ctx.keys, &ctx.identity, device, lines).map_err(|e| SyncError::Io {
            context: "cannot seal the checkpoint journal".into(),
            source: std::io::Error::other(e),
        })?;
    report.journal_lines += lines.len() as u64;
    lines.clear();
    up.add(ctx, report, sealed, vec![Mark::Journal(mark)])
}

fn upload_blobs(
    ctx: &mut SyncContext,
    report: &mut PushReport,
    shas: BTreeSet<String>,
) -> Result<(), SyncError> {
    let present: Vec<String> = shas
        .into_iter()
        .filter(|s| blob_path(ctx, s).is_file())
        .collect();
    for chunk in present.chunks(1000) {
        let names = chunk.iter().map(|s| ctx.keys.blob_key(s)).collect();
        let missing: BTreeSet<_> = ctx.client.missing_blobs(names)?.into_iter().collect();
        for sha in chunk {
            let name = ctx.keys.blob_key(sha);
            if !missing.contains(&name) {
                continue;
            }
            let src = blob_path(ctx, sha);
            let plain =
                std::fs::File::open(&src).ctx(|| format!("cannot read {}", src.display()))?;
            let tmp = tempfile::NamedTempFile::new_in(&ctx.paths.dir)
                .ctx(|| "cannot create a temp file in the sync folder".into())?;
            let (_, digest) =
                seal_blob(&ctx.identity, plain, tmp.as_file()).map_err(|e| SyncError::Io {
                    context: format!("cannot encrypt {}", src.display()),
                    source: std::io::Error::other(e),
                })?;
            if digest.sha256_hex != *sha {
                crate::commands::warn(&format!(
                    "{} does not match its name (changed on disk?); not uploaded",
                    src.display()
                ));
                continue;
            }
            ctx.client.put_blob(&name, tmp.path())?;
            report.blobs_uploaded += 1;
        }
    }
    Ok(())
}

/// Appends another device's journal lines not yet here; returns the blobs
/// they name.
pub(super) fn apply_journal(
    ctx: &mut SyncContext,
    device: &str,
    mut lines: Vec<JournalLine>,
) -> Result<Vec<String>, SyncError> {
    if device == ctx.account.device {
        return Ok(Vec::new());
    }
    let last = applied(ctx, device)?;
    lines.retain(|l| l.seq > last);
    lines.sort_by_key(|l| l.seq);
    if lines.is_empty() {
        return Ok(Vec::new());
    }
    // `device` passed `check_device` when the segment was opened: it is a
    // single path component that cannot climb out of `devices/`.
    let dir = ctx.home.checkpoints_dir().join("devices").join(device);
    std::fs::create_dir_all(&dir).ctx(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("journal.jsonl");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .ctx(|| format!("cannot open {}", path.display()))?;
    let mut buf = Vec::new();
    let mut blobs = Vec::new();
    for l in &lines {
        buf.extend_from_slice(&l.line);
        buf.push(b'\n');
        blobs.extend(blob_of(&l.line));
    }
    f.write_all(&buf)
        .and_then(|()| f.sync_all())
        .ctx(|| format!("cannot write {}", path.display()))?;
    Ok(blobs)
}

/// The blobs named by those of `device`'s lines that [`apply_journal`]
/// would append.
pub(super) fn journal_blobs(
    ctx: &SyncContext,
    device: &str,
    lines: &[JournalLine],
) -> Result<Vec<String>, SyncError> {
    if device == ctx.account.device {
        return Ok(Vec::new());
    }
    let last = applied(ctx, device)?;
    Ok(lines
        .iter()
        .filter(|l| l.seq > last)
        .filter_map(|l| blob_of(&l.line))
        .collect())
}

/// How many of `device`'s lines are here: its journal is appended in seq
/// order from 1, so the line count is the last seq applied. Counting instead
/// of remembering means a pull interrupted after appending never appends the
/// same lines twice.
fn applied(ctx: &SyncContext, device: &str) -> Result<u64, SyncError> {
    let path = ctx
        .home
        .checkpoints_dir()
        .join("devices")
        .join(device)
        .join("journal.jsonl");
    match std::fs::read(&path) {
        Ok(bytes) => Ok(bytes.iter().filter(|&&b| b == b'\n').count() as u64),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(SyncError::Io {
            context: format!("cannot read {}", path.display()),
            source: e,
        }),
    }
}

/// Downloads, verifies and stores blobs that are not here yet.
pub(super) fn fetch_blobs(ctx: &mut SyncContext, shas: &[String]) -> Result<u64, SyncError> {
    let mut fetched = 0;
    for sha in shas.iter().collect::<BTreeSet<_>>() {
        let dest = blob_path(ctx, sha);
        if dest.exists() {
            continue;
        }
        let name = ctx.keys.blob_key(sha);
        let body = match ctx.client.get_blob(&name) {
            Ok(b) => b,
            Err(ClientError::Api { status: 404, .. }) => {
                crate::commands::warn(&format!("blob {sha} is not on the server; skipped"));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match open_blob_to_path(&ctx.identity, sha, body, &dest) {
            Ok(BlobWrite::Written(_)) => fetched += 1,
            Ok(BlobWrite::AlreadyPresent) => {}
            Err(source) => {
                return Err(SyncError::Blob {
                    name: sha.clone(),
                    source,
                });
            }
        }
    }
    Ok(fetched)
}
