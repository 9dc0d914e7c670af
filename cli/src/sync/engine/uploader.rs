//! The push pipeline: the main thread reads files and derives ids; sealing
//! (zstd + age + MAC) runs on a pool of worker threads, each first sending
//! up as blobs the lines of its job too long for a segment (the main thread
//! once did, and every core but the network's waited); batches go up on
//! several kept-alive connections at once. File states are still recorded
//! strictly in order, each once every batch before it is acknowledged, so a
//! push killed at any point and run again resends only what no
//! acknowledgement covered.
//!
//! # Order
//!
//! Every submission (entries to seal, a segment sealed already, states with
//! nothing to send) takes the next index. Sealed results come back in any
//! order and are put back in index order before they join a batch; batches
//! are numbered as they are cut, and acknowledgements, which also come in
//! any order, are applied in batch order. A failure to seal one session's
//! entries is that session's (its later states are dropped too, so nothing
//! after the failed entries is recorded as sent); a failed upload ends the
//! push after recording what was acknowledged before it.
//!
//! A batch that goes on with a session of a batch not yet recorded is not
//! sent until that one is (the server numbers records in commit order), but
//! it no longer stops the reading: it is held, and reading and sealing go
//! on, until a second one would be held.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::mpsc::{Receiver, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use evi_shared::api::PushResponse;
use evi_shared::frames::SegmentHead;

use crate::sync::engine::line_blobs::send_lines;
use crate::sync::engine::push_report::{Mark, PushReport};
use crate::sync::error::SyncError;
use crate::sync::remote::blob_transfer::BlobTransfer;
use crate::sync::remote::client::{Client, ClientError};
use crate::sync::remote::records::{OutBatch, OutSegment};
use crate::sync::seal::keys::SyncKeys;
use crate::sync::state::context::SyncContext;
use crate::sync::{Entry, Identity, SealedSegment, seal_stream};

/// Plaintext bytes gathered before a segment is sealed.
const SEGMENT_TARGET: usize = 4 << 20;

/// Batches on the wire at once. Two keep the server busy while the next is
/// cut; more only add memory (each is up to `max_batch_bytes`).
const UPLOADERS: usize = 2;

/// Batches cut and held back behind another of their session (see
/// `Uploader::cut`). One lets the next batch of a long session be read
/// and sealed while the one before it is made durable; each is up to
/// `max_batch_bytes` of memory.
const HELD: usize = 1;

struct SealJob {
    idx: u64,
    /// The stream name (an eVi session's bare id).
    session: String,
    /// Entries whose line travels as a blob may still hold its bytes: the
    /// sealer uploads them first (see [`send_lines`]).
    entries: Vec<Entry>,
}

/// What a sealer made of a job: the segment or why not, and how many lines
/// it sent as blobs before sealing.
type Sealing = (Result<SealedSegment, String>, u64);

type SealResult = (u64, Sealing);

/// What the main thread keeps about a submission until it joins a batch.
struct Meta {
    marks: Vec<Mark>,
    /// Who the segment is for, in messages and for dropping later states.
    label: String,
    entries: u64,
}

struct Batch {
    no: u64,
    body: OutBatch,
    /// Bytes on the wire, for the report.
    bytes: u64,
}

type Ack = (u64, Result<PushResponse, ClientError>, u64);

/// Segments on their way up, and the states that become true once they
/// are acknowledged.
pub(crate) struct Uploader {
    max_bytes: u64,
    framed: bool,
    jobs: Option<SyncSender<SealJob>>,
    sealed: Receiver<SealResult>,
    batches: Option<SyncSender<Batch>>,
    acks: Receiver<Ack>,
    workers: Vec<JoinHandle<()>>,
    /// Index the next submission gets.
    next_idx: u64,
    /// Index the batch being cut expects next.
    next_in_order: u64,
    meta: BTreeMap<u64, Meta>,
    ready: BTreeMap<u64, Option<Sealing>>,
    /// The batch being cut.
    batch: OutBatch,
    bytes: u64,
    /// States, each with who it is for (see [`Meta::label`]).
    marks: Vec<(String, Mark)>,
    /// Who each segment of the batch being cut is for, and how many entries
    /// it holds, in batch order (the server names refused segments by index).
    segments: Vec<(String, u64)>,
    /// Number the next batch gets; the one whose states are recorded next.
    next_batch: u64,
    next_record: u64,
    /// States of batches cut and not yet recorded, and their segments.
    pending_marks: BTreeMap<u64, Vec<(String, Mark)>>,
    pending_segments: BTreeMap<u64, Vec<(String, u64)>>,
    acked: BTreeMap<u64, (Result<PushResponse, ClientError>, u64)>,
    /// Sessions one of whose segments could not be made: nothing more of
    /// theirs is recorded as sent in this push.
    failed: BTreeSet<String>,
    /// Sessions (or the journal) the server's quota refused a segment of:
    /// none of their states is recorded from then on.
    over_quota: BTreeSet<String>,
    /// Who has segments in the batch being cut, and in each batch cut and
    /// not yet recorded.
    labels: BTreeSet<String>,
    labels_in_flight: BTreeMap<u64, BTreeSet<String>>,
    /// Batches cut that go on with a session of one not yet recorded, in
    /// batch order: sent once it is (at most [`HELD`] wait so).
    held: VecDeque<Batch>,
    /// Sessions counted in the report.
    counted: BTreeSet<String>,
}

