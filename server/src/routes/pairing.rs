//! Pairing a device by short code: the server is a blind relay between a
//! device of the account (the creator) and one holding the code (the
//! joiner).
//!
//! The code is `N-word-word`: `N` names the slot here, the words are a
//! secret the two devices feed to a PAKE (SPAKE2) and never send. The slot
//! carries three opaque messages: the creator's offer (its PAKE message),
//! the joiner's hello (its PAKE message, its key confirmation and its
//! sealed device name) and the creator's reply (its confirmation and, under
//! the PAKE key, the identity, the account name and a fresh device token
//! made by [`device`]). The server sees none of the code's secret part and
//! none of the key, and cannot open what it relays.
//!
//! Bounds: a message is at most [`PAIR_MESSAGE_MAX_BYTES`]; a slot lives
//! `--pair-ttl` (ten minutes) and takes one join (one attempt per code: a
//! wrong code is found out by the creator, which burns the slot with
//! `mismatch`); an account has at most [`MAX_LIVE_PER_ACCOUNT`] slots under
//! way and opens at most `--pair-rate` a minute; the calls without a token
//! (reading an offer, joining) are limited per address at the same rate, so
//! slot numbers cannot be swept. A finished slot keeps no message. Slots are
//! rows of the store, so the two devices may reach different replicas.
//!
//! Polls are plain HTTPS long polls (`GET …/wait`, at most
//! [`PAIR_WAIT_MAX_SECS`]), through the same proxies as the rest of the API.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use chrono::{DateTime, Utc};
use evi_shared::api::{
    AuthResponse, ErrorBody, ErrorCode, PairCreateRequest, PairCreateResponse, PairDeviceRequest,
    PairJoinRequest, PairJoinResponse, PairOfferResponse, PairReplyRequest, PairState,
    PairWaitQuery, PairWaitResponse,
};
use evi_shared::limits::{PAIR_MESSAGE_MAX_BYTES, PAIR_WAIT_MAX_SECS};
use subtle::ConstantTimeEq;

use super::ApiJson;
use crate::AppState;
use crate::auth::{Authed, token_hash};
use crate::error::{ApiError, ApiResult};
use crate::ratelimit::ClientIp;
use crate::store::{NewPairSlot, PairSlot};

/// Slots one account may have under way at once.
pub const MAX_LIVE_PER_ACCOUNT: u32 = 4;
/// How often a wait looks at its slot again.
const POLL_EVERY: Duration = Duration::from_millis(200);

fn now() -> i64 {
    Utc::now().timestamp()
}

fn expired() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no pairing under this number: the code expired, was used, or was mistyped; \
         start a new pairing (`evi sync pair`) for a new code",
    )
}

fn check_message(what: &str, b: &[u8]) -> ApiResult<()> {
    if b.is_empty() || b.len() > PAIR_MESSAGE_MAX_BYTES {
        return Err(ApiError::bad_request(format!(
            "{what} must be 1 to {PAIR_MESSAGE_MAX_BYTES} bytes"
        )));
    }
    Ok(())
}

async fn live_slot(state: &AppState, number: u32) -> ApiResult<PairSlot> {
    state
        .store
        .pair_slot(number, now())
        .await?
        .ok_or_else(expired)
}

/// Who is asking about a slot: the device that opened it (its token) or
/// the device that joined it (the secret [`join`] gave it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Creator,
    Joiner,
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

async fn side(state: &AppState, headers: &HeaderMap, slot: &PairSlot) -> ApiResult<Side> {
    let token = bearer(headers).ok_or_else(ApiError::unauthorized)?;
    let hash = token_hash(token);
    if let Some(j) = &slot.join_hash
        && bool::from(j.ct_eq(&hash))
    {
        return Ok(Side::Joiner);
    }
    match state.store.token_owner(hash).await? {
        Some(o) if bool::from(o.token_hash.ct_eq(&hash)) && o.device_id == slot.device_id => {
            Ok(Side::Creator)
        }
        _ => Err(ApiError::unauthorized()),
    }
}

/// The slot, if `auth` is the device that opened it (else 404, as for a
/// slot that does not exist: another account learns nothing).
async fn own_slot(state: &AppState, auth: &Authed, number: u32) -> ApiResult<PairSlot> {
    let slot = live_slot(state, number).await?;
    if slot.user != auth.user_id || slot.device_id != auth.device_id {
        return Err(expired());
    }
    Ok(slot)
}

