//! A test-only man in the middle: forwards every request to a real
//! `evi-server` and lets a test rewrite what comes back from
//! `GET /api/v1/records` and `GET /api/v1/blobs/{name}`, as a hostile or
//! broken server could, or keep the answers of pushes the server stored,
//! as a network that fails at the worst moment would.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::response::Response;

/// Rewrites a pull page (`{records, next_after, more}`) in place.
pub type RecordsHook = Box<dyn Fn(&mut serde_json::Value) + Send + Sync>;
/// Rewrites a blob's ciphertext; gets the keyed name.
pub type BlobHook = Box<dyn Fn(&str, Vec<u8>) -> Vec<u8> + Send + Sync>;

#[derive(Default)]
struct Hooks {
    records: Option<RecordsHook>,
    blob: Option<BlobHook>,
    /// Answers of `POST /api/v1/records` are never passed back.
    hold_push_answers: bool,
}

struct Shared {
    upstream: String,
    http: reqwest::Client,
    hooks: Mutex<Hooks>,
}

pub struct Proxy {
    pub url: String,
    shared: Arc<Shared>,
    // Dropping the runtime stops the proxy.
    _rt: tokio::runtime::Runtime,
}

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
            http: reqwest::Client::new(),
            hooks: Mutex::default(),
        });
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(shared.clone());
        rt.spawn(async move { axum::serve(listener, app).await });
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

    /// Passes everything through untouched again.
    pub fn clear(&self) {
        *self.shared.hooks.lock().unwrap() = Hooks::default();
    }
}

async fn forward(State(st): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
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
    let resp = rb.body(body).send().await.unwrap();
    let hold = st.hooks.lock().unwrap().hold_push_answers;
    if hold && parts.method == Method::POST && parts.uri.path() == "/api/v1/records" {
        std::future::pending::<()>().await;
    }
    let status = resp.status();
    let headers = resp.headers().clone();
    let mut bytes = resp.bytes().await.unwrap().to_vec();
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
    let mut out = Response::builder().status(status);
    for (k, v) in &headers {
        if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
            out = out.header(k, v);
        }
    }
    out.body(Body::from(bytes)).unwrap()
}
