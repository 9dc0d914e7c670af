//! Prometheus metrics, served in text format on their own listener
//! (`--metrics-listen`) so they are never exposed on the API port.

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
            "Long-poll waits (GET /records/wait) held",
            waiters.clone(),
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

pub async fn serve_metrics(State(state): State<AppState>) -> impl IntoResponse {
    let m = &state.metrics;
    m.auth_limiter_keys
        .set(i64::try_from(state.limiter.len()).unwrap_or(i64::MAX));
    m.waiters
        .set(i64::try_from(state.waiters.len()).unwrap_or(i64::MAX));
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
}
