//! `evi sync pull`: fetch records after the cursor, page by page (the next
//! one fetched and opened while this one is written); verify a whole page
//! (MAC, bound ids, formats) before writing any of it; append
//! entries as [`apply`](crate::sync::engine::apply) says, or keep them waiting in
//! [`pending`](crate::sync::engine::pending); fetch and verify the blobs the pulled
//! journals name; advance the cursor only once all that is durable.
//!
//! Under a key that is not the account's (its key check value says so),
//! nothing is opened: the pull fails as push does, with
//! [`SyncError::KeyMismatch`], before it writes or records anything. Every
//! record would fail to open, and that is the key, not damage.
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

use crate::sync::engine::blobs::{BlobFetcher, LandedBlobs};
use crate::sync::engine::cores::on_all_cores;
use crate::sync::engine::incoming::{Incoming, drain_pending};
use crate::sync::engine::journal::{apply_journal, journal_name};
use crate::sync::error::SyncError;
use crate::sync::progress::Progress;
use crate::sync::remote::blob_transfer::BlobTransfer;
use crate::sync::remote::records::{Page, PulledRecord};
use crate::sync::state::JournalState;
use crate::sync::state::context::SyncContext;
use crate::sync::state::damaged::{self, DamagedRecord};
use crate::sync::state::high_water::{HighWater, WentBack};
use crate::sync::state::pulled_journals::blob_of;
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
    /// Entries of other agents' sessions kept in `sync/pending-agents/`
    /// (all of them, after the pull).
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
    /// The other agents' sessions that got entries ([`Self::agent_sessions`]
    /// counts them).
    #[serde(skip)]
    pub agent_streams: std::collections::BTreeSet<crate::source::StreamName>,
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
    ctx.check_key()?;
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
    ctx.check_key()?;
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
    ctx.seen_files.clear();
    crate::sync::engine::forget::apply::purge_trash(ctx, &mut report.forget);
    // Blobs an earlier pull found missing are asked for again first.
    report.blobs += crate::sync::engine::blobs::pull_missing_blobs(ctx, progress)?;
    // What waited since an earlier sync goes in first, in its order.
    let (mut incoming, drained) = drain_pending(ctx)?;
    report.agent_entries += drained.entries;
    report.agent_streams.extend(drained.sessions);
    report.waiting_agents = drained.waiting;
    report.agent_notes.extend(drained.notes);
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
        let mut opened = Opener::new(ctx, None, true).open_run(&records)?;
        let (good, mut healed) = opened.healed(ctx);
        let blobs = std::mem::take(&mut opened.blobs);
        apply_opened(ctx, &mut incoming, &mut report, good, blobs, progress)?;
        healed.extend(gone);
        damaged::note(&mut ctx.state.damaged, opened.damaged, &healed);
        ctx.save_state()?;
    }
    let mut pulled_to = first;
    // Two stages, each on its own thread, so that network, CPU and disk
    // overlap: the next page is downloaded and opened (decrypted and
    // verified, on all cores) while this one is written.
    let fetched = std::thread::scope(|scope_| -> Result<(), SyncError> {
        // A rendezvous: the opener holds the one part of a page it opened
        // until this loop takes it, so two parts are in memory, and the
        // rest of a page's ciphertext.
        let (tx, opened_pages) = std::sync::mpsc::sync_channel(0);
        let opener = Opener::new(ctx, only.clone(), opts.all);
        scope_.spawn(move || opener.run(first, framed, tx));
        for page in opened_pages {
            let page = page?;
            if page.count == 0 && page.end {
                break;
            }
            // Each run was verified whole before anything of it is written;
            // a forget or undo between runs applies in seq order (see
            // `forget`).
            for (mut opened, then) in page.runs {
                let (good, healed) = opened.healed(ctx);
                let blobs = std::mem::take(&mut opened.blobs);
                apply_opened(ctx, &mut incoming, &mut report, good, blobs, progress)?;
                // Entries that wait are safe in sync/pending/, damaged
                // records in the state saved below with the cursor: it
                // moves past every record of the page.
                damaged::note(&mut ctx.state.damaged, opened.damaged, &healed);
                if let Some(t) = then {
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
            progress.inc(page.count);
            if !page.end {
                // The cursor moves once the whole page is written.
                continue;
            }
            pulled_to = page.next_after;
            match &scope {
                Scope::Everything => {
                    ctx.state.advance_cursor(page.next_after);
                    ctx.state.high_water.observe_seq(page.next_after);
                }
                Scope::Session { session, .. } => {
                    let c = ctx
                        .state
                        .session_cursors
                        .entry(session.to_string())
                        .or_default();
                    *c = (*c).max(page.next_after);
                }
            }
            ctx.save_state()?;
            if !page.more {
                break;
            }
        }
        Ok(())
    });
    // What was applied before an error too: it is durable.
    report
        .agent_notes
        .extend(crate::source::apply::after_pull(ctx));
    fetched?;
    progress.finish();
    damaged::name_sessions(&mut ctx.state.damaged, &ctx.home, &ctx.keys);
    report.damaged = (ctx.state.damaged.iter())
        .filter(|d| only.as_ref().is_none_or(|s| *s == d.stream))
        .cloned()
        .collect();
    let applied = &incoming.applied;
    report.entries = applied.entries + report.agent_entries;
    report.agent_sessions = report.agent_streams.len() as u64;
    report.sessions = applied.sessions.len() as u64 + report.agent_sessions;
    report.diverged = applied.diverged.len() as u64;
    report.waiting = incoming.waiting();
    let mut why = Vec::new();
    if report.waiting > 0 {
        why.push(format!(
            "{} entries wait until eVi finishes the line it is writing",
            report.waiting
        ));
    }
    if report.waiting_agents > 0 {
        why.push(format!(
            "{} entries of other agents' sessions wait for the line their file ends in, or \
             for their session's file",
            report.waiting_agents
        ));
    }
    if !why.is_empty() {
        report.deferred = Some(format!("{} (see `evi sync status`)", why.join("; ")));
    }
    Ok((report, pulled_to))
}

/// Writes verified segments: the blobs their journals name first (fetched
/// and verified with the page: a blob that fails its hash leaves the home
/// as it was, and a blob landing before its journal line is the safe
/// order), then journal lines and entries. Durable on return.
fn apply_opened(
    ctx: &mut SyncContext,
    incoming: &mut Incoming,
    report: &mut PullReport,
    opened: Vec<OpenedSegment>,
    blobs: LandedBlobs,
    progress: &dyn Progress,
) -> Result<(), SyncError> {
    let opened = crate::sync::engine::forget::drop_forgotten(ctx, opened);
    report.blobs += blobs.place(ctx, progress)?;
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
    report.agent_streams.extend(done.sessions);
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
    open_with(&ctx.keys, &ctx.identity, r)
}

fn open_with(
    keys: &crate::sync::seal::keys::SyncKeys,
    identity: &crate::sync::seal::identity::Identity,
    r: &PulledRecord,
) -> Result<OpenedSegment, SyncError> {
    let h = &r.head;
    let kind = SegmentKind::from_str(&h.kind).map_err(|e| SyncError::Segment {
        seq: h.seq,
        source: e,
    })?;
    open(keys, identity, &h.stream, kind, &h.entry_ids, &r.ciphertext)
        .map_err(|source| SyncError::Segment { seq: h.seq, source })
}

/// A run of a page's records opened (see [`forget::runs`]).
///
/// [`forget::runs`]: crate::sync::engine::forget::runs
struct OpenedRun {
    /// Those that verify, in order, with their seqs.
    good: Vec<(u64, OpenedSegment)>,
    /// Those that do not verify.
    damaged: Vec<DamagedRecord>,
    /// The blobs the journal lines among them name, fetched and verified.
    blobs: LandedBlobs,
}

impl OpenedRun {
    /// Takes the segments that verified, and the seqs of those among them
    /// that were damaged before.
    fn healed(&mut self, ctx: &SyncContext) -> (Vec<OpenedSegment>, Vec<u64>) {
        let mut healed = Vec::new();
        let mut good = Vec::with_capacity(self.good.len());
        for (seq, seg) in std::mem::take(&mut self.good) {
            if ctx.state.damaged.iter().any(|d| d.seq == seq) {
                healed.push(seq);
            }
            good.push(seg);
        }
        (good, healed)
    }
}

/// Opened runs of records, each with the forget or undo that follows it.
type Runs = Vec<(OpenedRun, Option<PulledRecord>)>;

/// A part of a page opened ([`PART_BYTES`]).
struct OpenedPage {
    runs: Runs,
    /// Records of the page in this part.
    count: u64,
    /// Whether this part ends its page: only then does the cursor move,
    /// to `next_after`.
    end: bool,
    next_after: u64,
    more: bool,
}

/// Ciphertext of a page opened and handed to the writer at a time. A page
/// is some MB of ciphertext, and opened it is several times that (a Claude
/// Code session compresses about 5:1): two whole pages in memory, the one
/// written and the one opened meanwhile, made a fresh pull's peak. In parts
/// the opener still works while the writer writes, on less at a time.
const PART_BYTES: usize = 1 << 20;

/// `records` in parts of about [`PART_BYTES`] of ciphertext, each of one
/// record at least (one empty part for none).
fn parts(records: Vec<PulledRecord>) -> Vec<Vec<PulledRecord>> {
    let mut out = vec![Vec::new()];
    let mut bytes = 0;
    for r in records {
        let last = out.last_mut().expect("one part at least");
        if !last.is_empty() && bytes + r.ciphertext.len() > PART_BYTES {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += r.ciphertext.len();
        out.last_mut().expect("one part at least").push(r);
    }
    out
}

/// The stage of a pull that downloads and opens pages (decrypts and checks
/// their records) while the one before is written: what it needs of the
/// context, which the writing stage holds.
struct Opener {
    client: crate::sync::remote::client::Client,
    keys: crate::sync::seal::keys::SyncKeys,
    identity: crate::sync::seal::identity::Identity,
    account: crate::sync::state::Account,
    /// Where blob downloads are staged (`sync/`).
    temp_dir: std::path::PathBuf,
    blobs: BlobFetcher,
    /// This device's journal, whose blobs are here already.
    own_journal: String,
    /// The stream of a one-session pull.
    only: Option<KeyedId>,
    /// This device's own records too.
    all: bool,
}

impl Opener {
    fn new(ctx: &SyncContext, only: Option<KeyedId>, all: bool) -> Self {
        Self {
            client: ctx.client.clone(),
            keys: ctx.keys.clone(),
            identity: ctx.identity.clone(),
            account: ctx.account.clone(),
            temp_dir: ctx.paths.dir.clone(),
            blobs: BlobFetcher::new(ctx),
            own_journal: journal_name(&ctx.account),
            only,
            all,
        }
    }

    /// Downloads and opens the pages after `after` into `out`, until the
    /// last one, an error (passed on), or the writer gone.
    fn run(
        &self,
        mut after: u64,
        framed: bool,
        out: std::sync::mpsc::SyncSender<Result<OpenedPage, SyncError>>,
    ) {
        loop {
            let page = match &self.only {
                None => self.client.pull(after, framed),
                Some(s) => self.client.pull_stream(s, after, framed),
            };
            let page = match page {
                Ok(p) => p,
                Err(e) => {
                    let _ = out.send(Err(e.into()));
                    return;
                }
            };
            after = page.next_after;
            let more = page.more && !page.records.is_empty();
            let parts = parts(page.records);
            let n = parts.len();
            for (i, records) in parts.into_iter().enumerate() {
                let end = i + 1 == n;
                let opened = self.open(records).map(|(runs, count)| OpenedPage {
                    runs,
                    count,
                    end,
                    next_after: after,
                    more,
                });
                let failed = opened.is_err();
                if out.send(opened).is_err() || failed {
                    return;
                }
                // Taken: the writer is done with the part before, whose
                // lines are freed now; their memory goes back while it
                // writes.
                crate::malloc::give_back_freed();
            }
            if !more {
                return;
            }
        }
    }

    /// Opens a part of a page: its runs, and how many records it had.
    fn open(&self, mut records: Vec<PulledRecord>) -> Result<(Runs, u64), SyncError> {
        let count = records.len() as u64;
        if let Some(stream) = &self.only {
            // A page of one stream holds that stream only; anything else a
            // server sends there is left to the full pull.
            records.retain(|r| &r.head.stream == stream);
        }
        let runs = crate::sync::engine::forget::runs(records)
            .into_iter()
            .map(|run| Ok((self.open_run(&run.records)?, run.then)))
            .collect::<Result<_, SyncError>>()?;
        Ok((runs, count))
    }

    /// Opens records, but this device's own unless `all`, in order, and
    /// fetches the blobs their journal lines name; the ciphertext is
    /// dropped with `records` (only the plaintext is written). A blob that
    /// cannot be fetched or fails its hash fails the run: nothing of it is
    /// written.
    fn open_run(&self, records: &[PulledRecord]) -> Result<OpenedRun, SyncError> {
        let wanted: Vec<&PulledRecord> = records
            .iter()
            .filter(|r| {
                // What this device pushed is here already (unless asked for all).
                self.all
                    || !r
                        .head
                        .device
                        .as_deref()
                        .is_some_and(|d| self.account.is_own_device(d))
            })
            .collect();
        let opened = on_all_cores(&wanted, |r| open_with(&self.keys, &self.identity, r));
        let mut run = OpenedRun {
            good: Vec::new(),
            damaged: Vec::new(),
            blobs: LandedBlobs::default(),
        };
        for (r, seg) in wanted.into_iter().zip(opened) {
            match seg {
                Ok(seg) => run.good.push((r.head.seq, seg)),
                Err(e) => run.damaged.push(DamagedRecord::new(r, &e)),
            }
        }
        // Every blob other devices' lines name; those here already, whose
        // lines may be here too, are passed over when landing.
        let named: Vec<String> = (run.good.iter())
            .filter_map(|(_, seg)| match seg {
                OpenedSegment::Journal { device, lines } if *device != self.own_journal => {
                    Some(lines)
                }
                _ => None,
            })
            .flatten()
            .filter_map(|l| blob_of(&l.line))
            .collect();
        let t = BlobTransfer::new(&self.client, &self.identity, &self.keys, &self.temp_dir);
        run.blobs = self.blobs.land(&t, &named)?;
        Ok(run)
    }
}
