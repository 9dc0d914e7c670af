//! Entries on their way from verified segments into the transcripts: the
//! part pull and push share.
//!
//! # Promises
//!
//! - Entries are applied per session in their order of arrival, entries that
//!   waited before first, through [`SessionAppender`] (which decides verbatim
//!   or with ids, and never writes into a line being written).
//! - What must wait goes to the [`PendingStore`]; it never holds back another
//!   session, nor the pull cursor.
//! - What pull wrote is what push skips, nothing more: a file whose state
//!   covered all of it before the append gets the exact state after it (when
//!   nothing else wrote meanwhile); otherwise the appended ids are remembered
//!   and push passes over exactly them.
//! - After [`Incoming::sync`] returns, every appended byte, new day folder
//!   and waiting entry is durable, so the caller may move the cursor.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use evi_shared::SessionId;

use crate::sync::Entry;
use crate::sync::engine::apply::{Appended, SessionAppender, local_today};
use crate::sync::engine::cores::each_on_all_cores;
use crate::sync::engine::line_blobs::fetch_line_through;
use crate::sync::engine::pending::{PendingStore, WaitReason, Waiting};
use crate::sync::error::{IoContext, SyncError};
use crate::sync::remote::blob_transfer::BlobTransfer;
use crate::sync::state::append_marks::AppendMarks;
use crate::sync::state::context::SyncContext;
use crate::sync::state::rel_name;

/// What applying did, summed over a command.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub entries: u64,
    pub sessions: BTreeSet<SessionId>,
    /// Sessions that got an entry branching from the local tip.
    pub diverged: BTreeSet<SessionId>,
}

pub(crate) struct Incoming {
    /// Sessions as read from disk, kept from one page to the next only while
    /// each page touches them: a session spread over many pages is read
    /// once, and memory follows the pages, not the whole history (an
    /// appender holds every entry id of its session).
    appenders: BTreeMap<SessionId, SessionAppender>,
    /// Sessions [`Self::apply`] touched since the last [`Self::sync`].
    touched: BTreeSet<SessionId>,
    queued: BTreeMap<SessionId, Vec<Entry>>,
    /// Entries that waited before, by session and id, to keep when they
    /// hold on (one line can be an entry of two sessions under one id).
    waited: BTreeMap<(SessionId, String), Waiting>,
    pending: PendingStore,
    marks: Arc<AppendMarks>,
    pub applied: Applied,
}

impl Incoming {
    /// Loads what waits from earlier syncs and queues it first.
    pub fn open(ctx: &SyncContext) -> Result<Self, SyncError> {
        let dir = ctx.paths.dir.join("pending");
        let mut pending =
            PendingStore::<SessionId>::load(dir).ctx(|| "cannot read sync/pending".into())?;
        let sessions: Vec<SessionId> = pending.sessions().map(|(s, _)| s.clone()).collect();
        let mut queued = BTreeMap::new();
        let mut waited = BTreeMap::new();
        for s in sessions {
            let list = pending.take(&s);
            let entries: Vec<Entry> = list.iter().map(Waiting::entry).collect();
            waited.extend(list.into_iter().map(|w| ((s.clone(), w.id.clone()), w)));
            queued.insert(s, entries);
        }
        Ok(Self {
            appenders: BTreeMap::new(),
            touched: BTreeSet::new(),
            queued,
            waited,
            pending,
            marks: ctx.marks.clone(),
            applied: Applied::default(),
        })
    }

