//! The accept loop: HTTP/1.1 connections with bounds and timeouts, and
//! graceful shutdown.
//!
//! What it promises, whatever a client does or fails to do:
//! - at most [`Connections::max_total`] connections at once, and
//!   [`Connections::max_per_address`] from one address (see
//!   [`crate::connlimit`]); one past either is answered 503 and closed
//!   before anything of it is read;
//! - a request's header must arrive whole within [`Timeouts::header`] of
//!   the connection waiting for it, so a half-sent header, a connection that
//!   sends nothing, and one kept alive with no next request are all closed;
//! - a header larger than [`Connections::max_header_bytes`] is answered 431
//!   and the connection closed. Hyper's own bound is on its read buffer,
//!   which a header fills up to about twice that before hyper refuses it
//!   (a 100 KiB header passed the 64 KiB bound), so the header hyper parsed
//!   is measured too ([`header_bytes`]): the bound is the one documented,
//!   and no client makes the server buffer more than twice it;
//! - a request body that sends nothing for [`Timeouts::body`] is cut, and
//!   so is the body of a request without a valid token that is not whole
//!   [`Timeouts::request`] after its header (see [`crate::deadline`]): the
//!   handler reading it answers 408 `request_timeout`;
//! - a connection on which no byte moves either way for [`Timeouts::idle`]
//!   while no handler runs (a client that stopped reading an answer) is
//!   closed.
//!
//! On shutdown it stops accepting and waits for the requests in flight;
//! idle connections close at once.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;

pub use crate::config::{Connections, Timeouts};
use crate::connlimit::ConnLimiter;
use crate::deadline::{Deadline, DeadlineBody};
use crate::flood::{Refusal, Refusals};

/// What a connection past the bounds gets before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n\
    Content-Type: application/json\r\nContent-Length: 83\r\nConnection: close\r\n\r\n\
    {\"code\":\"unavailable\",\"message\":\"the server holds as many connections as it takes\"}";

/// How [`serve`] treats connections.
#[derive(Clone)]
pub struct Options {
    pub timeouts: Timeouts,
    pub max_header_bytes: usize,
    pub connections: Arc<ConnLimiter>,
    pub refusals: Arc<Refusals>,
}

/// When a connection last moved a byte, and how many of its requests are
/// being handled.
struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    /// Resolves once nothing has moved for `idle` while no handler ran.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let due = self.last() + idle;
            if Instant::now() >= due && self.busy.load(Ordering::Relaxed) == 0 {
                return;
            }
            let wake = if Instant::now() >= due {
                // A handler runs: look again after another period.
                Instant::now() + idle
            } else {
                due
            };
            tokio::time::sleep_until(wake.into()).await;
        }
    }
}

/// Marks a request as being handled until dropped (when the handler has
/// produced its answer, or was dropped).
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: &Arc<Activity>) -> Self {
        a.busy.fetch_add(1, Ordering::Relaxed);
        Self(a.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TCP stream that notes every byte it moves.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for
/// the requests in flight. Each request carries `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    options: Options,
    shutdown: impl Future<Output = ()>,
) {
    let timeouts = options.timeouts;
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let admitted = match options.connections.admit(peer.ip()) {
            Ok(a) => a,
            Err(why) => {
                options.refusals.note(why);
                // Best effort: the socket buffer of a new connection is
                // empty, so this does not block; if it fails, the close says
                // enough.
                let _ = tcp.try_write(BUSY);
                continue;
            }
        };
        // No Nagle: a streamed body (blob download) is written in small
        // chunks, and the last one would wait for the client's delayed ACK
        // (about 40 ms per blob on loopback).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY: {e}");
        }
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Tracked {
            inner: tcp,
            activity: activity.clone(),
        });
        let service = {
            let activity = activity.clone();
            let app = app.clone();
            let refusals = options.refusals.clone();
            let max_header_bytes = options.max_header_bytes.max(8192);
            hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                if header_bytes(&req) > max_header_bytes {
                    refusals.note(Refusal::HeaderTooLarge);
                    let resp = hyper::Response::builder()
                        .status(hyper::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
                        .header(hyper::header::CONNECTION, "close")
                        .body(Body::empty())
                        .expect("a fixed response");
                    return futures_util::future::Either::Left(std::future::ready(Ok(resp)));
                }
                let busy = Busy::new(&activity);
                let deadline = Deadline::default();
                let mut req = req.map(|b| {
                    let b = tower_http::timeout::TimeoutBody::new(timeouts.body, b);
                    Body::new(DeadlineBody::new(b, timeouts.request, deadline.clone()))
                });
                req.extensions_mut().insert(ConnectInfo(peer));
                req.extensions_mut().insert(deadline);
                let app = app.clone();
                futures_util::future::Either::Right(async move {
                    let resp = app.oneshot(req).await;
                    drop(busy);
                    resp
                })
            })
        };
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(timeouts.header)
            .max_buf_size(options.max_header_bytes.max(8192));
        let conn = graceful.watch(http.serve_connection(io, service));
        let idle = timeouts.idle;
        let refusals = options.refusals.clone();
        tokio::spawn(async move {
            let _admitted = admitted;
            tokio::select! {
                r = conn => {
                    if let Err(e) = r {
                        if e.is_parse_too_large() {
                            refusals.note(Refusal::HeaderTooLarge);
                        } else if e.is_timeout() {
                            refusals.note(Refusal::TimedOut);
                        }
                        tracing::debug!(%peer, "connection ended: {e}");
                    }
                }
                () = activity.idle_for(idle) => {
                    // Counted, not logged one by one: a flood of clients that
                    // stop reading is a flood of these.
                    refusals.note(Refusal::TimedOut);
                    tracing::debug!(%peer, idle_secs = idle.as_secs(), "closed a connection on which nothing moved");
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A connection that failed before it was accepted is the client's
/// problem; anything else (out of file descriptors) gets a pause so the
/// loop does not spin.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!("accept failed: {e}; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A request's header as it came on the wire, near enough: its request
/// line, and each field's name and value with their `: ` and line end.
fn header_bytes<B>(req: &hyper::Request<B>) -> usize {
    let target = req.uri().path_and_query().map_or(1, |p| p.as_str().len());
    let line = req.method().as_str().len() + 1 + target + " HTTP/1.1\r\n".len();
    req.headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + line
}
