//! The engine's side of blob transfer: which blobs a push or pull
//! moves, what the sync state remembers, and what the user is warned about.
//! Blobs live in `checkpoints/blobs/<sha256>`. A blob a journal line names
//! that cannot be sent, or that the server does not have, never stops the
//! sync: it is warned about and remembered in `SyncState::missing_blobs`,
//! and forgotten only once the server has it or it has arrived here (or its
//! name is not a blob's). These functions change the state in memory and
//! never save it (the caller does). Warnings go to the [`Progress`] the
//! caller hands in (the face prints them; the engine never does).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use crate::sync::engine::push_report::PushReport;
use crate::sync::error::SyncError;
use crate::sync::progress::Progress;
use crate::sync::remote::blob_transfer::{
    BlobTransfer, Fetched, Landing, TransferError, UploadOutcome, in_parallel, is_sha_name,
};
use crate::sync::state::context::SyncContext;

/// Where a checkpoint blob lives: `checkpoints/blobs/<sha256>`.
pub fn checkpoint_blob_path(ctx: &SyncContext, sha256: &str) -> PathBuf {
    checkpoint_blobs_dir(ctx).join(sha256)
}

/// The folder of checkpoint blobs: `checkpoints/blobs/`.
fn checkpoint_blobs_dir(ctx: &SyncContext) -> PathBuf {
    ctx.home.checkpoints_dir().join("blobs")
}

fn transfer(ctx: &SyncContext) -> BlobTransfer<'_> {
    BlobTransfer::new(&ctx.client, &ctx.identity, &ctx.keys, &ctx.paths.dir)
}

/// Uploads one blob from `src` unless the server has it; `true` if it went
/// up now. A blob that cannot be sent is an error about that item alone
/// ([`SyncError::Io`], its cause as the source), so a caller can name it and
/// go on; the state is not touched.
pub fn upload_one(ctx: &SyncContext, sha256: &str, src: &Path) -> Result<bool, SyncError> {
    upload_through(&transfer(ctx), sha256, src)
}

/// [`upload_one`] through `transfer`: for threads of their own, which hold
/// no [`SyncContext`].
pub(crate) fn upload_through(
    transfer: &BlobTransfer<'_>,
    sha256: &str,
    src: &Path,
) -> Result<bool, SyncError> {
    match transfer.upload_blob(sha256, src)? {
        UploadOutcome::Uploaded { .. } => Ok(true),
        UploadOutcome::AlreadyStored => Ok(false),
        UploadOutcome::Failed(why) => Err(SyncError::Io {
            context: format!("blob {sha256} was not uploaded"),
            source: io::Error::other(why),
        }),
    }
}

/// Fetches one blob into `dest` (verified, created, never replaced; see
/// [`BlobTransfer::fetch_blob`]), with no warning and no state: a caller
/// that gets [`Fetched::Missing`] decides what waits.
pub fn fetch_to(ctx: &SyncContext, sha256: &str, dest: &Path) -> Result<Fetched, SyncError> {
    Ok(transfer(ctx).fetch_blob(sha256, dest)?)
}

/// Uploads started before they are needed, on threads of their own: the
/// blobs of the journal lines a push will send go up while its transcripts
/// are read and sealed, so the wait for the server to make each durable
/// overlaps that work instead of following it. Nothing is recorded until
/// [`push_blobs`] takes the outcomes, in the order it always did (blobs,
/// then the lines naming them); a push killed before that only left blobs
/// on the server that the next one finds there.
#[derive(Default)]
pub(crate) struct BlobsAhead {
    running: Option<std::thread::JoinHandle<Vec<(String, UploadOutcome)>>>,
    done: std::collections::HashMap<String, UploadOutcome>,
}

/// Uploads at once while the transcripts are sealed beside them: each holds
/// a zstd context and its buffers, and the push's peak memory is bounded.
const AHEAD_TRANSFERS: usize = 2;

impl BlobsAhead {
    /// Starts uploading `shas` (those the server lacks) in the background.
    pub(crate) fn start(ctx: &SyncContext, shas: BTreeSet<String>) -> Self {
        let list: Vec<(String, PathBuf)> = shas
            .into_iter()
            .filter(|s| is_sha_name(s))
            .map(|s| {
                let p = checkpoint_blob_path(ctx, &s);
                (s, p)
            })
            .collect();
        if list.is_empty() {
            return Self::default();
        }
        let (client, identity, keys) = (ctx.client.clone(), ctx.identity.clone(), ctx.keys.clone());
        let dir = ctx.paths.dir.clone();
        let running = std::thread::spawn(move || {
            let t = BlobTransfer::new(&client, &identity, &keys, &dir);
            // An error that stops the transfer (the server out of reach)
            // is met again, and reported, by the upload that needs them.
            match t.upload_blobs_on(AHEAD_TRANSFERS, &list) {
                Ok(outcomes) => list.into_iter().map(|(s, _)| s).zip(outcomes).collect(),
                Err(_) => Vec::new(),
            }
        });
        Self {
            running: Some(running),
            done: std::collections::HashMap::new(),
        }
    }