impl Uploader {
    pub(crate) fn new(ctx: &SyncContext, max_bytes: u64, framed: bool) -> Self {
        let sealers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        // A job is handed over only when a sealer is free: entries waiting
        // in a queue would only hold another segment's plaintext.
        let (jobs_tx, jobs_rx) = sync_channel::<SealJob>(0);
        let (sealed_tx, sealed) = channel();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let mut workers = Vec::new();
        for _ in 0..sealers {
            let (rx, tx) = (jobs_rx.clone(), sealed_tx.clone());
            let (keys, identity) = (ctx.keys.clone(), ctx.identity.clone());
            let (client, dir) = (ctx.client.clone(), ctx.paths.dir.clone());
            workers.push(std::thread::spawn(move || {
                let transfer = BlobTransfer::new(&client, &identity, &keys, &dir);
                while let Some(mut job) = next(&rx) {
                    let r = seal_job(&transfer, &keys, &identity, &mut job);
                    if tx.send((job.idx, r)).is_err() {
                        return;
                    }
                }
            }));
        }
        let (batches_tx, batches_rx) = sync_channel::<Batch>(0);
        let (acks_tx, acks) = channel();
        let batches_rx = Arc::new(Mutex::new(batches_rx));
        for _ in 0..UPLOADERS {
            let (rx, tx) = (batches_rx.clone(), acks_tx.clone());
            let client: Client = ctx.client.clone();
            workers.push(std::thread::spawn(move || {
                while let Some(b) = next(&rx) {
                    let r = client.push(b.body);
                    if tx.send((b.no, r, b.bytes)).is_err() {
                        return;
                    }
                }
            }));
        }
        Self {
            max_bytes,
            framed,
            jobs: Some(jobs_tx),
            sealed,
            batches: Some(batches_tx),
            acks,
            workers,
            next_idx: 0,
            next_in_order: 0,
            meta: BTreeMap::new(),
            ready: BTreeMap::new(),
            batch: OutBatch::new(framed, batch_room(max_bytes)),
            bytes: 0,
            marks: Vec::new(),
            segments: Vec::new(),
            next_batch: 0,
            next_record: 0,
            pending_marks: BTreeMap::new(),
            pending_segments: BTreeMap::new(),
            acked: BTreeMap::new(),
            failed: BTreeSet::new(),
            over_quota: BTreeSet::new(),
            labels: BTreeSet::new(),
            labels_in_flight: BTreeMap::new(),
            held: VecDeque::new(),
            counted: BTreeSet::new(),
        }
    }

    /// Budget for one segment's plaintext so that it fits a batch (as
    /// base64 in JSON, a third larger, when the server wants JSON).
    pub(crate) fn segment_budget(&self) -> usize {
        (SEGMENT_TARGET as u64).min(self.max_bytes / 3) as usize
    }

    fn take_idx(&mut self, marks: Vec<Mark>, label: String, entries: u64) -> u64 {
        let idx = self.next_idx;
        self.next_idx += 1;
        self.meta.insert(
            idx,
            Meta {
                marks,
                label,
                entries,
            },
        );
        idx
    }

    /// Queues `entries` of `session` to be sealed on a worker; `marks` are
    /// recorded once the segment is acknowledged.
    pub(crate) fn seal_and_add(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
        session: &str,
        entries: Vec<Entry>,
        marks: Vec<Mark>,
    ) -> Result<(), SyncError> {
        let idx = self.take_idx(marks, format!("session {session}"), entries.len() as u64);
        let job = SealJob {
            idx,
            session: session.to_owned(),
            entries,
        };
        if let Some(jobs) = &self.jobs
            && jobs.send(job).is_err()
        {
            return Err(stopped("sealing"));
        }
        self.pump(ctx, report)
    }

