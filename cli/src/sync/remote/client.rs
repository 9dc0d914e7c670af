//! The HTTP client of `evi-server`: one method per endpoint, the wire types
//! from `evi_shared::api`, retries with backoff for what is worth retrying
//! (connection failures, answers cut short, 5xx but 501 and 507, 429), and
//! typed errors for what is not.
//!
//! An attempt is the request and the reading of its answer: a connection
//! lost while the body arrives is retried like one lost before, for the
//! JSON answers and framed pages read here, and, through
//! [`Client::again_if_cut`], for the streamed blob answers read elsewhere.
//! Every push is safe to send again (the server merges by entry id), so a
//! lost answer costs a resend, never a doubled entry.
//!
//! What the user learns: a server URL without `http://` or `https://` is
//! refused before any request; a failed connection names its cause (refused,
//! TLS handshake, timeout, unknown host); an answer that is not evi-server's
//! (a 404 of no route, a body that is not its JSON) is checked against
//! `<base>/healthz` and said to be so. Waits are told through
//! [`notice`](crate::sync::notice): each rate-limit wait with its length, and once
//! per command that a lost connection is being retried (all the calls of a
//! client and its clones share that one line; a long-running watcher says
//! it again after a quiet minute). A server this client
//! never reached that refuses the connection (or whose name does not resolve)
//! gets one short retry (it may be starting), not seconds of backoff.

mod pairing;
mod rotation;

use std::collections::HashSet;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use evi_shared::KeyedId;
use evi_shared::api::{
    AuthResponse, BlobNames, BlobStored, Capabilities, DamagedMarked, DamagedSeqs, DevicesResponse,
    EntryIds, ErrorBody, ErrorCode, KeyCheckRequest, KeyCheckResponse, KnownEntries, LoginRequest,
    MissingResponse, PullResponse, PushResponse, RegisterRequest, StatusResponse, WaitResponse,
};
use evi_shared::limits::MAX_NAMES_PER_CALL;
use reqwest::StatusCode;
use reqwest::blocking::{Client as Http, RequestBuilder, Response};
use serde::de::DeserializeOwned;

use crate::sync::notice::notice;
use crate::sync::remote::records::{self, OutBatch, Page};
use evi_shared::frames;

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server URL has no `http://` or `https://` (checked before any
    /// request).
    #[error("the server URL needs http:// or https:// (got {url:?})")]
    UrlScheme { url: String },
    /// The server URL does not parse.
    #[error("the server URL {url:?} is not valid: {reason}")]
    BadUrl { url: String, reason: String },
    /// The server answered with an error body.
    #[error("server refused ({status}): {message}")]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
        /// Seconds the server asked to wait (`Retry-After`).
        retry_after: Option<u64>,
    },
    /// The server could not be reached.
    #[error("cannot reach {url}: {cause}")]
    Transport {
        url: String,
        cause: Cause,
        #[source]
        source: reqwest::Error,
    },
    /// What answered is not evi-server: `healthz` is the address that has no
    /// evi-server health check; `root` is where one answers instead (the
    /// URL's origin, when the URL has a path).
    #[error("this does not look like an evi-server (no /healthz at {healthz})")]
    NotEviServer {
        healthz: String,
        root: Option<String>,
    },
    /// evi-server answered, but not what this version reads.
    #[error("unexpected answer from {url}: {source}")]
    BadAnswer {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    /// The connection was lost while the answer's body arrived.
    #[error("the connection to {url} was lost mid-answer ({cause})")]
    Cut { url: String, cause: String },
    /// A framed page that does not read: cut short (a lost connection) or
    /// malformed.
    #[error("unreadable page from {url}: {source}")]
    BadFrames {
        url: String,
        #[source]
        source: evi_shared::frames::FrameError,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Why a connection failed, as far as the error chain tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Nothing listens at that host and port.
    Refused,
    /// The TLS handshake failed (the detail from rustls).
    Tls(String),
    /// No answer in time.
    Timeout,
    /// The host name does not resolve.
    UnknownHost(String),
    /// Anything else: the innermost message.
    Other(String),
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused => f.write_str("connection refused"),
            Self::Tls(d) => write!(f, "TLS handshake failed ({d})"),
            Self::Timeout => f.write_str("timed out"),
            Self::UnknownHost(d) => write!(f, "unknown host ({d})"),
            Self::Other(d) => f.write_str(d),
        }
    }
}

