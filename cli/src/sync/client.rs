//! The HTTP client of `evi-server`: one method per endpoint, the wire types
//! from `evi_shared::api`, retries with backoff for what is worth retrying
//! (connection failures, 5xx, 429), and typed errors for what is not.
//!
//! What the user learns: a server URL without `http://` or `https://` is
//! refused before any request; a failed connection names its cause (refused,
//! TLS handshake, timeout, unknown host); an answer that is not evi-server's
//! (a 404 of no route, a body that is not its JSON) is checked against
//! `<base>/healthz` and said to be so. Waits are told through
//! [`notice`](super::notice): each rate-limit wait with its length, and once
//! per call that a lost connection is being retried. A server this client
//! never reached that refuses the connection (or whose name does not resolve)
//! gets one short retry (it may be starting), not seconds of backoff.

use std::collections::HashSet;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use evi_shared::KeyedId;
use evi_shared::api::{
    AuthResponse, BlobNames, BlobStored, Capabilities, DevicesResponse, EntryIds, ErrorBody,
    ErrorCode, KeyCheckRequest, KeyCheckResponse, KnownEntries, LoginRequest, MissingResponse,
    PullResponse, PushResponse, RegisterRequest, StatusResponse, WaitResponse,
};
use evi_shared::limits::MAX_NAMES_PER_CALL;
use reqwest::StatusCode;
use reqwest::blocking::{Client as Http, RequestBuilder, Response};
use serde::de::DeserializeOwned;

use super::notice::notice;
use super::records::{self, OutBatch, Page};
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
        source: reqwest::Error,
    },
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
            // 501: what answered does not implement the method at all; 408:
            // the body stopped arriving (the connection, most likely).
            Self::Api { status, .. } => {
                (*status >= 500 && *status != 501) || *status == 429 || *status == 408
            }
            Self::Transport { cause, .. } => !matches!(cause, Cause::Tls(_)),
            Self::BadFrames { source, .. } => matches!(
                source,
                evi_shared::frames::FrameError::Truncated | evi_shared::frames::FrameError::Io(_)
            ),
            _ => false,
        }
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
}

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