    /// Queues a segment sealed already (the journal's).
    pub(crate) fn add(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
        seg: SealedSegment,
        marks: Vec<Mark>,
    ) -> Result<(), SyncError> {
        // The journal counts its lines itself; they are not entries.
        let idx = self.take_idx(marks, "checkpoint journal".into(), 0);
        self.ready.insert(idx, Some((Ok(seg), 0)));
        self.pump(ctx, report)
    }

    /// States that need no upload, recorded after everything before them
    /// (unless something of `label`'s failed before).
    pub(crate) fn mark(&mut self, label: String, marks: Vec<Mark>) {
        let idx = self.take_idx(marks, label, 0);
        self.ready.insert(idx, None);
    }

    /// Takes what is ready without waiting: sealed segments into the batch
    /// (cutting and sending batches as they fill), acknowledgements into
    /// the state.
    fn pump(&mut self, ctx: &mut SyncContext, report: &mut PushReport) -> Result<(), SyncError> {
        while let Ok((idx, r)) = self.sealed.try_recv() {
            self.ready.insert(idx, Some(r));
        }
        self.place_ready(ctx, report)?;
        while let Ok((no, r, bytes)) = self.acks.try_recv() {
            self.acked.insert(no, (r, bytes));
        }
        self.record_acked(ctx, report)
    }

    fn place_ready(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
    ) -> Result<(), SyncError> {
        while let Some(r) = self.ready.remove(&self.next_in_order) {
            let meta = self
                .meta
                .remove(&self.next_in_order)
                .expect("every index has its meta");
            self.next_in_order += 1;
            let seg = match r {
                None => {
                    self.keep_marks(&meta.label, meta.marks);
                    continue;
                }
                Some((r, line_blobs)) => {
                    report.line_blobs += line_blobs;
                    match r {
                        Ok(seg) => seg,
                        Err(e) => {
                            self.fail(report, &meta.label, e);
                            continue;
                        }
                    }
                }
            };
            let seg = OutSegment {
                head: SegmentHead {
                    stream: seg.stream,
                    kind: seg.kind.as_str().to_owned(),
                    entry_ids: seg.entry_ids,
                    refs: evi_shared::blob_refs::SegmentRefs {
                        refs: seg.refs,
                        ..Default::default()
                    },
                    group: seg.group,
                },
                ciphertext: seg.ciphertext,
            };
            let size = seg.wire_size(self.framed);
            let room = batch_room(self.max_bytes);
            if size > room {
                let e = SyncError::TooLarge {
                    stream: seg.head.stream.to_string(),
                    size,
                    max: self.max_bytes,
                };
                self.fail(report, &meta.label, e.to_string());
                continue;
            }
            if self.failed.contains(&meta.label) {
                continue;
            }
            if self.bytes + size > room {
                self.cut(ctx, report)?;
            }
            report.entries += meta.entries;
            if meta.entries > 0 && self.counted.insert(meta.label.clone()) {
                report.sessions += 1;
            }
            self.bytes += size;
            self.batch.add(seg);
            self.segments.push((meta.label.clone(), meta.entries));
            self.labels.insert(meta.label.clone());
            self.keep_marks(&meta.label, meta.marks);
        }
        Ok(())
    }

    fn keep_marks(&mut self, label: &str, marks: Vec<Mark>) {
        if !self.failed.contains(label) {
            self.marks
                .extend(marks.into_iter().map(|m| (label.to_owned(), m)));
        }
    }

    fn fail(&mut self, report: &mut PushReport, label: &str, message: String) {
        if self.failed.insert(label.to_owned()) {
            report.failed.push(format!("{label}: {message}"));
        }
    }