impl Cause {
    /// Whether a TLS failure says the other side does not speak TLS at all
    /// (an `https://` URL to a plain HTTP server).
    pub fn is_plain_http(&self) -> bool {
        matches!(self, Self::Tls(d) if d.contains("InvalidContentType")
            || d.contains("corrupt message"))
    }

    /// Classifies a failed request by walking its source chain (an
    /// `io::Error`'s own inner error included, which `source()` skips).
    fn of(e: &reqwest::Error, https: bool) -> Self {
        if e.is_timeout() {
            return Self::Timeout;
        }
        let mut chain: Vec<&(dyn std::error::Error + 'static)> = Vec::new();
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = next {
            chain.push(err);
            next = match err.downcast_ref::<std::io::Error>() {
                Some(io) => io
                    .get_ref()
                    .map(|inner| inner as &(dyn std::error::Error + 'static)),
                None => err.source(),
            };
        }
        let innermost = chain.last().map(|c| c.to_string()).unwrap_or_default();
        for err in &chain {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    std::io::ErrorKind::ConnectionRefused => return Self::Refused,
                    std::io::ErrorKind::TimedOut => return Self::Timeout,
                    _ => {}
                }
            }
            if err.to_string() == "dns error" {
                return Self::UnknownHost(innermost);
            }
        }
        // rustls reports through an `io::Error` of kind InvalidData (or a
        // connection closed mid-handshake) on an `https://` connection.
        let tls_io = chain.iter().any(|err| {
            err.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
                )
            })
        });
        if https && e.is_connect() && tls_io {
            return Self::Tls(innermost);
        }
        Self::Other(innermost)
    }
}

impl ClientError {
    /// Whether the same call may succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            // 501: what answered does not implement the method at all; 507:
            // the account's quota or the server's disk is full, which no
            // wait of seconds changes; 408: the body stopped arriving (the
            // connection, most likely).
            Self::Api { status, .. } => {
                (*status >= 500 && *status != 501 && *status != 507)
                    || *status == 429
                    || *status == 408
            }
            Self::Transport { cause, .. } => !matches!(cause, Cause::Tls(_)),
            Self::Cut { .. } => true,
            Self::BadFrames { source, .. } => matches!(
                source,
                evi_shared::frames::FrameError::Truncated | evi_shared::frames::FrameError::Io(_)
            ),
            _ => false,
        }
    }

    /// Whether an answer was cut short (see [`Client::again_if_cut`]).
    pub fn is_cut(&self) -> bool {
        matches!(self, Self::Cut { .. })
    }

    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Api { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the server URL as given cannot be used (a usage error).
    pub fn is_bad_url(&self) -> bool {
        matches!(self, Self::UrlScheme { .. } | Self::BadUrl { .. })
    }
}

