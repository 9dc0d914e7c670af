//! `GET /records/wait`: a long poll that answers once another device's
//! record newer than the caller's cursor commits, or when it times out (see
//! [`crate::waiters`] for what a wait holds).

use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use evi_shared::api::{ErrorBody, WaitQuery, WaitResponse};

use crate::AppState;
use crate::auth::Authed;
use crate::error::{ApiError, ApiResult};
use crate::inflight::paused;

/// Waits until a record newer than `after` that another device pushed has
/// committed (answering at once if one has), or for `timeout` seconds (at
/// most the server's `max_wait_secs`), then answers how many such records
/// there are. The server's idle and header timeouts do not apply while a
/// wait runs: a wait is a request being handled. A device revoked while it
/// waits gets 401 at once; one whose key a rotation made old, 409
/// `key_rotated`.
#[utoipa::path(get, path = "/api/v1/records/wait", tag = "records", security(("bearer" = [])),
    params(WaitQuery),
    responses((status = 200, body = WaitResponse),
        (status = 400, body = ErrorBody), (status = 401, description = "no valid token, or the device was revoked while it waited", body = ErrorBody),
        (status = 409, description = "`key_rotated`: the account's key was rotated (before or while it waited); the device must be paired again", body = ErrorBody),
        (status = 429, description = "too many waits from this device or account; retry after `Retry-After` seconds", body = ErrorBody),
        (status = 503, description = "the server holds as many waits as it takes, or is shutting down; retry after `Retry-After` seconds", body = ErrorBody)))]
pub async fn wait(
    State(state): State<AppState>,
    auth: Authed,
    query: Result<Query<WaitQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<WaitResponse>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    super::check_cursor(q.after)?;
    paused(state.limiter.wait(&auth.device_id)).await?;
    let cap = state.config.waits.max_secs.max(1);
    let secs = match q.timeout {
        None | Some(0) => cap,
        Some(t) => t.min(cap),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(secs));
    // Subscribed before the first look: a commit in between still wakes it.
    let mut slot = paused(state.waiters.enter(auth.user_id)).await?;
    loop {
        // Woken by a revocation or a key rotation (or by a push after
        // one): the device gets what its next request would.
        if let Some(moved) = still_waiting(&state, &auth).await? {
            return Ok(Json(moved));
        }
        let pending = state
            .store
            .pending_for_device(auth.user_id, &auth.device_id, q.after)
            .await?;
        if pending > 0 {
            return Ok(Json(WaitResponse { pending }));
        }
        tokio::select! {
            changed = slot.commits.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            () = tokio::time::sleep_until(deadline) => break,
            _ = slot.closed.wait_for(|c| *c) => {
                let mut e = ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    evi_shared::api::ErrorCode::Unavailable,
                    "the server is shutting down; retry",
                );
                e.retry_after = Some(1);
                return Err(e);
            }
        }
    }
    Ok(Json(WaitResponse { pending: 0 }))
}

/// What ends a wait besides a record, as the next request would be told:
/// its token is looked up again. Gone (revoked) is 401; a key older than
/// the account's (a rotation committed) is 409 `key_rotated`, so a watcher
/// says "pair again", not "log in again"; the rotating device, now on the
/// new account row, is answered `pending: 0` so that it waits again there.
/// `None` while the device may wait on.
async fn still_waiting(state: &AppState, auth: &Authed) -> ApiResult<Option<WaitResponse>> {
    let owner = state
        .store
        .token_owner(auth.token_hash)
        .await?
        .ok_or_else(ApiError::unauthorized)?;
    if let Some(r) = &owner.rotated {
        return Err(ApiError::key_rotated(r));
    }
    Ok((owner.user_id != auth.user_id).then_some(WaitResponse { pending: 0 }))
}
