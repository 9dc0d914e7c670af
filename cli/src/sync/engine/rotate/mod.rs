//! `evi sync key rotate`: a new identity for the account, and everything
//! the server holds sealed again under it.
//!
//! # Promises
//!
//! - **No device ever sees a mix.** Every record (entry segments, journals,
//!   tombstones) is pulled from the account page by page, opened and
//!   checked under the old identity as a pull would, sealed again under
//!   the new one (new keyed ids, new MACs), and pushed into a *staging
//!   account* on the server; every blob a record names (journal blobs,
//!   line blobs) is fetched, verified and uploaded there too. Nothing of
//!   it is visible to the account's devices until the server swaps the
//!   staging account in, in one transaction (see evi-server's
//!   `store::rotation`), which also revokes the devices named and leaves
//!   every other device to learn `key_rotated` on its next call.
//! - **Nothing is lost.** The commit names the last old seq carried; the
//!   server refuses it (`rotation_behind`) while the account holds newer
//!   records, and the rotation carries those and asks again. Before the
//!   commit, the staged records are opened under the new key and the
//!   staging account must hold as many entries as the old one.
//! - **Resumable.** The new identity is saved (`sync/identity.new.txt`,
//!   0600) before anything is uploaded, and the progress after every page
//!   (`sync/rotation.json`, see [`local`]); a rerun after a kill goes on
//!   from there, and whatever it sends again the server drops by keyed id.
//!   A rerun after the commit only finishes the local swap.
//! - **Never stuck on another device's rotation.** The server holds one
//!   staging account per account, for the device that began it and its new
//!   key (the begin carries the key's check value). A rotation another
//!   device left unfinished (it was killed there, the device is lost) is
//!   abandoned by this one's begin, and the outcome says so; revoking the
//!   device that began one abandons it too. When the server answers that
//!   the staging account is new, the progress starts over: nothing this
//!   device staged before is there any more. A rotation of this device
//!   that another abandoned stops with [`RotateError::Abandoned`], the
//!   account as it was.
//! - **Bounded memory**: one page of records and one blob at a time, and
//!   the names of the blobs carried.
//!
//! - **Forgets and undos stay as they were.** Tombstones are carried like
//!   any record, in seq order, so the new account forgets and brings back
//!   what the old one did. Each device's forget ledger knows the tombstones
//!   it applied by what they say, not by their ids (which the rotation
//!   changes): a forget the user undid before the rotation, pulled again
//!   under its new id, changes nothing (the rotating device learns what
//!   each tombstone it carries says as it carries it; a device paired
//!   again knows from its own ledger, see [`rekey_ledger`]).
//!
//! Blobs no record names are not carried: nothing could ever ask for them.

pub mod local;
pub mod reseal;

use std::collections::HashSet;

use evi_shared::api::ErrorCode;

use crate::sync::SyncKeys;
use crate::sync::engine::forget::{Action, Ledger, Tombstone};
use crate::sync::error::{IoContext, SyncError};
use crate::sync::remote::blob_transfer::{BlobTransfer, TransferError, UploadOutcome};
use crate::sync::remote::client::{Client, ClientError};
use crate::sync::remote::records::OutBatch;
use crate::sync::state::context::SyncContext;
use crate::sync::state::high_water::HighWater;
use crate::sync::{Identity, IdentityError};
use local::Progress;
use reseal::{Keys, ResealError, reseal};

/// Why a rotation stopped. Until the commit, the account is as it was and
/// a rerun goes on where this one stopped.
#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error(transparent)]
    Record(#[from] ResealError),
    #[error("blob {sha}: {source}")]
    Blob {
        sha: String,
        #[source]
        source: TransferError,
    },
    #[error("blob {sha} could not be uploaded to the staging account: {reason}")]
    Upload { sha: String, reason: String },
    #[error(
        "the staged data does not match the account's: {what} (nothing was changed; run the \
         rotation again)"
    )]
    Mismatch { what: String },
    #[error(
        "the account's key check value matches neither this device's key nor the rotation's new \
         one: another device rotated the key"
    )]
    Foreign,
    #[error(
        "this key rotation was abandoned: another device began one of its own, or it stayed \
         unfinished past the server's time limit for rotations (nothing changed on the \
         account)"
    )]
    Abandoned,
    #[error(
        "the server keeps the staging area of an unfinished key rotation another device began, \
         and this evi-server cannot abandon it (nothing changed on the account)"
    )]
    OlderServer,
}

