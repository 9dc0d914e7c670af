//! Prometheus metrics, served in text format on their own listener
//! (`--metrics-listen`) so they are never exposed on the API port.
//!
//! What an operator asks first, each with its HELP text (and in
//! `deploy/README.md`): what the server stores (bytes on disk per part,
//! users, devices, records, entries, blobs), the accounts by class (how
//! recently seen, how large, how near their quota: never a name, so a
//! metrics store holds nothing that says who uses the server), which build
//! runs, how full its bounds are (connections, waits, limiter buckets) and
//! what it refused. A scrape costs two reads of the users table (one joined
//! with the devices) and three `stat`s; the
//! folder sums are reused for a minute, a bucket's for ten (see
//! [`crate::disk_usage`]).

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::AppState;
use crate::flood::Refusal;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabels {
    part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SizeLabels {
    size: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Gauges set at each scrape from what the server holds.
#[derive(Default)]
struct Held {
    storage_bytes: Family<PartLabels, Gauge>,
    users: Gauge,
    devices: Gauge,
    records: Gauge,
    entries: Gauge,
    blobs: Gauge,
    connections: Gauge,
    max_connections: Gauge,
    max_waiters: Gauge,
    refused: Family<ReasonLabels, Counter>,
    accounts: Family<ClassLabels, Gauge>,
    accounts_by_size: Family<SizeLabels, Gauge>,
    accounts_near_quota: Gauge,
    accounts_with_own_quota: Gauge,
}

/// How recently an account's devices were seen, or that it is disabled:
/// the classes `accounts{class=…}` counts (each account in one).
const CLASSES: [&str; 4] = ["seen_day", "seen_month", "idle", "disabled"];

/// Bytes an account stores (what its quota counts), by upper bound: the
/// classes `accounts_by_size{size=…}` counts.
const SIZES: [(&str, i64); 5] = [
    ("under_1mib", 1 << 20),
    ("under_100mib", 100 << 20),
    ("under_1gib", 1 << 30),
    ("under_10gib", 10 << 30),
    ("10gib_and_over", i64::MAX),
];

/// The account classes of the users table, counted without a name: an
/// operator sees how many accounts are active, large or near their quota,
/// never which.
#[derive(Default)]
struct Classes {
    by_class: [u64; CLASSES.len()],
    by_size: [u64; SIZES.len()],
    near_quota: u64,
    own_quota: u64,
}

impl Classes {
    fn count(rows: &[crate::store::admin::AccountRow], now: i64, default: Option<u64>) -> Self {
        const DAY: i64 = 86_400;
        let mut c = Self::default();
        for a in rows {
            let class = match (a.disabled_at, a.last_seen_at) {
                (Some(_), _) => 3,
                (None, Some(t)) if now - t < DAY => 0,
                (None, Some(t)) if now - t < 30 * DAY => 1,
                _ => 2,
            };
            c.by_class[class] += 1;
            let size = SIZES
                .iter()
                .position(|(_, under)| a.bytes_used < *under)
                .unwrap_or(SIZES.len() - 1);
            c.by_size[size] += 1;
            if a.quota_bytes.is_some() {
                c.own_quota += 1;
            }
            let quota = crate::store::admin::effective_quota(a.quota_bytes, default);
            if quota.is_some_and(|q| (a.bytes_used.max(0) as u64).saturating_mul(10) >= q * 9) {
                c.near_quota += 1;
            }
        }
        c
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    method: String,
    route: String,
    status: u16,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<HttpLabels, Counter>,
    duration: Family<HttpLabels, Histogram>,
    pub records_stored: Counter,
    pub records_dropped: Counter,
    pub blob_bytes_stored: Counter,
    /// Buckets the register/login limiter holds, read at each scrape: the
    /// limiter's memory, which no client can grow past its bound.
    auth_limiter_keys: Gauge,
    /// Long-poll waits held, read at each scrape.
    waiters: Gauge,
    /// Authenticated requests being handled, read at each scrape.
    requests_in_flight: Gauge,
    held: Held,
    disk: crate::disk_usage::Cached,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("evi_server");
        let requests = Family::<HttpLabels, Counter>::default();
        let duration = Family::<HttpLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0005, 2.0, 16))) as fn() -> Histogram,
        );
        let records_stored = Counter::default();
        let records_dropped = Counter::default();
        let blob_bytes_stored = Counter::default();
        let auth_limiter_keys = Gauge::default();
        let waiters = Gauge::default();
        let requests_in_flight = Gauge::default();
        registry.register("http_requests", "HTTP requests answered", requests.clone());
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request",
            duration.clone(),
        );
        registry.register(
            "records_stored",
            "Pushed segments stored",
            records_stored.clone(),
        );
        registry.register(
            "records_dropped",
            "Pushed segments dropped as already known",
            records_dropped.clone(),
        );
        registry.register(
            "blob_bytes_stored",
            "Blob bytes stored",
            blob_bytes_stored.clone(),
        );
        registry.register(
            "auth_limiter_keys",
            "Buckets held by the register/login rate limiter",
            auth_limiter_keys.clone(),
        );
        registry.register(
            "waiters",
            "Long-poll waits (GET /records/wait and GET /pair/{slot}/wait) held",
            waiters.clone(),
        );
        registry.register(
            "requests_in_flight",
            "Authenticated requests being handled, waits included (each account holds at most \
             --max-requests-per-user)",
            requests_in_flight.clone(),
        );
        let held = Held::default();
        held.register(&mut registry);
        registry.register(
            "build",
            "The running build: its version in the label, value 1",
            prometheus_client::metrics::info::Info::new(BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            }),
        );
        Self {
            registry,
            requests,
            duration: duration.clone(),
            records_stored,
            records_dropped,
            blob_bytes_stored,
            auth_limiter_keys,
            waiters,
            requests_in_flight,
            held,
            disk: Default::default(),
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts and times every request, notes refusals (401, 408, 429) for the
/// flood lines, and logs it at DEBUG (method, route template, status, time:
/// never headers or bodies, so never a token or password).
pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let secs = start.elapsed().as_secs_f64();
    let labels = HttpLabels {
        method: method.clone(),
        route: route.clone(),
        status,
    };
    state.metrics.requests.get_or_create(&labels).inc();
    state.metrics.duration.get_or_create(&labels).observe(secs);
    let refused = match status {
        401 => Some(Refusal::Unauthorized),
        408 => Some(Refusal::TimedOut),
        429 => Some(Refusal::RateLimited),
        _ => None,
    };
    if let Some(r) = refused {
        state.refusals.note(r);
    }
    // DEBUG: at INFO a flood of requests is a flood of log lines; floods
    // are summed by `crate::flood` instead.
    tracing::debug!(%method, %route, status, ms = (secs * 1000.0).round() as u64, "request");
    resp
}