fn wrong_state(s: PairState) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::PairingTaken,
        format!("this pairing is {s:?}, so that step does not apply").to_lowercase(),
    )
}

/// Opens a pairing slot holding the creator's offer.
#[utoipa::path(post, path = "/api/v1/pair", tag = "pairing", security(("bearer" = [])),
    request_body = PairCreateRequest,
    responses((status = 200, body = PairCreateResponse),
        (status = 429, body = ErrorBody, description = "`pairing_limit`: too many pairings under way, or `rate_limited`"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn create(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<PairCreateRequest>,
) -> ApiResult<Json<PairCreateResponse>> {
    check_message("offer", &req.offer.0)?;
    state.limiter.pair_create(auth.user_id)?;
    let now = now();
    let ttl = i64::try_from(state.config.pair_ttl.as_secs()).unwrap_or(i64::MAX);
    let expires_at = now.saturating_add(ttl);
    let slot = state
        .store
        .pair_create(
            NewPairSlot {
                user: auth.user_id,
                device_id: auth.device_id.clone(),
                offer: req.offer.0,
                now,
                expires_at,
            },
            MAX_LIVE_PER_ACCOUNT,
        )
        .await?;
    // Not the slot number: with the words it is the code.
    tracing::info!(user = %auth.user_name, device = %auth.device_id, "pairing opened");
    Ok(Json(PairCreateResponse {
        slot,
        expires_at: DateTime::from_timestamp(expires_at, 0).unwrap_or_default(),
    }))
}

/// The creator's offer, for the device that holds the code (no token).
#[utoipa::path(get, path = "/api/v1/pair/{slot}", tag = "pairing",
    params(("slot" = u32, Path, description = "the code's number")),
    responses((status = 200, body = PairOfferResponse),
        (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`pairing_taken`: another device joined already"),
        (status = 429, body = ErrorBody)))]
pub async fn offer(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(number): Path<u32>,
) -> ApiResult<Json<PairOfferResponse>> {
    state.limiter.pair_anonymous(ip)?;
    let slot = live_slot(&state, number).await?;
    if slot.state != PairState::Open {
        return Err(crate::store::StoreError::PairTaken.into());
    }
    let offer = slot.offer.ok_or_else(expired)?;
    Ok(Json(PairOfferResponse {
        offer: offer.into(),
        expires_at: DateTime::from_timestamp(slot.expires_at, 0).unwrap_or_default(),
    }))
}

/// The one join of a slot (no token): stores the joiner's hello and
/// answers the secret it reads the reply with.
#[utoipa::path(post, path = "/api/v1/pair/{slot}/join", tag = "pairing",
    params(("slot" = u32, Path, description = "the code's number")),
    request_body = PairJoinRequest,
    responses((status = 200, body = PairJoinResponse),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`pairing_taken`: another device joined already"),
        (status = 429, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn join(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    Path(number): Path<u32>,
    ApiJson(req): ApiJson<PairJoinRequest>,
) -> ApiResult<Json<PairJoinResponse>> {
    state.limiter.pair_anonymous(ip)?;
    check_message("hello", &req.hello.0)?;
    let (secret, hash) = crate::auth::new_token()?;
    state
        .store
        .pair_join(number, hash, req.hello.0, now())
        .await
        .map_err(|e| match e {
            crate::store::StoreError::NotFound => expired(),
            e => e.into(),
        })?;
    tracing::info!(%ip, "pairing joined");
    Ok(Json(PairJoinResponse { secret }))
}

/// Waits until the slot leaves the state named (or for the timeout), then
/// answers its state, with the message the caller waits for: the hello for
/// the creator, the reply for the joiner.
#[utoipa::path(get, path = "/api/v1/pair/{slot}/wait", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, description = "the code's number"), PairWaitQuery),
    responses((status = 200, body = PairWaitResponse),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody, description = "neither the creator's token nor the joiner's secret"),
        (status = 404, body = ErrorBody, description = "the slot expired"),
        (status = 429, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "the server is shutting down; retry")))]
