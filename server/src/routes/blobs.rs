//! Blobs: ask which are missing, upload and download streamed, purge.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use evi_shared::KeyedId;
use evi_shared::api::{
    BlobNames, BlobPutQuery, BlobStored, ErrorBody, MissingResponse, PurgeResponse,
};
use evi_shared::limits::MAX_NAMES_PER_CALL;

use super::{ApiJson, BlobName};
use crate::AppState;
use crate::auth::Authed;
use crate::blobs::{BlobError, UploadError, drain};
use crate::error::{ApiError, ApiResult};

fn check_count(names: &BlobNames) -> ApiResult<()> {
    if names.names.len() > MAX_NAMES_PER_CALL {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_NAMES_PER_CALL} names per call"
        )));
    }
    Ok(())
}

/// The named blobs this user has not uploaded (another user's blobs count as
/// missing).
#[utoipa::path(post, path = "/api/v1/blobs/missing", tag = "blobs", security(("bearer" = [])),
    request_body = BlobNames,
    responses((status = 200, body = MissingResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn missing(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<BlobNames>,
) -> ApiResult<Json<MissingResponse>> {
    check_count(&req)?;
    let missing = state.store.missing_blobs(auth.user_id, req.names).await?;
    Ok(Json(MissingResponse { missing }))
}

/// Uploads one blob as a raw streamed body. An already stored blob is left as
/// it is (`created: false`). A part or manifest of a blob sent in parts
/// names its whole in `part_of`, and is deleted with it.
#[utoipa::path(put, path = "/api/v1/blobs/{name}", tag = "blobs", security(("bearer" = [])),
    params(("name" = KeyedId, Path, description = "keyed blob name (64 lowercase hex)"), BlobPutQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = BlobStored), (status = 200, body = BlobStored),
        (status = 400, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`quota_exceeded` (the account's quota) or `storage_full` (the server's disk); nothing was stored"),
        (status = 503, body = ErrorBody, description = "`unavailable`: the object store holding blobs did not answer; nothing was stored: retry after `Retry-After`")))]
pub async fn put(
    State(state): State<AppState>,
    auth: Authed,
    BlobName(name): BlobName,
    query: Result<Query<BlobPutQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // A blob that names itself as its whole is a blob stored whole: it is
    // deleted with its own name's last reference either way.
    let part_of = query.part_of.filter(|whole| whole != &name);
    let max = state.config.limits.max_blob_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(ApiError::too_large(format!(
            "blob is larger than {max} bytes"
        )));
    }
    if let Some(size) = state.store.blob_size(auth.user_id, &name).await? {
        // Read and discard the body so the client gets this answer rather
        // than a connection closed under its upload.
        drain(body, max).await;
        let stored = BlobStored {
            name,
            size,
            created: false,
        };
        return Ok((StatusCode::OK, Json(stored)).into_response());
    }
    // With a quota, stop streaming as soon as the upload cannot fit (its
    // row counts too: see blob_cost).
    let room = match auth.quota {
        Some(q) => Some(
            q.saturating_sub(state.store.usage(auth.user_id).await?.bytes_used)
                .saturating_sub(crate::store::BLOB_ROW_BYTES),
        ),
        None => None,
    };
    if let (Some(room), Some(n)) = (room, declared)
        && n > room
    {
        drain(body, max).await;
        return Err(ApiError::quota());
    }
    let limit = room.map_or(max, |r| r.min(max));
    // Before anything of the upload is in place: a blob of this name
    // collected after this refuses it (see `store::blob_refs`).
    let since_ms = chrono::Utc::now().timestamp_millis();
    let placed = match state.blobs.receive(auth.user_id, &name, body, limit).await {
        Ok(p) => p,
        Err(UploadError::TooLarge(_)) if limit < max => return Err(ApiError::quota()),
        Err(UploadError::TooLarge(_)) => {
            return Err(ApiError::too_large(format!(
                "blob is larger than {max} bytes"
            )));
        }
        Err(UploadError::Body(e)) => return Err(ApiError::bad_request(format!("upload cut: {e}"))),
        Err(UploadError::Stalled) => return Err(ApiError::request_timeout()),
        Err(UploadError::Io(e)) if crate::store::is_disk_full(&e) => {
            return Err(ApiError::storage_full());
        }
        Err(e @ UploadError::Io(_)) => return Err(ApiError::internal(e)),
        Err(UploadError::Unavailable(cause)) => return Err(ApiError::storage_unavailable(cause)),
    };
    // Recorded with the size of the file in place, whichever upload put it
    // there (the other one may not have recorded it yet, or may have died
    // before it could): what the quota counts is what is on disk.
    match state
        .store
        .add_blob(
            auth.user_id,
            &name,
            placed.size,
            auth.quota,
            since_ms,
            part_of.as_ref(),
        )
        .await
    {
        Ok(recorded) => {
            // The row decides, not who wrote the object: the other upload
            // may have seen this one's object and recorded it first, and
            // then this one's insert finds the row and neither would say so.
            let created = recorded;
            if created {
                state.metrics.blob_bytes_stored.inc_by(placed.size);
            }
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let stored = BlobStored {
                name,
                size: placed.size,
                created,
            };
            Ok((status, Json(stored)).into_response())
        }
        Err(e) => {
            // Not recorded: take our file away again unless a concurrent
            // upload of the same name recorded it meanwhile. Another
            // upload's file is its own to take away.
            if placed.ours
                && state.store.blob_size(auth.user_id, &name).await?.is_none()
                && let Err(e) = state.blobs.remove(auth.user_id, &name).await
            {
                tracing::warn!(error = %e, "could not delete an unrecorded blob");
            }
            Err(e.into())
        }
    }
}