    /// What became of `sha`, once every upload started ahead is over; only
    /// those that went up or were there (a failed one is tried again).
    fn take(&mut self, sha: &str) -> Option<UploadOutcome> {
        if let Some(h) = self.running.take() {
            // A panicked upload thread is as if nothing went ahead.
            self.done = h.join().unwrap_or_default().into_iter().collect();
        }
        self.done
            .remove(sha)
            .filter(|o| !matches!(o, UploadOutcome::Failed(_)))
    }
}

impl Drop for BlobsAhead {
    /// A push that stops early still waits for its uploads, so none runs on
    /// after the push (and its lock) is over.
    fn drop(&mut self) {
        if let Some(h) = self.running.take() {
            let _ = h.join();
        }
    }
}

/// Uploads the blobs `shas` (named by journal lines about to be pushed) and
/// those the state remembers as missing that are here now, taking what
/// `ahead` did already. A blob that cannot be sent is warned about, counted
/// in `blobs_failed`, and remembered, so the next push tries again; the
/// lines naming it still go.
pub(crate) fn push_blobs(
    ctx: &mut SyncContext,
    report: &mut PushReport,
    mut shas: BTreeSet<String>,
    progress: &dyn Progress,
    ahead: &mut BlobsAhead,
) -> Result<(), SyncError> {
    shas.extend(owed_blobs(ctx));
    shas.retain(|s| is_sha_name(s));
    if shas.is_empty() {
        return Ok(());
    }
    let mut outcomes = Vec::with_capacity(shas.len());
    let mut list: Vec<(String, PathBuf)> = Vec::new();
    for s in shas {
        match ahead.take(&s) {
            Some(o) => outcomes.push((s, o)),
            None => {
                let p = checkpoint_blob_path(ctx, &s);
                list.push((s, p));
            }
        }
    }
    if !list.is_empty() {
        let sent = transfer(ctx).upload_blobs(&list)?;
        outcomes.extend(list.into_iter().map(|(s, _)| s).zip(sent));
    }
    for (sha, outcome) in outcomes {
        match outcome {
            UploadOutcome::Uploaded { .. } => {
                report.blobs_uploaded += 1;
                ctx.state.missing_blobs.remove(&sha);
            }
            UploadOutcome::AlreadyStored => {
                ctx.state.missing_blobs.remove(&sha);
            }
            UploadOutcome::Failed(why) => {
                progress.warn(&format!(
                    "blob {sha} was not uploaded: {why}; the journal lines naming it go \
                     without it, and the next push tries again"
                ));
                report.blobs_failed += 1;
                ctx.state.missing_blobs.insert(sha);
            }
        }
    }
    Ok(())
}

/// [`push_blobs`] of only the blobs the state remembers as missing: what a
/// push owes the server even when its journal did not change.
pub(crate) fn push_missing_blobs(
    ctx: &mut SyncContext,
    report: &mut PushReport,
    progress: &dyn Progress,
    ahead: &mut BlobsAhead,
) -> Result<(), SyncError> {
    push_blobs(ctx, report, BTreeSet::new(), progress, ahead)
}

/// The blobs the state remembers as not on the server that are here now.
pub(crate) fn owed_blobs(ctx: &SyncContext) -> BTreeSet<String> {
    ctx.state
        .missing_blobs
        .iter()
        .filter(|s| is_sha_name(s) && checkpoint_blob_path(ctx, s).is_file())
        .cloned()
        .collect()
}

/// Which blobs that pulled journal lines name to fetch, for the stage of a
/// pull that opens the next page while the writer has the context: what it
/// knew of the state when the pull began.
pub(crate) struct BlobFetcher {
    blobs_dir: PathBuf,
    /// Known missing: asked for at the start of this pull already.
    missing: BTreeSet<String>,
}

impl BlobFetcher {
    pub(crate) fn new(ctx: &SyncContext) -> Self {
        Self {
            blobs_dir: checkpoint_blobs_dir(ctx),
            missing: ctx.state.missing_blobs.clone(),
        }
    }

    /// Fetches and verifies through `t`, a few at once, the blobs of `shas`
    /// that are neither here nor known missing, into temp files made
    /// durable together, none placed yet: a blob that fails its hash places
    /// nothing, and what is landed is placed before the journal lines that
    /// name it (see [`LandedBlobs::place`]).
    pub(crate) fn land(
        &self,
        t: &BlobTransfer<'_>,
        shas: &[String],
    ) -> Result<LandedBlobs, SyncError> {
        let todo: BTreeSet<&String> = shas
            .iter()
            .filter(|s| is_sha_name(s) && !self.missing.contains(*s))
            .collect();
        let (present, todo): (Vec<_>, Vec<_>) = (todo.into_iter())
            .map(|sha| (sha.clone(), self.blobs_dir.join(sha)))
            .partition(|(_, path)| path.exists());
        let landed = if todo.is_empty() {
            Vec::new()
        } else {
            t.land_blobs(&todo)?
        };
        Ok(LandedBlobs {
            todo,
            landed,
            present,
        })
    }
}