impl From<ClientError> for RotateError {
    fn from(e: ClientError) -> Self {
        Self::Sync(SyncError::Client(e))
    }
}

impl From<IdentityError> for RotateError {
    fn from(e: IdentityError) -> Self {
        Self::Sync(SyncError::Identity(e))
    }
}

/// What a rotation did.
#[derive(Debug, Clone, Default)]
pub struct Rotated {
    pub generation: u64,
    pub records: u64,
    pub blobs: u64,
    /// Blobs a record names that the old account did not hold either.
    pub blobs_missing: u64,
    pub revoked: Vec<String>,
    pub fingerprint: String,
    /// Whether it went on from an earlier, interrupted run.
    pub resumed: bool,
    /// Whether an unfinished rotation another device began was abandoned.
    pub abandoned: bool,
    /// The name of the device that began it, when the server knows it.
    pub abandoned_by: Option<String>,
}

/// Runs (or resumes) a rotation of the account `ctx` syncs with, revoking
/// the devices `revoke` names (server ids) in the commit.
pub fn rotate(ctx: &mut SyncContext, revoke: Vec<String>) -> Result<Rotated, RotateError> {
    rotate_inner(ctx, revoke).map_err(|e| {
        // The staging token stopped working while this device's own still
        // works: another device's begin abandoned this rotation, or the
        // server did, the rotation past its `--rotation-ttl-secs`.
        if staging_refused(&e) && ctx.client.devices().is_ok() {
            RotateError::Abandoned
        } else {
            e
        }
    })
}

/// Whether `e` is a 401: from the staging account's device when this
/// device's own token still works (a commit refused as another device's
/// rotation is told apart where it is made).
fn staging_refused(e: &RotateError) -> bool {
    use crate::sync::remote::client::is_unauthorized;
    match e {
        RotateError::Sync(SyncError::Client(c)) => is_unauthorized(c),
        RotateError::Blob {
            source: TransferError::Client(c),
            ..
        } => is_unauthorized(c),
        _ => false,
    }
}