/// Downloads one blob, streamed.
#[utoipa::path(get, path = "/api/v1/blobs/{name}", tag = "blobs", security(("bearer" = [])),
    params(("name" = KeyedId, Path, description = "keyed blob name (64 lowercase hex)")),
    responses((status = 200, content_type = "application/octet-stream", body = Vec<u8>),
        (status = 404, body = ErrorBody), (status = 400, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "`unavailable`: the object store holding blobs did not answer: retry after `Retry-After`")))]
pub async fn get(
    State(state): State<AppState>,
    auth: Authed,
    BlobName(name): BlobName,
) -> ApiResult<Response> {
    let Some(size) = state.store.blob_size(auth.user_id, &name).await? else {
        return Err(ApiError::not_found("blob"));
    };
    let stream = match state.blobs.open(auth.user_id, &name).await {
        Ok(Some((_, stream))) => stream,
        Ok(None) => return Err(ApiError::not_found("blob")),
        Err(BlobError::Unavailable(cause)) => return Err(ApiError::storage_unavailable(cause)),
        Err(e) => return Err(ApiError::internal(e)),
    };
    let body = Body::from_stream(stream);
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        body,
    )
        .into_response())
}

/// Deletes the named blobs of this user: the only call that deletes.
#[utoipa::path(post, path = "/api/v1/blobs/purge", tag = "blobs", security(("bearer" = [])),
    request_body = BlobNames,
    responses((status = 200, body = PurgeResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn purge(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<BlobNames>,
) -> ApiResult<Json<PurgeResponse>> {
    check_count(&req)?;
    let gone = state.store.purge_blobs(auth.user_id, req.names).await?;
    for n in &gone {
        if let Err(e) = state.blobs.remove(auth.user_id, n).await {
            tracing::warn!(error = %e, "could not delete purged blob file");
        }
    }
    tracing::info!(user = %auth.user_name, purged = gone.len(), "blobs purged");
    Ok(Json(PurgeResponse {
        purged: gone.len() as u64,
    }))
}

/// Anything under `/api/v1/blobs/` that is not one path segment (`../x`,
/// `a/b`) names no blob: say so as an invalid id rather than 404.
pub async fn bad_blob_path() -> ApiError {
    ApiError::invalid_id("a blob name is one path segment of 64 lowercase hex")
}

/// Unknown routes answer the JSON error shape too.
pub async fn fallback(uri: axum::http::Uri) -> ApiError {
    if uri.path().starts_with("/api/v1/blobs/") {
        return bad_blob_path().await;
    }
    ApiError::not_found("route")
}
