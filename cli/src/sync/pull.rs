//! `evi sync pull`: fetch records after the cursor, page by page; verify a
//! whole page (MAC, bound ids, formats) before writing any of it; append
//! entries as [`apply`](super::apply) says, or keep them waiting in
//! [`pending`](super::pending); fetch and verify the blobs the pulled
//! journals name; advance the cursor only once all that is durable.

use std::str::FromStr;

use super::context::SyncContext;
use super::error::SyncError;
use super::incoming::drain_pending;
use super::journal::{apply_journal, fetch_blobs, journal_blobs};
use super::progress::Progress;
use super::{OpenedSegment, SegmentKind, open};

/// What a pull did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct PullReport {
    pub entries: u64,
    pub sessions: u64,
    pub blobs: u64,
    pub journal_lines: u64,
    /// Sessions that got an entry branching from the local tip.
    pub diverged: u64,
    pub records: u64,
    /// Why some entries wait, for people (`None` when nothing waits).
    pub deferred: Option<String>,
    /// Entries kept in `sync/pending/` until their file is whole.
    pub waiting: u64,
}

/// How to pull.
#[derive(Debug, Default, Clone, Copy)]
pub struct PullOptions {
    /// From the first record, this device's own too: brings back what this
    /// device pushed and then lost (an old backup restored, a file cut
    /// short). Entries already here are passed over by id; the cursor never
    /// moves back.
    pub all: bool,
}

pub fn pull(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: PullOptions,
) -> Result<PullReport, SyncError> {
    let mut report = PullReport::default();
    let status = ctx.client.status()?;
    // Blobs an earlier pull found missing are asked for again first.
    report.blobs += super::blob_transfer::pull_missing_blobs(ctx)?;
    let mut after = if opts.all { 0 } else { ctx.state.cursor };
    progress.start("pulling", status.newest_seq.saturating_sub(after));
    // What waited since an earlier sync goes in first, in its order.
    let mut incoming = drain_pending(ctx)?;
    loop {
        let page = ctx.client.pull(after)?;
        if page.records.is_empty() {
            break;
        }
        // Verify the whole page before writing anything.
        let mut opened = Vec::with_capacity(page.records.len());
        for r in &page.records {
            // What this device pushed is here already (unless asked for all).
            if !opts.all
                && r.device
                    .as_deref()
                    .is_some_and(|d| ctx.account.is_own_device(d))
            {
                continue;
            }
            let kind = SegmentKind::from_str(&r.kind).map_err(|e| SyncError::Segment {
                seq: r.seq,
                source: e,
            })?;
            let seg = open(
                &ctx.keys,
                &ctx.identity,
                &r.stream,
                kind,
                &r.entry_ids,
                &r.ciphertext.0,
            )
            .map_err(|source| SyncError::Segment { seq: r.seq, source })?;
            opened.push(seg);
        }
        // Blobs the page's journals name are fetched and verified before
        // anything is written: a blob that fails its hash leaves the home as
        // it was. (A blob landing before its journal line is the safe order.)
        let mut named = Vec::new();
        for seg in &opened {
            if let OpenedSegment::Journal { device, lines } = seg {
                named.extend(journal_blobs(ctx, device, lines)?);
            }
        }
        report.blobs += fetch_blobs(ctx, &named)?;
        for seg in opened {
            match seg {
                OpenedSegment::Entries { session, entries } => {
                    incoming.queue(session, entries);
                }
                OpenedSegment::Journal { device, lines } => {
                    let (appended, _) = apply_journal(ctx, &device, lines)?;
                    report.journal_lines += appended;
                }
            }
            report.records += 1;
        }
        incoming.apply(ctx)?;
        incoming.sync()?;
        // Entries that wait are safe in sync/pending/: the cursor moves past
        // every record of the page.
        after = page.next_after;
        ctx.state.cursor = ctx.state.cursor.max(after);
        ctx.save_state()?;
        progress.inc(page.records.len() as u64);
        if !page.more {
            break;
        }
    }
    progress.finish();
    let applied = &incoming.applied;
    report.entries = applied.entries;
    report.sessions = applied.sessions.len() as u64;
    report.diverged = applied.diverged.len() as u64;
    report.waiting = incoming.waiting();
    if report.waiting > 0 {
        report.deferred = Some(format!(
            "{} entries wait until eVi finishes the line it is writing (see `evi sync status`)",
            report.waiting
        ));
    }
    ctx.state.last_pull = Some(chrono::Utc::now().to_rfc3339());
    ctx.save_state()?;
    Ok(report)
}