fn rotate_inner(ctx: &mut SyncContext, revoke: Vec<String>) -> Result<Rotated, RotateError> {
    let paths = ctx.paths.clone();
    let new_path = local::new_identity(&paths);
    let mut hits = 0u64;
    let resumed = new_path.exists();
    let kcv = ctx.client.key_check()?;
    let mut progress = Progress::load(&paths).ctx(|| "cannot read sync/rotation.json".into())?;
    if !resumed && progress.fingerprint == ctx.identity.fingerprint() {
        // The swap ran and only the progress file was left.
        local::swap_identity(&paths).ctx(|| "cannot finish the key swap".into())?;
        return Ok(Rotated {
            generation: current_generation(&ctx.client)?,
            fingerprint: ctx.identity.fingerprint(),
            resumed: true,
            ..Rotated::default()
        });
    }
    if resumed {
        let new = Identity::load(&new_path)?;
        let new_keys = SyncKeys::derive(&new);
        if kcv
            .as_deref()
            .is_some_and(|k| new_keys.matches_key_check(k))
        {
            // Committed before: only the local part is left.
            let generation = current_generation(&ctx.client)?;
            finish_local(ctx, &new, &new_keys)?;
            return Ok(Rotated {
                generation,
                fingerprint: new.fingerprint(),
                resumed,
                ..Rotated::default()
            });
        }
    }
    if !kcv.as_deref().is_none_or(|k| ctx.keys.matches_key_check(k)) {
        return Err(RotateError::Foreign);
    }
    let new = if resumed {
        Identity::load(&new_path)?
    } else {
        let fresh = Identity::generate();
        fresh.save_new(&new_path)?;
        progress = Progress {
            fingerprint: fresh.fingerprint(),
            ..Progress::default()
        };
        progress
            .save(&paths)
            .ctx(|| "cannot save sync/rotation.json".into())?;
        fresh
    };
    let new_keys = SyncKeys::derive(&new);
    let begun = ctx.client.rotation_begin(&new_keys)?;
    if begun.fresh && progress.through_seq + progress.verified_seq + progress.records > 0 {
        // What an earlier run staged is gone (another device abandoned
        // it, or a revoke or a commit ended it): carry everything again.
        progress = Progress {
            fingerprint: progress.fingerprint,
            ..Progress::default()
        };
        progress
            .save(&paths)
            .ctx(|| "cannot save sync/rotation.json".into())?;
    }
    // The staging account is the new key's: its forgets prove that key.
    let staging = ctx
        .client
        .with_token(begun.token.clone())
        .with_key_proof(&new_keys);
    // The begin set it already; an older server needs it set here.
    match staging.set_key_check(&new_keys, None) {
        Err(ClientError::Api {
            code: ErrorCode::KeyCheckMismatch,
            ..
        }) => return Err(RotateError::OlderServer),
        r => r?,
    }
    let caps = ctx.client.capabilities()?;
    let keys = Keys {
        old: &ctx.identity,
        old_keys: &ctx.keys,
        new: &new,
        new_keys: &new_keys,
    };
    let old_blobs = BlobTransfer::new(&ctx.client, &ctx.identity, &ctx.keys, &paths.dir)
        .with_max_blob_bytes(caps.max_blob_bytes);
    let new_blobs = BlobTransfer::new(&staging, &new, &new_keys, &paths.dir)
        .with_max_blob_bytes(caps.max_blob_bytes);
    // The forget ledger learns what each tombstone it applied says, so
    // none applies again under its new ids (see `rekey_ledger`).
    let mut ledger = Ledger::load(&paths.dir).ctx(|| "cannot read sync/forget.json".into())?;
    let mut carried_blobs: HashSet<String> = HashSet::new();
    let mut blobs_missing = 0u64;
    let mut lost_blobs: HashSet<String> = HashSet::new();
    let committed = loop {
        // Carry every record after the progress.
        loop {
            let page = ctx.client.pull(progress.through_seq, caps.frames)?;
            let mut batch = OutBatch::new(caps.frames, caps.max_batch_bytes);
            let mut bytes = 0u64;
            let mut learned = false;
            for r in &page.records {
                let mut out = reseal(&keys, r)?;
                if let Some(t) = &out.tombstone
                    && (r.head.entry_ids.first())
                        .is_some_and(|id| ledger.applied.contains(id.as_str()))
                    && !ledger.knows(t)
                {
                    ledger.remember(t);
                    learned = true;
                }
                // Blobs first, then the record that names them: the server
                // refuses a record whose declared blob it does not hold.
                for sha in &out.blobs {
                    if carried_blobs.contains(sha) || lost_blobs.contains(sha) {
                        continue;
                    }
                    match carry_blob(&old_blobs, &new_blobs, sha, &paths.dir)? {
                        Some(true) => progress.blobs += 1,
                        Some(false) => {}
                        None => {
                            blobs_missing += 1;
                            lost_blobs.insert(sha.clone());
                            continue;
                        }
                    }
                    carried_blobs.insert(sha.clone());
                }
                // A blob the old account had lost stays lost: the record
                // is carried without declaring it, as it was stored.
                if !lost_blobs.is_empty() {
                    let lost: HashSet<_> = (out.blobs.iter())
                        .filter(|s| lost_blobs.contains(*s))
                        .map(|s| new_keys.blob_key(s))
                        .collect();
                    out.segment.head.refs.refs.retain(|n| !lost.contains(n));
                }
                let size = out.segment.wire_size(caps.frames);
                if !batch.is_empty() && bytes + size > caps.max_batch_bytes.saturating_sub(1024) {
                    push_batch(
                        &staging,
                        std::mem::replace(
                            &mut batch,
                            OutBatch::new(caps.frames, caps.max_batch_bytes),
                        ),
                    )?;
                    bytes = 0;
                }
                bytes += size;
                batch.add(out.segment);
            }
            if !batch.is_empty() {
                push_batch(&staging, batch)?;
            }
            if learned {
                ledger
                    .save(&paths.dir)
                    .ctx(|| "cannot save sync/forget.json".into())?;
            }
            progress.records += page.records.len() as u64;
            crate::test_hooks::rotate_kill_point("page", &mut hits);
            progress.through_seq = page.next_after.max(progress.through_seq);
            progress
                .save(&paths)
                .ctx(|| "cannot save sync/rotation.json".into())?;
            if !page.more {
                break;
            }
        }
        verify(&keys, ctx, &staging, &mut progress, caps.frames)?;
        progress
            .save(&paths)
            .ctx(|| "cannot save sync/rotation.json".into())?;
        crate::test_hooks::rotate_kill_point("verify", &mut hits);
        match ctx.client.rotation_commit(progress.through_seq, &revoke) {
            Ok(done) => break done,
            Err(ClientError::Api {
                code: ErrorCode::RotationBehind,
                ..
            }) => continue,
            Err(ClientError::Api {
                code: ErrorCode::RotationAbandoned,
                ..
            }) => return Err(RotateError::Abandoned),
            Err(e) => return Err(e.into()),
        }
    };
    crate::test_hooks::rotate_kill_point("commit", &mut hits);
    let records = progress.records;
    let blobs = progress.blobs;
    finish_local_with(ctx, &new, &new_keys, &mut hits)?;
    Ok(Rotated {
        generation: committed.generation,
        records,
        blobs,
        blobs_missing,
        revoked: committed.revoked,
        fingerprint: new.fingerprint(),
        resumed,
        abandoned: begun.abandoned,
        abandoned_by: begun.abandoned_by,
    })
}