    /// Whether anything is queued.
    pub fn has_work(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Queues a verified segment's entries of `session`.
    pub fn queue(&mut self, session: SessionId, entries: Vec<Entry>) {
        self.queued.entry(session).or_default().extend(entries);
    }

    /// Applies everything queued and records the push state; what cannot be
    /// applied now waits. Nothing is durable before [`Self::sync`]. Sessions
    /// are independent (each its own files): they are written on all cores,
    /// and what they did is recorded afterwards in their order.
    pub fn apply(&mut self, ctx: &mut SyncContext) -> Result<(), SyncError> {
        let today = local_today();
        let mut work: Vec<SessionWork> = std::mem::take(&mut self.queued)
            .into_iter()
            .map(|(session, entries)| {
                self.touched.insert(session.clone());
                SessionWork {
                    appender: self.appenders.remove(&session),
                    session,
                    entries,
                    blob_waits: Vec::new(),
                    batch: None,
                }
            })
            .collect();
        let transfer = BlobTransfer::new(&ctx.client, &ctx.identity, &ctx.keys, &ctx.paths.dir);
        let (home, marks) = (&ctx.home, &self.marks);
        each_on_all_cores(&mut work, |w| {
            w.batch = Some(w.apply(home, marks, &transfer, today))
        });
        let mut failed = None;
        for w in work {
            let SessionWork {
                session,
                appender,
                blob_waits,
                batch,
                ..
            } = w;
            if let Some(appender) = appender {
                self.appenders.insert(session.clone(), appender);
            }
            let batch = match batch.expect("applied above") {
                Ok(b) => b,
                Err(e) => {
                    // The first failure in session order is the one told;
                    // what the others wrote is recorded all the same.
                    failed.get_or_insert(e);
                    continue;
                }
            };
            let written: u64 = batch.appended.iter().map(|x| x.ids.len() as u64).sum();
            if written > 0 {
                self.applied.entries += written;
                self.applied.sessions.insert(session.clone());
            }
            if batch.branched > 0 {
                self.applied.diverged.insert(session.clone());
            }
            record_appends(ctx, &session, batch.appended);
            let waits = batch
                .waiting
                .into_iter()
                .chain(blob_waits.into_iter().map(|e| (e, WaitReason::BlobMissing)));
            for (e, reason) in waits {
                let mut w = self
                    .waited
                    .remove(&(session.clone(), e.id.clone()))
                    .unwrap_or_else(|| Waiting::new(&e, reason));
                w.reason = reason;
                self.pending.wait(&session, w);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Makes what [`Self::apply`] did durable: appended files and their new
    /// folders, and the waiting entries.
    pub fn sync(&mut self) -> Result<(), SyncError> {
        let mut dirs = BTreeSet::new();
        let mut files = Vec::new();
        for a in self.appenders.values_mut() {
            files.extend(a.take_unsynced(&mut dirs));
        }
        // A folder's fsync makes its new entries durable; opened here, the
        // folders go into the same batch as the files.
        for dir in dirs {
            files.push(std::fs::File::open(&dir).ctx(|| format!("cannot sync {}", dir.display()))?);
        }
        crate::fsutil::sync_files(files).ctx(|| "cannot make the pulled entries durable".into())?;
        // Durable now: a kill can no longer cut what the marks cover.
        (self.marks.clear()).ctx(|| "cannot clear sync/appending".into())?;
        let touched = std::mem::take(&mut self.touched);
        self.appenders.retain(|s, _| touched.contains(s));
        self.pending
            .save()
            .ctx(|| "cannot save the entries that wait in sync/pending".into())
    }

    /// Drops everything of `session` (a tombstone was just applied): what
    /// is queued, what waits in `sync/pending/` (its file goes now), and
    /// the session as read, so nothing of it is written again.
    pub fn forget(&mut self, session: &SessionId) -> Result<(), SyncError> {
        self.queued.remove(session);
        self.appenders.remove(session);
        self.touched.remove(session);
        self.waited.retain(|(s, _), _| s != session);
        self.pending.drop_session(session);
        self.pending
            .save()
            .ctx(|| "cannot save the entries that wait in sync/pending".into())
    }

    /// Entries waiting now.
    pub fn waiting(&self) -> u64 {
        self.pending.count()
    }
}

/// One session's part of [`Incoming::apply`].
struct SessionWork {
    session: SessionId,
    /// As read for an earlier page (`None`: read it now).
    appender: Option<SessionAppender>,
    entries: Vec<Entry>,
    blob_waits: Vec<Entry>,
    batch: Option<Result<crate::sync::engine::apply::Batch, SyncError>>,
}

impl SessionWork {
    /// Reads the session (unless read for an earlier page), fetches the
    /// lines that travel as blobs, and appends the entries not here yet.
    /// All of it on the thread the session was given (see
    /// [`each_on_all_cores`]): reading a session, and above all fetching a
    /// line of megabytes, kept the other core waiting when done first.
    fn apply(
        &mut self,
        home: &crate::home::EviHome,
        marks: &Arc<AppendMarks>,
        transfer: &BlobTransfer<'_>,
        today: evi_shared::Day,
    ) -> Result<crate::sync::engine::apply::Batch, SyncError> {
        let session = &self.session;
        let a = match &mut self.appender {
            Some(a) => a,
            None => self.appender.insert(
                SessionAppender::load(home, marks.clone(), session)
                    .ctx(|| format!("cannot read session {session}"))?,
            ),
        };
        // Written or waiting (a copy in the batch): memory follows the
        // sessions being written, not the whole page.
        let entries = std::mem::take(&mut self.entries);
        let mut ready = Vec::with_capacity(entries.len());
        for mut e in entries {
            if a.has(&e.id) {
                continue;
            }
            if e.line_blob.is_some() && !fetch_line_through(transfer, &mut e)? {
                self.blob_waits.push(e);
                continue;
            }
            ready.push(e);
        }
        a.apply(&ready, today)
            .ctx(|| format!("cannot write session {session}"))
    }
}

/// Applies what waits from earlier syncs (the start of every push and
/// pull): eVi's entries in `sync/pending/`, then other agents' in
/// `sync/pending-agents/` (see [`crate::source::apply`]). So an entry that
/// waited for a line to be finished goes in with the next sync after it is,
/// whether or not anything new came.
pub(crate) fn drain_pending(
    ctx: &mut SyncContext,
) -> Result<(Incoming, crate::source::apply::AgentApplied), SyncError> {
    let mut inc = Incoming::open(ctx)?;
    if inc.has_work() {
        inc.apply(ctx)?;
        inc.sync()?;
        ctx.save_state()?;
    }
    let agents = crate::source::apply::apply(ctx, Vec::new())?;
    if agents.entries > 0 {
        ctx.save_state()?;
    }
    Ok((inc, agents))
}

/// Keeps the next push from sending back what pull just wrote (see the
/// module's promises).
fn record_appends(ctx: &mut SyncContext, session: &SessionId, appended: Vec<Appended>) {
    for a in appended {
        let rel = rel_name(a.day, session);
        let clean = match (&a.before, ctx.state.files.get(&rel)) {
            (None, _) => true,
            (Some(st), Some(fs)) => st.matches(fs) && fs.offset == st.size,
            (Some(_), None) => false,
        };
        match a.after {
            Some(fs) if clean => {
                ctx.state.files.insert(rel, fs);
            }
            _ => ctx
                .state
                .skip
                .entry(session.to_string())
                .or_default()
                .extend(a.ids),
        }
    }
}
