//! Forgetting checkpoints everywhere (`evi checkpoints forget`, and
//! `[checkpoints] keep_days` applied by push).
//!
//! # Promises
//!
//! - A forget takes the lines out of this device's journal (see
//!   [`crate::checkpoints::forget`]) and sends a tombstone ([`tombstone`]:
//!   sealed to the identity, MAC-bound to the journal's stream) naming the
//!   lines by content hash and the blobs no line here names any more. The
//!   tombstone is queued in `sync/checkpoint-forget.json` ([`outbox`])
//!   before the journal is rewritten, and goes up first thing in the next
//!   push (the command pushes at once), in a batch of its own: the server
//!   deletes the records holding those lines before this device sends the
//!   lines it kept from the same records again.
//! - The record tells the server, in the clear, the keyed ids of the lines
//!   and the keyed names of the blobs (see [`evi_shared::blob_refs`]): it
//!   deletes those records, and the blobs once no record refers to them.
//! - Every other device applies it when its pull reaches it: the lines
//!   leave its copy (`checkpoints/devices/<journal>/journal.jsonl`, replaced
//!   atomically) and the blobs no journal line there names leave
//!   `checkpoints/blobs/`. A tombstone that does not verify is not applied
//!   (and said so).
//!
//! What it does not reach: journal records of segment format 1, pushed by
//! versions before journals were named by device id. Those are a stream of
//! their own, `journal_stream_key(<bare device name>)`, and name each line
//! by its position, `journal_entry_key(<bare device name>, seq)`. The
//! tombstone names lines by content in the journal's version 2 stream, and
//! the server deletes only records of the tombstone's stream holding one of
//! those ids, so a format 1 record holding a forgotten line stays on the
//! server, and so does the line in the copy other devices keep of that old
//! journal (`checkpoints/devices/<bare device name>/`, which a tombstone of
//! the new name does not touch). Naming those records would need this
//! device to find them by content, pulling and opening every record of the
//! old stream at each forget: a seq alone is not the line (a rewind trims
//! the journal and later lines reuse numbers, so the record holding seq 12
//! may hold another line than the one forgotten), and a tombstone naming
//! the wrong record would delete lines that were not forgotten. That search
//! is not built: a device that moved to the version 2 name pushed its
//! journal again whole under it, so the format 1 records hold copies of
//! lines the new stream holds too (or lines rewound away before the move,
//! which no journal here names any more); docs/forget.md says what stays.
//!
//! No undo: a session's forget keeps the files in a trash for 7 days
//! because a transcript is what a user would miss; a checkpoint is the
//! earlier contents of a file the user chose to take back (often for size
//! or for a secret in it), and keeping it around would defeat that. Use
//! `--dry-run` first.

pub mod outbox;
pub mod tombstone;

use std::collections::HashSet;

use evi_shared::blob_refs::{FORGET_LINES_KIND, SegmentRefs};
use evi_shared::frames::SegmentHead;
use evi_shared::limits::MAX_ENTRY_IDS_PER_SEGMENT;
use serde::Serialize;

use crate::checkpoints::forget::{self as local, Announce, ForgetError, Forgotten, Pick};
use crate::sync::engine::journal::journal_name;
use crate::sync::error::SyncError;
use crate::sync::remote::records::{OutBatch, OutSegment, PulledRecord};
use crate::sync::state::context::SyncContext;
use outbox::{Outbox, Queued};
use tombstone::LinesTombstone;

/// Lines one tombstone names at most (with their blobs, under the server's
/// limit of ids per segment).
const LINES_PER_TOMBSTONE: usize = MAX_ENTRY_IDS_PER_SEGMENT / 2;

/// What checkpoint forgets did in a push or a pull, for the reports.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Done {
    /// Lines of this device's journal forgotten by `keep_days` (push).
    pub expired_lines: u64,
    /// Tombstones sent.
    pub sent: u64,
    /// Lines taken out of pulled journals (pull).
    pub pulled_lines: u64,
    /// Blobs removed from `checkpoints/blobs/`.
    pub blobs: u64,
    /// Why a pulled tombstone was not applied, for people.
    pub refused: Vec<String>,
}