    /// Sends the batch being cut (or, with no segments, queues its states
    /// behind the batches in flight).
    fn cut(&mut self, ctx: &mut SyncContext, report: &mut PushReport) -> Result<(), SyncError> {
        // The server numbers records in commit order, and batches in flight
        // commit in any order: a session's later segments must not commit
        // before its earlier ones, or a pull would get them first and write
        // the session's lines out of order. So a batch that goes on with a
        // session (or the journal) of a batch in flight waits for it: held
        // here, while reading and sealing go on, and sent once that one is
        // recorded (see `release_held`).
        let labels = std::mem::take(&mut self.labels);
        let after_another = self
            .labels_in_flight
            .values()
            .any(|other| !other.is_disjoint(&labels));
        let no = self.next_batch;
        self.next_batch += 1;
        self.labels_in_flight.insert(no, labels);
        self.pending_marks
            .insert(no, std::mem::take(&mut self.marks));
        self.pending_segments
            .insert(no, std::mem::take(&mut self.segments));
        let bytes = std::mem::take(&mut self.bytes);
        let fresh = OutBatch::new(self.framed, batch_room(self.max_bytes));
        let body = std::mem::replace(&mut self.batch, fresh);
        if body.is_empty() {
            let nothing = PushResponse {
                stored: 0,
                dropped: 0,
                newest_seq: 0,
                over_quota: Vec::new(),
                forgotten: Vec::new(),
                blob_missing: Vec::new(),
            };
            self.acked.insert(no, (Ok(nothing), 0));
            return self.record_acked(ctx, report);
        }
        let batch = Batch { no, body, bytes };
        if !after_another {
            return self.send(batch);
        }
        self.held.push_back(batch);
        while self.held.len() > HELD {
            self.wait_ack(ctx, report)?;
        }
        Ok(())
    }

    /// Hands a batch to the upload threads (waiting for one to be free).
    fn send(&self, batch: Batch) -> Result<(), SyncError> {
        let sent = self.batches.as_ref().is_some_and(|b| b.send(batch).is_ok());
        if !sent {
            return Err(stopped("upload"));
        }
        Ok(())
    }

    /// Sends held batches, first first, while the first shares no session
    /// with a batch before it that is not recorded yet.
    fn release_held(&mut self) -> Result<(), SyncError> {
        while let Some(front) = self.held.front() {
            let labels = &self.labels_in_flight[&front.no];
            let blocked = self
                .labels_in_flight
                .range(..front.no)
                .any(|(_, other)| !other.is_disjoint(labels));
            if blocked {
                return Ok(());
            }
            let batch = self.held.pop_front().expect("looked at above");
            self.send(batch)?;
        }
        Ok(())
    }

    /// Waits for the next acknowledgement and records what it allows.
    fn wait_ack(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
    ) -> Result<(), SyncError> {
        let (no, r, bytes) = self.acks.recv().map_err(|_| stopped("upload"))?;
        self.acked.insert(no, (r, bytes));
        self.record_acked(ctx, report)
    }

    /// Records, in batch order, the states of every acknowledged batch
    /// whose predecessors are all recorded; the first failed upload is the
    /// push's error.
    fn record_acked(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
    ) -> Result<(), SyncError> {
        let mut changed = false;
        while let Some((r, bytes)) = self.acked.remove(&self.next_record) {
            let resp = match r {
                Ok(resp) => resp,
                Err(e) => {
                    if changed {
                        ctx.save_state()?;
                    }
                    return Err(e.into());
                }
            };
            self.labels_in_flight.remove(&self.next_record);
            changed |= resp.newest_seq > ctx.state.high_water.newest_seq;
            ctx.state.high_water.observe_seq(resp.newest_seq);
            report.segments_stored += resp.stored;
            report.segments_dropped += resp.dropped;
            // A batch's records take consecutive seqs ending at
            // `newest_seq`: when they follow the cursor directly, nothing
            // else came in between, and the cursor passes over them, so no
            // pull fetches this device's own records back.
            if resp.stored > 0 && resp.newest_seq.checked_sub(resp.stored) == Some(ctx.state.cursor)
            {
                ctx.state.advance_cursor(resp.newest_seq);
                changed = true;
            }
            report.bytes_sent += bytes;
            let segments = self
                .pending_segments
                .remove(&self.next_record)
                .unwrap_or_default();
            // Refused for the quota: not sent, so none of that session's
            // states in this batch or a later one is recorded (the next
            // push reads it again), and it is named; the rest went up.
            for &i in &resp.over_quota {
                if let Some((label, entries)) = segments.get(i as usize) {
                    report.entries = report.entries.saturating_sub(*entries);
                    self.over_quota.insert(label.clone());
                    self.fail(
                        report,
                        &label.clone(),
                        "the account's storage quota on the server has no room for it                          (the rest was pushed); free room or raise the quota"
                            .into(),
                    );
                }
            }
            // Refused because a blob it refers to is gone from the server
            // (deleted as unreferenced right after this push asked which
            // were missing): not stored, no state recorded, so the next
            // push uploads the blob again and resends it.
            for &i in &resp.blob_missing {
                if let Some((label, entries)) = segments.get(i as usize) {
                    report.entries = report.entries.saturating_sub(*entries);
                    self.over_quota.insert(label.clone());
                    self.fail(
                        report,
                        &label.clone(),
                        "a blob it refers to was deleted from the server meanwhile; the next \
                         push uploads it again"
                            .into(),
                    );
                }
            }
            // Refused because the session was forgotten (another device's
            // tombstone): not stored, no state recorded; the push applies
            // the tombstone here (see `forget`).
            for &i in &resp.forgotten {
                if let Some((label, entries)) = segments.get(i as usize) {
                    report.entries = report.entries.saturating_sub(*entries);
                    self.over_quota.insert(label.clone());
                    let stream = label.strip_prefix("session ").unwrap_or(label);
                    if !report.forgotten.iter().any(|s| s == stream) {
                        report.forgotten.push(stream.to_owned());
                    }
                }
            }
            for (label, m) in self
                .pending_marks
                .remove(&self.next_record)
                .unwrap_or_default()
            {
                if self.over_quota.contains(&label) {
                    continue;
                }
                changed = true;
                match m {
                    Mark::File(rel, fs) => {
                        ctx.state.files.insert(rel, fs);
                    }
                    Mark::Journal(j) => ctx.state.journal = j,
                    Mark::Project(stream, record) => ctx.projects.set_record(&stream, record),
                }
            }
            self.next_record += 1;
        }
        if changed {
            ctx.save_state()?;
        }
        self.release_held()
    }

