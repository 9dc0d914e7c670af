//! What this device asks: a forget or an undo made here, and sending them
//! (at once, or first thing in the next push when the server was away).

use evi_shared::frames::SegmentHead;

use super::apply::{Applied, ledger, restore_stream, save, trash_stream};
use super::ledger::{Ledger, SessionMark};
use super::tombstone::{Action, Tombstone};
use crate::source::StreamName;
use crate::sync::error::SyncError;
use crate::sync::remote::records::{OutBatch, OutSegment};
use crate::sync::state::context::SyncContext;

/// Forgets `stream` on this device (the command): its files (eVi's, or
/// another agent's) to the trash, its tombstone queued to send. Nothing of
/// it is kept here.
pub fn forget_here(
    ctx: &mut SyncContext,
    stream: &StreamName,
    applied: &mut Applied,
) -> Result<(), SyncError> {
    let mut l = ledger(ctx)?;
    let at_ms = chrono::Utc::now().timestamp_millis();
    trash_stream(ctx, &l, stream, at_ms, false, applied)?;
    let t = Tombstone {
        action: Action::Forget,
        stream: stream.to_string(),
        at_ms,
        device: ctx.account.device_id.clone(),
    };
    queue(ctx, &mut l, &t)?;
    save(ctx, &l)?;
    ctx.save_state()
}

/// Undoes the forget of `stream` here: its trash folders back (a
/// session's with its subagents' transcripts), an undo queued to send, and
/// the session's files read again whole by the next push (the server
/// deleted what it had). `false` when the trash holds nothing of it and it
/// is not forgotten here by a tombstone of its own (a subagent transcript
/// forgotten with its session has its files in the session's folder).
pub fn undo_here(
    ctx: &mut SyncContext,
    stream: &StreamName,
    applied: &mut Applied,
) -> Result<bool, SyncError> {
    let mut l = ledger(ctx)?;
    if !restore_stream(ctx, stream, applied)? && !l.is_forgotten_alone(&stream.to_string()) {
        return Ok(false);
    }
    let t = Tombstone {
        action: Action::Undo,
        stream: stream.to_string(),
        at_ms: chrono::Utc::now().timestamp_millis(),
        device: ctx.account.device_id.clone(),
    };
    queue(ctx, &mut l, &t)?;
    save(ctx, &l)?;
    ctx.save_state()?;
    Ok(true)
}

fn queue(ctx: &mut SyncContext, l: &mut Ledger, t: &Tombstone) -> Result<(), SyncError> {
    ctx.state.high_water.forgot();
    let (_, entry) = t.ids(&ctx.keys);
    l.applied.insert(entry.to_string());
    l.remember(t);
    l.sessions.insert(
        t.stream.clone(),
        SessionMark {
            action: t.action,
            at_ms: t.at_ms,
            device: t.device.clone(),
            tombstone: entry.to_string(),
            unsent: true,
        },
    );
    Ok(())
}

/// Marks every forget and undo this device holds (its own, and those it
/// applied) to be sent again by the next push: the server's history went
/// back (restored from a backup), and may have lost them. Each goes under
/// its own entry id again, so a server that kept it stores it once.
pub fn resend_all(ctx: &SyncContext) -> Result<(), SyncError> {
    let mut l = ledger(ctx)?;
    if l.sessions.is_empty() {
        return Ok(());
    }
    for m in l.sessions.values_mut() {
        m.unsent = true;
    }
    save(ctx, &l)
}

/// Sends the forgets and undos made here that the server has not
/// acknowledged, in one batch, before anything else of a push.
pub fn send_outbox(ctx: &mut SyncContext, applied: &mut Applied) -> Result<(), SyncError> {
    let mut l = ledger(ctx)?;
    let unsent: Vec<Tombstone> = l
        .sessions
        .iter()
        .filter(|(_, m)| m.unsent)
        .map(|(s, m)| Tombstone {
            action: m.action,
            stream: s.clone(),
            at_ms: m.at_ms,
            device: m.device.clone(),
        })
        .collect();
    if unsent.is_empty() {
        return Ok(());
    }
    // As push does: nothing goes up under a key the account does not hold.
    ctx.check_key()?;
    let caps = ctx.client.capabilities()?;
    let mut batch = OutBatch::new(caps.frames, caps.max_batch_bytes);
    for t in &unsent {
        let sealed = t
            .seal(&ctx.keys, &ctx.identity)
            .map_err(|e| SyncError::Io {
                context: format!("cannot seal the tombstone of session {}", t.stream),
                source: std::io::Error::other(e),
            })?;
        batch.add(OutSegment {
            head: SegmentHead {
                stream: sealed.stream,
                kind: sealed.kind.to_owned(),
                entry_ids: vec![sealed.entry_id],
                refs: Default::default(),
                group: None,
            },
            ciphertext: sealed.ciphertext,
        });
    }
    let resp = ctx.client.push(batch)?;
    // As the uploader does: records that follow the cursor directly are
    // this device's own, and the cursor passes over them.
    if resp.stored > 0 && resp.newest_seq.checked_sub(resp.stored) == Some(ctx.state.cursor) {
        ctx.state.advance_cursor(resp.newest_seq);
    }
    ctx.state.high_water.observe_seq(resp.newest_seq);
    for t in &unsent {
        if let Some(m) = l.sessions.get_mut(&t.stream) {
            m.unsent = false;
        }
    }
    applied.sent += unsent.len() as u64;
    save(ctx, &l)?;
    ctx.save_state()
}