fn push_batch(staging: &Client, batch: OutBatch) -> Result<(), RotateError> {
    let r = staging.push(batch)?;
    if !r.blob_missing.is_empty() {
        return Err(RotateError::Mismatch {
            what: format!(
                "the staging account refused {} records for a blob it does not hold",
                r.blob_missing.len()
            ),
        });
    }
    if !r.over_quota.is_empty() {
        return Err(RotateError::Mismatch {
            what: format!(
                "the account's quota has no room for a second copy of its data ({} records refused)",
                r.over_quota.len()
            ),
        });
    }
    Ok(())
}

/// Fetches blob `sha` from the old account and uploads it to the staging
/// one: `Some(true)` uploaded, `Some(false)` staged already, `None` when
/// the old account does not hold it either.
fn carry_blob(
    old: &BlobTransfer<'_>,
    new: &BlobTransfer<'_>,
    sha: &str,
    dir: &std::path::Path,
) -> Result<Option<bool>, RotateError> {
    let err = |source| RotateError::Blob {
        sha: sha.to_owned(),
        source,
    };
    if new.stored(&[sha.to_owned()]).map_err(err)?.first() == Some(&true) {
        return Ok(Some(false));
    }
    let Some(tmp) = old.fetch_blob_to_temp(sha, dir).map_err(err)? else {
        return Ok(None);
    };
    match new.upload_blob(sha, tmp.path()).map_err(err)? {
        UploadOutcome::Uploaded { .. } => Ok(Some(true)),
        UploadOutcome::AlreadyStored => Ok(Some(false)),
        UploadOutcome::Failed(f) => Err(RotateError::Upload {
            sha: sha.to_owned(),
            reason: f.to_string(),
        }),
    }
}

/// Opens every staged record not checked yet under the new key, and
/// compares the counts: as many entries and records as carried.
fn verify(
    keys: &Keys<'_>,
    ctx: &SyncContext,
    staging: &Client,
    progress: &mut Progress,
    framed: bool,
) -> Result<(), RotateError> {
    loop {
        let page = staging.pull(progress.verified_seq, framed)?;
        for r in &page.records {
            reseal::open_new(keys, r)?;
        }
        progress.verified_seq = page.next_after.max(progress.verified_seq);
        if !page.more {
            break;
        }
    }
    let old = ctx.client.status()?;
    let new = staging.status()?;
    // Fewer on the staging side would be entries lost; more is possible
    // (entries of records another device reported damaged count again).
    if new.entries < old.entries {
        return Err(RotateError::Mismatch {
            what: format!(
                "the account holds {} entries, the staging account {}",
                old.entries, new.entries
            ),
        });
    }
    if new.records > old.records {
        return Err(RotateError::Mismatch {
            what: format!(
                "the staging account holds {} records, more than the account's {}",
                new.records, old.records
            ),
        });
    }
    Ok(())
}

