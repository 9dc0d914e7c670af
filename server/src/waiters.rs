//! Who waits for new records (`GET /records/wait`) or for a pairing's next
//! step (`GET /pair/{slot}/wait`, counted against the slot's account), and
//! waking them.
//!
//! What it promises:
//! - a wait holds no thread and no database connection: it is a task parked
//!   on its user's [`watch`] channel, which a commit of that user bumps;
//! - a commit is never missed: a waiter subscribes before it reads the
//!   store, so a commit between the read and the park still wakes it;
//! - at most [`Waits::max_waiters`] waits at once (then 503 with
//!   `Retry-After`), and [`Waits::max_per_user`] per user (then 429);
//! - at shutdown every wait ends at once (503), so a restart is not held up
//!   by parked clients;
//! - a wait of a device that is revoked (or whose account's password
//!   changed, which revokes the others) ends at once with 401: a revoked
//!   token learns nothing more, not even that another device pushed.
//!   A wait of a device whose key a rotation made old ends at once with 409
//!   `key_rotated`, the answer its next request gets.
//!
//! SQLite has one server process, so the commits it sees are all there are.
//! A backend shared by several replicas (Postgres) wakes a user's waits
//! from its `LISTEN` connection too, for every commit that ends or changes
//! a wait (records, forgets, revocations, password changes, key rotations:
//! see `store::postgres::listen`), so a commit through one replica ends
//! the waits parked on another as soon as it would end them here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;

use crate::config::Waits;
use crate::error::ApiError;
use crate::store::UserId;

/// Seconds a client turned away for a full server is asked to wait.
const FULL_RETRY_SECS: u64 = 5;

struct Feed {
    newest: watch::Sender<u64>,
    waiters: usize,
}

pub struct Waiters {
    limits: Waits,
    active: AtomicUsize,
    feeds: Mutex<HashMap<UserId, Feed>>,
    closed: watch::Sender<bool>,
}

/// One wait's slot, given back when dropped (the answer sent, or the
/// client gone).
pub struct Slot {
    waiters: Arc<Waiters>,
    user: UserId,
    /// Changes when the user's records do.
    pub commits: watch::Receiver<u64>,
    /// Turns true at shutdown.
    pub closed: watch::Receiver<bool>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.waiters.active.fetch_sub(1, Ordering::Relaxed);
        let mut feeds = self.waiters.lock();
        if let Some(f) = feeds.get_mut(&self.user) {
            f.waiters -= 1;
            if f.waiters == 0 {
                feeds.remove(&self.user);
            }
        }
    }
}

impl Waiters {
    pub fn new(limits: Waits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            active: AtomicUsize::new(0),
            feeds: Mutex::new(HashMap::new()),
            closed: watch::Sender::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<UserId, Feed>> {
        self.feeds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits held now (for the metrics).
    pub fn len(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A slot for one more wait of `user`, or why not.
    pub fn enter(self: &Arc<Self>, user: UserId) -> Result<Slot, ApiError> {
        if *self.closed.borrow() {
            return Err(unavailable("the server is shutting down; retry", 1));
        }
        let mut feeds = self.lock();
        if self.active.load(Ordering::Relaxed) >= self.limits.max_waiters {
            return Err(unavailable(
                "the server holds as many waits as it takes; retry later",
                FULL_RETRY_SECS,
            ));
        }
        let feed = feeds.entry(user).or_insert_with(|| Feed {
            newest: watch::Sender::new(0),
            waiters: 0,
        });
        if feed.waiters >= self.limits.max_per_user {
            let mut e = ApiError::rate_limited(FULL_RETRY_SECS);
            e.message = format!(
                "this account already holds {} waits (the most it may); retry later",
                feed.waiters
            );
            return Err(e);
        }
        feed.waiters += 1;
        self.active.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            waiters: self.clone(),
            user,
            commits: feed.newest.subscribe(),
            closed: self.closed.subscribe(),
        })
    }

    /// Records of `user` up to `newest_seq` have committed: wakes the
    /// user's waits (none is woken for another user's commit).
    pub fn committed(&self, user: UserId, newest_seq: u64) {
        if let Some(f) = self.lock().get(&user) {
            f.newest.send_replace(newest_seq);
        }
    }

    /// Devices of `user` were revoked: wakes the user's waits, which then
    /// find out whether theirs is one of them.
    pub fn devices_changed(&self, user: UserId) {
        if let Some(f) = self.lock().get(&user) {
            f.newest.send_modify(|_| {});
        }
    }

    /// Wakes every wait, of every user: each re-checks its cursor. For when
    /// commits may have gone unannounced (the database listener was away).
    pub fn wake_all(&self) {
        for f in self.lock().values() {
            f.newest.send_modify(|_| {});
        }
    }

    /// Ends every wait (shutdown) and refuses new ones.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }
}

fn unavailable(message: &str, retry_after: u64) -> ApiError {
    let mut e = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        evi_shared::api::ErrorCode::Unavailable,
        message,
    );
    e.retry_after = Some(retry_after);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_user: usize) -> Waits {
        Waits {
            max_waiters: max,
            max_per_user: per_user,
            ..Waits::default()
        }
    }

    #[test]
    fn slots_are_counted_and_given_back() {
        let w = Waiters::new(limits(3, 2));
        let a = w.enter(1).unwrap();
        let b = w.enter(1).unwrap();
        assert_eq!(w.enter(1).unwrap_err().status.as_u16(), 429);
        let c = w.enter(2).unwrap();
        let full = w.enter(3).unwrap_err();
        assert_eq!((full.status.as_u16(), full.retry_after), (503, Some(5)));
        drop(a);
        assert_eq!(w.len(), 2);
        let _d = w.enter(3).unwrap();
        drop((b, c));
        assert_eq!(w.len(), 1);
        assert_eq!(w.lock().len(), 1, "a user's feed goes with its last wait");
    }

    #[tokio::test]
    async fn a_commit_wakes_its_users_waits_only() {
        let w = Waiters::new(limits(10, 10));
        let mut mine = w.enter(1).unwrap();
        let mut theirs = w.enter(2).unwrap();
        w.committed(1, 7);
        assert!(mine.commits.has_changed().unwrap());
        assert_eq!(*mine.commits.borrow_and_update(), 7);
        assert!(!theirs.commits.has_changed().unwrap());
        w.close();
        assert!(theirs.closed.wait_for(|c| *c).await.is_ok());
        assert_eq!(w.enter(3).unwrap_err().status.as_u16(), 503);
    }
}