pub async fn wait(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(number): Path<u32>,
    query: Result<Query<PairWaitQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<PairWaitResponse>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let first = live_slot(&state, number).await?;
    let side = side(&state, &headers, &first).await?;
    if side == Side::Creator {
        state.limiter.wait(&first.device_id)?;
    }
    let cap = PAIR_WAIT_MAX_SECS.min(state.config.waits.max_secs.max(1));
    let secs = q.timeout.filter(|t| *t > 0).unwrap_or(cap).min(cap);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(secs));
    let mut slot = first;
    loop {
        if slot.state != q.state || tokio::time::Instant::now() >= deadline {
            let message = match (side, slot.state) {
                (Side::Creator, PairState::Joined) => slot.hello,
                (Side::Joiner, PairState::Replied) => slot.reply,
                _ => None,
            };
            return Ok(Json(PairWaitResponse {
                state: slot.state,
                message: message.map(Into::into),
            }));
        }
        if state.waiters.is_closed() {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Unavailable,
                "the server is shutting down; retry",
            );
            e.retry_after = Some(1);
            return Err(e);
        }
        tokio::time::sleep(POLL_EVERY).await;
        slot = live_slot(&state, number).await?;
    }
}

/// Makes the joiner's device on the creator's account, with a fresh token
/// the creator seals into its reply (the server never learns the joiner's
/// key; the token it made is stored only hashed, as every token).
#[utoipa::path(post, path = "/api/v1/pair/{slot}/device", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, description = "the code's number")),
    request_body = PairDeviceRequest,
    responses((status = 200, body = AuthResponse),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "the slot is not joined"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn device(
    State(state): State<AppState>,
    auth: Authed,
    Path(number): Path<u32>,
    ApiJson(req): ApiJson<PairDeviceRequest>,
) -> ApiResult<Json<AuthResponse>> {
    let slot = own_slot(&state, &auth, number).await?;
    if slot.state != PairState::Joined {
        return Err(wrong_state(slot.state));
    }
    super::accounts::check_device(&req.device)?;
    let (device, token) = super::accounts::new_device(req.device)?;
    let device_id = device.id.clone();
    let device_name = state.store.add_device(auth.user_id, device).await?;
    tracing::info!(user = %auth.user_name, device = %device_id, name = %device_name, by = %auth.device_id, "device paired");
    Ok(Json(AuthResponse {
        token,
        device_id,
        user: auth.user_name,
        device_name,
    }))
}

/// The creator's outcome: `replied` with its sealed reply, or `mismatch`
/// (the joiner's confirmation was wrong: the slot is burnt) or `declined`.
#[utoipa::path(post, path = "/api/v1/pair/{slot}/reply", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, description = "the code's number")),
    request_body = PairReplyRequest,
    responses((status = 204), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "the slot is not joined"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn reply(
    State(state): State<AppState>,
    auth: Authed,
    Path(number): Path<u32>,
    ApiJson(req): ApiJson<PairReplyRequest>,
) -> ApiResult<StatusCode> {
    let slot = own_slot(&state, &auth, number).await?;
    let message = match (req.outcome, req.message) {
        (PairState::Replied, Some(m)) => {
            check_message("reply", &m.0)?;
            Some(m.0)
        }
        (PairState::Replied, None) => {
            return Err(ApiError::bad_request("a reply needs its message"));
        }
        (PairState::Mismatch | PairState::Declined, _) => None,
        (other, _) => {
            return Err(ApiError::bad_request(format!(
                "outcome must be replied, mismatch or declined, not {other:?}"
            )));
        }
    };
    let from = match (slot.state, req.outcome) {
        (PairState::Joined, _) => PairState::Joined,
        // The creator gives up before anyone joined.
        (PairState::Open, PairState::Declined) => PairState::Open,
        (s, _) => return Err(wrong_state(s)),
    };
    if !state
        .store
        .pair_advance(number, from, req.outcome, message, now())
        .await?
    {
        return Err(wrong_state(live_slot(&state, number).await?.state));
    }
    if req.outcome != PairState::Replied {
        tracing::info!(user = %auth.user_name, outcome = ?req.outcome, "pairing ended");
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The joiner took the reply: the slot is done and keeps no message.
#[utoipa::path(delete, path = "/api/v1/pair/{slot}", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, description = "the code's number")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "there is no reply to take")))]
pub async fn done(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(number): Path<u32>,
) -> ApiResult<StatusCode> {
    let slot = live_slot(&state, number).await?;
    if side(&state, &headers, &slot).await? != Side::Joiner {
        return Err(ApiError::unauthorized());
    }
    if slot.state == PairState::Done {
        return Ok(StatusCode::NO_CONTENT);
    }
    if !state
        .store
        .pair_advance(number, PairState::Replied, PairState::Done, None, now())
        .await?
    {
        return Err(wrong_state(slot.state));
    }
    tracing::info!("pairing done");
    Ok(StatusCode::NO_CONTENT)
}
