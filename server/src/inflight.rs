//! How many requests one account has in flight: at most
//! [`crate::config::Connections::max_requests_per_user`] at once, then 429.
//!
//! Why: a valid token lifts a request's body deadline (see
//! [`crate::deadline`]), so that pushes and uploads on slow links are not
//! cut. Without a bound per account, one account (or one stolen token)
//! could trickle uploads a byte at a time on every connection the server
//! holds, and behind a proxy (`--trust-forwarded-for`) nothing per address
//! stops it. A place is taken when the token is checked and given back when
//! the handler ends, waits included (they hold a connection too, and have
//! their own smaller bound in [`crate::waiters`]). A real client keeps a
//! handful of requests open per device, far under the default.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::ApiError;
use crate::store::UserId;

/// Seconds a client turned away is asked to wait: a request of its own
/// will usually have ended by then.
const RETRY_SECS: u64 = 1;

/// The refusal of a request past its account's share (of requests in
/// flight, of waits, of the wait rate), answered after [`RETRY_SECS`]
/// rather than at once: a client that ignores `Retry-After`
/// and asks again in a loop (a hostile account, a stolen token, a broken
/// client) then asks once a second per connection instead of as fast as
/// the server can refuse, which on a shared machine took the CPU the other
/// accounts needed (issue 46's load test). The paused request holds no
/// place, no database connection and no body; only its connection, which
/// the connection bounds count as before.
/// Anything else (a 503 while the server shuts down) is answered at once.
pub async fn paused<T>(result: Result<T, ApiError>) -> Result<T, ApiError> {
    if let Err(e) = &result
        && e.status == axum::http::StatusCode::TOO_MANY_REQUESTS
    {
        tokio::time::sleep(std::time::Duration::from_secs(RETRY_SECS)).await;
    }
    result
}

pub struct InFlight {
    max_per_user: usize,
    total: AtomicUsize,
    per_user: Mutex<HashMap<UserId, usize>>,
    /// The account of tokens seen lately (by hash), so that a request of an
    /// account already at its share is refused before its token is looked
    /// up: a flood of requests past the bound then costs the database
    /// nothing (on Postgres each lookup is a round trip, and a hostile
    /// account's 429s came back tens of thousands of times a minute). Only
    /// ever used to refuse; a request let through is authenticated as
    /// always.
    owners: Mutex<HashMap<[u8; 32], UserId>>,
}

/// Tokens [`InFlight`] remembers before it starts again: a bound on its
/// memory, far above the devices a server sees within a minute.
const OWNERS_KEPT: usize = 50_000;

/// One request's place, given back when dropped.
pub struct Place {
    flight: Arc<InFlight>,
    user: UserId,
}

impl std::fmt::Debug for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place").field("user", &self.user).finish()
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.flight.total.fetch_sub(1, Ordering::Relaxed);
        let mut m = self.flight.lock();
        if let Some(n) = m.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.user);
            }
        }
    }
}

impl InFlight {
    pub fn new(max_per_user: usize) -> Arc<Self> {
        Arc::new(Self {
            max_per_user: max_per_user.max(1),
            total: AtomicUsize::new(0),
            per_user: Mutex::new(HashMap::new()),
            owners: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<UserId, usize>> {
        self.per_user.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Authenticated requests being handled now, all accounts together
    /// (for the metrics).
    pub fn len(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// 429 if the token `hash` was lately seen for an account that holds
    /// its share now: checked before the token is looked up.
    pub fn refuse_early(&self, hash: &[u8; 32]) -> Result<(), ApiError> {
        let owner = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(hash)
            .copied();
        let Some(user) = owner else { return Ok(()) };
        match self.lock().get(&user) {
            Some(&held) if held >= self.max_per_user => Err(Self::full(held)),
            _ => Ok(()),
        }
    }

    fn full(held: usize) -> ApiError {
        let mut e = ApiError::rate_limited(RETRY_SECS);
        e.message = format!(
            "this account already has {held} requests in flight (the most the server \
             takes from one account); retry when one of them ends"
        );
        e
    }

    /// A place for one more request of `user`, whose token is `hash`, or
    /// 429 if it holds its share.
    pub fn enter(self: &Arc<Self>, user: UserId, hash: &[u8; 32]) -> Result<Place, ApiError> {
        {
            let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
            if owners.len() >= OWNERS_KEPT && !owners.contains_key(hash) {
                owners.clear();
            }
            owners.insert(*hash, user);
        }
        let mut m = self.lock();
        let n = m.entry(user).or_insert(0);
        if *n >= self.max_per_user {
            return Err(Self::full(*n));
        }
        *n += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        Ok(Place {
            flight: self.clone(),
            user,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_per_account_and_given_back() {
        let f = InFlight::new(2);
        let a = f.enter(1, &[1; 32]).unwrap();
        let b = f.enter(1, &[1; 32]).unwrap();
        let full = f.enter(1, &[1; 32]).unwrap_err();
        assert_eq!((full.status.as_u16(), full.retry_after), (429, Some(1)));
        assert!(
            full.message.contains("2 requests in flight"),
            "{}",
            full.message
        );
        // Another account is not held up by the first.
        let c = f.enter(2, &[2; 32]).unwrap();
        assert_eq!(f.len(), 3);
        drop(a);
        let _d = f.enter(1, &[1; 32]).unwrap();
        drop((b, c));
        assert_eq!(f.len(), 1);
        assert_eq!(
            f.lock().len(),
            1,
            "an account's count goes with its last request"
        );
    }

    #[test]
    fn a_token_of_an_account_at_its_share_is_refused_before_its_lookup() {
        let f = InFlight::new(1);
        // Never seen: looked up as always.
        assert!(f.refuse_early(&[7; 32]).is_ok());
        let held = f.enter(1, &[7; 32]).unwrap();
        let early = f.refuse_early(&[7; 32]).unwrap_err();
        assert_eq!(early.status.as_u16(), 429);
        // Another token of the same account too; another account's not.
        f.enter(1, &[8; 32]).unwrap_err();
        assert!(f.refuse_early(&[8; 32]).is_err());
        assert!(f.refuse_early(&[9; 32]).is_ok());
        drop(held);
        assert!(f.refuse_early(&[7; 32]).is_ok());
    }
}
