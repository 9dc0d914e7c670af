//! What the server refused, counted, and said in one WARN line per
//! interval instead of a line per refusal.
//!
//! A flood (of connections past the limits, of rate-limited or unauthorized
//! requests, of bodies cut at their deadline) must neither fill the disk
//! with log lines nor go unseen: the first refusal after a quiet interval
//! is logged at once, later ones are summed into the next line, at most one
//! per [`INTERVAL`], and a ticker writes out what is left when the flood
//! ends. The totals since start are in the metrics.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// At most one WARN line per this long.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// Why a connection or request was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A connection past `--max-connections`.
    ConnectionsFull,
    /// A connection past `--max-connections-per-ip` from one address.
    ConnectionsPerAddress,
    /// A request header larger than `--max-header-bytes`.
    HeaderTooLarge,
    /// A header, a body or an unauthenticated request not in within its
    /// timeout or deadline (408, or the connection closed), or a connection
    /// closed because nothing moved on it.
    TimedOut,
    /// A request answered 429 (rate limits, waits per account).
    RateLimited,
    /// A request answered 401 (no token, a wrong or revoked one, a wrong
    /// password).
    Unauthorized,
}

impl Refusal {
    pub const ALL: [Refusal; 6] = [
        Refusal::ConnectionsFull,
        Refusal::ConnectionsPerAddress,
        Refusal::HeaderTooLarge,
        Refusal::TimedOut,
        Refusal::RateLimited,
        Refusal::Unauthorized,
    ];

    /// The metrics label and the log field.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::ConnectionsFull => "connections_full",
            Refusal::ConnectionsPerAddress => "connections_per_address",
            Refusal::HeaderTooLarge => "header_too_large",
            Refusal::TimedOut => "timed_out",
            Refusal::RateLimited => "rate_limited",
            Refusal::Unauthorized => "unauthorized",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|r| *r == self).expect("listed")
    }
}

#[derive(Default)]
pub struct Refusals {
    totals: [AtomicU64; 6],
    unlogged: [AtomicU64; 6],
    /// When the last line was written.
    last_line: Mutex<Option<Instant>>,
}

impl Refusals {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn note(&self, r: Refusal) {
        self.totals[r.index()].fetch_add(1, Ordering::Relaxed);
        self.unlogged[r.index()].fetch_add(1, Ordering::Relaxed);
        self.log_if_due();
    }

    /// Refusals of this kind since start.
    pub fn total(&self, r: Refusal) -> u64 {
        self.totals[r.index()].load(Ordering::Relaxed)
    }

    /// Writes the line of what was not logged yet, if one is due: the
    /// ticker calls it once per interval.
    pub fn log_if_due(&self) {
        let mut last = self.last_line.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < INTERVAL) {
            return;
        }
        let counts: Vec<(Refusal, u64)> = Refusal::ALL
            .iter()
            .map(|r| (*r, self.unlogged[r.index()].swap(0, Ordering::Relaxed)))
            .collect();
        if counts.iter().all(|(_, n)| *n == 0) {
            return;
        }
        *last = Some(Instant::now());
        let n = |r: Refusal| counts[r.index()].1;
        tracing::warn!(
            connections_full = n(Refusal::ConnectionsFull),
            connections_per_address = n(Refusal::ConnectionsPerAddress),
            header_too_large = n(Refusal::HeaderTooLarge),
            timed_out = n(Refusal::TimedOut),
            rate_limited = n(Refusal::RateLimited),
            unauthorized = n(Refusal::Unauthorized),
            interval_secs = INTERVAL.as_secs(),
            "refused connections or requests since the last such line (at most one line per interval; \
             totals in the metrics)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_the_lines() {
        let r = Refusals::new();
        for _ in 0..5 {
            r.note(Refusal::RateLimited);
        }
        r.note(Refusal::ConnectionsFull);
        assert_eq!(r.total(Refusal::RateLimited), 5);
        assert_eq!(r.total(Refusal::ConnectionsFull), 1);
        // The first went out at once; the other five wait for the next line.
        let waiting: u64 = r.unlogged.iter().map(|a| a.load(Ordering::Relaxed)).sum();
        assert_eq!(waiting, 5);
    }
}