impl Held {
    fn register(&self, r: &mut Registry) {
        r.register(
            "storage_bytes",
            "Bytes stored, by part: database (the SQLite file with its -wal and -shm files; 0 \
             with --database), bodies (record body packs), blobs; in the data folder or a file:// \
             store at most 60 s old, in an s3:// store the objects under its prefix, listed at \
             most every 10 min",
            self.storage_bytes.clone(),
        );
        r.register("users", "Accounts", self.users.clone());
        r.register(
            "devices",
            "Devices with a live token, all accounts",
            self.devices.clone(),
        );
        r.register(
            "records",
            "Records (encrypted segments) stored, all accounts",
            self.records.clone(),
        );
        r.register(
            "entries",
            "Entry ids the stored records hold, all accounts",
            self.entries.clone(),
        );
        r.register(
            "blobs",
            "Blobs (checkpoint file contents) stored, all accounts",
            self.blobs.clone(),
        );
        r.register(
            "connections",
            "Connections held on the API listener",
            self.connections.clone(),
        );
        r.register(
            "max_connections",
            "Most connections the API listener holds (--max-connections, fitted to the \
             descriptor limit)",
            self.max_connections.clone(),
        );
        r.register(
            "max_waiters",
            "Most long-poll waits held at once (--max-waiters, fitted)",
            self.max_waiters.clone(),
        );
        r.register(
            "accounts",
            "Accounts by class, never by name: seen_day (a device of it seen in the last 24 \
             hours), seen_month (in the last 30 days), idle (not since, or no device), disabled \
             (by the operator)",
            self.accounts.clone(),
        );
        r.register(
            "accounts_by_size",
            "Accounts by the bytes they store (what the quota counts): under_1mib, under_100mib, \
             under_1gib, under_10gib, 10gib_and_over",
            self.accounts_by_size.clone(),
        );
        r.register(
            "accounts_near_quota",
            "Accounts storing 90% of their quota or more (their own, or --quota-bytes)",
            self.accounts_near_quota.clone(),
        );
        r.register(
            "accounts_with_own_quota",
            "Accounts the operator gave their own quota (`evi-server admin quota`)",
            self.accounts_with_own_quota.clone(),
        );
        r.register(
            "refused",
            "Connections and requests turned away, by reason: connections_full, \
             connections_per_address, header_too_large, timed_out, rate_limited (429), \
             unauthorized (401)",
            self.refused.clone(),
        );
    }
}

