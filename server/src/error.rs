//! One error type for every handler: it answers `{code, message}` with a
//! stable [`ErrorCode`] and logs the cause (never a secret) with `tracing`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use evi_shared::api::{ErrorBody, ErrorCode};

use crate::store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

/// `Retry-After` of a 503 for an object store that did not answer.
const STORAGE_RETRY_SECS: u64 = 5;

/// Longest error message, in characters: a message that quotes input (a
/// parse error naming the value it read) is cut there, so an answer never
/// carries back what a client sent in bulk.
pub const MESSAGE_MAX_CHARS: usize = 256;

fn cut(mut message: String, max: usize) -> String {
    if let Some((end, _)) = message.char_indices().nth(max) {
        message.truncate(end);
        message.push('…');
    }
    message
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: cut(message.into(), MESSAGE_MAX_CHARS),
            retry_after: None,
        }
    }
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::BadRequest, msg)
    }
    pub fn invalid_id(msg: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidId, msg)
    }
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "missing, unknown or revoked token",
        )
    }
    /// 409 `key_rotated`: the device's key is older than the account's.
    pub fn key_rotated(r: &crate::store::rotation::Rotated) -> Self {
        let at = chrono::DateTime::from_timestamp(r.at, 0)
            .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_default();
        Self::new(
            StatusCode::CONFLICT,
            ErrorCode::KeyRotated,
            format!(
                "the account's key was rotated on {at} from device {}: this device's key \
                 opens nothing the account holds now",
                r.by
            ),
        )
    }
    fn rotation_refused(r: &crate::store::rotation::CommitRefused) -> Self {
        use crate::store::rotation::CommitRefused;
        match r {
            CommitRefused::Behind { .. } => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::RotationBehind,
                r.to_string(),
            ),
            CommitRefused::NotBegun => {
                Self::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, r.to_string())
            }
            CommitRefused::NoKeyCheck => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::RotationNotReady,
                r.to_string(),
            ),
            CommitRefused::NotYours => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::RotationAbandoned,
                r.to_string(),
            ),
        }
    }
    pub fn account_disabled() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            ErrorCode::AccountDisabled,
            "this account is disabled by the server's operator; its data is kept: ask them to \
             enable it again",
        )
    }
    pub fn invalid_credentials() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidCredentials,
            "wrong user name or password",
        )
    }
    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("no such {what}"),
        )
    }
    pub fn too_large(msg: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            msg,
        )
    }
    pub fn unsupported_media_type(msg: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            msg,
        )
    }
    /// 408: the body stopped arriving (see [`crate::listen`]).
    pub fn request_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            ErrorCode::RequestTimeout,
            "the request body stopped arriving; send the request again",
        )
    }
    /// 421: the request names another host than the server's public URL.
    pub fn misdirected(msg: impl Into<String>) -> Self {
        Self::new(
            StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::MisdirectedRequest,
            msg,
        )
    }
    pub fn quota() -> Self {
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::QuotaExceeded,
            "this would exceed the account's storage quota; nothing was stored",
        )
    }
    /// 507: the disk is full; what the request wrote was taken back.
    pub fn storage_full() -> Self {
        tracing::error!("the data folder's disk is full: a write was refused (507)");
        Self::new(
            StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::StorageFull,
            "the server's disk is full; nothing was stored: send it again once there is room",
        )
    }
    pub fn rate_limited(retry_after: u64) -> Self {
        Self {
            retry_after: Some(retry_after.max(1)),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::RateLimited,
                "too many attempts; retry later",
            )
        }
    }
    /// 503: the object store holding bodies and blobs did not answer;
    /// nothing was stored. The cause goes to the log (it names the store,
    /// never its keys), the client retries after `Retry-After`.
    pub fn storage_unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "the object store did not answer: request refused (503)");
        Self {
            retry_after: Some(STORAGE_RETRY_SECS),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                "the server's storage is not answering; nothing was stored: retry shortly",
            )
        }
    }
    /// A server-side failure: the cause is logged here, the client sees a
    /// generic message.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::Internal,
            "internal server error",
        )
    }
}

/// Whether a body read failed because the body stopped arriving (the
/// body timeout of [`crate::listen`]), anywhere in the error's chain.
pub fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<tower_http::timeout::TimeoutError>()
            || err.is::<crate::deadline::DeadlinePassed>()
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// Longest piece of a request an error message repeats, in characters.
pub const ECHO_MAX_CHARS: usize = 64;

/// `input` as an error message may repeat it: at most [`ECHO_MAX_CHARS`]
/// characters, cut ones marked with `…`, so an answer never carries back
/// what a client sent in bulk.
pub fn echo(input: &str) -> String {
    cut(input.to_owned(), ECHO_MAX_CHARS)
}

/// The stable code of an error status that no handler chose (axum's own
/// answers: 405, a path that does not parse).
fn code_for(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::REQUEST_TIMEOUT => ErrorCode::RequestTimeout,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::RateLimited,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::BadRequest,
    }
}

/// Turns every error answer that is not already `{code, message}` (axum's
/// 405 with an empty body, its text/plain rejections) into that shape,
/// keeping the status and headers such as `Allow`.
pub async fn json_shape(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // These bodies are a line of text; more is cut anyway.
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(b) => String::from_utf8_lossy(&b).trim().to_owned(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        match status {
            StatusCode::METHOD_NOT_ALLOWED => {
                "this path does not take this method (the Allow header names those it takes)"
                    .to_owned()
            }
            s => s.canonical_reason().unwrap_or("refused").to_owned(),
        }
    } else {
        text
    };
    let shaped = ApiError::new(status, code_for(status), message).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    let (new_parts, body) = shaped.into_parts();
    parts.headers.extend(new_parts.headers);
    Response::from_parts(parts, body)
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UserExists => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::UserExists,
                "user name is taken",
            ),
            StoreError::InvalidInvite => Self::new(
                StatusCode::FORBIDDEN,
                ErrorCode::InvalidInvite,
                "a valid invite code is required: this one is unknown, used or expired (the server's operator makes a new one)",
            ),
            StoreError::KeyCheckMismatch => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::KeyCheckMismatch,
                "the account holds a different key check value: this device has another key",
            ),
            StoreError::KeyProofMismatch => Self::new(
                StatusCode::CONFLICT,
                ErrorCode::KeyProofMismatch,
                "the account holds another key proof, set by a device with another key (or by \
                 someone holding a device token only): send the account's password with it to \
                 replace it (`evi sync login` does)",
            ),
            StoreError::QuotaExceeded => Self::quota(),
            StoreError::Full => Self::storage_full(),
            StoreError::NotFound => Self::not_found("item"),
            StoreError::NoFreeSlot => Self {
                retry_after: Some(60),
                ..Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::Unavailable,
                    "every pairing slot of this server is in use; retry in a minute",
                )
            },
            StoreError::Unavailable(cause) => Self::storage_unavailable(cause),
            StoreError::Rotation(r) => Self::rotation_refused(&r),
            StoreError::Backend(_) => Self::internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_client_error() {
            tracing::debug!(code = ?self.code, message = %self.message, "request refused");
        }
        let mut resp = (
            self.status,
            Json(ErrorBody {
                code: self.code,
                message: self.message,
            }),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}
