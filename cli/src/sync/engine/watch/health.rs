//! What the watcher says of the server and of its token, once each way:
//! away and back, refused and accepted again. The watch loop and the thread
//! parked on the server share one [`Health`], so a change both notice is
//! said once, and the thread backing off while the server is away wakes as
//! soon as the loop finds it answering (and the other way round), instead of
//! sleeping out a backoff of up to a minute while records wait.
//!
//! A refused token (revoked from another device, say) does not end
//! watching: the user fixes it with `evi sync login`, which writes a new
//! `sync/token`. Until then the watcher says once that it waits for a
//! login, and looks at the token file every [`LOGIN_POLL`] without asking
//! the server anything; a new token is used from the next request on.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::presence::{self, Presence};
use super::{WatchEvent, WatchLog};

/// How often the token file is looked at while the server refuses the one
/// it held.
pub const LOGIN_POLL: Duration = Duration::from_secs(1);

/// Whether the server answers and takes the token, told once each way.
pub struct Health {
    /// Since when the server has not answered, while it does not.
    away: Mutex<Option<Instant>>,
    /// Signalled when the server answers again.
    answered: Condvar,
    /// The token the server refused, while the token file still holds it,
    /// and when.
    refused: Mutex<Option<(String, Instant)>>,
    log: Arc<dyn WatchLog>,
    presence: Mutex<Presence>,
    token_path: PathBuf,
}

impl Health {
    pub fn new(log: Arc<dyn WatchLog>, presence: Presence, token_path: PathBuf) -> Self {
        Self {
            away: Mutex::new(None),
            answered: Condvar::new(),
            refused: Mutex::new(None),
            log,
            presence: Mutex::new(presence),
            token_path,
        }
    }

    /// Notes a failure to reach the server; says so if it is news.
    pub fn failed(&self, error: &str) {
        let mut away = self.away.lock().unwrap_or_else(|p| p.into_inner());
        if away.is_none() {
            *away = Some(Instant::now());
            self.log.log(WatchEvent::ServerAway {
                error: error.to_owned(),
            });
            self.record(|i| i.server_away_since = Some(chrono::Utc::now().to_rfc3339()));
        }
    }

    /// Notes an answer; true (and said) if the server was away. Wakes a
    /// thread sleeping in [`Health::sleep_while_away`].
    pub fn ok(&self) -> bool {
        let mut away = self.away.lock().unwrap_or_else(|p| p.into_inner());
        let Some(since) = away.take() else {
            return false;
        };
        self.answered.notify_all();
        self.log.log(WatchEvent::ServerBack {
            away_secs: since.elapsed().as_secs(),
        });
        self.record(|i| i.server_away_since = None);
        true
    }

    /// Sleeps `d`, or less if the server is found answering meanwhile.
    pub fn sleep_while_away(&self, d: Duration) {
        let away = self.away.lock().unwrap_or_else(|p| p.into_inner());
        let _unused = self
            .answered
            .wait_timeout_while(away, d, |a| a.is_some())
            .unwrap_or_else(|p| p.into_inner());
    }

    /// The device token in the token file now (trimmed), if it can be read.
    pub fn token(&self) -> Option<String> {
        std::fs::read_to_string(&self.token_path)
            .ok()
            .map(|t| t.trim().to_owned())
    }

    /// Notes that the server refused the token `used`. True if the token
    /// file still holds it: the watcher then waits for a login (said once
    /// per refused token); false if a new one is there already (retry now).
    pub fn refused(&self, used: &str, error: &str) -> bool {
        if self.token().as_deref() != Some(used) {
            return false;
        }
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.as_ref().map(|(t, _)| t.as_str()) != Some(used) {
            *refused = Some((used.to_owned(), Instant::now()));
            self.log.log(WatchEvent::WaitingForLogin {
                error: error.to_owned(),
            });
            self.record(|i| i.waiting_for_login_since = Some(chrono::Utc::now().to_rfc3339()));
        }
        true
    }

    /// Notes that the server took the token in a request sent at `sent`;
    /// said if it had refused one before that. A request sent before the
    /// refusal (the loop's step under way while the other thread heard the
    /// 401) proves nothing about the token now, and is not taken as a login.
    pub fn accepted(&self, sent: Instant) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.as_ref().is_some_and(|(_, at)| sent > *at) {
            *refused = None;
            self.log.log(WatchEvent::LoggedIn);
            self.record(|i| i.waiting_for_login_since = None);
        }
    }

    /// Blocks until the token file holds another token than `used`; that
    /// one.
    pub fn wait_for_new_token(&self, used: &str) -> String {
        loop {
            match self.token() {
                Some(t) if !t.is_empty() && t != used => return t,
                _ => std::thread::sleep(LOGIN_POLL),
            }
        }
    }

    /// Notes for `evi sync status` that a push or pull went through.
    pub fn synced(&self) {
        self.record(|i| i.last_sync = Some(chrono::Utc::now().to_rfc3339()));
    }

    /// Updates what `evi sync status` reads (best effort: a status file
    /// that cannot be written never stops syncing).
    fn record(&self, f: impl FnOnce(&mut presence::WatchInfo)) {
        let mut p = self.presence.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut p.info);
        let _ = p.save();
    }
}
