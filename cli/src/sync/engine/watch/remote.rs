//! Waiting on the server for other devices' records: one thread parked on
//! `GET /records/wait` (a status poll on older servers), which tells the
//! watch loop to pull and waits until it has, backs off with jitter while
//! the server is away (waking early when the loop finds it back), and waits
//! for a new token when the server refuses its own (see [`health`]).
//!
//! [`health`]: super::health

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::Signal;
use super::health::{Health, Refusal};
use crate::sync::remote::client::{Client, ClientError};

/// How often an older server without the wait endpoint is asked instead.
const STATUS_POLL: Duration = Duration::from_secs(30);
/// How long to wait for the loop to pull before asking again anyway.
const ACK_WAIT: Duration = Duration::from_secs(120);

/// Exponential backoff with jitter: 1 s, 2 s, 4 s, … up to `max`, each
/// drawn from half to one and a half of its step, so devices that lost the
/// same server do not come back in step.
#[derive(Debug, Clone)]
pub struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    pub const FIRST: Duration = Duration::from_secs(1);

    pub fn new(max: Duration) -> Self {
        Self {
            step: Self::FIRST,
            max,
        }
    }

    /// The next delay.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.step.mul_f64(0.5 + fastrand::f64());
        self.step = (self.step * 2).min(self.max);
        d.min(self.max)
    }

    pub fn reset(&mut self) {
        self.step = Self::FIRST;
    }
}

/// What the thread needs.
pub struct Remote {
    pub client: Client,
    /// The token `client` sends.
    pub token: String,
    /// The pull cursor the loop keeps current.
    pub cursor: Arc<AtomicU64>,
    /// Seconds per wait (`None`: drawn from 25 to 55 each time).
    pub wait_secs: Option<u32>,
    /// The server's cap (`0`: it has no wait endpoint).
    pub max_wait_secs: u32,
    pub backoff: Backoff,
    pub health: Arc<Health>,
    pub tx: Sender<Signal>,
    /// The loop's word that it pulled.
    pub pulled: Receiver<()>,
}

impl Remote {
    pub fn run(mut self) {
        // After a failure (and first), a quick look rather than a long
        // poll: a server back from away is said and caught up with at once,
        // and one whose history went back (its newest seq below the cursor,
        // where no long poll would ever wake) is pulled from, which mends it.
        let mut quick = true;
        loop {
            let after = self.cursor.load(Ordering::Relaxed);
            let sent = Instant::now();
            let answer = if quick || self.max_wait_secs == 0 {
                self.client.status_after(after).map(|s| {
                    let pending = s.pending_for_device.unwrap_or(0);
                    if s.newest_seq < after {
                        pending.max(1)
                    } else {
                        pending
                    }
                })
            } else {
                let secs = self
                    .wait_secs
                    .unwrap_or_else(|| fastrand::u32(25..=55))
                    .min(self.max_wait_secs);
                self.client.wait(after, secs).map(|w| w.pending)
            };
            match answer {
                Ok(pending) => {
                    quick = false;
                    self.backoff.reset();
                    self.health.accepted(sent);
                    let back = self.health.ok();
                    if !self.tell(back, pending > 0) {
                        return;
                    }
                    if !back && pending == 0 && self.max_wait_secs == 0 {
                        std::thread::sleep(STATUS_POLL);
                    }
                }
                Err(e) => match Refusal::of(&e) {
                    // Revoked, or a rotation made this key old: nothing
                    // more is asked until a login or a join writes a new
                    // token.
                    Some(why) => {
                        self.health.refused(&self.token, why, &e);
                        self.token = self.health.wait_for_new_token(&self.token);
                        match Client::for_account(self.client.server(), Some(self.token.clone())) {
                            Ok(c) => self.client = c.without_retries(),
                            Err(_) => return,
                        }
                        quick = true;
                    }
                    None => {
                        self.after_failure(&e);
                        quick = true;
                    }
                },
            }
        }
    }

    /// Tells the loop the server is `back` and/or has records to `pull`,
    /// then waits for its pull (asking again before it would only hear the
    /// same records again, and from a cursor a mending pull may lower).
    /// False once the loop is gone.
    fn tell(&self, back: bool, pull: bool) -> bool {
        if !back && !pull {
            return true;
        }
        // A word from a pull made before this one says nothing of it.
        while self.pulled.try_recv().is_ok() {}
        if back && self.tx.send(Signal::Back).is_err() {
            return false;
        }
        if pull && self.tx.send(Signal::Remote).is_err() {
            return false;
        }
        !matches!(
            self.pulled.recv_timeout(ACK_WAIT),
            Err(RecvTimeoutError::Disconnected)
        )
    }

    /// Waits after a failed request: what the server asked for (a full
    /// server, a rate limit), else the backoff while it is away, cut short
    /// when the loop finds it answering.
    fn after_failure(&mut self, e: &ClientError) {
        if let ClientError::Api {
            retry_after: Some(s),
            ..
        } = e
        {
            std::thread::sleep(Duration::from_secs(*s).mul_f64(1.0 + fastrand::f64() * 0.5));
            return;
        }
        self.health.failed(&e.to_string());
        self.health.sleep_while_away(self.backoff.next_delay());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(8));
        let steps: Vec<Duration> = (0..6).map(|_| b.next_delay()).collect();
        for (d, step) in steps.iter().zip([1u64, 2, 4, 8, 8, 8]) {
            let step = Duration::from_secs(step);
            assert!(
                *d >= step / 2 && *d <= (step * 3 / 2).min(Duration::from_secs(8)),
                "{d:?} for {step:?}"
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(1500));
    }
}
