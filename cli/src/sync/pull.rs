//! `evi sync pull`: fetch records after the cursor, page by page; verify a
//! whole page (MAC, bound ids, formats) before writing any of it; append
//! entries as [`apply`](super::apply) says; fetch and verify the blobs the
//! pulled journals name; advance the cursor only once all that is durable.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use evi_shared::SessionId;

use super::apply::{ApplyError, SessionAppender};
use super::context::SyncContext;
use super::error::{IoContext, SyncError};
use super::journal::{apply_journal, fetch_blobs, journal_blobs};
use super::progress::Progress;
use super::push::rel_name;
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
    /// Set when pull stopped early because eVi is writing a session here.
    pub deferred: Option<String>,
}

pub fn pull(ctx: &mut SyncContext, progress: &dyn Progress) -> Result<PullReport, SyncError> {
    let mut report = PullReport::default();
    let mut sessions_seen = BTreeSet::new();
    let mut diverged = BTreeSet::new();
    let status = ctx.client.status()?;
    // Blobs an earlier pull found missing are asked for again first.
    report.blobs += super::blob_transfer::pull_missing_blobs(ctx)?;
    progress.start(
        "pulling",
        status.newest_seq.saturating_sub(ctx.state.cursor),
    );
    // Kept across pages: a long session arrives in many records.
    let mut appenders: BTreeMap<SessionId, SessionAppender> = BTreeMap::new();
    loop {
        let page = ctx.client.pull(ctx.state.cursor)?;
        if page.records.is_empty() {
            break;
        }
        // Verify the whole page before writing anything.
        let mut opened = Vec::with_capacity(page.records.len());
        for r in &page.records {
            // What this device pushed is here already.
            if r.device.as_deref() == Some(ctx.account.device_id.as_str()) {
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
            opened.push((r.seq, seg));
        }
        // Blobs the page's journals name are fetched and verified before
        // anything is written: a blob that fails its hash leaves the home as
        // it was. (A blob landing before its journal line is the safe order.)
        let mut named = Vec::new();
        for (_, seg) in &opened {
            if let OpenedSegment::Journal { device, lines } = seg {
                named.extend(journal_blobs(ctx, device, lines)?);
            }
        }
        report.blobs += fetch_blobs(ctx, &named)?;
        let mut applied_to = ctx.state.cursor;
        'records: for (seq, seg) in opened {
            match seg {
                OpenedSegment::Entries { session, entries } => {
                    if !appenders.contains_key(&session) {
                        let a = SessionAppender::load(&ctx.home, &session)
                            .ctx(|| format!("cannot read session {session}"))?;
                        appenders.insert(session.clone(), a);
                    }
                    let a = appenders.get_mut(&session).expect("inserted above");
                    for e in &entries {
                        if a.has(&e.id) {
                            continue;
                        }
                        let branched = a.branched;
                        match a.apply(e) {
                            Ok(()) => {}
                            Err(ApplyError::Busy(b)) => {
                                report.deferred = Some(b.to_string());
                                break 'records;
                            }
                            Err(ApplyError::Io(source)) => {
                                return Err(SyncError::Io {
                                    context: format!("cannot write session {session}"),
                                    source,
                                });
                            }
                        }
                        report.entries += 1;
                        sessions_seen.insert(session.clone());
                        if a.branched > branched {
                            diverged.insert(session.clone());
                        }
                    }
                }
                OpenedSegment::Journal { device, lines } => {
                    let n = lines.len() as u64;
                    let named = apply_journal(ctx, &device, lines)?;
                    if !named.is_empty() || device != ctx.account.device {
                        report.journal_lines += n;
                    }
                }
            }
            applied_to = seq;
            report.records += 1;
            progress.inc(1);
        }
        for a in appenders.values_mut() {
            a.sync()
                .ctx(|| format!("cannot write session {}", a.session))?;
        }
        for a in appenders.values_mut() {
            record_appends(ctx, a)?;
        }
        if report.deferred.is_none() {
            // Past this device's own records at the end of the page too.
            applied_to = applied_to.max(page.next_after);
        }
        ctx.state.cursor = applied_to;
        ctx.save_state()?;
        if report.deferred.is_some() || !page.more {
            break;
        }
    }
    progress.finish();
    report.sessions = sessions_seen.len() as u64;
    report.diverged = diverged.len() as u64;
    ctx.state.last_pull = Some(chrono::Utc::now().to_rfc3339());
    ctx.save_state()?;
    Ok(report)
}

/// Keeps the next push from sending back what pull just wrote. A file that
/// was fully pushed before (or is new) has its state moved past the appended
/// lines; otherwise the appended ids are remembered and push passes over them.
fn record_appends(ctx: &mut SyncContext, a: &mut SessionAppender) -> Result<(), SyncError> {
    for (day, t) in a.take_touched() {
        let rel = rel_name(day, &a.session);
        let clean = match (&t.before, ctx.state.files.get(&rel)) {
            (None, None) => true,
            (Some(st), Some(fs)) => st.matches(fs) && fs.offset == st.size,
            _ => false,
        };
        let new_state = if clean {
            a.file_state(day)
                .ctx(|| format!("cannot stat session {} of {day}", a.session))?
        } else {
            None
        };
        match new_state {
            Some(fs) => {
                ctx.state.files.insert(rel, fs);
            }
            None => ctx
                .state
                .skip
                .entry(a.session.to_string())
                .or_default()
                .extend(t.ids),
        }
    }
    Ok(())
}
