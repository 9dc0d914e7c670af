//! Pulls reading bodies, counted, so compaction removes an old pack only
//! once no pull that may still read it is under way.
//!
//! A pull reads where its records' bodies are (the metadata), then reads
//! the bodies, maybe seconds later as a framed page streams out. A
//! compaction that repoints those records and removes their old pack in
//! between would leave the pull reading a file that is gone. So every pull
//! holds a [`ReadTicket`] from before its metadata read until its last
//! body byte is read, and compaction, once its repoint committed, waits
//! for every ticket handed out before that ([`PackReaders::drain_earlier`]):
//! pulls after the repoint read the new pack and are not waited for, and
//! no pull ever waits for compaction. A pull that never ends (a stalled
//! client) holds the removal back for at most [`MAX_WAIT`]; the server's
//! own timeouts end such a pull well before.
//!
//! This covers the pulls of one server process; replicas that share one
//! Postgres database and bucket do not see each other's tickets, and the
//! compaction keeps an old pack for them for a grace after the repoint (see
//! [`super::compact`]) as long as [`MAX_WAIT`].

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The longest a compaction waits for earlier pulls before it removes the
/// old pack anyway.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// The tickets of the pulls under way.
#[derive(Default)]
pub struct PackReaders {
    inner: Mutex<Tickets>,
    ended: Notify,
}

#[derive(Default)]
struct Tickets {
    next: u64,
    held: BTreeSet<u64>,
}

/// Held by one pull while it may read a pack; dropping it ends the read.
pub struct ReadTicket {
    readers: Arc<PackReaders>,
    n: u64,
}

impl Drop for ReadTicket {
    fn drop(&mut self) {
        self.readers
            .inner
            .lock()
            .expect("ticket lock")
            .held
            .remove(&self.n);
        self.readers.ended.notify_waiters();
    }
}

impl PackReaders {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A ticket for a pull about to read records' places.
    pub fn enter(self: &Arc<Self>) -> ReadTicket {
        let mut t = self.inner.lock().expect("ticket lock");
        let n = t.next;
        t.next += 1;
        t.held.insert(n);
        ReadTicket {
            readers: self.clone(),
            n,
        }
    }

    /// Whether a ticket older than `before` is still held.
    fn earlier_held(&self, before: u64) -> bool {
        let t = self.inner.lock().expect("ticket lock");
        t.held.first().is_some_and(|&n| n < before)
    }

    /// Returns once every pull that held a ticket at the call has ended
    /// (or after [`MAX_WAIT`]; `false` then).
    pub async fn drain_earlier(&self) -> bool {
        let before = self.inner.lock().expect("ticket lock").next;
        let wait = async {
            loop {
                let ended = self.ended.notified();
                tokio::pin!(ended);
                // Registered before the check, so an end between the two
                // is not missed.
                ended.as_mut().enable();
                if !self.earlier_held(before) {
                    return;
                }
                ended.await;
            }
        };
        tokio::time::timeout(MAX_WAIT, wait).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_earlier_pulls_only() {
        let r = PackReaders::new();
        let early = r.enter();
        let drained = {
            let r = r.clone();
            tokio::spawn(async move { r.drain_earlier().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A pull that starts after the drain began is not waited for.
        let _late = r.enter();
        assert!(!drained.is_finished());
        drop(early);
        assert!(drained.await.unwrap());
    }
}