/// Checks a server URL as the user gave it: `http://` or `https://`, a host.
pub fn check_server_url(server: &str) -> Result<reqwest::Url, ClientError> {
    let scheme = server
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("http" | "https")) {
        return Err(ClientError::UrlScheme {
            url: server.to_owned(),
        });
    }
    let bad = |reason: String| ClientError::BadUrl {
        url: server.to_owned(),
        reason,
    };
    match reqwest::Url::parse(server) {
        Ok(u) if u.has_host() => Ok(u),
        Ok(_) => Err(bad("no host".into())),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// A client of one server, with or without a device token.
#[derive(Clone)]
pub struct Client {
    http: Http,
    base: String,
    token: Option<String>,
    /// Attempts for a transient failure (1 = no retry).
    attempts: u32,
    /// Whether this server answered before (in this process, or it is the
    /// account's): a refused connection is then a restart worth the backoff.
    known: Arc<AtomicBool>,
    /// Attempts made again after a transient failure, by this client and
    /// its clones (what a push or pull reports as `retries`).
    retries: Arc<AtomicU64>,
    /// When this client or a clone last retried: the notice that it retries
    /// is said once for all of them, not once per call (a push makes many,
    /// some at once), and again only after [`RETRY_NOTICE_QUIET`] without a
    /// retry.
    last_retry: Arc<Mutex<Option<Instant>>>,
    /// The account key's proof (hex), sent only on the calls that change
    /// the account's history or key (see [`Client::with_key_proof`]).
    key_proof: Option<Arc<zeroize::Zeroizing<String>>>,
}

/// How long without a retry before a new one is said again (a watcher's
/// next outage, not the next call of the same one).
const RETRY_NOTICE_QUIET: Duration = Duration::from_secs(60);

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The one retry of a refused connection to a server never reached.
const FIRST_CONTACT_RETRY: Duration = Duration::from_millis(300);

/// Largest record body a pull reads: above any server's batch limit (a
/// record is one segment of one batch), so only a hostile length is refused.
const MAX_RECORD_BYTES: u32 = 256 << 20;

/// How long the `/healthz` probe of a strange answer may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// An HTTP client's builder, with ring made the process's rustls provider
/// first (once): reqwest is built without a provider of its own (see
/// Cargo.toml), and panics on an `https://` URL without one.
pub fn http_builder() -> reqwest::blocking::ClientBuilder {
    // An error only says one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Http::builder()
}

impl Client {
    /// A client of `server`, checked to be an `http://` or `https://` URL.
    pub fn new(server: &str, token: Option<String>) -> Result<Self, ClientError> {
        check_server_url(server)?;
        let base = server.trim_end_matches('/').to_owned();
        let http = http_builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .user_agent(concat!("evi/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.clone(),
                cause: Cause::Other(source.to_string()),
                source,
            })?;
        let attempts = std::env::var("EVI_SYNC_RETRIES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5);
        Ok(Self {
            http,
            base,
            token,
            attempts,
            known: Arc::new(AtomicBool::new(false)),
            retries: Arc::new(AtomicU64::new(0)),
            last_retry: Arc::new(Mutex::new(None)),
            key_proof: None,
        })
    }

    /// The same client proving `keys` on the calls that need it (forgets
    /// and their undo, damage reports, a rotation's begin and commit, a
    /// device made by pairing): the server refuses those on a token alone.
    pub fn with_key_proof(&self, keys: &crate::sync::seal::keys::SyncKeys) -> Self {
        Self {
            key_proof: Some(Arc::new(keys.key_proof_hex())),
            ..self.clone()
        }
    }

    /// A client of the account's server, which answered at `init` or
    /// `login`: a refused connection there is retried with backoff.
    pub fn for_account(server: &str, token: Option<String>) -> Result<Self, ClientError> {
        let c = Self::new(server, token)?;
        c.known.store(true, Ordering::Relaxed);
        Ok(c)
    }

    /// The same client giving up fast: `timeout` to connect and for each
    /// request, no retry (for a pull made on the side of another command,
    /// which must not keep the user waiting).
    pub fn fail_fast(&self, timeout: Duration) -> Result<Self, ClientError> {
        let http = http_builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .user_agent(concat!("evi/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| self.transport(source))?;
        Ok(Self {
            http,
            attempts: 1,
            ..self.clone()
        })
    }

    pub fn server(&self) -> &str {
        &self.base
    }

    /// Attempts made again so far after a transient failure (a lost
    /// connection, an answer cut short, a 5xx, a rate limit).
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Records a retry now; whether it is news (the first in a while).
    fn retry_is_news(&self) -> bool {
        let mut last = self.last_retry.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let news = last.is_none_or(|t| now.duration_since(t) > RETRY_NOTICE_QUIET);
        *last = Some(now);
        news
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    fn authed(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// `rb` with the key proof header, when this client holds the key.
    fn proven(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.key_proof {
            Some(p) => rb.header(evi_shared::api::KEY_PROOF_HEADER, p.as_str()),
            None => rb,
        }
    }

    /// [`Self::post`] with the key proof.
    fn post_proven<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        self.call(
            || self.proven(self.http.post(&url).json(body)),
            |resp| self.json(resp),
        )
    }

    fn transport(&self, source: reqwest::Error) -> ClientError {
        ClientError::Transport {
            url: self.base.clone(),
            cause: Cause::of(&source, self.base.starts_with("https://")),
            source,
        }
    }

    /// Sends the request `make` builds, retrying transient failures (see
    /// [`Backoff`]); the response is the caller's to read.
    fn send(&self, make: impl Fn() -> RequestBuilder) -> Result<Response, ClientError> {
        self.call(make, Ok)
    }

    /// Sends the request `make` builds and reads its answer with `read`,
    /// retrying both as one attempt: a transient failure of either (a lost
    /// connection, a body cut short, a 5xx, a rate limit) sends the request
    /// again after the [`Backoff`] wait.
    fn call<T>(
        &self,
        make: impl Fn() -> RequestBuilder,
        read: impl Fn(Response) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut backoff = Backoff::new(self);
        loop {
            let err = match self.authed(make()).send() {
                Ok(resp) => {
                    self.known.store(true, Ordering::Relaxed);
                    if resp.status().is_success() {
                        match read(resp) {
                            Ok(v) => return Ok(v),
                            Err(e) => e,
                        }
                    } else {
                        let retry_after = resp
                            .headers()
                            .get(reqwest::header::RETRY_AFTER)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.trim().parse::<u64>().ok());
                        self.api_error(resp, retry_after)
                    }
                }
                Err(source) => self.transport(source),
            };
            if !backoff.wait_to_retry(&err) {
                return Err(self.explain(err));
            }
        }
    }

    /// The error an error answer stands for: its `{code, message}`, or, from
    /// what is not evi-server's JSON, its status; a body cut short is
    /// [`ClientError::Cut`], worth another attempt like any lost answer.
    fn api_error(&self, resp: Response, retry_after: Option<u64>) -> ClientError {
        let status = resp.status();
        let body = match resp.bytes() {
            Ok(b) => b,
            Err(e) => return self.cut(innermost(&e)),
        };
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(b) => ClientError::Api {
                status: status.as_u16(),
                code: b.code,
                message: b.message,
                retry_after,
            },
            Err(_) => ClientError::Api {
                status: status.as_u16(),
                code: ErrorCode::Unknown,
                message: status
                    .canonical_reason()
                    .unwrap_or("unexpected answer")
                    .to_owned(),
                retry_after,
            },
        }
    }

    /// Runs `f` again, after the [`Backoff`] wait, while it fails because an
    /// answer was cut short (`cut` picks that failure out of `E`): for an
    /// answer streamed into a reader of its own (a blob into age and a
    /// hash), whose failures this client cannot see. Each run of `f` makes
    /// its requests with their own retries; only the cut is retried here.
    pub fn again_if_cut<T, E>(
        &self,
        cut: impl Fn(&E) -> Option<&ClientError>,
        mut f: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut backoff = Backoff::new(self);
        loop {
            match f() {
                Err(e) if cut(&e).is_some_and(|c| backoff.wait_to_retry(c)) => {}
                r => return r,
            }
        }
    }

    /// The error of an answer whose body failed to arrive whole.
    fn cut(&self, cause: impl std::fmt::Display) -> ClientError {
        ClientError::Cut {
            url: self.base.clone(),
            cause: cause.to_string(),
        }
    }

    /// An error answer that may not be evi-server's (no route, or a body
    /// that is not its JSON) becomes [`ClientError::NotEviServer`] when
    /// `/healthz` says so.
    fn explain(&self, err: ClientError) -> ClientError {
        let strange = match &err {
            ClientError::Api {
                status,
                code,
                message,
                ..
            } => {
                ((400..500).contains(status) || *status == 501)
                    && (*code == ErrorCode::Unknown
                        || (*status == 404 && message == "no such route"))
            }
            _ => false,
        };
        if strange && let Some(not) = self.not_evi_server() {
            return not;
        }
        err
    }

    /// `Some` when `<base>/healthz` answers, and not as evi-server does.
    fn not_evi_server(&self) -> Option<ClientError> {
        if self.healthz_ok(&self.base)? {
            return None;
        }
        let root = reqwest::Url::parse(&self.base)
            .ok()
            .filter(|u| u.path() != "/")
            .map(|u| u.origin().ascii_serialization())
            .filter(|origin| self.healthz_ok(origin) == Some(true));
        Some(ClientError::NotEviServer {
            healthz: format!("{}/healthz", self.base),
            root,
        })
    }

    /// Whether `<base>/healthz` answers `ok`; `None` when it cannot be asked.
    fn healthz_ok(&self, base: &str) -> Option<bool> {
        let resp = self
            .http
            .get(format!("{base}/healthz"))
            .timeout(PROBE_TIMEOUT)
            .send()
            .ok()?;
        let ok = resp.status() == StatusCode::OK;
        // An answer cut short says nothing either way.
        let text = resp.text().ok()?;
        Some(ok && text.trim() == "ok")
    }

    /// Reads a JSON answer: a body cut short is [`ClientError::Cut`] (worth
    /// another attempt), one that does not parse is not evi-server's or not
    /// what this version reads.
    fn json<T: DeserializeOwned>(&self, resp: Response) -> Result<T, ClientError> {
        let body = resp.bytes().map_err(|e| self.cut(innermost(&e)))?;
        serde_json::from_slice(&body).map_err(|source| {
            self.not_evi_server()
                .unwrap_or_else(|| ClientError::BadAnswer {
                    url: self.base.clone(),
                    source,
                })
        })
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = self.url(path);
        self.call(|| self.http.get(&url), |resp| self.json(resp))
    }

    fn post<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        self.call(|| self.http.post(&url).json(body), |resp| self.json(resp))
    }

    pub fn capabilities(&self) -> Result<Capabilities, ClientError> {
        self.get("/capabilities")
    }

    pub fn register(&self, req: &RegisterRequest) -> Result<AuthResponse, ClientError> {
        self.post("/register", req)
    }

    pub fn login(&self, req: &LoginRequest) -> Result<AuthResponse, ClientError> {
        self.post("/login", req)
    }

    /// Every device of the account, page after page (a server older than
    /// paging sends them all at once, with no `next`).
    pub fn devices(&self) -> Result<DevicesResponse, ClientError> {
        let mut all = DevicesResponse {
            devices: Vec::new(),
            next: None,
        };
        let mut after: Option<String> = None;
        loop {
            let mut url =
                reqwest::Url::parse(&self.url("/devices")).map_err(|e| ClientError::BadUrl {
                    url: self.base.clone(),
                    reason: e.to_string(),
                })?;
            if let Some(a) = &after {
                url.query_pairs_mut().append_pair("after", a);
            }
            let page: DevicesResponse =
                self.call(|| self.http.get(url.as_str()), |resp| self.json(resp))?;
            all.devices.extend(page.devices);
            match page.next {
                // Each page starts past the one before: a server that says
                // otherwise would have this loop for ever.
                Some(next) if after.as_ref().is_none_or(|a| next > *a) => after = Some(next),
                _ => return Ok(all),
            }
        }
    }

    pub fn revoke(&self, device_id: &str) -> Result<(), ClientError> {
        let url = self.url(&format!("/devices/{device_id}"));
        self.send(|| self.http.delete(&url)).map(drop)
    }

    pub fn key_check(&self) -> Result<Option<Vec<u8>>, ClientError> {
        Ok(self.key_check_state()?.key_check.map(|b| b.0))
    }

    /// The account's key check value and whether it holds a key proof.
    pub fn key_check_state(&self) -> Result<KeyCheckResponse, ClientError> {
        self.get("/key-check")
    }

    /// Stores the key check value and the key proof's hash of `keys` where
    /// the account holds none; with the account's `password`, replaces a
    /// proof another key set.
    pub fn set_key_check(
        &self,
        keys: &crate::sync::seal::keys::SyncKeys,
        password: Option<&str>,
    ) -> Result<(), ClientError> {
        let url = self.url("/key-check");
        let body = KeyCheckRequest {
            key_check: keys.key_check_value().to_vec().into(),
            key_proof_hash: Some(keys.key_proof_hash().to_vec().into()),
            password: password.map(str::to_owned),
        };
        self.send(|| self.http.put(&url).json(&body)).map(drop)
    }

    /// Stores a batch, in the wire form it was cut for (framed when the
    /// server takes it, from its capabilities, else JSON). Asks the server
    /// to store what fits the quota and name the rest (`over_quota`); an
    /// older server ignores that and refuses the whole batch with 507.
    pub fn push(&self, batch: OutBatch) -> Result<PushResponse, ClientError> {
        const PATH: &str = "/records?per_item=true";
        let prove = batch.changes_history();
        let body = match batch.into_framed() {
            Ok(body) => body,
            Err(segments) if prove => {
                return self.post_proven(PATH, &records::json_batch(segments));
            }
            Err(segments) => return self.post(PATH, &records::json_batch(segments)),
        };
        let url = self.url(PATH);
        // Each retry sends the same bytes without a copy.
        let body = bytes::Bytes::from(body);
        self.call(
            || {
                let rb = self
                    .http
                    .post(&url)
                    .header(reqwest::header::CONTENT_TYPE, frames::CONTENT_TYPE)
                    .body(body.clone());
                if prove { self.proven(rb) } else { rb }
            },
            |resp| self.json(resp),
        )
    }

    /// One page of records after `after`. With `framed`, asks for the framed
    /// body and reads it as it arrives; a server that answers JSON anyway is
    /// read as JSON. A page cut short is fetched again (as a lost connection
    /// is), never taken as a shorter page.
    pub fn pull(&self, after: u64, framed: bool) -> Result<Page, ClientError> {
        self.pull_page(&self.url(&format!("/records?after={after}")), framed)
    }

    /// [`Self::pull`] of one keyed stream's records only (a server whose
    /// capabilities say `stream_pull`).
    pub fn pull_stream(
        &self,
        stream: &KeyedId,
        after: u64,
        framed: bool,
    ) -> Result<Page, ClientError> {
        let url = self.url(&format!("/records?stream={stream}&after={after}"));
        self.pull_page(&url, framed)
    }

    fn pull_page(&self, url: &str, framed: bool) -> Result<Page, ClientError> {
        if !framed {
            return self.call(
                || self.http.get(url),
                |resp| self.json::<PullResponse>(resp).map(Page::from),
            );
        }
        self.call(
            || {
                self.http
                    .get(url)
                    .header(reqwest::header::ACCEPT, frames::CONTENT_TYPE)
            },
            |resp| {
                let is_framed = resp
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with(frames::CONTENT_TYPE));
                if !is_framed {
                    return self.json::<PullResponse>(resp).map(Page::from);
                }
                records::read_framed_page(resp, MAX_RECORD_BYTES).map_err(|source| {
                    ClientError::BadFrames {
                        url: self.base.clone(),
                        source,
                    }
                })
            },
        )
    }

    pub fn status(&self) -> Result<StatusResponse, ClientError> {
        self.get("/status")
    }

    /// The same client trying each call once: a long-running caller
    /// (`evi sync watch`) backs off by itself and says so once.
    pub fn without_retries(&self) -> Self {
        Self {
            attempts: 1,
            ..self.clone()
        }
    }

    /// Parks on `GET /records/wait` until another device's record after
    /// `after` commits or `secs` pass (the server may cap them); the
    /// request's own timeout allows for the wait.
    pub fn wait(&self, after: u64, secs: u32) -> Result<WaitResponse, ClientError> {
        let url = self.url(&format!("/records/wait?after={after}&timeout={secs}"));
        let limit = Duration::from_secs(u64::from(secs) + 20);
        let resp = self.send(|| self.http.get(&url).timeout(limit))?;
        self.json(resp)
    }

    /// `status` with this device's pull cursor: newer servers also count
    /// what its pull would apply (`pending_for_device`).
    pub fn status_after(&self, after: u64) -> Result<StatusResponse, ClientError> {
        self.get(&format!("/status?after={after}"))
    }

    /// The subset of `ids` the server's records already hold, asked in
    /// calls of at most [`MAX_NAMES_PER_CALL`] ids.
    pub fn known_entries(&self, ids: &[KeyedId]) -> Result<HashSet<KeyedId>, ClientError> {
        let mut known = HashSet::new();
        for chunk in ids.chunks(MAX_NAMES_PER_CALL) {
            let body = EntryIds {
                entry_ids: chunk.to_vec(),
            };
            let r: KnownEntries = self.post("/records/known", &body)?;
            known.extend(r.known);
        }
        Ok(known)
    }

    /// Tells the server the records of `seqs` are damaged (see
    /// `POST /records/damaged`): how many it marked.
    pub fn mark_damaged(&self, seqs: &[u64]) -> Result<u64, ClientError> {
        let mut marked = 0;
        for chunk in seqs.chunks(MAX_NAMES_PER_CALL) {
            let body = DamagedSeqs {
                seqs: chunk.to_vec(),
            };
            let r: DamagedMarked = self.post_proven("/records/damaged", &body)?;
            marked += r.marked;
        }
        Ok(marked)
    }

    pub fn missing_blobs(&self, names: Vec<KeyedId>) -> Result<Vec<KeyedId>, ClientError> {
        let r: MissingResponse = self.post("/blobs/missing", &BlobNames { names })?;
        Ok(r.missing)
    }

    /// Uploads a blob's ciphertext from a file, streamed. `part_of`: for a
    /// part or the manifest of a blob sent in parts, the whole's keyed name,
    /// so the server deletes the piece with the whole (see
    /// [`evi_shared::blob_refs`]).
    pub fn put_blob(
        &self,
        name: &KeyedId,
        path: &std::path::Path,
        part_of: Option<&KeyedId>,
    ) -> Result<BlobStored, ClientError> {
        let url = match part_of {
            Some(whole) => self.url(&format!("/blobs/{name}?part_of={whole}")),
            None => self.url(&format!("/blobs/{name}")),
        };
        self.call(
            || {
                let body = match std::fs::File::open(path) {
                    Ok(f) => reqwest::blocking::Body::from(f),
                    Err(_) => reqwest::blocking::Body::from(Vec::new()),
                };
                self.http
                    .put(&url)
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .body(body)
            },
            |resp| self.json(resp),
        )
    }

    /// Downloads a blob's ciphertext as a stream; a read that fails (the
    /// connection lost mid-body) is remembered in `cut`.
    pub fn get_blob(&self, name: &KeyedId, cut: &CutWatch) -> Result<Download, ClientError> {
        let url = self.url(&format!("/blobs/{name}"));
        let resp = self.send(|| self.http.get(&url))?;
        Ok(Download {
            resp,
            cut: cut.clone(),
        })
    }

    /// The error to retry when `cut` saw an answer cut short since it was
    /// last asked (asking clears it).
    pub fn cut_error(&self, cut: &CutWatch) -> Option<ClientError> {
        let cause = cut.0.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        Some(self.cut(cause))
    }

    /// The waits of one call, for a caller that retries a step of its own
    /// (a part of a blob cut short, without the parts before it).
    pub fn backoff(&self) -> Backoff<'_> {
        Backoff::new(self)
    }
}

