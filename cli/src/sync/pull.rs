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
use super::journal::{apply_journal, fetch_blobs};
use super::progress::Progress;
use super::push::rel_name;
use super::state::{FileState, Stat};
use super::{OpenedSegment, SegmentError, SegmentKind, open};
use crate::transcript::entry_id::IdChain;
use crate::transcript::line::parse_head;
use crate::transcript::lines::walk_file;
use std::ops::ControlFlow;

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
    progress.start(
        "pulling",
        status.newest_seq.saturating_sub(ctx.state.cursor),
    );
    loop {
        let page = ctx.client.pull(ctx.state.cursor)?;
        if page.records.is_empty() {
            break;
        }
        // Verify the whole page before writing anything.
        let mut opened = Vec::with_capacity(page.records.len());
        for r in &page.records {
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
        let mut appenders: BTreeMap<SessionId, SessionAppender> = BTreeMap::new();
        let mut blobs = Vec::new();
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
                    blobs.extend(named);
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
        report.blobs += fetch_blobs(ctx, &blobs)?;
        for a in appenders.values() {
            record_appends(ctx, a)?;
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

/// Keeps the next push from sending back what pull just wrote. If every file
/// pull touched was fully pushed before (or is new), the file states move
/// past the appended lines; otherwise the appended ids are remembered and
/// push passes over them.
fn record_appends(ctx: &mut SyncContext, a: &SessionAppender) -> Result<(), SyncError> {
    if a.touched.is_empty() {
        return Ok(());
    }
    let clean = a.touched.iter().all(|(day, t)| {
        let rel = rel_name(*day, &a.session);
        match (&t.before, ctx.state.files.get(&rel)) {
            (None, None) => true,
            (Some(st), Some(fs)) => st.matches(fs) && fs.offset == st.size,
            _ => false,
        }
    });
    if !clean {
        let skip = ctx.state.skip.entry(a.session.to_string()).or_default();
        for t in a.touched.values() {
            skip.extend(t.ids.iter().cloned());
        }
        return Ok(());
    }
    // Walk the session once to learn each touched file's new state.
    let mut chain = IdChain::default();
    let catalog_dir = ctx.home.transcripts_dir();
    let mut days: Vec<_> = std::fs::read_dir(&catalog_dir)
        .ctx(|| format!("cannot list {}", catalog_dir.display()))?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .parse::<evi_shared::Day>()
                .ok()
        })
        .collect();
    days.sort();
    for day in days {
        let path = catalog_dir
            .join(day.as_str())
            .join(format!("{}.jsonl", a.session));
        if !path.is_file() {
            continue;
        }
        let chain_before = chain.implicit_parent().map(str::to_owned);
        let mut fs = FileState {
            chain_before,
            ..FileState::default()
        };
        let end = walk_file(&path, 0, |offset, raw| {
            let head = parse_head(raw);
            chain.place(raw, head.ids);
            fs.last_start = offset;
            let mut with_nl = raw.to_vec();
            with_nl.push(b'\n');
            fs.last_hash = Some(super::push::sha_hex(&with_nl));
            ControlFlow::Continue(())
        })
        .ctx(|| format!("cannot read {}", path.display()))?;
        if !a.touched.contains_key(&day) || end.pending_bytes > 0 {
            continue;
        }
        let st = Stat::of(&path).ctx(|| format!("cannot stat {}", path.display()))?;
        fs.size = st.size;
        fs.mtime_ns = st.mtime_ns;
        fs.ino = st.ino;
        fs.offset = end.offset;
        fs.chain_after = chain.implicit_parent().map(str::to_owned);
        ctx.state.files.insert(rel_name(day, &a.session), fs);
    }
    Ok(())
}

impl From<SegmentError> for SyncError {
    fn from(source: SegmentError) -> Self {
        SyncError::Segment { seq: 0, source }
    }
}