impl Done {
    /// One line each for people (what push and pull print on stderr).
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.expired_lines > 0 {
            out.push(format!(
                "forgot {} checkpoints older than [checkpoints] keep_days, on every device",
                self.expired_lines
            ));
        }
        if self.pulled_lines > 0 {
            out.push(format!(
                "{} checkpoints forgotten on another device were taken out here",
                self.pulled_lines
            ));
        }
        for r in &self.refused {
            out.push(format!(
                "a checkpoint forget from the server was not applied: {r}"
            ));
        }
        out
    }
}

fn forget_error(e: ForgetError) -> SyncError {
    SyncError::Io {
        context: "cannot forget checkpoints".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Forgets what `pick` names of this device's journal, here and (queued)
/// everywhere. Nothing is sent yet: [`send_outbox`] does.
pub fn forget_here(
    ctx: &mut SyncContext,
    pick: &Pick,
    dry_run: bool,
) -> Result<Forgotten, SyncError> {
    let name = journal_name(&ctx.account);
    let device = ctx.account.device_id.clone();
    let (keys, dir) = (ctx.keys.clone(), ctx.paths.dir.clone());
    let queue = |a: &Announce| -> Result<(), String> {
        let mut o = Outbox::load(&dir).map_err(|e| e.to_string())?;
        let at_ms = chrono::Utc::now().timestamp_millis();
        for (i, chunk) in a.lines.chunks(LINES_PER_TOMBSTONE).enumerate() {
            let t = LinesTombstone {
                journal: name.clone(),
                at_ms,
                device: device.clone(),
                lines: chunk
                    .iter()
                    .map(|l| hex::encode(local::line_hash(l)))
                    .collect(),
                // The blobs with the last: by then every line naming them is
                // named too.
                blobs: if (i + 1) * LINES_PER_TOMBSTONE >= a.lines.len() {
                    a.unnamed.iter().cloned().collect()
                } else {
                    Vec::new()
                },
            };
            o.unsent.push(Queued::new(&keys, t, chunk));
        }
        o.save(&dir).map_err(|e| e.to_string())
    };
    let cp = ctx.home.checkpoints_dir();
    let before = Outbox::load(&ctx.paths.dir).map_or(0, |o| o.unsent.len());
    match local::forget(&cp, pick, dry_run, queue) {
        Ok(f) => Ok(f),
        // Queued, then the journal could not be rewritten (eVi was writing
        // to it): the lines stay, so their tombstones must not go.
        Err(e @ (ForgetError::Trim(_) | ForgetError::Io { .. })) => {
            if let Ok(mut o) = Outbox::load(&ctx.paths.dir)
                && o.unsent.len() > before
            {
                o.unsent.truncate(before);
                let _ = o.save(&ctx.paths.dir);
            }
            Err(forget_error(e))
        }
        Err(e) => Err(forget_error(e)),
    }
}

/// Applies `[checkpoints] keep_days` (at the start of a push): forgets the
/// lines of this device's journal older than that.
pub fn expire(ctx: &mut SyncContext, done: &mut Done) -> Result<(), SyncError> {
    let Some(days) = ctx.checkpoint_keep_days else {
        return Ok(());
    };
    let before = chrono::Utc::now().timestamp_millis() - i64::from(days) * 86_400_000;
    let pick = Pick {
        seqs: Vec::new(),
        before_ms: Some(before),
    };
    let f = forget_here(ctx, &pick, false)?;
    done.expired_lines += f.lines.len() as u64;
    done.blobs += f.blobs.len() as u64;
    Ok(())
}

/// Sends the checkpoint forgets queued here, in a batch of their own (see
/// the module's promises), before anything else of a push.
pub fn send_outbox(ctx: &mut SyncContext, done: &mut Done) -> Result<(), SyncError> {
    let dir = ctx.paths.dir.clone();
    let io = |e: std::io::Error| SyncError::Io {
        context: "cannot read sync/checkpoint-forget.json".into(),
        source: e,
    };
    let mut o = Outbox::load(&dir).map_err(io)?;
    if o.unsent.is_empty() {
        return Ok(());
    }
    ctx.check_key()?;
    let caps = ctx.client.capabilities()?;
    let mut batch = OutBatch::new(caps.frames, caps.max_batch_bytes);
    for q in &o.unsent {
        let ciphertext = q
            .tombstone
            .seal(&ctx.keys, &ctx.identity)
            .map_err(|e| SyncError::Io {
                context: "cannot seal a checkpoint forget".into(),
                source: std::io::Error::other(e),
            })?;
        let (stream, entry) = q.tombstone.ids(&ctx.keys).map_err(|e| SyncError::Io {
            context: "cannot seal a checkpoint forget".into(),
            source: std::io::Error::other(e),
        })?;
        batch.add(OutSegment {
            head: SegmentHead {
                stream,
                kind: FORGET_LINES_KIND.to_owned(),
                entry_ids: vec![entry],
                refs: SegmentRefs {
                    refs: Vec::new(),
                    forgets: q.line_ids.clone(),
                    forget_blobs: q.blob_ids.clone(),
                },
                group: None,
            },
            ciphertext,
        });
    }
    let resp = ctx.client.push(batch)?;
    if resp.stored > 0 && resp.newest_seq.checked_sub(resp.stored) == Some(ctx.state.cursor) {
        ctx.state.advance_cursor(resp.newest_seq);
    }
    ctx.state.high_water.observe_seq(resp.newest_seq);
    // The server deleted the records holding those lines: its counts go
    // down, which is no restore from a backup.
    ctx.state.high_water.forgot();
    done.sent += o.unsent.len() as u64;
    o.unsent.clear();
    o.save(&dir).map_err(io)?;
    ctx.save_state()
}

/// Opens a pulled `forget-lines` record and checks it against its ids.
fn open_pulled(ctx: &SyncContext, r: &PulledRecord) -> Result<LinesTombstone, String> {
    LinesTombstone::open(
        &ctx.keys,
        &ctx.identity,
        &r.head.stream,
        &r.head.entry_ids,
        &r.ciphertext,
    )
    .map_err(|e| e.to_string())
}

/// Whether a pulled checkpoint forget verifies (for `evi sync verify`).
pub fn check(ctx: &SyncContext, r: &PulledRecord) -> Result<(), String> {
    open_pulled(ctx, r).map(drop)
}

/// Applies a pulled checkpoint forget: the lines out of this device's copy
/// of that journal, and the blobs no line here names out of `blobs/`. This
/// device's own forgets are passed over (done when they were made).
pub fn apply_pulled(
    ctx: &mut SyncContext,
    r: &PulledRecord,
    done: &mut Done,
) -> Result<(), SyncError> {
    let t = match open_pulled(ctx, r) {
        Ok(t) => t,
        Err(e) => {
            done.refused.push(format!("record {}: {e}", r.head.seq));
            return Ok(());
        }
    };
    ctx.state.high_water.forgot();
    if t.journal == journal_name(&ctx.account)
        || crate::sync::seal::segment::check_device(&t.journal).is_err()
    {
        return Ok(());
    }
    let cp = ctx.home.checkpoints_dir();
    let path = cp.join("devices").join(&t.journal).join("journal.jsonl");
    let journal = crate::checkpoints::Journal::read(&path).map_err(|source| SyncError::Io {
        context: format!("cannot read {}", path.display()),
        source,
    })?;
    let hashes: HashSet<[u8; 32]> = (t.lines.iter())
        .filter_map(|h| hex::decode(h).ok()?.try_into().ok())
        .collect();
    let picked = local::lines_with_hashes(&journal, &hashes).map_err(forget_error)?;
    let mut candidates: std::collections::BTreeSet<String> = t.blobs.iter().cloned().collect();
    candidates.extend(picked.iter().filter_map(|c| c.blob.clone()));
    local::take_out(&journal, &picked).map_err(forget_error)?;
    done.pulled_lines += picked.len() as u64;
    done.blobs += local::remove_unnamed_blobs(&cp, &candidates)
        .map_err(forget_error)?
        .len() as u64;
    Ok(())
}
