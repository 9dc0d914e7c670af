//! Token buckets for register and login, per client address and per user
//! name. A refused attempt gets 429 with `Retry-After` and costs no hashing.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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

/// Above this many tracked keys, full buckets are forgotten.
const PRUNE_AT: usize = 10_000;

impl RateLimiter {
    pub fn new(limits: RateLimits) -> Self {
        Self {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one attempt from the address's and the user's buckets, or says
    /// how many seconds to wait.
    pub fn check(&self, ip: IpAddr, user: &str) -> Result<(), ApiError> {
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if b.len() > PRUNE_AT {
            let l = &self.limits;
            b.retain(|k, v| {
                let cap = match k {
                    Key::Ip(_) => l.per_ip_per_minute,
                    Key::User(_) => l.per_user_per_minute,
                } as f64;
                v.tokens + now.duration_since(v.at).as_secs_f64() * cap / 60.0 < cap
            });
        }
        let keys = [
            (Key::Ip(ip), self.limits.per_ip_per_minute),
            (
                Key::User(user.to_lowercase()),
                self.limits.per_user_per_minute,
            ),
        ];
        let mut wait = 0.0f64;
        for (key, per_min) in &keys {
            let cap = f64::from(*per_min);
            let bucket = b.entry(key.clone()).or_insert(Bucket {
                tokens: cap,
                at: now,
            });
            bucket.tokens =
                (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * cap / 60.0).min(cap);
            bucket.at = now;
            if bucket.tokens < 1.0 {
                wait = wait.max((1.0 - bucket.tokens) * 60.0 / cap.max(1e-9));
            }
        }
        if wait > 0.0 {
            return Err(ApiError::rate_limited(wait.ceil() as u64));
        }
        for (key, _) in &keys {
            if let Some(bucket) = b.get_mut(key) {
                bucket.tokens -= 1.0;
            }
        }
        Ok(())
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

    #[test]
    fn bucket_refuses_after_capacity_then_names_a_wait() {
        let l = RateLimiter::new(RateLimits {
            per_ip_per_minute: 100,
            per_user_per_minute: 3,
        });
        let ip = IpAddr::from([127, 0, 0, 1]);
        for _ in 0..3 {
            l.check(ip, "alice").unwrap();
        }
        let e = l.check(ip, "Alice").unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert!(e.retry_after.unwrap() >= 1);
        l.check(ip, "bob").unwrap();
    }
}
