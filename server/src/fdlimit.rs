//! Fits the connection and long-poll bounds to the descriptor limit, so the
//! server never runs out of descriptors: past the limit `accept` fails for
//! everyone, `/healthz` included, for as long as the connections last.
//!
//! At start it raises the soft `RLIMIT_NOFILE` to the hard one (a process
//! may, and systemd's default soft 1024 is far below its hard 524288), then
//! lowers `max_connections` to what the limit holds, with two descriptors
//! per connection (its socket, and a blob file or body pack it may write)
//! and [`RESERVE`] for the database, the listeners and the log; and keeps
//! `max_waiters` an eighth below `max_connections`, since every parked wait
//! holds a connection and the other requests need some too. It says in the
//! log what it found and what it lowered.

use crate::config::Config;

/// Descriptors kept for everything but client connections.
pub const RESERVE: u64 = 128;

/// A bound [`fit`] lowered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lowered {
    /// The flag, as the operator knows it.
    pub flag: &'static str,
    pub asked: usize,
    pub to: usize,
    pub why: &'static str,
}

/// What [`fit`] found and changed, for the start lines of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fitted {
    pub soft_before: u64,
    pub soft: u64,
    pub hard: u64,
    pub lowered: Vec<Lowered>,
    /// Why the limit could not be read or raised, if it could not.
    pub problem: Option<String>,
}

/// The most connections `nofile` descriptors hold.
pub fn connections_for(nofile: u64) -> usize {
    usize::try_from((nofile.saturating_sub(RESERVE) / 2).max(1)).unwrap_or(usize::MAX)
}

/// Lowers `config`'s bounds to what the descriptor limit `nofile` holds;
/// returns what it lowered.
pub fn fit_to(config: &mut Config, nofile: u64) -> Vec<Lowered> {
    let mut lowered = Vec::new();
    let mut lower = |flag, value: &mut usize, to: usize, why| {
        if *value > to {
            lowered.push(Lowered {
                flag,
                asked: *value,
                to,
                why,
            });
            *value = to;
        }
    };
    let c = &mut config.connections;
    lower(
        "--max-connections",
        &mut c.max_total,
        connections_for(nofile),
        "what the descriptor limit holds (2 per connection, 128 kept): raise LimitNOFILE= \
         (or ulimit -n) for more",
    );
    lower(
        "--max-connections-per-ip",
        &mut c.max_per_address,
        (c.max_total / 2).max(1),
        "half of --max-connections, so one address cannot hold every connection",
    );
    lower(
        "--max-waiters",
        &mut config.waits.max_waiters,
        (c.max_total - c.max_total / 8).max(1),
        "below --max-connections: each wait holds a connection, and an eighth stays for \
         other requests",
    );
    lowered
}

/// Raises the soft descriptor limit to the hard one, then [`fit_to`] it.
pub fn fit(config: &mut Config) -> Fitted {
    use rlimit::Resource;
    let (soft_before, hard) = match Resource::NOFILE.get() {
        Ok(l) => l,
        Err(e) => {
            return Fitted {
                soft_before: 0,
                soft: 0,
                hard: 0,
                lowered: Vec::new(),
                problem: Some(format!("cannot read RLIMIT_NOFILE: {e}; bounds unchanged")),
            };
        }
    };
    let mut problem = None;
    let soft = if soft_before < hard {
        rlimit::increase_nofile_limit(hard).unwrap_or_else(|e| {
            problem = Some(format!(
                "cannot raise the soft limit {soft_before} to {hard}: {e}"
            ));
            soft_before
        })
    } else {
        soft_before
    };
    let lowered = fit_to(config, soft);
    Fitted {
        soft_before,
        soft,
        hard,
        lowered,
        problem,
    }
}

/// The log lines of [`fit`]'s outcome: one INFO line, and a WARN per
/// problem or lowered bound.
pub fn log(f: &Fitted, config: &Config) {
    if let Some(p) = &f.problem {
        tracing::warn!("descriptor limit: {p}");
    }
    for l in &f.lowered {
        tracing::warn!(
            asked = l.asked,
            to = l.to,
            "{} lowered to {}: {}",
            l.flag,
            l.to,
            l.why
        );
    }
    tracing::info!(
        nofile = f.soft,
        nofile_at_start = f.soft_before,
        nofile_hard = f.hard,
        max_connections = config.connections.max_total,
        max_connections_per_ip = config.connections.max_per_address,
        max_waiters = config.waits.max_waiters,
        "{}",
        if f.soft > f.soft_before {
            "descriptor limit raised to the hard limit"
        } else {
            "descriptor limit"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_fit_the_descriptors() {
        let mut c = Config::new("unused".into());
        assert_eq!(fit_to(&mut c, 1024).len(), 2);
        assert_eq!(c.connections.max_total, 448);
        assert_eq!(c.connections.max_per_address, 64);
        assert_eq!(c.waits.max_waiters, 448 - 56);
        let mut c = Config::new("unused".into());
        fit_to(&mut c, 256);
        assert_eq!(
            (c.connections.max_total, c.connections.max_per_address),
            (64, 32)
        );
        let mut c = Config::new("unused".into());
        assert!(
            fit_to(&mut c, 1 << 20).is_empty(),
            "a roomy limit lowers nothing"
        );
    }
}
