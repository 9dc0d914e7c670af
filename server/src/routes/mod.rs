//! HTTP handlers, one file per area, and the JSON body extractor they share.

pub mod accounts;
pub mod blobs;
pub mod devices;
pub mod framed;
pub mod meta;
pub mod pairing;
pub mod records;
pub mod rotation;
pub mod wait;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body whose failures answer `{code, message}`: 415 unless it says
/// `application/json` (see [`crate::crosssite`]), 413 past the route's body
/// limit, 400 `invalid_id` for a malformed keyed id, 400 otherwise.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        crate::crosssite::require_json(req.headers())?;
        let bytes = body_bytes(req, state).await?;
        // Every body of this API is an object; serde would also read a
        // struct from an array (`[]` as a request whose fields are all
        // optional), which the OpenAPI document says is refused.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::bad_request(
                "invalid JSON body: expected an object (`{...}`), as the API's document says",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(ApiJson)
            .map_err(|e| json_error("invalid JSON body", &e))
    }
}

/// The whole request body, within the route's body limit (413 past it).
pub async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large("request body is larger than this server accepts")
        } else if crate::error::is_body_timeout(&e) {
            ApiError::request_timeout()
        } else {
            ApiError::bad_request(e.body_text())
        }
    })
}

/// 400 `invalid_id` for a malformed keyed id inside JSON, 400 otherwise.
pub fn json_error(what: &str, e: &serde_json::Error) -> ApiError {
    let msg = e.to_string();
    // IdError's message for keyed ids: see evi_shared::ids.
    if msg.contains("keyed id") {
        ApiError::invalid_id(msg)
    } else {
        ApiError::bad_request(format!("{what}: {msg}"))
    }
}

/// The `{name}` of a blob path, parsed: 400 `invalid_id` for anything but
/// 64 lowercase hex (a segment that is not UTF-8 included).
pub struct BlobName(pub evi_shared::KeyedId);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for BlobName {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        let axum::extract::Path(name) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|_| {
                    ApiError::invalid_id("a blob name is one path segment of 64 lowercase hex")
                })?;
        keyed(&name).map(Self)
    }
}

/// 400 for a cursor no seq can reach: seqs are SQLite integers, at most
/// 2^63 - 1 (larger values would wrap in the query).
pub fn check_cursor(after: u64) -> Result<(), ApiError> {
    if after > i64::MAX as u64 {
        return Err(ApiError::bad_request(format!(
            "after is a seq: at most {}",
            i64::MAX
        )));
    }
    Ok(())
}

/// Whether `id` can name a device at all. The server issues lowercase
/// ULIDs; whatever it held from before, no id it issued holds a control
/// character, and a NUL in one reached Postgres, whose text cannot hold it
/// (answered 500 where SQLite said "no such device").
pub fn could_be_device_id(id: &str) -> bool {
    (1..=DEVICE_ID_MAX_LEN).contains(&id.chars().count()) && !id.chars().any(char::is_control)
}

/// The longest string [`could_be_device_id`] takes, in characters.
pub const DEVICE_ID_MAX_LEN: usize = 128;

/// [`could_be_device_id`] as the document's `pattern` (the length goes in
/// `minLength`/`maxLength`): no control character (Unicode Cc, what
/// `char::is_control` finds).
pub const DEVICE_ID_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";

/// 400 unless every one of `ids` (from field `field`) can name a device.
pub fn check_device_ids<'a>(
    field: &str,
    ids: impl IntoIterator<Item = &'a String>,
) -> Result<(), ApiError> {
    match ids.into_iter().find(|id| !could_be_device_id(id)) {
        Some(bad) => Err(ApiError::bad_request(format!(
            "{field}: {:?} is not a device id (1 to 128 characters, no control characters)",
            bad.chars().take(40).collect::<String>()
        ))),
        None => Ok(()),
    }
}

/// Parses a keyed id from a path segment.
pub fn keyed(s: &str) -> Result<evi_shared::KeyedId, ApiError> {
    s.parse()
        .map_err(|e: evi_shared::IdError| ApiError::invalid_id(e.to_string()))
}
