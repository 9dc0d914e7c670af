//! Compaction after a forget: rewrites each pack that held bodies of
//! deleted records without them, so the server's storage keeps no byte of
//! a forgotten session.
//!
//! # Promises
//!
//! - Crash-safe: the packs to rewrite are listed by the forget's own
//!   transaction ([`crate::store::forget`]). For one pack, the bodies still
//!   referenced are copied into a new pack (durable before anything points
//!   at it), the records are pointed at it in one transaction that also
//!   records when ([`Store::repoint_bodies`]), the old pack is removed once
//!   no pull may read it any more, and only then is the pack taken off the
//!   list. A kill between any two steps loses nothing: before the repoint
//!   the old pack still serves every record (the new one is an orphan the
//!   start-up sweep removes); after it the list still names the old pack,
//!   with the repoint's time, and the next run (at the next start, the next
//!   forget, or the end of the grace) removes it. The orphan sweep never
//!   takes a listed pack.
//! - In the background: a push that commits a forget only wakes the one
//!   task a server runs; pushes and pulls go on meanwhile, and are answered
//!   whole. A pull reads where its records' bodies are, then the bodies,
//!   maybe seconds later; so the old pack is removed only once every pull
//!   of this process that read a place before the repoint has ended
//!   ([`super::readers`]), and, for the pulls of other replicas on the same
//!   database and store, which no process can see, not before the grace
//!   ([`crate::Config::compaction_grace`]) has passed since the repoint,
//!   counted on the database's clock (one clock for every replica). The
//!   grace is as long as a compaction waits for its own pulls
//!   ([`super::readers::MAX_WAIT`]); on the embedded store (one process,
//!   under the data folder's lock) there are no other replicas, and none.
//!   Until then the old pack still holds the forgotten bodies.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::readers::PackReaders;
use super::{BodyRef, BodyStore};
use crate::store::{Store, ToCompact};
use crate::worker::Worker;

/// The compaction task of one server: started on the first wake.
pub struct Compactor {
    store: Arc<dyn Store>,
    bodies: Arc<dyn BodyStore>,
    /// The pulls under way, which an old pack outlives.
    readers: Arc<PackReaders>,
    /// How long an old pack stays after its repoint, for other replicas'
    /// pulls.
    grace: Duration,
    /// `crash-mid-compaction` of the crash tests (see [`crate::fault`]).
    crash: bool,
    worker: Arc<Worker>,
    /// When the wake for the earliest pack still in its grace is due.
    timer: Mutex<Option<tokio::time::Instant>>,
}

impl Compactor {
    pub fn new(
        store: Arc<dyn Store>,
        bodies: Arc<dyn BodyStore>,
        fault: Option<crate::fault::Fault>,
        grace: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            bodies,
            readers: PackReaders::new(),
            grace,
            crash: crate::fault::is(fault, crate::fault::Fault::CrashMidCompaction),
            worker: Worker::new(
                "rewrote body packs without forgotten records",
                "compaction after a forget failed; it runs again at the next forget or start",
            ),
            timer: Mutex::new(None),
        })
    }

    /// The pulls under way: a pull holds a ticket while it may read a pack.
    pub fn readers(&self) -> &Arc<PackReaders> {
        &self.readers
    }

    /// Has the task compact everything listed, starting it if it is not
    /// running (on the caller's tokio runtime); packs still in their grace
    /// are removed by a wake of its own once it ends.
    pub fn wake(self: &Arc<Self>) {
        let me = self.clone();
        self.worker.wake(move || {
            let me = me.clone();
            async move {
                let round =
                    compact_pending(&*me.store, &*me.bodies, &me.readers, me.grace, me.crash)
                        .await?;
                if let Some(after) = round.next {
                    me.wake_after(after);
                }
                Ok(round.removed)
            }
        });
    }

    /// Wakes the task again `after` from now, unless a wake as early is
    /// due already.
    fn wake_after(self: &Arc<Self>, after: Duration) {
        let at = tokio::time::Instant::now() + after;
        {
            let mut timer = self.timer.lock().unwrap_or_else(|p| p.into_inner());
            if timer.is_some_and(|t| t <= at && t > tokio::time::Instant::now()) {
                return;
            }
            *timer = Some(at);
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            me.wake();
        });
    }
}

/// What a round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// Old packs removed.
    pub removed: usize,
    /// When the earliest pack still in its grace may go, from now.
    pub next: Option<Duration>,
}

/// What became of one listed pack.
enum Step {
    Removed,
    /// Repointed; its grace ends this long from now.
    Waiting(Duration),
}

/// Repoints every listed pack, and removes those whose grace has passed.
/// A forget that commits while a pack is copied may list the copy (see
/// `repoint_bodies`): the list is read again until it holds only packs in
/// their grace.
pub async fn compact_pending(
    store: &dyn Store,
    bodies: &dyn BodyStore,
    readers: &PackReaders,
    grace: Duration,
    crash: bool,
) -> anyhow::Result<Round> {
    let mut round = Round::default();
    let mut waiting = std::collections::HashSet::new();
    loop {
        let listed: Vec<ToCompact> = store
            .packs_to_compact()
            .await?
            .into_iter()
            .filter(|c| !waiting.contains(&(c.user, c.pack.clone())))
            .collect();
        if listed.is_empty() {
            return Ok(round);
        }
        for c in listed {
            match compact_pack(store, bodies, readers, &c, grace, crash).await? {
                Step::Removed => round.removed += 1,
                Step::Waiting(left) => {
                    round.next = Some(round.next.map_or(left, |n| n.min(left)));
                    waiting.insert((c.user, c.pack));
                }
            }
        }
    }
}

async fn compact_pack(
    store: &dyn Store,
    bodies: &dyn BodyStore,
    readers: &PackReaders,
    c: &ToCompact,
    grace: Duration,
    crash: bool,
) -> anyhow::Result<Step> {
    let (user, pack) = (c.user, &c.pack);
    let since = match c.repointed_ago {
        Some(ago) => ago,
        None => {
            let live = store.bodies_in_pack(user, pack).await?;
            let mut moved = Vec::new();
            if !live.is_empty() {
                let refs: Vec<BodyRef> = live.iter().map(|(_, r)| r.clone()).collect();
                let data = bodies.read_small(user, refs).await?;
                let moved_to = bodies.put_batch(user, data).await?;
                crate::fault::crash_if(
                    crash,
                    "crash-mid-compaction: aborting before the records point at the new pack",
                );
                moved = live.into_iter().map(|(seq, _)| seq).zip(moved_to).collect();
            }
            // With nothing to move the time is recorded all the same: a
            // pull may have read the places of the records the forget
            // deleted.
            store.repoint_bodies(user, pack, moved).await?;
            Duration::ZERO
        }
    };
    if since < grace {
        return Ok(Step::Waiting(grace - since));
    }
    // A pull of this process that read the old places (or a forgotten
    // record's) before the repoint may still read this pack.
    if !readers.drain_earlier().await {
        tracing::warn!(
            %pack,
            wait_secs = super::readers::MAX_WAIT.as_secs(),
            "a pull still under way may read the pack a compaction removes now"
        );
    }
    bodies.remove_pack(user, pack).await?;
    store.compaction_done(user, pack).await?;
    Ok(Step::Removed)
}
