//! Token buckets for register and login, per client address and per user
//! name. A refused attempt gets 429 with `Retry-After` and costs no hashing.
//!
//! The limiter's memory is bounded whatever clients send: a key is a client
//! address (IPv6 by its /64, which one host usually holds whole) or a user
//! name that has already passed validation (at most
//! [`USER_NAME_MAX_LEN`](evi_shared::limits::USER_NAME_MAX_LEN) bytes), and
//! at most [`RateLimits::max_keys`] buckets are held. A full bucket carries
//! no information (it is what a new key starts as), so it is the first to
//! go; past the bound the buckets touched longest ago go next.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use crate::AppState;
use crate::config::RateLimits;
use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Ip(IpAddr),
    /// A validated user name, lowercased.
    User(String),
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

pub struct RateLimiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<Key, Bucket>>,
}

/// The address a bucket is kept for: IPv4 as it is (IPv4-mapped IPv6 as
/// IPv4), IPv6 by its /64 prefix, so one host cannot make a new bucket per
/// address it holds.
fn address_key(ip: IpAddr) -> IpAddr {
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
        }
    }

    /// How many buckets are held (for the metrics).
    pub fn len(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn per_minute(&self, key: &Key) -> f64 {
        f64::from(match key {
            Key::Ip(_) => self.limits.per_ip_per_minute,
            Key::User(_) => self.limits.per_user_per_minute,
        })
    }

    /// Takes one attempt from the address's and the user's buckets, or says
    /// how many seconds to wait. `user` must have passed validation (it
    /// becomes a key).
    pub fn check(&self, ip: IpAddr, user: &str) -> Result<(), ApiError> {
        let keys = [
            Key::Ip(address_key(ip)),
            Key::User(user.to_ascii_lowercase()),
        ];
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut wait = 0.0f64;
        for key in &keys {
            let per_min = self.per_minute(key);
            if let Some(bucket) = b.get_mut(key) {
                bucket.tokens = (bucket.tokens
                    + now.duration_since(bucket.at).as_secs_f64() * per_min / 60.0)
                    .min(per_min);
                bucket.at = now;
                if bucket.tokens < 1.0 {
                    wait = wait.max((1.0 - bucket.tokens) * 60.0 / per_min.max(1e-9));
                }
            }
        }
        if wait > 0.0 {
            return Err(ApiError::rate_limited(wait.ceil() as u64));
        }
        for key in keys {
            let per_min = self.per_minute(&key);
            if !b.contains_key(&key) {
                self.make_room(&mut b, now);
            }
            b.entry(key)
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

/// The client's address: the TCP peer, or with `trust_forwarded_for` the last
/// `X-Forwarded-For` entry (the one the trusted proxy added).
pub struct ClientIp(pub IpAddr);

impl FromRequestParts<AppState> for ClientIp {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.config.trust_forwarded_for
            && let Some(ip) = parts
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|v| v.trim().parse().ok())
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
            max_keys,
        }
    }

    #[test]
    fn bucket_refuses_after_capacity_then_names_a_wait() {
        let l = RateLimiter::new(limits(100, 3, 1000));
        let ip = IpAddr::from([127, 0, 0, 1]);
        for _ in 0..3 {
            l.check(ip, "alice").unwrap();
        }
        let e = l.check(ip, "Alice").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.retry_after.unwrap() >= 1);
        l.check(ip, "bob").unwrap();
    }

    #[test]
    fn the_number_of_buckets_never_passes_the_bound() {
        let l = RateLimiter::new(limits(1_000_000, 3, 100));
        let ip = IpAddr::from([10, 0, 0, 1]);
        for n in 0..10_000 {
            l.check(ip, &format!("user{n}")).unwrap();
            assert!(l.len() <= 100, "{} buckets after {n}", l.len());
        }
        // The newest names are still limited: eviction takes the oldest.
        for _ in 0..2 {
            l.check(ip, "user9999").unwrap();
        }
        assert!(l.check(ip, "user9999").is_err());
    }

    #[test]
    fn one_ipv6_host_is_one_address() {
        let l = RateLimiter::new(limits(2, 100, 1000));
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        l.check(a, "u1").unwrap();
        l.check(b, "u2").unwrap();
        assert!(l.check(a, "u3").is_err());
        // Another /64 has its own budget; IPv4-mapped is IPv4.
        l.check("2001:db8:1:3::1".parse().unwrap(), "u4").unwrap();
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        l.check(v4, "u5").unwrap();
        l.check("::ffff:192.0.2.7".parse().unwrap(), "u6").unwrap();
        assert!(l.check(v4, "u7").is_err());
    }
}
