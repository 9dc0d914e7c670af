//! `evi sync pull`: fetch records after the cursor, page by page; verify a
//! whole page (MAC, bound ids, formats) before writing any of it; append
//! entries as [`apply`](crate::sync::engine::apply) says, or keep them waiting in
//! [`pending`](crate::sync::engine::pending); fetch and verify the blobs the pulled
//! journals name; advance the cursor only once all that is durable.
//!
//! A record that arrives whole and fails its checks is not applied and
//! does not stop the others: it is recorded as [`damaged`](crate::sync::state::damaged)
//! in the state save that moves the cursor past it, fetched again by every
//! later pull, and named in the report until it opens.
//!
//! [`pull_session`] does the same for one session's stream alone (resume,
//! `pull --session`, the viewer's pull button): it never moves the global
//! cursor, only that session's own (`session_cursors`), so the next full
//! pull still reads every other record, and passes over the entries it
//! brought by id.

use std::str::FromStr;

use evi_shared::{KeyedId, SessionId};

use crate::sync::engine::cores::on_all_cores;
use crate::sync::engine::incoming::{Incoming, drain_pending};
use crate::sync::engine::journal::{apply_journal, fetch_blobs, journal_blobs};
use crate::sync::error::SyncError;
use crate::sync::progress::Progress;
use crate::sync::remote::records::{Page, PulledRecord};
use crate::sync::state::JournalState;
use crate::sync::state::context::SyncContext;
use crate::sync::state::damaged::{self, DamagedRecord};
use crate::sync::state::high_water::{HighWater, WentBack};
use crate::sync::{OpenedSegment, SegmentKind, open};

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
    /// Set when the server holds less than this device saw it hold (see
    /// [`high_water`](crate::sync::state::high_water)): what went back, for people.
    pub server_went_back: Option<String>,
    /// Requests sent again after a transient failure (see `PushReport`).
    pub retries: u64,
    /// Records refused as damaged, passed and remembered (this pull's and
    /// earlier ones' not healed yet): the pull applied everything else.
    pub damaged: Vec<DamagedRecord>,
    /// Of `entries` and `sessions`: those of other agents' sessions.
    pub agent_entries: u64,
    pub agent_sessions: u64,
    /// What people should know about other agents' sessions.
    pub agent_notes: Vec<String>,
    /// Entries of other agents' sessions kept in `sync/pending-agents/`.
    pub waiting_agents: u64,
    /// Sessions of agents not turned on here, passed over (`[agents]`).
    pub agents_not_enabled: std::collections::BTreeMap<crate::source::Agent, u64>,
    /// What pulled forgets and undos did here (see [`crate::sync::engine::forget`]).
    pub forget: crate::sync::engine::forget::Applied,
    /// What pulled checkpoint forgets did here.
    pub checkpoint_forget: crate::sync::engine::checkpoint_forget::Done,
    /// Forgets and undos among the pulled records (applied before or now).
    #[serde(skip)]
    pub tombstones_seen: u64,
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

/// Which records a pull reads, and which cursor it moves.
#[derive(Debug, Clone)]
enum Scope {
    /// Every stream, from the global cursor.
    Everything,
    /// One session's stream, from that session's cursor.
    Session { session: SessionId, stream: KeyedId },
}

pub fn pull(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: PullOptions,
) -> Result<PullReport, SyncError> {
    pull_with(ctx, progress, opts, false)
}

/// [`pull`], but when the server's history went back (see
/// [`high_water`](crate::sync::state::high_water)) it mends as `pull --all` does instead
/// of only saying so: for `evi sync watch`, which has nobody to run `pull
/// --all` and would otherwise wait for the seqs the restored server gives
/// out again below its cursor. The report says what went back all the same.
pub fn pull_mending(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
) -> Result<PullReport, SyncError> {
    pull_with(ctx, progress, PullOptions::default(), true)
}

