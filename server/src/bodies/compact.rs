//! Compaction after a forget: rewrites each pack that held bodies of
//! deleted records without them, so the server's storage keeps no byte of
//! a forgotten session.
//!
//! # Promises
//!
//! - Crash-safe: the packs to rewrite are listed by the forget's own
//!   transaction ([`crate::store::forget`]). For one pack, the bodies still
//!   referenced are copied into a new pack (durable before anything points
//!   at it), the records are pointed at it in one transaction, the old pack
//!   is removed, and only then is the pack taken off the list. A kill
//!   between any two steps loses nothing: before the repoint the old pack
//!   still serves every record (the new one is an orphan the start-up sweep
//!   removes); after it the list still names the old pack, and the next
//!   run (at the next start, or the next forget) finds nothing of it
//!   referenced and removes it.
//! - In the background: a push that commits a forget only wakes the one
//!   task a server runs; pushes and pulls go on meanwhile, and are answered
//!   whole: the old pack is removed only once every pull that read a
//!   record's place before the repoint has ended ([`super::readers`]).

use std::sync::Arc;

use super::readers::PackReaders;
use super::{BodyRef, BodyStore, PackName};
use crate::store::{Store, UserId};
use crate::worker::Worker;

/// The compaction task of one server: started on the first wake.
pub struct Compactor {
    store: Arc<dyn Store>,
    bodies: Arc<dyn BodyStore>,
    /// The pulls under way, which an old pack outlives.
    readers: Arc<PackReaders>,
    /// `crash-mid-compaction` of the crash tests (see [`crate::fault`]).
    crash: bool,
    worker: Arc<Worker>,
}

impl Compactor {
    pub fn new(
        store: Arc<dyn Store>,
        bodies: Arc<dyn BodyStore>,
        fault: Option<crate::fault::Fault>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            bodies,
            readers: PackReaders::new(),
            crash: fault == Some(crate::fault::Fault::CrashMidCompaction),
            worker: Worker::new(
                "rewrote body packs without forgotten records",
                "compaction after a forget failed; it runs again at the next forget or start",
            ),
        })
    }

    /// The pulls under way: a pull holds a ticket while it may read a pack.
    pub fn readers(&self) -> &Arc<PackReaders> {
        &self.readers
    }

    /// Has the task compact everything listed, starting it if it is not
    /// running (on the caller's tokio runtime).
    pub fn wake(self: &Arc<Self>) {
        let me = self.clone();
        self.worker.wake(move || {
            let me = me.clone();
            async move { compact_pending(&*me.store, &*me.bodies, &me.readers, me.crash).await }
        });
    }
}

/// Rewrites every listed pack; how many were done.
/// A forget that commits while a pack is copied may list the copy (see
/// `repoint_bodies`): the list is read again until it is empty.
pub async fn compact_pending(
    store: &dyn Store,
    bodies: &dyn BodyStore,
    readers: &PackReaders,
    crash: bool,
) -> anyhow::Result<usize> {
    let mut done = 0;
    loop {
        let listed = store.packs_to_compact().await?;
        if listed.is_empty() {
            return Ok(done);
        }
        for (user, pack) in listed {
            compact_pack(store, bodies, readers, user, &pack, crash).await?;
            done += 1;
        }
    }
}

async fn compact_pack(
    store: &dyn Store,
    bodies: &dyn BodyStore,
    readers: &PackReaders,
    user: UserId,
    pack: &PackName,
    crash: bool,
) -> anyhow::Result<()> {
    let live = store.bodies_in_pack(user, pack).await?;
    if !live.is_empty() {
        let refs: Vec<BodyRef> = live.iter().map(|(_, r)| r.clone()).collect();
        let data = bodies.read_small(user, refs).await?;
        let moved_to = bodies.put_batch(user, data).await?;
        if crash {
            tracing::error!(
                "{}=crash-mid-compaction: aborting before the records point at the new pack",
                crate::fault::FAULT_ENV
            );
            std::process::abort();
        }
        let moved = live.into_iter().map(|(seq, _)| seq).zip(moved_to).collect();
        store.repoint_bodies(user, pack, moved).await?;
    }
    // A pull that read the old places (or a forgotten record's) before the
    // repoint may still read this pack.
    if !readers.drain_earlier().await {
        tracing::warn!(
            %pack,
            wait_secs = super::readers::MAX_WAIT.as_secs(),
            "a pull still under way may read the pack a compaction removes now"
        );
    }
    bodies.remove_pack(user, pack).await?;
    store.compaction_done(user, pack).await?;
    Ok(())
}
