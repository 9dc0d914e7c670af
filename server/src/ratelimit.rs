//! Token buckets for register, login and password change. A refused
//! attempt gets 429 with `Retry-After` and costs no hashing.
//!
//! Who can lock whom out is the point of the keys:
//! - every register and login attempt takes a token of its client address;
//! - a login takes a token of (user, address) and one of the user across all
//!   addresses, and gives both back when the password was right, so only
//!   failures count there: wrong guesses from one address lock out that
//!   address, not the owner elsewhere (and only a flood of failures from
//!   many addresses at once holds up new logins for the user);
//! - a password change takes a token of its device, given back on success:
//!   the calls of a device's token never depend on anyone's login failures;
//! - a long-poll wait (`GET /records/wait`) takes a token of its device, so
//!   a client that loops without waiting is slowed, and only that device.
//!
//! These buckets are per process. With a database several replicas share
//! (Postgres), the failure limits also go through a [`FailureLog`] there:
//! failed logins per user and per (user, address) within the last minute
//! are counted across every replica, so a guesser spreading over replicas
//! is held to the same limits. The per-address request rates and the
//! per-device ones stay per replica: behind a proxy that spreads clients
//! over N replicas an address may make up to N times its rate, which is the
//! proxy's to cap if that matters (it sees every request).
//!
//! The limiter's memory is bounded whatever clients send: a key is a client
//! address (IPv6 by its /64, which one host usually holds whole), a user
//! name that has already passed validation (at most
//! [`USER_NAME_MAX_LEN`](evi_shared::limits::USER_NAME_MAX_LEN) bytes), or a
//! device id the server issued, and at most [`RateLimits::max_keys`] buckets
//! are held. A full bucket carries no information (it is what a new key
//! starts as), so it is the first to go; past the bound the buckets touched
//! longest ago go next.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use async_trait::async_trait;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use crate::AppState;
use crate::config::RateLimits;
use crate::error::ApiError;
use crate::store::StoreResult;

/// Failed logins kept where every replica sees them.
#[async_trait]
pub trait FailureLog: Send + Sync {
    /// Failures of `user` (validated, lowercased) at or after `since_ms`
    /// (Unix milliseconds), in all and from `address`.
    async fn recent(&self, user: &str, address: &str, since_ms: i64) -> StoreResult<FailureCounts>;
    /// Adds a failure at `now_ms` and forgets those before `prune_before_ms`.
    async fn record(
        &self,
        user: &str,
        address: &str,
        now_ms: i64,
        prune_before_ms: i64,
    ) -> StoreResult<()>;
}

/// What [`FailureLog::recent`] found.
#[derive(Debug, Clone, Copy, Default)]
pub struct FailureCounts {
    pub user: u64,
    pub user_oldest_ms: Option<i64>,
    pub at_address: u64,
    pub at_address_oldest_ms: Option<i64>,
}

/// The window of the shared failure counts.
const FAILURE_WINDOW_MS: i64 = 60_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// Every register and login attempt from this address.
    Ip(IpAddr),
    /// Failed logins for this (validated, lowercased) user from this address.
    UserAt(String, IpAddr),
    /// Failed logins for this user from all addresses.
    User(String),
    /// Wrong old passwords given by this device.
    Device(String),
    /// Long-poll waits begun by this device (or on this pairing slot, for
    /// its joiner, which has no device yet).
    Waits(String),
    /// Pairing slots opened by this account.
    PairOpen(crate::store::UserId),
    /// Pairing calls without a token (reading an offer, joining) from this
    /// address.
    PairAnon(IpAddr),
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct RateLimiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<Key, Bucket>>,
    /// Set once at start when the database is shared by replicas.
    shared: OnceLock<Arc<dyn FailureLog>>,
}

/// Tokens a login or password change took that count only failures: call
/// [`Reservation::succeeded`] when the password was right to give them back.
#[must_use]
pub struct Reservation<'a> {
    limiter: &'a RateLimiter,
    keys: Vec<Key>,
}

