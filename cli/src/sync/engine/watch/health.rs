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
//!
//! A key rotation on another device ([`Refusal::KeyRotated`]) is waited out
//! the same way, and said as what it is: this device must be paired again.
//! `evi sync join` puts the new key and state in place and writes its new
//! token last, so a new token file is the sign that the re-join is whole.
//! The watcher does not exit instead: its service (systemd
//! `Restart=on-failure`, launchd `KeepAlive`) would start it again every
//! few seconds, each start asking the server and saying it all again, and
//! a unit told not to restart would stay down after the join.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::presence::{self, Presence};
use super::{WatchEvent, WatchLog};
use crate::sync::engine::rotate::is_key_rotated;
use crate::sync::remote::client::{ClientError, is_unauthorized};

/// How often the token file is looked at while the server refuses the one
/// it held.
pub const LOGIN_POLL: Duration = Duration::from_secs(1);

/// Why the server refused this device's token; what mends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Unknown or revoked: `evi sync login`.
    Revoked,
    /// The account's key was rotated since this device got it: `evi sync
    /// join` from a device with the new key.
    KeyRotated,
}

impl Refusal {
    /// The refusal `e` is, if it is one (else a failure to retry).
    pub fn of(e: &ClientError) -> Option<Self> {
        if is_key_rotated(e) {
            Some(Self::KeyRotated)
        } else if is_unauthorized(e) {
            Some(Self::Revoked)
        } else {
            None
        }
    }
}

/// Whether the server answers and takes the token, told once each way.
pub struct Health {
    /// Since when the server has not answered, while it does not.
    away: Mutex<Option<Instant>>,
    /// Signalled when the server answers again.
    answered: Condvar,
    /// The token the server refused, while the token file still holds it,
    /// when, and why.
    refused: Mutex<Option<(String, Instant, Refusal)>>,
    log: Arc<dyn WatchLog>,
    presence: Mutex<Presence>,
    token_path: PathBuf,
    /// The server's URL, for the command that pairs this device again.
    server: String,
}

impl Health {
    pub fn new(
        log: Arc<dyn WatchLog>,
        presence: Presence,
        token_path: PathBuf,
        server: String,
    ) -> Self {
        Self {
            away: Mutex::new(None),
            answered: Condvar::new(),
            refused: Mutex::new(None),
            log,
            presence: Mutex::new(presence),
            token_path,
            server,
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

    /// Notes that the server refused the token `used`, and `why`. True if
    /// the token file still holds it: the watcher then waits for a login or
    /// a re-join (said once per refused token); false if a new one is there
    /// already (retry now).
    pub fn refused(&self, used: &str, why: Refusal, e: &ClientError) -> bool {
        if self.token().as_deref() != Some(used) {
            return false;
        }
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.as_ref().map(|(t, _, _)| t.as_str()) != Some(used) {
            *refused = Some((used.to_owned(), Instant::now(), why));
            let now = Some(chrono::Utc::now().to_rfc3339());
            match why {
                Refusal::Revoked => {
                    self.log.log(WatchEvent::WaitingForLogin {
                        error: e.to_string(),
                    });
                    self.record(|i| i.waiting_for_login_since = now);
                }
                Refusal::KeyRotated => {
                    // The server's words (when, from which device), not
                    // the status: it is no failure to retry.
                    let error = match e {
                        ClientError::Api { message, .. } => message.clone(),
                        e => e.to_string(),
                    };
                    self.log.log(WatchEvent::KeyRotated {
                        error,
                        server: self.server.clone(),
                    });
                    self.record(|i| i.waiting_for_join_since = now);
                }
            }
        }
        true
    }

    /// The token the server refused, while the token file still holds it:
    /// nothing is to be asked with it (whichever side heard the refusal).
    pub fn still_refused(&self) -> Option<String> {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let (token, _, _) = refused.as_ref()?;
        (self.token().as_deref() == Some(token.as_str())).then(|| token.clone())
    }

    /// Notes that the server took the token in a request sent at `sent`;
    /// said if it had refused one before that. A request sent before the
    /// refusal (the loop's step under way while the other thread heard the
    /// 401) proves nothing about the token now, and is not taken as a login.
    pub fn accepted(&self, sent: Instant) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, at, why)) = refused.as_ref()
            && sent > *at
        {
            self.log.log(match why {
                Refusal::Revoked => WatchEvent::LoggedIn,
                Refusal::KeyRotated => WatchEvent::Rejoined,
            });
            *refused = None;
            self.record(|i| {
                i.waiting_for_login_since = None;
                i.waiting_for_join_since = None;
            });
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
