//! A test-only man in the middle: forwards every request to a real
//! `evi-server` and lets a test rewrite what comes back from
//! `GET /api/v1/records` and `GET /api/v1/blobs/{name}`, as a hostile or
//! broken server could, or keep the answers of pushes the server stored,
//! as a network that fails at the worst moment would.
//!
//! It is also a bad network ([`Proxy::inject`], [`Proxy::slow`]): at a given
//! rate, chosen by a seeded generator (the same seed draws the same faults
//! in the same order of requests), a request's connection is reset before
//! the server sees it or after the server answered, the request body is cut
//! after N bytes (the server gets that much and then a closed connection),
//! or the answer is cut after N bytes (status and headers, including the
//! full `Content-Length`, then part of the body and a closed connection);
//! and every request can wait a fixed latency and move its bodies at a
//! bounded rate. [`Proxy::counts`] says what it did.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, header, request::Parts};
use axum::response::Response;
use http_body_util::BodyExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::common::Rng;

/// Rewrites a pull page (`{records, next_after, more}`) in place.
pub type RecordsHook = Box<dyn Fn(&mut serde_json::Value) + Send + Sync>;
/// Rewrites a blob's ciphertext; gets the keyed name.
pub type BlobHook = Box<dyn Fn(&str, Vec<u8>) -> Vec<u8> + Send + Sync>;

/// What can go wrong with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The connection closes before the request reaches the server.
    ResetBefore,
    /// The server handles the request; its answer never comes back.
    ResetAfter,
    /// The server gets the head and part of the body, then the
    /// connection closes (a request without a body is reset instead).
    CutRequest,
    /// The client gets the status, the headers and part of the body, then
    /// the connection closes (an empty answer is reset instead).
    CutAnswer,
}

/// Resets and cuts both ways.
pub const RESETS_AND_CUTS: &[Fault] = &[
    Fault::ResetBefore,
    Fault::ResetAfter,
    Fault::CutRequest,
    Fault::CutAnswer,
];

/// What the proxy saw and did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    pub reset_before: u64,
    pub reset_after: u64,
    pub cut_requests: u64,
    pub cut_answers: u64,
}

impl Counts {
    pub fn faults(&self) -> u64 {
        self.reset_before + self.reset_after + self.cut_requests + self.cut_answers
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests, {} faults ({} reset before, {} reset after, {} requests cut, {} answers cut)",
            self.requests,
            self.faults(),
            self.reset_before,
            self.reset_after,
            self.cut_requests,
            self.cut_answers
        )
    }
}

struct Injector {
    rng: Rng,
    percent: u64,
    kinds: Vec<Fault>,
}

#[derive(Default)]
struct Hooks {
    records: Option<RecordsHook>,
    blob: Option<BlobHook>,
    /// Answers of `POST /api/v1/records` are never passed back.
    hold_push_answers: bool,
    faults: Option<Injector>,
    latency: Duration,
    /// Bytes per second each body moves at, both ways.
    rate: Option<u64>,
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    hooks: Mutex<Hooks>,
    counts: Mutex<Counts>,
}

pub struct Proxy {
    pub url: String,
    shared: Arc<Shared>,
    // Dropping the runtime stops the proxy.
    _rt: tokio::runtime::Runtime,
}

/// A request whose connection the proxy drops without an answer.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the test proxy")
    }
}

impl std::error::Error for Dropped {}

