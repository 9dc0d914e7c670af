//! Health, capabilities and the per-user status.

use axum::Json;
use axum::extract::State;
use evi_shared::api::{Capabilities, ErrorBody, StatusResponse};

use crate::AppState;
use crate::auth::Authed;
use crate::error::ApiResult;

/// Liveness: the process answers HTTP.
#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "`ok`", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

/// The limits this server enforces and how it admits accounts.
#[utoipa::path(get, path = "/api/v1/capabilities", tag = "meta",
    responses((status = 200, body = Capabilities)))]
pub async fn capabilities(State(state): State<AppState>) -> Json<Capabilities> {
    Json(state.config.capabilities())
}

/// What the caller's account holds.
#[utoipa::path(get, path = "/api/v1/status", tag = "meta", security(("bearer" = [])),
    responses((status = 200, body = StatusResponse), (status = 401, body = ErrorBody)))]
pub async fn status(
    State(state): State<AppState>,
    auth: Authed,
) -> ApiResult<Json<StatusResponse>> {
    let u = state.store.usage(auth.user_id).await?;
    Ok(Json(StatusResponse {
        newest_seq: u.newest_seq,
        records: u.records,
        entries: u.entries,
        blobs: u.blobs,
        bytes_used: u.bytes_used,
        quota_bytes: state.config.quota_bytes,
    }))
}
