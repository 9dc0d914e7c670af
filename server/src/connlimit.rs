//! How many connections the server holds: at most `max_total` at once, and
//! at most `max_per_address` from one client address (IPv6 by its /64, as
//! the rate limiter counts them). A connection past either is closed at once
//! with a 503, before hyper reads a byte of it, so a flood from one address
//! cannot take every descriptor and slot from everyone else.
//!
//! Behind a reverse proxy every connection comes from the proxy, so the
//! per-address bound is off with `--trust-forwarded-for`: the proxy's own
//! limits stand in front of it, and the total still holds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::flood::Refusal;

pub struct ConnLimiter {
    max_total: usize,
    max_per_address: Option<usize>,
    open: AtomicUsize,
    per_address: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; its slots are given back when it is dropped.
pub struct Admitted {
    limiter: Arc<ConnLimiter>,
    address: Option<IpAddr>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.limiter.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(a) = self.address {
            let mut m = self.limiter.lock();
            if let Some(n) = m.get_mut(&a) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&a);
                }
            }
        }
    }
}

impl ConnLimiter {
    pub fn new(max_total: usize, max_per_address: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            max_total: max_total.max(1),
            max_per_address: max_per_address.map(|n| n.max(1)),
            open: AtomicUsize::new(0),
            per_address: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.per_address.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections held now (for the metrics).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refusal> {
        // One lock for both counts, so two racing connections cannot both
        // take the last slot.
        let mut m = self.lock();
        if self.open.load(Ordering::Relaxed) >= self.max_total {
            return Err(Refusal::ConnectionsFull);
        }
        let address = match self.max_per_address {
            Some(max) => {
                let key = crate::ratelimit::address_key(peer);
                let n = m.entry(key).or_insert(0);
                if *n >= max {
                    return Err(Refusal::ConnectionsPerAddress);
                }
                *n += 1;
                Some(key)
            }
            None => None,
        };
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(Admitted {
            limiter: self.clone(),
            address,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_and_per_address_bounds_hold_and_free_up() {
        let l = ConnLimiter::new(3, Some(2));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        let a1 = l.admit(a).unwrap();
        let _a2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).err(), Some(Refusal::ConnectionsPerAddress));
        let _b1 = l.admit(b).unwrap();
        // Same /64: the same address.
        assert_eq!(
            l.admit("2001:db8::2".parse().unwrap()).err(),
            Some(Refusal::ConnectionsFull)
        );
        drop(a1);
        assert_eq!(l.open(), 2);
        let _b2 = l.admit("2001:db8::2".parse().unwrap()).unwrap();
        assert_eq!(l.admit(b).err(), Some(Refusal::ConnectionsFull));
        let free = ConnLimiter::new(10, None);
        let held: Vec<_> = (0..10).map(|_| free.admit(a).unwrap()).collect();
        assert_eq!(free.open(), held.len());
    }
}