impl Proxy {
    /// Listens on a free loopback port, forwarding to `upstream` (a URL).
    pub fn start(upstream: &str) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = Arc::new(Shared {
            upstream: upstream.to_owned(),
            http: crate::common::http_async(),
            hooks: Mutex::default(),
            counts: Mutex::default(),
        });
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let st = shared.clone();
        // hyper directly rather than `axum::serve`: a service that fails
        // makes hyper close the connection without an answer, which is
        // what a reset is.
        rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            handle(st.clone(), req.map(Body::new))
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            url,
            shared,
            _rt: rt,
        }
    }

    pub fn on_records(&self, hook: impl Fn(&mut serde_json::Value) + Send + Sync + 'static) {
        self.shared.hooks.lock().unwrap().records = Some(Box::new(hook));
    }

    pub fn on_blob(&self, hook: impl Fn(&str, Vec<u8>) -> Vec<u8> + Send + Sync + 'static) {
        self.shared.hooks.lock().unwrap().blob = Some(Box::new(hook));
    }

    /// Forwards pushes and lets the server store them, but never passes
    /// their answers back: the client waits as if the network died after
    /// the server committed.
    pub fn hold_push_answers(&self) {
        self.shared.hooks.lock().unwrap().hold_push_answers = true;
    }

    /// From now on `percent` of requests (100: every one) get one of
    /// `kinds`, drawn from `seed`, as are the cut points; [`Self::counts`]
    /// starts again from zero.
    pub fn inject(&self, seed: u64, percent: u64, kinds: &[Fault]) {
        *self.shared.counts.lock().unwrap() = Counts::default();
        self.shared.hooks.lock().unwrap().faults = Some(Injector {
            rng: Rng::new(seed),
            percent,
            kinds: kinds.to_vec(),
        });
    }

    /// Every request waits `latency` before it is forwarded, and its bodies
    /// move at `bytes_per_second` both ways.
    pub fn slow(&self, latency: Duration, bytes_per_second: u64) {
        let mut h = self.shared.hooks.lock().unwrap();
        h.latency = latency;
        h.rate = Some(bytes_per_second.max(1));
    }

    /// What the proxy saw and did so far.
    pub fn counts(&self) -> Counts {
        *self.shared.counts.lock().unwrap()
    }

    /// Passes everything through untouched again.
    pub fn clear(&self) {
        *self.shared.hooks.lock().unwrap() = Hooks::default();
    }
}

/// The fault for the next request, and a number to place its cut with.
fn draw(st: &Shared) -> (Option<Fault>, u64) {
    let mut hooks = st.hooks.lock().unwrap();
    let Some(inj) = hooks.faults.as_mut() else {
        return (None, 0);
    };
    let hit = inj.rng.range(0, 100) < inj.percent && !inj.kinds.is_empty();
    let kind = inj.kinds[inj.rng.range(0, inj.kinds.len().max(1) as u64) as usize];
    let at = inj.rng.next();
    (hit.then_some(kind), at)
}

fn count(st: &Shared, fault: Fault) {
    let mut c = st.counts.lock().unwrap();
    match fault {
        Fault::ResetBefore => c.reset_before += 1,
        Fault::ResetAfter => c.reset_after += 1,
        Fault::CutRequest => c.cut_requests += 1,
        Fault::CutAnswer => c.cut_answers += 1,
    }
}

async fn handle(st: Arc<Shared>, req: Request<Body>) -> Result<Response, Dropped> {
    st.counts.lock().unwrap().requests += 1;
    let (fault, at) = draw(&st);
    let (latency, rate) = {
        let h = st.hooks.lock().unwrap();
        (h.latency, h.rate)
    };
    tokio::time::sleep(latency).await;
    let (parts, body) = req.into_parts();
    let Some(body) = read_body(body, rate).await else {
        return Err(Dropped);
    };
    match fault {
        Some(Fault::ResetBefore) => {
            count(&st, Fault::ResetBefore);
            return Err(Dropped);
        }
        Some(Fault::CutRequest) => {
            if body.is_empty() {
                count(&st, Fault::ResetBefore);
            } else {
                count(&st, Fault::CutRequest);
                let keep = (at % body.len() as u64) as usize;
                send_cut(&st.upstream, &parts, &body[..keep], body.len()).await;
            }
            return Err(Dropped);
        }
        _ => {}
    }
    let (status, headers, bytes) = forward(&st, &parts, body).await;
    let cut_at = match fault {
        Some(Fault::ResetAfter) => {
            count(&st, Fault::ResetAfter);
            return Err(Dropped);
        }
        Some(Fault::CutAnswer) if bytes.is_empty() => {
            count(&st, Fault::ResetAfter);
            return Err(Dropped);
        }
        Some(Fault::CutAnswer) => {
            count(&st, Fault::CutAnswer);
            Some((at % bytes.len() as u64) as usize)
        }
        _ => None,
    };
    let mut out = Response::builder().status(status);
    for (k, v) in &headers {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
            out = out.header(k, v);
        }
    }
    // The whole length, even when fewer bytes follow: the client must see
    // the answer as cut, not as a shorter one.
    out = out.header(header::CONTENT_LENGTH, bytes.len());
    Ok(out.body(answer_body(bytes, cut_at, rate)).unwrap())
}