impl Reservation<'_> {
    pub fn succeeded(self) {
        let mut b = self.limiter.lock();
        let now = Instant::now();
        for key in &self.keys {
            let per_min = self.limiter.per_minute(key);
            if let Some(bucket) = b.get_mut(key) {
                refill(bucket, per_min, now);
                bucket.tokens = (bucket.tokens + 1.0).min(per_min);
            }
        }
    }
}

fn refill(bucket: &mut Bucket, per_min: f64, now: Instant) {
    bucket.tokens =
        (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_min / 60.0).min(per_min);
    bucket.at = now;
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The address a bucket is kept for: IPv4 as it is (IPv4-mapped IPv6 as
/// IPv4), IPv6 by its /64 prefix, so one host cannot make a new bucket per
/// address it holds.
pub(crate) fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl RateLimiter {
    pub fn new(limits: RateLimits) -> Self {
        Self {
            limits,
            buckets: Mutex::new(HashMap::new()),
            shared: OnceLock::new(),
        }
    }

    /// Counts login failures in `log` too, across every replica using it.
    pub fn share_failures(&self, log: Arc<dyn FailureLog>) {
        let _ = self.shared.set(log);
    }

    /// With a shared failure log: refuses a login for `user` from `ip` once
    /// the failures every replica recorded in the last minute reach the
    /// per-user or per-(user, address) limit. Without one: nothing to do.
    pub async fn check_shared(&self, ip: IpAddr, user: &str) -> Result<(), ApiError> {
        let Some(log) = self.shared.get() else {
            return Ok(());
        };
        let now = now_ms();
        let user = user.to_ascii_lowercase();
        let found = log
            .recent(&user, &address_key(ip).to_string(), now - FAILURE_WINDOW_MS)
            .await?;
        let l = &self.limits;
        let over = |count: u64, oldest: Option<i64>, limit: u32| {
            (count >= u64::from(limit)).then(|| {
                let frees_at = oldest.unwrap_or(now) + FAILURE_WINDOW_MS;
                ((frees_at - now).max(1000) as u64).div_ceil(1000)
            })
        };
        let wait = over(
            found.at_address,
            found.at_address_oldest_ms,
            l.per_user_per_minute,
        )
        .into_iter()
        .chain(over(
            found.user,
            found.user_oldest_ms,
            l.per_user_total_per_minute,
        ))
        .max();
        match wait {
            Some(secs) => Err(ApiError::rate_limited(secs)),
            None => Ok(()),
        }
    }

    /// With a shared failure log: records a failed login there.
    pub async fn failed_shared(&self, ip: IpAddr, user: &str) -> Result<(), ApiError> {
        let Some(log) = self.shared.get() else {
            return Ok(());
        };
        let now = now_ms();
        log.record(
            &user.to_ascii_lowercase(),
            &address_key(ip).to_string(),
            now,
            now - FAILURE_WINDOW_MS,
        )
        .await?;
        Ok(())
    }

    /// How many buckets are held (for the metrics).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Bucket>> {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn per_minute(&self, key: &Key) -> f64 {
        let l = &self.limits;
        f64::from(match key {
            Key::Ip(_) => l.per_ip_per_minute,
            Key::UserAt(..) | Key::Device(_) => l.per_user_per_minute,
            Key::User(_) => l.per_user_total_per_minute,
            Key::Waits(_) => l.waits_per_device_per_minute,
            Key::PairOpen(_) | Key::PairAnon(_) => l.pair_per_minute,
        })
    }

    /// A registration attempt from `ip`.
    pub fn register(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.take(&[Key::Ip(address_key(ip))])
    }

    /// A login attempt for `user` (validated: it becomes a key) from `ip`.
    pub fn login(&self, ip: IpAddr, user: &str) -> Result<Reservation<'_>, ApiError> {
        let ip = address_key(ip);
        let user = user.to_ascii_lowercase();
        let failures = vec![Key::UserAt(user.clone(), ip), Key::User(user)];
        let mut keys = failures.clone();
        keys.push(Key::Ip(ip));
        self.take(&keys)?;
        Ok(Reservation {
            limiter: self,
            keys: failures,
        })
    }

    /// A password change by `device`, which proves the old password.
    pub fn password_change(&self, device: &str) -> Result<Reservation<'_>, ApiError> {
        let keys = vec![Key::Device(device.to_owned())];
        self.take(&keys)?;
        Ok(Reservation {
            limiter: self,
            keys,
        })
    }

    /// A long-poll wait begun by `device` (a token issued by the server).
    pub fn wait(&self, device: &str) -> Result<(), ApiError> {
        self.take(&[Key::Waits(device.to_owned())])
    }

    /// A pairing slot opened by `user`.
    pub fn pair_open(&self, user: crate::store::UserId) -> Result<(), ApiError> {
        self.take(&[Key::PairOpen(user)])
    }

    /// A pairing call without a token (reading an offer, joining) from `ip`.
    pub fn pair_anonymous(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.take(&[Key::PairAnon(address_key(ip))])
    }

    /// Takes one token from each of `keys`' buckets, or none and says how
    /// many seconds to wait.
    fn take(&self, keys: &[Key]) -> Result<(), ApiError> {
        let mut b = self.lock();
        let now = Instant::now();
        let mut wait = 0.0f64;
        for key in keys {
            let per_min = self.per_minute(key);
            if let Some(bucket) = b.get_mut(key) {
                refill(bucket, per_min, now);
                if bucket.tokens < 1.0 {
                    wait = wait.max((1.0 - bucket.tokens) * 60.0 / per_min.max(1e-9));
                }
            }
        }
        if wait > 0.0 {
            return Err(ApiError::rate_limited(wait.ceil() as u64));
        }
        for key in keys {
            let per_min = self.per_minute(key);
            if !b.contains_key(key) {
                self.make_room(&mut b, now);
            }
            b.entry(key.clone())
                .or_insert(Bucket {
                    tokens: per_min,
                    at: now,
                })
                .tokens -= 1.0;
        }
        Ok(())
    }

    /// Frees at least one slot when the map is at its bound: first every
    /// full bucket, then, if that was not enough, the eighth of the buckets
    /// touched longest ago (so this runs once per many insertions).
    fn make_room(&self, b: &mut HashMap<Key, Bucket>, now: Instant) {
        let max = self.limits.max_keys.max(1);
        if b.len() < max {
            return;
        }
        b.retain(|k, v| {
            let per_min = self.per_minute(k);
            v.tokens + now.duration_since(v.at).as_secs_f64() * per_min / 60.0 < per_min
        });
        if b.len() < max {
            return;
        }
        let evict = (max / 8).max(1);
        let mut ages: Vec<(Instant, Key)> = b.iter().map(|(k, v)| (v.at, k.clone())).collect();
        ages.select_nth_unstable_by_key(evict - 1, |(at, _)| *at);
        for (_, k) in ages.into_iter().take(evict) {
            b.remove(&k);
        }
    }
}