fn pull_with(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: PullOptions,
    mend: bool,
) -> Result<PullReport, SyncError> {
    let status = ctx.client.status()?;
    let mut went_back = ctx.state.high_water.went_back(&status);
    // Fewer records and entries at the same or a later seq may be a forget
    // the server committed (it deletes the stream's records): the pull
    // says whether one came.
    let counts_only = went_back.as_ref().is_some_and(WentBack::counts_only);
    ctx.state.high_water.observe(&status);
    let caps = ctx.client.capabilities()?;
    let all = opts.all || (mend && went_back.is_some() && !counts_only);
    let opts = PullOptions { all };
    let first = if all { 0 } else { ctx.state.cursor };
    progress.start("pulling", status.newest_seq.saturating_sub(first));
    let (mut report, pulled_to) = pull_scope(ctx, progress, opts, &caps, first, Scope::Everything)?;
    if counts_only && !all {
        if report.tombstones_seen > 0 {
            // A forget explains the lower counts: they are the marks now.
            went_back = None;
            ctx.state.high_water.records = status.records;
            ctx.state.high_water.entries = status.entries;
        } else if mend {
            ctx.save_state()?;
            return pull_with(ctx, progress, PullOptions { all: true }, mend);
        }
    }
    report.server_went_back = went_back.as_ref().map(ToString::to_string);
    if went_back.is_some() && all {
        // Everything the server holds now is here: its history as it now
        // stands is the one to follow, and to measure it by from now on.
        ctx.state.cursor = pulled_to;
        // A session fetched alone may have its own cursor past seqs the
        // server now gives out again: it starts over with the global one.
        ctx.state.session_cursors.clear();
        ctx.state.high_water = HighWater::default();
        ctx.state.high_water.observe(&status);
        ctx.state.high_water.observe_seq(pulled_to);
        // What this device pushed may be what the server lost: the next
        // push reads every file and journal line again, as with a lost
        // state.json, and the server keeps by entry id what it still has.
        ctx.state.files.clear();
        ctx.state.skip.clear();
        ctx.state.journal = JournalState {
            name: ctx.state.journal.name.take(),
            ..JournalState::default()
        };
        // So may the forgets: sent again, the restored server deletes
        // what it got back of those sessions.
        crate::sync::engine::forget::local::resend_all(ctx)?;
    }
    ctx.state.last_pull = Some(chrono::Utc::now().to_rfc3339());
    ctx.save_state()?;
    crate::sync::engine::rotate::local::drop_old_identity(&ctx.paths);
    report.retries = ctx.client.retries();
    Ok(report)
}

/// Fetches and applies the records of `session` alone, this device's own
/// too (it may have pushed them and lost its files since: what is here is
/// passed over by id), after the global cursor or the session's own,
/// whichever is further: what full pulls applied is not fetched again. The
/// global cursor does not move. From the stream's first record instead
/// when no file of the session is here (the cursors say nothing of a
/// session that was lost) or when the server's history went back (its new
/// records may have seqs below the cursors; said in the report, as pull
/// says it). `None` from a server that cannot answer for one stream (older
/// than `stream_pull`): the caller pulls everything instead.
pub fn pull_session(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    session: &SessionId,
) -> Result<Option<PullReport>, SyncError> {
    let caps = ctx.client.capabilities()?;
    if !caps.stream_pull {
        return Ok(None);
    }
    let status = ctx.client.status()?;
    let went_back = ctx.state.high_water.went_back(&status);
    ctx.state.high_water.observe(&status);
    if went_back.is_some() {
        ctx.state.session_cursors.remove(session.as_str());
    }
    let first = if went_back.is_some() || !session_is_here(ctx, session) {
        0
    } else {
        ctx.state
            .session_cursors
            .get(session.as_str())
            .copied()
            .unwrap_or(0)
            .max(ctx.state.cursor)
    };
    // No bar: the number of the session's records is not known, and a
    // session alone takes the time of its own records.
    let scope = Scope::Session {
        session: session.clone(),
        stream: ctx.keys.session_key(session),
    };
    let opts = PullOptions { all: true };
    let (mut report, _) = pull_scope(ctx, progress, opts, &caps, first, scope)?;
    report.server_went_back = went_back.as_ref().map(ToString::to_string);
    // The marks observed, even when no page came.
    ctx.save_state()?;
    report.retries = ctx.client.retries();
    Ok(Some(report))
}

/// Whether a file of `session` is in a day folder here.
fn session_is_here(ctx: &SyncContext, session: &SessionId) -> bool {
    let Ok(days) = std::fs::read_dir(ctx.home.transcripts_dir()) else {
        return false;
    };
    let name = format!("{session}.jsonl");
    days.flatten().any(|d| d.path().join(&name).is_file())
}