    /// Waits until everything queued so far is sealed, sent, acknowledged
    /// and recorded.
    pub(crate) fn flush(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
    ) -> Result<(), SyncError> {
        while self.next_in_order < self.next_idx {
            if !self.ready.contains_key(&self.next_in_order) {
                let (idx, r) = self.sealed.recv().map_err(|_| stopped("sealing"))?;
                self.ready.insert(idx, Some(r));
            }
            self.place_ready(ctx, report)?;
        }
        if !self.batch.is_empty() || !self.marks.is_empty() {
            self.cut(ctx, report)?;
        }
        self.wait_recorded(ctx, report, self.next_batch)
    }

    /// Waits until every batch numbered below `upto` is acknowledged and
    /// its states recorded.
    fn wait_recorded(
        &mut self,
        ctx: &mut SyncContext,
        report: &mut PushReport,
        upto: u64,
    ) -> Result<(), SyncError> {
        while self.next_record < upto {
            // The next to record may be held, with nothing before it now.
            self.release_held()?;
            if self.acked.contains_key(&self.next_record) {
                self.record_acked(ctx, report)?;
            } else {
                self.wait_ack(ctx, report)?;
            }
        }
        Ok(())
    }
}

impl Drop for Uploader {
    /// Closing the queues lets every worker finish its item and stop.
    fn drop(&mut self) {
        self.jobs = None;
        self.batches = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// What a batch may hold under the server's limit, with a margin for the
/// framing the estimates leave out.
fn batch_room(max_bytes: u64) -> u64 {
    max_bytes * 9 / 10
}

/// The error when a pool's workers are gone (one panicked).
fn stopped(pool: &str) -> SyncError {
    SyncError::Io {
        context: format!("the {pool} threads stopped"),
        source: std::io::Error::other(format!("{pool} thread panicked")),
    }
}

/// The next item of a queue shared by workers; `None` once it is closed.
/// A sealer's work on one job: its lines that travel as blobs go up, then
/// its entries are sealed.
fn seal_job(
    transfer: &BlobTransfer<'_>,
    keys: &SyncKeys,
    identity: &Identity,
    job: &mut SealJob,
) -> Sealing {
    let line_blobs = match send_lines(transfer, &mut job.entries) {
        Ok(n) => n,
        Err(e) => return (Err(format!("cannot send a line as a blob: {e}")), 0),
    };
    let sealed = seal_stream(keys, identity, &job.session, &job.entries)
        .map_err(|e| format!("cannot seal: {e}"));
    (sealed, line_blobs)
}

fn next<T>(rx: &Mutex<Receiver<T>>) -> Option<T> {
    rx.lock().unwrap_or_else(|p| p.into_inner()).recv().ok()
}
