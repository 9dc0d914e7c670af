//! A background task of one server that runs rounds of listed work (the
//! compaction of packs after a forget, the collection of unreferenced
//! blobs) when woken: started by the first wake, on the caller's tokio
//! runtime, then one round per wake for as long as the server runs.
//!
//! A round does everything listed when it starts; what it cannot finish
//! stays listed (by the store, durably), so a failed round is logged and
//! left to the next wake (the next forget, or the start of a server, which
//! wakes every worker once). Wakes while a round runs fold into one more
//! round after it: none is lost, and rounds never overlap.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// One worker: its wake signal and what it says in the log.
pub struct Worker {
    started: AtomicBool,
    wake: Notify,
    /// Logged with the count after a round that did something.
    did: &'static str,
    /// Logged with the error after a round that failed.
    failed: &'static str,
}

impl Worker {
    pub fn new(did: &'static str, failed: &'static str) -> Arc<Self> {
        Arc::new(Self {
            started: AtomicBool::new(false),
            wake: Notify::new(),
            did,
            failed,
        })
    }

    /// Has the worker run a round of `round` (how many items it did),
    /// starting its task if it is not running. Every wake passes the same
    /// `round`; the first one's is kept.
    pub fn wake<F, Fut>(self: &Arc<Self>, round: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<usize>> + Send + 'static,
    {
        self.wake.notify_one();
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().run(round));
        }
    }

    async fn run<F, Fut>(self: Arc<Self>, round: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<usize>> + Send + 'static,
    {
        loop {
            // A permit stored by the wake that started the task is taken
            // at once by the wait below: one extra round, which finds
            // nothing.
            match round().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(count = n, "{}", self.did),
                Err(e) => tracing::warn!(error = %e, "{}", self.failed),
            }
            self.wake.notified().await;
        }
    }
}