/// Remembers whether a [`Download`] failed under its reader, for readers
/// that turn every read error into one of their own (age, a hash check):
/// a cut answer is then retried, not refused as a bad one.
#[derive(Debug, Clone, Default)]
pub struct CutWatch(Arc<Mutex<Option<String>>>);

/// A streamed answer's body.
pub struct Download {
    resp: Response,
    cut: CutWatch,
}

impl Read for Download {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.resp.read(buf).inspect_err(|e| {
            let mut seen = self.cut.0.lock().unwrap_or_else(|p| p.into_inner());
            seen.get_or_insert_with(|| innermost(e));
        })
    }
}

/// The innermost message of an error's chain: what went wrong, without
/// reqwest's layers around it.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// The waits between the attempts of one call, and what the user is told:
/// 0.2 s, 0.4 s, … capped at 5 s, or what `Retry-After` asks (at most 30 s);
/// each rate-limit wait, once per client any other retry, and when the
/// attempts are spent, how many there were over how long. A server this
/// client never reached that refuses the connection gets one short retry.
pub struct Backoff<'a> {
    client: &'a Client,
    delay: Duration,
    attempt: u32,
    started: Instant,
}

impl<'a> Backoff<'a> {
    fn new(client: &'a Client) -> Self {
        Self {
            client,
            delay: Duration::from_millis(200),
            attempt: 1,
            started: Instant::now(),
        }
    }

