//! Deleting blobs no record refers to any more (listed by the push that
//! deleted their last reference: see [`crate::store::blob_refs`]), in the
//! background, like the compaction of packs after a forget.
//!
//! # Promises
//!
//! - Crash-safe: for one listed blob, the row goes first (in a transaction
//!   that finds no reference, under the lock a push that would add one
//!   takes, so no record ever refers to a blob without a row), then its
//!   bytes, then the listing is marked done. A kill between any two steps
//!   leaves the listing: the next run (at the next start, or the next
//!   forget) finds no row, removes the bytes if any are left, and marks it.
//! - An upload of the name waits until the listing is done (see
//!   [`crate::store::blob_refs`]), so bytes removed here are never those a
//!   new row counts on.

use std::sync::Arc;

use super::BlobStore;
use crate::store::Store;
use crate::worker::Worker;

/// The collection task of one server: started on the first wake.
pub struct Collector {
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    /// `crash-mid-collect` of the crash tests (see [`crate::fault`]).
    crash: bool,
    worker: Arc<Worker>,
}

impl Collector {
    pub fn new(
        store: Arc<dyn Store>,
        blobs: Arc<dyn BlobStore>,
        fault: Option<crate::fault::Fault>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            blobs,
            crash: crate::fault::is(fault, crate::fault::Fault::CrashMidCollect),
            worker: Worker::new(
                "deleted blobs no record refers to any more",
                "deleting unreferenced blobs failed; it runs again at the next forget or start",
            ),
        })
    }

    /// Has the task look for work, starting it if it is not running.
    pub fn wake(self: &Arc<Self>) {
        let me = self.clone();
        self.worker.wake(move || {
            let me = me.clone();
            async move { collect_pending(&*me.store, &*me.blobs, me.crash).await }
        });
    }
}

/// Collects every listed blob; how many had their bytes removed.
///
/// A blob sent in parts goes as one: its row step takes the rows of its
/// parts and manifest too and lists them, then their bytes go and their
/// listings are marked done, then the whole's. A kill in between leaves
/// the pieces listed, and the next run removes what is left of them.
pub async fn collect_pending(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    crash: bool,
) -> anyhow::Result<usize> {
    let mut done = 0;
    for (user, name) in store.blobs_to_collect().await? {
        if let Some(pieces) = store.collect_blob_row(user, &name).await? {
            crate::fault::crash_if(
                crash,
                "crash-mid-collect: aborting after the row went, before the bytes",
            );
            for piece in &pieces {
                blobs.remove(user, piece).await?;
                store.blob_collected(user, piece).await?;
            }
            blobs.remove(user, &name).await?;
            done += 1 + pieces.len();
        }
        store.blob_collected(user, &name).await?;
    }
    Ok(done)
}
