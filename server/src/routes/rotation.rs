//! `POST /rotation` and `POST /rotation/commit`: a key rotation's staging
//! account and the step that swaps it in (see [`crate::store::rotation`]).

use axum::Json;
use axum::extract::State;
use evi_shared::api::{
    ErrorBody, RotationBeginRequest, RotationBeginResponse, RotationCommitRequest,
    RotationCommitResponse,
};

use super::ApiJson;
use crate::AppState;
use crate::auth::Authed;
use crate::error::{ApiError, ApiResult};
use crate::keyproof::KeyProof;
use crate::store::StoreError;
use crate::store::rotation::NewKey;

/// Opens (or opens again, to resume) the staging account of a rotation of
/// the caller's account, with a fresh token of its one device; abandons
/// another device's unfinished one (see [`crate::store::rotation`]).
#[utoipa::path(post, path = "/api/v1/rotation", tag = "rotation", security(("bearer" = [])),
    request_body = RotationBeginRequest, params(crate::keyproof::Header),
    responses((status = 200, body = RotationBeginResponse), (status = 401, body = ErrorBody),
        (status = 400, body = ErrorBody, description = "a `key_proof_hash` that is not 32 bytes"),
        (status = 403, body = ErrorBody, description = "`key_proof_required`: the account's key proof header is missing or wrong; nothing was begun"),
        (status = 404, body = ErrorBody, description = "the caller is a staging account's device"),
        (status = 409, body = ErrorBody, description = "`key_rotated`: the caller's key is not the account's")))]
pub async fn begin(
    State(state): State<AppState>,
    auth: Authed,
    proof: KeyProof,
    ApiJson(req): ApiJson<RotationBeginRequest>,
) -> ApiResult<Json<RotationBeginResponse>> {
    let key = NewKey {
        check: req.key_check.map(|k| k.0),
        proof_hash: req.key_proof_hash.map(|k| k.0),
    };
    if let Some(h) = &key.proof_hash {
        crate::keyproof::check_hash("key_proof_hash", h)?;
    }
    // A staging account abandons another device's and ends in the key's
    // place: only the current key's holder begins one.
    proof
        .require(&state, auth.user_id, "beginning a key rotation")
        .await?;
    let (device, token) = super::accounts::new_device("rotation".to_owned())?;
    let begun = state
        .store
        .rotation_begin(auth.user_id, device, &auth.device_id, key)
        .await
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::not_found("account to rotate"),
            e => e.into(),
        })?;
    if begun.abandoned {
        tracing::info!(user = %auth.user_name, device = %auth.device_id,
            began_by = begun.abandoned_by.as_deref().unwrap_or("?"),
            "an unfinished key rotation of another device abandoned");
        spawn_purge(&state);
    }
    tracing::info!(user = %auth.user_name, device = %auth.device_id,
        generation = begun.generation, fresh = begun.fresh, "key rotation staged");
    Ok(Json(RotationBeginResponse {
        token,
        generation: begun.generation as u64,
        fresh: begun.fresh,
        abandoned: begun.abandoned,
        abandoned_by: begun.abandoned_by,
    }))
}

/// Deletes, in the background, what retired accounts hold (an abandoned
/// staging account, the old account after a commit).
pub fn spawn_purge(state: &AppState) {
    let purging = state.clone();
    tokio::spawn(async move { crate::rotation::purge(&purging).await });
}

/// Swaps the staging account in, revokes the devices named, and leaves
/// every other device to learn `key_rotated`; the old data is purged.
#[utoipa::path(post, path = "/api/v1/rotation/commit", tag = "rotation", security(("bearer" = [])),
    request_body = RotationCommitRequest, params(crate::keyproof::Header),
    responses((status = 200, body = RotationCommitResponse), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`key_proof_required`: the proof of the account's current key is missing or wrong; nothing changed"),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "no rotation was begun"),
        (status = 409, body = ErrorBody, description = "`rotation_behind`: records after `through_seq`; `rotation_not_ready`: the staging account has no key check value yet; `rotation_abandoned`: the staging account is another device's rotation; nothing changed")))]
pub async fn commit(
    State(state): State<AppState>,
    auth: Authed,
    proof: KeyProof,
    ApiJson(req): ApiJson<RotationCommitRequest>,
) -> ApiResult<Json<RotationCommitResponse>> {
    super::check_cursor(req.through_seq)?;
    super::check_device_ids("revoke", &req.revoke)?;
    if req.revoke.contains(&auth.device_id) {
        return Err(ApiError::bad_request(
            "the rotating device cannot revoke itself",
        ));
    }
    proof
        .require(&state, auth.user_id, "committing a key rotation")
        .await?;
    let done = state
        .store
        .rotation_commit(
            auth.user_id,
            &auth.device_id,
            req.through_seq,
            req.revoke,
            chrono::Utc::now().timestamp(),
        )
        .await?;
    // Parked waits of the old account end now and ask again (here; on
    // other replicas, by the commit's notice: `store::postgres::listen`).
    state.waiters.devices_changed(done.old_user);
    tracing::info!(user = %auth.user_name, device = %auth.device_id,
        generation = done.generation, revoked = done.revoked.len(), "key rotation committed");
    spawn_purge(&state);
    Ok(Json(RotationCommitResponse {
        generation: done.generation as u64,
        revoked: done.revoked,
    }))
}