    /// After the failure `err`: waits and returns `true` when another
    /// attempt is worth making, else `false` (the caller gives up).
    pub fn wait_to_retry(&mut self, err: &ClientError) -> bool {
        if let ClientError::Api {
            retry_after: Some(ra),
            ..
        } = err
        {
            self.delay = Duration::from_secs(*ra).min(Duration::from_secs(30));
        }
        if !err.is_transient() {
            return false;
        }
        if self.attempt >= self.client.attempts {
            if self.attempt > 1 {
                notice(&format!(
                    "gave up after {} attempts over {}",
                    self.attempt,
                    seconds(self.started.elapsed())
                ));
            }
            return false;
        }
        match err {
            ClientError::Transport {
                cause: Cause::Refused | Cause::UnknownHost(_),
                ..
            } if !self.client.known.load(Ordering::Relaxed) => {
                if self.attempt >= 2 {
                    return false;
                }
                self.delay = FIRST_CONTACT_RETRY;
            }
            ClientError::Api { status: 429, .. } => {
                self.client.retry_is_news();
                notice(&format!(
                    "rate limited by the server, retrying in {}",
                    seconds(self.delay)
                ))
            }
            _ => {
                if self.client.retry_is_news() {
                    notice(&format!("{err}; retrying…"));
                }
            }
        }
        std::thread::sleep(self.delay);
        self.delay = (self.delay * 2).min(Duration::from_secs(5));
        self.attempt += 1;
        self.client.retries.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// Whether a status means the token is no longer valid (a wrong password at
/// login is also a 401, but not this).
pub fn is_unauthorized(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status, code, .. }
        if *status == StatusCode::UNAUTHORIZED.as_u16() && *code != ErrorCode::InvalidCredentials)
}