fn pull_scope(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: PullOptions,
    caps: &evi_shared::api::Capabilities,
    first: u64,
    scope: Scope,
) -> Result<(PullReport, u64), SyncError> {
    let framed = caps.frames;
    let mut report = PullReport::default();
    crate::sync::engine::forget::apply::purge_trash(ctx, &mut report.forget);
    // Blobs an earlier pull found missing are asked for again first.
    report.blobs += crate::sync::engine::blobs::pull_missing_blobs(ctx, progress)?;
    // What waited since an earlier sync goes in first, in its order.
    let mut incoming = drain_pending(ctx)?;
    let only = match &scope {
        Scope::Everything => None,
        Scope::Session { stream, .. } => Some(stream.clone()),
    };
    // Records refused before are asked for again first, each alone.
    if caps.stream_pull && !ctx.state.damaged.is_empty() {
        let again = damaged::refetch(&ctx.state.damaged, &ctx.client, only.as_ref(), framed)?;
        let mut gone = Vec::new();
        let mut records = Vec::new();
        for (seq, r) in again {
            match r {
                Some(r) => records.push(r),
                None => gone.push(seq),
            }
        }
        let mut opened = open_page(ctx, &records, true);
        apply_opened(ctx, &mut incoming, &mut report, opened.good, progress)?;
        opened.healed.extend(gone);
        damaged::note(&mut ctx.state.damaged, opened.damaged, &opened.healed);
        ctx.save_state()?;
    }
    let mut pulled_to = first;
    // The next page downloads while this one is verified and written.
    std::thread::scope(|scope_| -> Result<(), SyncError> {
        // A rendezvous: the fetcher holds the one page it read ahead until
        // this loop takes it, so at most two pages are in memory.
        let (tx, pages) = std::sync::mpsc::sync_channel(0);
        let client = ctx.client.clone();
        let stream = match &scope {
            Scope::Everything => None,
            Scope::Session { stream, .. } => Some(stream.clone()),
        };
        scope_.spawn(move || fetch_pages(&client, stream.as_ref(), first, framed, tx));
        for page in pages {
            let mut page = page?;
            if page.records.is_empty() {
                break;
            }
            if let Some(stream) = match &scope {
                Scope::Session { stream, .. } => Some(stream),
                Scope::Everything => None,
            } {
                // A page of one stream holds that stream only; anything
                // else a server sends there is left to the full pull.
                page.records.retain(|r| &r.head.stream == stream);
            }
            let (count, next_after, more) = (page.records.len() as u64, page.next_after, page.more);
            // Verify the whole page before writing anything; a forget or
            // undo in it splits it into runs, each verified whole and
            // applied in seq order (see `forget`).
            for run in crate::sync::engine::forget::runs(std::mem::take(&mut page.records)) {
                let opened = open_page(ctx, &run.records, opts.all);
                // The ciphertext is done with; only the plaintext is written.
                drop(run.records);
                apply_opened(ctx, &mut incoming, &mut report, opened.good, progress)?;
                // Entries that wait are safe in sync/pending/, damaged
                // records in the state saved below with the cursor: it
                // moves past every record of the page.
                damaged::note(&mut ctx.state.damaged, opened.damaged, &opened.healed);
                if let Some(t) = run.then {
                    // A forget of either kind deletes records: the counts
                    // the server reports go down for it.
                    report.tombstones_seen += 1;
                    if t.head.kind == evi_shared::blob_refs::FORGET_LINES_KIND {
                        let done = &mut report.checkpoint_forget;
                        crate::sync::engine::checkpoint_forget::apply_pulled(ctx, &t, done)?;
                    } else {
                        let forgot = crate::sync::engine::forget::apply::apply_pulled(
                            ctx,
                            &t,
                            &mut report.forget,
                        )?;
                        // What waited for a session forgotten now goes with it.
                        if let Some(session) = forgot.and_then(|s| s.parse::<SessionId>().ok()) {
                            incoming.forget(&session)?;
                        }
                    }
                }
            }
            drop(page);
            pulled_to = next_after;
            match &scope {
                Scope::Everything => {
                    ctx.state.advance_cursor(next_after);
                    ctx.state.high_water.observe_seq(next_after);
                }
                Scope::Session { session, .. } => {
                    let c = ctx
                        .state
                        .session_cursors
                        .entry(session.to_string())
                        .or_default();
                    *c = (*c).max(next_after);
                }
            }
            ctx.save_state()?;
            progress.inc(count);
            if !more {
                break;
            }
        }
        Ok(())
    })?;
    progress.finish();
    damaged::name_sessions(&mut ctx.state.damaged, &ctx.home, &ctx.keys);
    report.damaged = (ctx.state.damaged.iter())
        .filter(|d| only.as_ref().is_none_or(|s| *s == d.stream))
        .cloned()
        .collect();
    let applied = &incoming.applied;
    report.entries = applied.entries + report.agent_entries;
    report.sessions = applied.sessions.len() as u64 + report.agent_sessions;
    report.diverged = applied.diverged.len() as u64;
    report.waiting = incoming.waiting();
    if report.waiting > 0 {
        report.deferred = Some(format!(
            "{} entries wait until eVi finishes the line it is writing (see `evi sync status`)",
            report.waiting
        ));
    }
    Ok((report, pulled_to))
}