fn gauge(g: &Gauge, n: impl TryInto<i64>) {
    g.set(n.try_into().unwrap_or(i64::MAX));
}

/// Sets the gauges from what the server holds now.
async fn read_held(state: &AppState) {
    let m = &state.metrics;
    let h = &m.held;
    gauge(&m.auth_limiter_keys, state.limiter.len());
    gauge(&m.waiters, state.waiters.len());
    gauge(&m.requests_in_flight, state.inflight.len());
    gauge(&h.connections, state.connections.open());
    gauge(&h.max_connections, state.config.connections.max_total);
    gauge(&h.max_waiters, state.config.waits.max_waiters);
    for r in Refusal::ALL {
        let c = h.refused.get_or_create(&ReasonLabels { reason: r.name() });
        c.inc_by(state.refusals.total(r).saturating_sub(c.get()));
    }
    match state.store.totals().await {
        Ok(t) => {
            gauge(&h.users, t.users);
            gauge(&h.devices, t.devices);
            gauge(&h.records, t.records);
            gauge(&h.entries, t.entries);
            gauge(&h.blobs, t.blobs);
        }
        // The scrape still answers; the figures keep their last values.
        Err(e) => tracing::warn!(error = %e, "metrics: cannot read the totals"),
    }
    match state.store.accounts().await {
        Ok(rows) => {
            let now = chrono::Utc::now().timestamp();
            let c = Classes::count(&rows, now, state.config.quota_bytes);
            for (class, n) in CLASSES.iter().zip(c.by_class) {
                gauge(&h.accounts.get_or_create(&ClassLabels { class }), n);
            }
            for ((size, _), n) in SIZES.iter().zip(c.by_size) {
                gauge(&h.accounts_by_size.get_or_create(&SizeLabels { size }), n);
            }
            gauge(&h.accounts_near_quota, c.near_quota);
            gauge(&h.accounts_with_own_quota, c.own_quota);
        }
        Err(e) => tracing::warn!(error = %e, "metrics: cannot read the accounts"),
    }
    let disk = m
        .disk
        .read(&state.config, &*state.bodies, &*state.blobs)
        .await;
    for (part, bytes) in [
        ("database", disk.database),
        ("bodies", disk.bodies),
        ("blobs", disk.blobs),
    ] {
        gauge(&h.storage_bytes.get_or_create(&PartLabels { part }), bytes);
    }
}

pub async fn serve_metrics(State(state): State<AppState>) -> impl IntoResponse {
    read_held(&state).await;
    let m = &state.metrics;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
}
