//! Health, capabilities and the per-user status.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use evi_shared::api::{Capabilities, ErrorBody, StatusQuery, StatusResponse};

use crate::AppState;
use crate::auth::Authed;
use crate::error::{ApiError, ApiResult};

/// Liveness: the process answers HTTP.
#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "`ok`", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// The limits this server enforces and how it admits accounts.
#[utoipa::path(get, path = "/api/v1/capabilities", tag = "meta",
    responses((status = 200, body = Capabilities)))]
pub async fn capabilities(State(state): State<AppState>) -> ApiResult<Json<Capabilities>> {
    let registration = state.registration().await?;
    Ok(Json(state.config.capabilities(registration)))
}

/// What the caller's account holds; with `after` (the caller's pull cursor),
/// also how many of the records after it other devices pushed.
#[utoipa::path(get, path = "/api/v1/status", tag = "meta", security(("bearer" = [])),
    params(StatusQuery),
    responses((status = 200, body = StatusResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody)))]
pub async fn status(
    State(state): State<AppState>,
    auth: Authed,
    query: Result<Query<StatusQuery>, QueryRejection>,
) -> ApiResult<Json<StatusResponse>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if let Some(after) = q.after {
        super::check_cursor(after)?;
    }
    let u = state.store.usage(auth.user_id).await?;
    let pending_for_device = match q.after {
        Some(after) => Some(
            state
                .store
                .pending_for_device(auth.user_id, &auth.device_id, after)
                .await?,
        ),
        None => None,
    };
    Ok(Json(StatusResponse {
        newest_seq: u.newest_seq,
        records: u.records,
        entries: u.entries,
        blobs: u.blobs,
        bytes_used: u.bytes_used,
        quota_bytes: auth.quota,
        pending_for_device,
    }))
}