/// The request body, read at `rate` if set; `None` if the client's
/// connection failed under it.
async fn read_body(mut body: Body, rate: Option<u64>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.ok()?.into_data() else {
            continue;
        };
        out.extend_from_slice(&data);
        if let Some(rate) = rate {
            tokio::time::sleep(Duration::from_secs_f64(data.len() as f64 / rate as f64)).await;
        }
    }
    Some(out)
}

/// Passes the request on and reads the whole answer, through the hooks.
async fn forward(st: &Shared, parts: &Parts, body: Vec<u8>) -> (u16, HeaderMap, Vec<u8>) {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut rb = st
        .http
        .request(parts.method.clone(), format!("{}{target}", st.upstream));
    // A records hook edits the JSON page: with one set, the client's ask
    // for the framed page is not passed on, so the server answers JSON (as
    // an older server would) and the client reads that.
    let rewrite_records = st.hooks.lock().unwrap().records.is_some();
    for (k, v) in &parts.headers {
        let framed_ask = k == header::ACCEPT && rewrite_records;
        if k != header::HOST && k != header::CONTENT_LENGTH && !framed_ask {
            rb = rb.header(k, v);
        }
    }
    let resp = match rb.body(body).send().await {
        Ok(r) => r,
        // What a reverse proxy answers when the server is away.
        Err(_) => return (502, HeaderMap::new(), b"bad gateway".to_vec()),
    };
    let hold = st.hooks.lock().unwrap().hold_push_answers;
    if hold && parts.method == Method::POST && parts.uri.path() == "/api/v1/records" {
        std::future::pending::<()>().await;
    }
    let status = resp.status();
    let headers = resp.headers().clone();
    let Ok(bytes) = resp.bytes().await else {
        return (502, HeaderMap::new(), b"bad gateway".to_vec());
    };
    let mut bytes = bytes.to_vec();
    if parts.method == Method::GET && status.is_success() {
        let path = parts.uri.path();
        let hooks = st.hooks.lock().unwrap();
        if path == "/api/v1/records" {
            if let Some(h) = &hooks.records {
                let mut page: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                h(&mut page);
                bytes = serde_json::to_vec(&page).unwrap();
            }
        } else if let Some(name) = path.strip_prefix("/api/v1/blobs/")
            && let Some(h) = &hooks.blob
        {
            bytes = h(name, bytes);
        }
    }
    (status.as_u16(), headers, bytes)
}

/// Sends the server the request's head (with the whole `Content-Length`)
/// and `prefix` of its body, then closes the connection.
async fn send_cut(upstream: &str, parts: &Parts, prefix: &[u8], full_len: usize) {
    let addr = upstream
        .strip_prefix("http://")
        .expect("an http:// upstream");
    let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = format!("{} {target} HTTP/1.1\r\nhost: {addr}\r\n", parts.method).into_bytes();
    for (k, v) in &parts.headers {
        let hop = [
            header::HOST,
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONNECTION,
        ];
        if !hop.contains(k) {
            head.extend_from_slice(k.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(v.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
    }
    head.extend_from_slice(format!("content-length: {full_len}\r\n\r\n").as_bytes());
    let _ = conn.write_all(&head).await;
    let _ = conn.write_all(prefix).await;
    let _ = conn.shutdown().await;
}

/// The answer's body: all of `bytes`, or the first `cut_at` of them and
/// then a failure (hyper closes the connection); at `rate` if set.
fn answer_body(bytes: Vec<u8>, cut_at: Option<usize>, rate: Option<u64>) -> Body {
    if cut_at.is_none() && rate.is_none() {
        return Body::from(bytes);
    }
    let mut bytes = Bytes::from(bytes);
    if let Some(n) = cut_at {
        bytes.truncate(n);
    }
    // A tenth of a second's worth per chunk when throttled.
    let chunk = rate.map_or(usize::MAX, |r| (r as usize / 10).max(1024));
    let stream = futures_util::stream::unfold(Some(bytes), move |left| async move {
        let mut left = left?;
        if left.is_empty() {
            // A moment first, so hyper sends what it holds (the head, the
            // bytes before the cut) before it closes the connection.
            cut_at?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Some((
                Err(std::io::Error::other("answer cut by the test proxy")),
                None,
            ));
        }
        let piece = left.split_to(chunk.min(left.len()));
        if let Some(rate) = rate {
            tokio::time::sleep(Duration::from_secs_f64(piece.len() as f64 / rate as f64)).await;
        }
        Some((Ok(piece), Some(left)))
    });
    Body::from_stream(stream)
}