impl Client {
    /// A client of `server`, checked to be an `http://` or `https://` URL.
    pub fn new(server: &str, token: Option<String>) -> Result<Self, ClientError> {
        check_server_url(server)?;
        let base = server.trim_end_matches('/').to_owned();
        let http = Http::builder()
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
        })
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
        let http = Http::builder()
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

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{path}", self.base)
    }

    fn authed(&self, rb: RequestBuilder) -> RequestBuilder {
        match &self.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    fn transport(&self, source: reqwest::Error) -> ClientError {
        ClientError::Transport {
            url: self.base.clone(),
            cause: Cause::of(&source, self.base.starts_with("https://")),
            source,
        }
    }

    /// Sends the request `make` builds, retrying transient failures with
    /// exponential backoff (0.2 s, 0.4 s, … capped at 5 s, or `Retry-After`),
    /// and telling each rate-limit wait and, once, any other retry.
    fn send(&self, make: impl Fn() -> RequestBuilder) -> Result<Response, ClientError> {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        let mut told = false;
        loop {
            let result = self.authed(make()).send();
            let err = match result {
                Ok(resp) => {
                    self.known.store(true, Ordering::Relaxed);
                    if resp.status().is_success() {
                        return Ok(resp);
                    }
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok());
                    if let Some(ra) = retry_after {
                        delay = Duration::from_secs(ra).min(Duration::from_secs(30));
                    }
                    api_error(resp, retry_after)
                }
                Err(source) => self.transport(source),
            };
            if !err.is_transient() || attempt >= self.attempts {
                return Err(self.explain(err));
            }
            match &err {
                ClientError::Transport {
                    cause: Cause::Refused | Cause::UnknownHost(_),
                    ..
                } if !self.known.load(Ordering::Relaxed) => {
                    if attempt >= 2 {
                        return Err(err);
                    }
                    delay = FIRST_CONTACT_RETRY;
                }
                ClientError::Api { status: 429, .. } => notice(&format!(
                    "rate limited by the server, retrying in {}",
                    seconds(delay)
                )),
                _ if !told => {
                    told = true;
                    notice(&format!("{err}; retrying…"));
                }
                _ => {}
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(5));
            attempt += 1;
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
        Some(ok && resp.text().is_ok_and(|t| t.trim() == "ok"))
    }

    fn json<T: DeserializeOwned>(&self, resp: Response) -> Result<T, ClientError> {
        resp.json().map_err(|source| {
            self.not_evi_server()
                .unwrap_or_else(|| ClientError::BadAnswer {
                    url: self.base.clone(),
                    source,
                })
        })
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let url = self.url(path);
        let resp = self.send(|| self.http.get(&url))?;
        self.json(resp)
    }

    fn post<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let url = self.url(path);
        let resp = self.send(|| self.http.post(&url).json(body))?;
        self.json(resp)
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

    pub fn devices(&self) -> Result<DevicesResponse, ClientError> {
        self.get("/devices")
    }

    pub fn revoke(&self, device_id: &str) -> Result<(), ClientError> {
        let url = self.url(&format!("/devices/{device_id}"));
        self.send(|| self.http.delete(&url)).map(drop)
    }

    pub fn key_check(&self) -> Result<Option<Vec<u8>>, ClientError> {
        let r: KeyCheckResponse = self.get("/key-check")?;
        Ok(r.key_check.map(|b| b.0))
    }

    pub fn set_key_check(&self, kcv: &[u8]) -> Result<(), ClientError> {
        let url = self.url("/key-check");
        let body = KeyCheckRequest {
            key_check: kcv.to_vec().into(),
        };
        self.send(|| self.http.put(&url).json(&body)).map(drop)
    }

    /// Stores a batch, in the wire form it was cut for (framed when the
    /// server takes it, from its capabilities, else JSON).
    pub fn push(&self, batch: OutBatch) -> Result<PushResponse, ClientError> {
        let body = match batch.into_framed() {
            Ok(body) => body,
            Err(segments) => return self.post("/records", &records::json_batch(segments)),
        };
        let url = self.url("/records");
        // Each retry sends the same bytes without a copy.
        let body = bytes::Bytes::from(body);
        let resp = self.send(|| {
            self.http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, frames::CONTENT_TYPE)
                .body(body.clone())
        })?;
        self.json(resp)
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
            let resp = self.send(|| self.http.get(url))?;
            return self.json::<PullResponse>(resp).map(Page::from);
        }
        let mut attempt = 1;
        loop {
            let resp = self.send(|| {
                self.http
                    .get(url)
                    .header(reqwest::header::ACCEPT, frames::CONTENT_TYPE)
            })?;
            let is_framed = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with(frames::CONTENT_TYPE));
            if !is_framed {
                return self.json::<PullResponse>(resp).map(Page::from);
            }
            match records::read_framed_page(resp, MAX_RECORD_BYTES) {
                Ok(page) => return Ok(page),
                Err(source) => {
                    let err = ClientError::BadFrames {
                        url: self.base.clone(),
                        source,
                    };
                    if !err.is_transient() || attempt >= self.attempts {
                        return Err(err);
                    }
                    notice(&format!("{err}; retrying…"));
                    attempt += 1;
                }
            }
        }
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

    pub fn missing_blobs(&self, names: Vec<KeyedId>) -> Result<Vec<KeyedId>, ClientError> {
        let r: MissingResponse = self.post("/blobs/missing", &BlobNames { names })?;
        Ok(r.missing)
    }

    /// Uploads a blob's ciphertext from a file, streamed.
    pub fn put_blob(
        &self,
        name: &KeyedId,
        path: &std::path::Path,
    ) -> Result<BlobStored, ClientError> {
        let url = self.url(&format!("/blobs/{name}"));
        let resp = self.send(|| {
            let body = match std::fs::File::open(path) {
                Ok(f) => reqwest::blocking::Body::from(f),
                Err(_) => reqwest::blocking::Body::from(Vec::new()),
            };
            self.http
                .put(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(body)
        })?;
        self.json(resp)
    }

    /// Downloads a blob's ciphertext as a stream.
    pub fn get_blob(&self, name: &KeyedId) -> Result<impl Read + use<>, ClientError> {
        let url = self.url(&format!("/blobs/{name}"));
        self.send(|| self.http.get(&url))
    }
}

fn api_error(resp: Response, retry_after: Option<u64>) -> ClientError {
    let status = resp.status();
    let body: Option<ErrorBody> = resp.json().ok();
    match body {
        Some(b) => ClientError::Api {
            status: status.as_u16(),
            code: b.code,
            message: b.message,
            retry_after,
        },
        None => ClientError::Api {
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
        client.http = Http::builder()
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