/// Blobs fetched and verified, waiting to be placed.
#[derive(Default)]
pub(crate) struct LandedBlobs {
    todo: Vec<(String, PathBuf)>,
    landed: Vec<Landing>,
    /// Those that were here when the others were fetched: a checkpoint
    /// forget applied since may have deleted one.
    present: Vec<(String, PathBuf)>,
}

impl LandedBlobs {
    /// Places the blobs (never replacing a file) and makes their names
    /// durable. One the server does not have is warned about and
    /// remembered, and its line is applied anyway: [`pull_missing_blobs`]
    /// asks for it again at every pull; each is warned about once per
    /// pull. Returns how many were written.
    pub(crate) fn place(
        self,
        ctx: &mut SyncContext,
        progress: &dyn Progress,
    ) -> Result<u64, SyncError> {
        let mut todo = self.todo;
        let mut fetched = BlobTransfer::place_blobs(&todo, self.landed)?;
        let gone: Vec<(String, PathBuf)> = (self.present.into_iter())
            .filter(|(_, path)| !path.exists())
            .collect();
        if !gone.is_empty() {
            fetched.extend(transfer(ctx).fetch_blobs(&gone)?);
            todo.extend(gone);
        }
        let mut n = 0;
        for ((sha, _), result) in todo.into_iter().zip(fetched) {
            match result {
                Fetched::Written(_) => n += 1,
                Fetched::AlreadyPresent => {}
                Fetched::Missing if ctx.state.missing_blobs.contains(&sha) => {}
                Fetched::Missing => {
                    progress.warn(&format!(
                        "blob {sha} is not on the server; its journal line is applied, and \
                         every pull asks for the blob again"
                    ));
                    ctx.state.missing_blobs.insert(sha);
                }
            }
        }
        Ok(n)
    }
}

/// What `evi sync verify` found of one blob on the server.
#[derive(Debug)]
pub enum Verified {
    /// Whole or in parts, it hashes to its name; its size.
    Good(u64),
    /// The server has neither the whole blob nor all its parts.
    Missing,
    /// What the server gives is not the blob (the reason).
    Bad(String),
}

/// Fetches and checks each of `shas`, a few at once, keeping nothing; only
/// a server out of reach (or refusing the device) stops it.
pub fn verify_blobs(ctx: &SyncContext, shas: &[String]) -> Result<Vec<Verified>, SyncError> {
    let t = transfer(ctx);
    let checked = in_parallel(shas, |sha| match t.verify_blob(sha) {
        Ok(Some(n)) => Ok(Verified::Good(n)),
        Ok(None) => Ok(Verified::Missing),
        Err(e @ (TransferError::Refused { .. } | TransferError::Manifest { .. })) => {
            Ok(Verified::Bad(e.to_string()))
        }
        Err(e) => Err(e),
    })?;
    Ok(checked)
}

/// Asks again for every blob the state remembers as missing (at the start
/// of a pull): those that arrive, or that are here and now on the server,
/// are forgotten; one the server refuses to give right is warned about and
/// kept (its line is applied already, so refusing the pull would only block
/// everything else). Those that are here but not on the server wait for
/// this device's next push. Returns how many were written.
pub fn pull_missing_blobs(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
) -> Result<u64, SyncError> {
    if ctx.state.missing_blobs.is_empty() {
        return Ok(0);
    }
    let mut done = Vec::new();
    let mut here = Vec::new();
    let mut absent = Vec::new();
    for sha in &ctx.state.missing_blobs {
        if !is_sha_name(sha) {
            done.push(sha.clone());
        } else if checkpoint_blob_path(ctx, sha).exists() {
            here.push(sha.clone());
        } else {
            absent.push(sha.clone());
        }
    }
    let t = transfer(ctx);
    let mut fetched = 0;
    if !here.is_empty() {
        let stored = t.stored(&here)?;
        done.extend(
            here.into_iter()
                .zip(stored)
                .filter(|(_, s)| *s)
                .map(|(h, _)| h),
        );
    }
    for sha in absent {
        match t.fetch_blob(&sha, &checkpoint_blob_path(ctx, &sha)) {
            Ok(Fetched::Written(_)) => {
                fetched += 1;
                done.push(sha);
            }
            Ok(Fetched::AlreadyPresent) => done.push(sha),
            Ok(Fetched::Missing) => progress.warn(&format!(
                "blob {sha} is still not on the server; a journal line here names it, and \
                 the next pull asks again"
            )),
            Err(e @ (TransferError::Refused { .. } | TransferError::Manifest { .. })) => {
                progress.warn(&format!("{e}; nothing was kept, the next pull asks again"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    for sha in done {
        ctx.state.missing_blobs.remove(&sha);
    }
    Ok(fetched)
}
