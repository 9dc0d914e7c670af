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
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use super::BlobStore;
use crate::store::Store;

/// The collection task of one server: started on the first wake.
pub struct Collector {
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    /// `crash-mid-collect` of the crash tests (see [`crate::fault`]).
    crash: bool,
    started: AtomicBool,
    wake: Notify,
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
            crash: fault == Some(crate::fault::Fault::CrashMidCollect),
            started: AtomicBool::new(false),
            wake: Notify::new(),
        })
    }

    /// Has the task look for work, starting it if it is not running.
    pub fn wake(self: &Arc<Self>) {
        self.wake.notify_one();
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().run());
        }
    }

    async fn run(self: Arc<Self>) {
        loop {
            match collect_pending(&*self.store, &*self.blobs, self.crash).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(blobs = n, "deleted blobs no record refers to any more"),
                Err(e) => tracing::warn!(
                    error = %e,
                    "deleting unreferenced blobs failed; it runs again at the next forget or start"
                ),
            }
            self.wake.notified().await;
        }
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
            if crash {
                tracing::error!(
                    "{}=crash-mid-collect: aborting after the row went, before the bytes",
                    crate::fault::FAULT_ENV
                );
                std::process::abort();
            }
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