/// `0.4 s`, `18 s`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_needs_a_scheme_and_a_host() {
        for ok in [
            "http://127.0.0.1:8787",
            "https://sync.example.org/",
            "HTTP://h",
        ] {
            assert!(check_server_url(ok).is_ok(), "{ok}");
        }
        for no_scheme in ["127.0.0.1:8787", "localhost:8787", "ftp://h", "h"] {
            let e = check_server_url(no_scheme).unwrap_err();
            assert!(matches!(e, ClientError::UrlScheme { .. }), "{no_scheme}");
            assert_eq!(
                e.to_string(),
                format!("the server URL needs http:// or https:// (got {no_scheme:?})")
            );
        }
        let e = check_server_url("http://").unwrap_err();
        assert_eq!(
            e.to_string(),
            "the server URL \"http://\" is not valid: empty host"
        );
        assert!(e.is_bad_url());
    }

    /// Serves `answers` (raw HTTP), one per connection, reading each
    /// request's head and body first.
    fn serve_raw(answers: Vec<String>) -> String {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for (conn, answer) in listener.incoming().zip(answers) {
                let mut conn = conn.unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                conn.write_all(answer.as_bytes()).unwrap();
                // Dropped: the connection closes, cut or not.
            }
        });
        base
    }

    #[test]
    fn an_answer_cut_short_is_asked_for_again() {
        let body = r#"{"known":[]}"#;
        let base = serve_raw(vec![
            // The full length announced, half of it sent.
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
                body.len(),
                &body[..5]
            ),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            ),
        ]);
        let client = Client::for_account(&base, Some("t".into())).unwrap();
        let id = KeyedId::from_bytes([1; 32]);
        assert!(client.known_entries(&[id]).unwrap().is_empty());
        assert_eq!(client.retries(), 1);
    }

    #[test]
    fn a_cut_answer_out_of_attempts_says_it_was_cut() {
        let cut =
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n{\"kn";
        let base = serve_raw(vec![cut.to_owned(), cut.to_owned()]);
        let mut client = Client::for_account(&base, Some("t".into())).unwrap();
        client.attempts = 2;
        let e = client
            .known_entries(&[KeyedId::from_bytes([1; 32])])
            .unwrap_err();
        assert!(e.is_cut(), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("the connection to {base} was lost mid-answer (")),
            "{e}"
        );
    }

    #[test]
    fn an_error_answer_cut_short_is_asked_for_again_not_taken_as_a_stranger() {
        let body = r#"{"known":[]}"#;
        let base = serve_raw(vec![
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 60\r\n\r\n{\"code\":\"not_f".to_owned(),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            ),
        ]);
        let client = Client::for_account(&base, Some("t".into())).unwrap();
        assert!(
            client
                .known_entries(&[KeyedId::from_bytes([1; 32])])
                .unwrap()
                .is_empty()
        );
        assert_eq!(client.retries(), 1);
    }

    #[test]
    fn a_full_server_is_not_asked_again_within_seconds() {
        let api = |status| ClientError::Api {
            status,
            code: ErrorCode::Unknown,
            message: String::new(),
            retry_after: None,
        };
        for full in [507, 501] {
            assert!(!api(full).is_transient(), "{full}");
        }
        for busy in [500, 502, 503, 429, 408] {
            assert!(api(busy).is_transient(), "{busy}");
        }
    }

    #[test]
    fn a_server_that_never_answers_times_out_and_says_so() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        // Accepts, reads nothing, answers nothing.
        let _held = std::thread::spawn(move || {
            let conns: Vec<_> = listener.incoming().take(2).collect();
            std::thread::sleep(Duration::from_secs(5));
            drop(conns);
        });
        let mut client = Client::new(&base, None).unwrap();
        client.attempts = 1;
        client.http = http_builder()
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let e = client.capabilities().unwrap_err();
        assert!(
            matches!(
                &e,
                ClientError::Transport {
                    cause: Cause::Timeout,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.to_string(), format!("cannot reach {base}: timed out"));
    }

    #[test]
    fn a_wrong_password_is_not_a_revoked_token() {
        let api = |code| ClientError::Api {
            status: 401,
            code,
            message: String::new(),
            retry_after: None,
        };
        assert!(!is_unauthorized(&api(ErrorCode::InvalidCredentials)));
        assert!(is_unauthorized(&api(ErrorCode::Unauthorized)));
    }

    #[test]
    fn waits_read_as_seconds() {
        assert_eq!(seconds(Duration::from_secs(18)), "18 s");
        assert_eq!(seconds(Duration::from_millis(400)), "0.4 s");
    }
}
