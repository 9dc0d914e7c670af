//! The HTTP client of `evi-server`: one method per endpoint, the wire types
//! from `evi_shared::api`, retries with backoff for what is worth retrying
//! (connection failures, 5xx, 429), and typed errors for what is not.

use std::io::Read;
use std::time::Duration;

use evi_shared::KeyedId;
use evi_shared::api::{
    AuthResponse, BlobNames, BlobStored, Capabilities, DevicesResponse, ErrorBody, ErrorCode,
    KeyCheckRequest, KeyCheckResponse, LoginRequest, MissingResponse, PullResponse, PushRequest,
    PushResponse, RegisterRequest, StatusResponse,
};
use reqwest::StatusCode;
use reqwest::blocking::{Client as Http, RequestBuilder, Response};
use serde::de::DeserializeOwned;

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error body.
    #[error("server refused ({status}): {message}")]
    Api {
        status: u16,
        code: ErrorCode,
        message: String,
    },
    /// The server could not be reached, or the answer did not parse.
    #[error("cannot reach {url}: {source}")]
    Transport {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ClientError {
    /// Whether the same call may succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Api { status, .. } => *status >= 500 || *status == 429,
            Self::Transport { source, .. } => !source.is_decode() && !source.is_builder(),
            Self::Io(_) => false,
        }
    }

    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Api { code, .. } => Some(*code),
            _ => None,
        }
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
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(server: &str, token: Option<String>) -> Result<Self, ClientError> {
        let base = server.trim_end_matches('/').to_owned();
        let http = Http::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .user_agent(concat!("evi/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|source| ClientError::Transport {
                url: base.clone(),
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

    /// Sends the request `make` builds, retrying transient failures with
    /// exponential backoff (0.2 s, 0.4 s, … capped at 5 s, or `Retry-After`).
    fn send(&self, make: impl Fn() -> RequestBuilder) -> Result<Response, ClientError> {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            let result = self.authed(make()).send();
            let err = match result {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => {
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let e = api_error(resp);
                    if let Some(ra) = retry_after {
                        delay = ra.min(Duration::from_secs(30));
                    }
                    e
                }
                Err(source) => ClientError::Transport {
                    url: self.base.clone(),
                    source,
                },
            };
            if !err.is_transient() || attempt >= self.attempts {
                return Err(err);
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(5));
            attempt += 1;
        }
    }

    fn json<T: DeserializeOwned>(&self, resp: Response) -> Result<T, ClientError> {
        resp.json().map_err(|source| ClientError::Transport {
            url: self.base.clone(),
            source,
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

    pub fn push(&self, req: &PushRequest) -> Result<PushResponse, ClientError> {
        self.post("/records", req)
    }

    pub fn pull(&self, after: u64) -> Result<PullResponse, ClientError> {
        self.get(&format!("/records?after={after}"))
    }

    pub fn status(&self) -> Result<StatusResponse, ClientError> {
        self.get("/status")
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

fn api_error(resp: Response) -> ClientError {
    let status = resp.status();
    let body: Option<ErrorBody> = resp.json().ok();
    match body {
        Some(b) => ClientError::Api {
            status: status.as_u16(),
            code: b.code,
            message: b.message,
        },
        None => ClientError::Api {
            status: status.as_u16(),
            code: ErrorCode::Unknown,
            message: status
                .canonical_reason()
                .unwrap_or("unexpected answer")
                .to_owned(),
        },
    }
}

/// Whether a status means the token is no longer valid.
pub fn is_unauthorized(e: &ClientError) -> bool {
    matches!(e, ClientError::Api { status, .. } if *status == StatusCode::UNAUTHORIZED.as_u16())
}