/// The last address of all `X-Forwarded-For` lines together: the one the
/// trusted proxy in front added. A client may send lines of its own, and a
/// proxy may add its entry as a line of its own instead of to the client's
/// line; a header split over lines is one list in line order (RFC 9110
/// 5.3), so only its very last entry is the proxy's word. `None` if that
/// entry is not an address (then the TCP peer counts).
fn last_forwarded_for(headers: &axum::http::HeaderMap) -> Option<IpAddr> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .next_back()?
        .to_str()
        .ok()?
        .rsplit(',')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The client's address: the TCP peer, or with `trust_forwarded_for` the last
/// `X-Forwarded-For` entry (the one the trusted proxy added).
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.config.trust_forwarded_for
            && let Some(ip) = last_forwarded_for(&parts.headers)
        {
            return Ok(Self(ip));
        }
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
            .unwrap_or(IpAddr::from([0, 0, 0, 0]));
        Ok(Self(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_ip: u32, per_user: u32, max_keys: usize) -> RateLimits {
        RateLimits {
            per_ip_per_minute: per_ip,
            per_user_per_minute: per_user,
            per_user_total_per_minute: per_user * 2,
            waits_per_device_per_minute: 60,
            pair_per_minute: 10,
            max_keys,
        }
    }

    fn fail(l: &RateLimiter, ip: IpAddr, user: &str) -> Result<(), ApiError> {
        l.login(ip, user).map(drop)
    }

    #[test]
    fn failures_are_refused_past_capacity_with_a_wait() {
        let l = RateLimiter::new(limits(100, 3, 1000));
        let ip = IpAddr::from([127, 0, 0, 1]);
        for _ in 0..3 {
            fail(&l, ip, "alice").unwrap();
        }
        let e = fail(&l, ip, "Alice").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.retry_after.unwrap() >= 1);
        fail(&l, ip, "bob").unwrap();
    }

    #[test]
    fn successes_cost_only_the_address() {
        let l = RateLimiter::new(limits(100, 2, 1000));
        let ip = IpAddr::from([127, 0, 0, 1]);
        for _ in 0..10 {
            l.login(ip, "alice").unwrap().succeeded();
        }
        fail(&l, ip, "alice").unwrap();
    }

    #[test]
    fn failures_from_many_addresses_meet_the_total() {
        // 2 per address, 4 in all.
        let l = RateLimiter::new(limits(100, 2, 1000));
        for n in 0..4u8 {
            fail(&l, IpAddr::from([10, 0, 0, n]), "alice").unwrap();
        }
        assert!(fail(&l, IpAddr::from([10, 0, 0, 9]), "alice").is_err());
        // A device's password change does not depend on any of that.
        l.password_change("dev1").unwrap().succeeded();
    }

    #[test]
    fn the_number_of_buckets_never_passes_the_bound() {
        let l = RateLimiter::new(limits(1_000_000, 3, 100));
        let ip = IpAddr::from([10, 0, 0, 1]);
        for n in 0..10_000 {
            fail(&l, ip, &format!("user{n}")).unwrap();
            assert!(l.len() <= 100, "{} buckets after {n}", l.len());
        }
        // The newest names are still limited: eviction takes the oldest.
        for _ in 0..2 {
            fail(&l, ip, "user9999").unwrap();
        }
        assert!(fail(&l, ip, "user9999").is_err());
    }

    #[test]
    fn the_last_forwarded_for_entry_of_all_lines_counts() {
        let mut h = axum::http::HeaderMap::new();
        h.append(
            "x-forwarded-for",
            "198.51.100.1, 198.51.100.2".parse().unwrap(),
        );
        h.append("x-forwarded-for", "203.0.113.7".parse().unwrap());
        assert_eq!(last_forwarded_for(&h), "203.0.113.7".parse().ok());
        h.append("x-forwarded-for", "not an address".parse().unwrap());
        assert_eq!(last_forwarded_for(&h), None);
    }

    #[test]
    fn one_ipv6_host_is_one_address() {
        let l = RateLimiter::new(limits(2, 100, 1000));
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        l.register(a).unwrap();
        l.register(b).unwrap();
        assert!(l.register(a).is_err());
        // Another /64 has its own budget; IPv4-mapped is IPv4.
        l.register("2001:db8:1:3::1".parse().unwrap()).unwrap();
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        l.register(v4).unwrap();
        l.register("::ffff:192.0.2.7".parse().unwrap()).unwrap();
        assert!(l.register(v4).is_err());
    }
}