fn current_generation(client: &Client) -> Result<u64, RotateError> {
    let list = client.devices()?;
    Ok(list
        .devices
        .iter()
        .find(|d| d.current)
        .map_or(0, |d| d.key_generation))
}

fn finish_local(ctx: &mut SyncContext, new: &Identity, keys: &SyncKeys) -> Result<(), RotateError> {
    let mut hits = 0;
    finish_local_with(ctx, new, keys, &mut hits)
}

/// After the commit: the state that named old keyed ids starts over (the
/// cursor, so the next pull reads the whole new account and passes over
/// what is here by entry id; the counts it saw), the forget ledger learns
/// the new ids of its tombstones, then the identities swap.
fn finish_local_with(
    ctx: &mut SyncContext,
    new: &Identity,
    keys: &SyncKeys,
    hits: &mut u64,
) -> Result<(), RotateError> {
    reset_for_new_key(ctx, keys)?;
    crate::test_hooks::rotate_kill_point("swap", hits);
    local::swap_identity(&ctx.paths).ctx(|| "cannot move the new key into place".into())?;
    ctx.identity = new.clone();
    ctx.keys = keys.clone();
    Ok(())
}

/// What a device does when its key changes under an account whose data
/// was sealed again (after a rotation here, or a join after one elsewhere):
/// the pull cursor and what it remembers of the server start over; what
/// it pushed stays pushed (the server holds it under the new key); the
/// forget ledger holds the new keyed ids of its tombstones too.
pub fn reset_for_new_key(ctx: &mut SyncContext, keys: &SyncKeys) -> Result<(), SyncError> {
    reset_state(&mut ctx.state);
    ctx.save_state()?;
    rekey_ledger(&ctx.paths.dir, keys)
}

/// [`reset_for_new_key`]'s change of the sync state.
pub fn reset_state(state: &mut crate::sync::state::SyncState) {
    state.cursor = 0;
    state.session_cursors.clear();
    state.high_water = HighWater::default();
    state.damaged.clear();
}

/// The sync state of a device that joins again after the account's key
/// was rotated elsewhere: as [`reset_state`], and its push state too, so
/// its next push reads every file again and the server keeps by entry id
/// only what it lacks (what this device wrote under the old key and never
/// pushed goes up; what the rotation carried is not doubled).
pub fn reset_for_rejoin(state: &mut crate::sync::state::SyncState) {
    reset_state(state);
    state.files.clear();
    state.skip.clear();
    state.journal = crate::sync::state::JournalState {
        name: state.journal.name.take(),
        ..Default::default()
    };
}

/// Adds to the forget ledger the ids every tombstone it knows has under
/// `keys` (forgets and undos alike), so pulling them again sealed under
/// the new key changes nothing here: a session forgotten and brought back
/// before the rotation stays back.
pub fn rekey_ledger(sync_dir: &std::path::Path, keys: &SyncKeys) -> Result<(), SyncError> {
    let mut ledger = Ledger::load(sync_dir).ctx(|| "cannot read sync/forget.json".into())?;
    if ledger.sessions.is_empty() {
        return Ok(());
    }
    for known in ledger.contents() {
        let id = known.tombstone().ids(keys).1.to_string();
        ledger.applied.insert(id);
    }
    for (stream, mark) in ledger.sessions.iter_mut() {
        let t = Tombstone {
            action: mark.action,
            stream: stream.clone(),
            at_ms: mark.at_ms,
            device: mark.device.clone(),
        };
        if !mark.unsent {
            mark.tombstone = t.ids(keys).1.to_string();
        }
    }
    // A ledger from an older evi kept only each session's newest
    // tombstone: the forget an undo took back is known by its time.
    let undone: Vec<(String, i64)> = (ledger.sessions.iter())
        .filter(|(s, m)| {
            m.action == Action::Undo
                && !ledger
                    .known
                    .iter()
                    .any(|k| k.stream == **s && k.action == Action::Forget)
        })
        .map(|(s, m)| (s.clone(), m.at_ms))
        .collect();
    ledger.undone_before.extend(undone);
    ledger
        .save(sync_dir)
        .ctx(|| "cannot save sync/forget.json".into())
}

/// Whether `e` says this device's key is older than the account's.
pub fn is_key_rotated(e: &ClientError) -> bool {
    e.code() == Some(ErrorCode::KeyRotated)
}