/// Writes verified segments: blobs their journals name first (fetched and
/// verified before anything is written: a blob that fails its hash leaves
/// the home as it was, and a blob landing before its journal line is the
/// safe order), then journal lines and entries. Durable on return.
fn apply_opened(
    ctx: &mut SyncContext,
    incoming: &mut Incoming,
    report: &mut PullReport,
    opened: Vec<OpenedSegment>,
    progress: &dyn Progress,
) -> Result<(), SyncError> {
    let opened = crate::sync::engine::forget::drop_forgotten(ctx, opened);
    let mut named = Vec::new();
    for seg in &opened {
        if let OpenedSegment::Journal { device, lines } = seg {
            named.extend(journal_blobs(ctx, device, lines)?);
        }
    }
    report.blobs += fetch_blobs(ctx, &named, progress)?;
    let mut agents = Vec::new();
    for seg in opened {
        match seg {
            OpenedSegment::Entries { session, entries } => {
                incoming.queue(session, entries);
            }
            OpenedSegment::AgentEntries { stream, entries } => agents.push((stream, entries)),
            OpenedSegment::Journal { device, lines } => {
                let (appended, _) = apply_journal(ctx, &device, lines)?;
                report.journal_lines += appended;
            }
        }
        report.records += 1;
    }
    incoming.apply(ctx)?;
    incoming.sync()?;
    let done = crate::source::apply::apply(ctx, agents)?;
    report.agent_entries += done.entries;
    report.agent_sessions += done.sessions;
    report.waiting_agents = done.waiting;
    report.agent_notes.extend(done.notes);
    for (a, n) in done.not_enabled {
        *report.agents_not_enabled.entry(a).or_default() += n;
    }
    Ok(())
}

/// Downloads pages from `after` on into `tx` until the last one (or an
/// error, which is sent too); stops when the receiver is gone.
pub(crate) fn fetch_pages(
    client: &crate::sync::remote::client::Client,
    stream: Option<&KeyedId>,
    mut after: u64,
    framed: bool,
    tx: std::sync::mpsc::SyncSender<Result<Page, SyncError>>,
) {
    loop {
        let page = match stream {
            None => client.pull(after, framed),
            Some(s) => client.pull_stream(s, after, framed),
        }
        .map_err(SyncError::from);
        let last = match &page {
            Ok(p) => p.records.is_empty() || !p.more,
            Err(_) => true,
        };
        if let Ok(p) = &page {
            after = p.next_after;
        }
        if tx.send(page).is_err() || last {
            return;
        }
    }
}

/// Opens (decrypts and checks) one pulled record: age, the MAC, the ids it
/// was served under, the formats of what it holds.
pub(crate) fn open_record(ctx: &SyncContext, r: &PulledRecord) -> Result<OpenedSegment, SyncError> {
    let h = &r.head;
    let kind = SegmentKind::from_str(&h.kind).map_err(|e| SyncError::Segment {
        seq: h.seq,
        source: e,
    })?;
    open(
        &ctx.keys,
        &ctx.identity,
        &h.stream,
        kind,
        &h.entry_ids,
        &r.ciphertext,
    )
    .map_err(|source| SyncError::Segment { seq: h.seq, source })
}

/// A page's records opened.
struct OpenedPage {
    /// Those that verify, in order.
    good: Vec<OpenedSegment>,
    /// Seqs of those among them that were damaged before.
    healed: Vec<u64>,
    /// Those that do not verify.
    damaged: Vec<DamagedRecord>,
}

/// Opens a page's records, but this device's own unless `all`, in order.
fn open_page(ctx: &SyncContext, records: &[PulledRecord], all: bool) -> OpenedPage {
    let wanted: Vec<&PulledRecord> = records
        .iter()
        .filter(|r| {
            // What this device pushed is here already (unless asked for all).
            all || !r
                .head
                .device
                .as_deref()
                .is_some_and(|d| ctx.account.is_own_device(d))
        })
        .collect();
    let opened = on_all_cores(&wanted, |r| open_record(ctx, r));
    let mut page = OpenedPage {
        good: Vec::new(),
        healed: Vec::new(),
        damaged: Vec::new(),
    };
    for (r, seg) in wanted.into_iter().zip(opened) {
        match seg {
            Ok(seg) => {
                if ctx.state.damaged.iter().any(|d| d.seq == r.head.seq) {
                    page.healed.push(r.head.seq);
                }
                page.good.push(seg);
            }
            Err(e) => page.damaged.push(DamagedRecord::new(r, &e)),
        }
    }
    page
}
