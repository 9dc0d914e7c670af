//! Listing and revoking the caller's devices.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use evi_shared::api::{Device, DevicesQuery, DevicesResponse, ErrorBody};

use crate::AppState;
use crate::auth::Authed;
use crate::error::ApiResult;

fn time(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

/// A page of the account's devices that hold a valid token, by id: an
/// account may hold thousands, and one answer stays bounded.
#[utoipa::path(get, path = "/api/v1/devices", tag = "devices", security(("bearer" = [])),
    params(DevicesQuery),
    responses((status = 200, body = DevicesResponse), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    auth: Authed,
    query: Result<Query<DevicesQuery>, QueryRejection>,
) -> ApiResult<Json<DevicesResponse>> {
    let Query(q) = query.map_err(|e| crate::error::ApiError::bad_request(e.body_text()))?;
    if let Some(after) = &q.after {
        super::check_device_ids("after", [after])?;
    }
    let max = state.config.limits.max_page_devices;
    let limit = q.limit.unwrap_or(max).clamp(1, max);
    let mut rows = state
        .store
        .devices(auth.user_id, q.after, limit.saturating_add(1))
        .await?;
    let next = (rows.len() > limit as usize).then(|| {
        rows.truncate(limit as usize);
        rows.last().map(|d| d.id.clone()).unwrap_or_default()
    });
    let devices = rows
        .into_iter()
        .map(|d| Device {
            current: d.id == auth.device_id,
            id: d.id,
            name: d.name,
            created_at: time(d.created_at),
            last_seen_at: time(d.last_seen_at),
            key_generation: d.key_generation.max(0) as u64,
            current_key: d.current_key,
        })
        .collect();
    Ok(Json(DevicesResponse { devices, next }))
}

/// Revokes one of the account's devices (its token gets 401 from now on),
/// and ends a key rotation it began (that token too).
#[utoipa::path(delete, path = "/api/v1/devices/{id}", tag = "devices", security(("bearer" = [])),
    params(("id" = String, Path, description = "device id")),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn revoke(
    State(state): State<AppState>,
    auth: Authed,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if !super::could_be_device_id(&id) {
        return Err(crate::error::ApiError::not_found("device"));
    }
    let ended_rotation =
        state
            .store
            .revoke_device(auth.user_id, &id)
            .await
            .map_err(|e| match e {
                crate::store::StoreError::NotFound => crate::error::ApiError::not_found("device"),
                e => e.into(),
            })?;
    // Its parked long polls end now (401), not at the next push.
    state.waiters.devices_changed(auth.user_id);
    tracing::info!(user = %auth.user_name, device = %id, ended_rotation, "device revoked");
    if ended_rotation {
        // What its rotation staged goes with it.
        super::rotation::spawn_purge(&state);
    }
    Ok(StatusCode::NO_CONTENT)
}
