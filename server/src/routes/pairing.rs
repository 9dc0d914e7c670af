//! Pairing a device by short code: the server is a blind relay between a
//! device of the account (the *creator*) and a new device holding the code
//! (the *joiner*), which has no token yet.
//!
//! The code is `N-word-word-word`: `N` names the slot here; the words are
//! the password the two devices feed to SPAKE2 and never send. A slot
//! relays three opaque messages in turn: the creator's offer (its PAKE
//! message), the joiner's hello (its PAKE message, its key confirmation and
//! its sealed name), the creator's reply (its key confirmation and, sealed
//! under the PAKE key, the identity, the account and a fresh device token
//! made by [`device`]). The server sees neither the words nor the key, and
//! cannot open what it relays; it keeps at most one message of a slot at a
//! time, and none once the slot is finished.
//!
//! One attempt per code: a slot takes one join, whatever its code was. A
//! wrong code is found by the creator (the joiner's confirmation does not
//! check out), which closes the slot; the joiner's wait then answers
//! `closed`. Bounds: a message is at most [`PAIR_MESSAGE_MAX_BYTES`]; a
//! slot lives `--pair-ttl`; an account opens at most `--pair-rate` slots a
//! minute, and one address makes at most as many calls without a token
//! (reading an offer, joining), so slot numbers cannot be swept. Waits are
//! long polls of at most [`PAIR_WAIT_MAX_SECS`] over plain HTTPS, through
//! the proxies the rest of the API goes through. Slots are database rows,
//! so the two devices may reach different replicas. Nothing here logs a
//! slot number, a message or a secret.

use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use chrono::{DateTime, Utc};
use evi_shared::api::{
    AuthResponse, ErrorBody, ErrorCode, PairDeviceRequest, PairJoinRequest, PairJoinResponse,
    PairOfferResponse, PairOpenRequest, PairOpenResponse, PairReplyRequest, PairState,
    PairWaitQuery, PairWaitResponse,
};
use evi_shared::limits::{PAIR_MESSAGE_MAX_BYTES, PAIR_SLOT_MAX, PAIR_WAIT_MAX_SECS};
use subtle::ConstantTimeEq;

use super::ApiJson;
use crate::AppState;
use crate::auth::{Authed, token_hash};
use crate::error::{ApiError, ApiResult};
use crate::inflight::paused;
use crate::ratelimit::ClientIp;
use crate::store::{NewPairSlot, PairSlot, PairStep};

/// How often a wait looks at its slot again when nothing woke it: a step
/// taken through this server wakes the slot's waits at once (they wait on
/// the account's feed, see [`crate::waiters`]); one taken through another
/// replica is seen by this look. A look every 200 ms was a query per wait
/// five times a second, and one account could park thousands.
const POLL_EVERY: Duration = Duration::from_secs(1);

fn now() -> i64 {
    Utc::now().timestamp()
}

fn time(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

/// The `{slot}` of a pairing path: 1 to [`PAIR_SLOT_MAX`], else 400.
pub struct SlotNumber(pub u32);

impl<S: Send + Sync> FromRequestParts<S> for SlotNumber {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        let bad = || {
            ApiError::bad_request(format!(
                "a pairing slot is a number from 1 to {PAIR_SLOT_MAX}"
            ))
        };
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| bad())?;
        match raw.parse::<u32>() {
            Ok(n)
                if (1..=PAIR_SLOT_MAX).contains(&n) && raw.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Ok(Self(n))
            }
            _ => Err(bad()),
        }
    }
}

/// 404 for a slot that is not there: it expired, or never was. Another
/// account's slot answers the same, so it learns nothing.
fn gone() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        "no pairing under this number: it expired or the number is mistyped; \
         start a new one with `evi sync pair`",
    )
}

fn wrong_step(s: PairState) -> ApiError {
    let at = match s {
        PairState::Open => "waiting for a device to join",
        PairState::Joined => "joined by a device",
        PairState::Replied => "answered",
        PairState::Done => "finished",
        PairState::Closed => "closed",
    };
    ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::PairingState,
        format!("this pairing is {at}, so that step does not apply; start a new pairing"),
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

async fn live(state: &AppState, number: u32) -> ApiResult<PairSlot> {
    state.store.pair_slot(number, now()).await?.ok_or_else(gone)
}

/// The slot, if `auth` is the device that opened it.
async fn own(state: &AppState, auth: &Authed, number: u32) -> ApiResult<PairSlot> {
    let slot = live(state, number).await?;
    if slot.user != auth.user_id || slot.device_id != auth.device_id {
        return Err(gone());
    }
    Ok(slot)
}

/// Who asks about a slot: the device that opened it (its token) or the
/// device that joined it (the secret [`join`] answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Creator,
    Joiner,
}

fn bearer(headers: &HeaderMap) -> ApiResult<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)
}

/// The caller of `number` by its bearer: 401 without one or with one that
/// is neither side's, 404 for a slot that is not there (or is another
/// device's).
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    number: u32,
) -> ApiResult<(Caller, PairSlot)> {
    let hash = token_hash(bearer(headers)?);
    let slot = live(state, number).await?;
    if let Some(j) = &slot.join_hash
        && bool::from(j.ct_eq(&hash))
    {
        return Ok((Caller::Joiner, slot));
    }
    match state.store.token_owner(hash).await? {
        Some(o) if bool::from(o.token_hash.ct_eq(&hash)) => {
            if o.user_id == slot.user && o.device_id == slot.device_id {
                Ok((Caller::Creator, slot))
            } else {
                Err(gone())
            }
        }
        _ => Err(ApiError::unauthorized()),
    }
}

/// One step of the slot, or 409 when another step got there first.
async fn step(state: &AppState, number: u32, from: PairState, step: PairStep) -> ApiResult<()> {
    if state.store.pair_step(number, from, step, now()).await? {
        stepped(state, number).await;
        return Ok(());
    }
    Err(wrong_step(live(state, number).await?.state))
}

/// Wakes the waits of slot `number`'s account, which a step of it may end.
async fn stepped(state: &AppState, number: u32) {
    if let Ok(Some(slot)) = state.store.pair_slot(number, now()).await {
        state.waiters.devices_changed(slot.user);
    }
}

/// Opens a pairing slot holding the creator's offer; the number it answers
/// is the first part of the code.
#[utoipa::path(post, path = "/api/v1/pair", tag = "pairing", security(("bearer" = [])),
    request_body = PairOpenRequest,
    responses((status = 200, body = PairOpenResponse),
        (status = 429, body = ErrorBody, description = "the account opened `--pair-rate` pairings this minute; retry after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "every slot number is in use; retry after `Retry-After` seconds"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn open(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<PairOpenRequest>,
) -> ApiResult<Json<PairOpenResponse>> {
    check_message("offer", &req.offer.0)?;
    state.limiter.pair_open(auth.user_id)?;
    let now = now();
    let ttl = i64::try_from(state.config.pairing.ttl.as_secs()).unwrap_or(i64::MAX);
    let expires_at = now.saturating_add(ttl);
    let slot = state
        .store
        .pair_open(NewPairSlot {
            user: auth.user_id,
            device_id: auth.device_id.clone(),
            offer: req.offer.0,
            now,
            expires_at,
        })
        .await?;
    // Not the number: with the words it is the code.
    tracing::info!(user = %auth.user_name, device = %auth.device_id, "pairing opened");
    Ok(Json(PairOpenResponse {
        slot,
        expires_at: time(expires_at),
    }))
}

/// The creator's offer, for the device that holds the code (no token).
#[utoipa::path(get, path = "/api/v1/pair/{slot}", tag = "pairing",
    params(("slot" = u32, Path, minimum = 1, maximum = 999_999, description = "the code's number")),
    responses((status = 200, body = PairOfferResponse),
        (status = 400, body = ErrorBody, description = "the slot is not a number from 1 to 999999"),
        (status = 404, body = ErrorBody, description = "no such slot: expired or mistyped"),
        (status = 409, body = ErrorBody, description = "`pairing_state`: a device joined already"),
        (status = 429, body = ErrorBody, description = "this address made `--pair-rate` calls without a token this minute")))]
pub async fn offer(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    SlotNumber(number): SlotNumber,
) -> ApiResult<Json<PairOfferResponse>> {
    state.limiter.pair_anonymous(ip)?;
    let slot = live(&state, number).await?;
    match (slot.state, slot.offer) {
        (PairState::Open, Some(offer)) => Ok(Json(PairOfferResponse {
            offer: offer.into(),
            expires_at: time(slot.expires_at),
        })),
        (s, _) => Err(wrong_step(s)),
    }
}

/// The one join of a slot (no token): stores the joiner's hello and
/// answers the secret it waits for the reply with.
#[utoipa::path(post, path = "/api/v1/pair/{slot}/join", tag = "pairing",
    params(("slot" = u32, Path, minimum = 1, maximum = 999_999, description = "the code's number")),
    request_body = PairJoinRequest,
    responses((status = 200, body = PairJoinResponse),
        (status = 404, body = ErrorBody, description = "no such slot: expired or mistyped"),
        (status = 409, body = ErrorBody, description = "`pairing_state`: a device joined already (one attempt per code)"),
        (status = 429, body = ErrorBody, description = "this address made `--pair-rate` calls without a token this minute"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn join(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    SlotNumber(number): SlotNumber,
    ApiJson(req): ApiJson<PairJoinRequest>,
) -> ApiResult<Json<PairJoinResponse>> {
    check_message("hello", &req.hello.0)?;
    state.limiter.pair_anonymous(ip)?;
    let (secret, hash) = crate::auth::new_token()?;
    step(
        &state,
        number,
        PairState::Open,
        PairStep {
            to: PairState::Joined,
            join_hash: Some(hash),
            message: Some(req.hello.0),
        },
    )
    .await?;
    tracing::info!("pairing joined");
    Ok(Json(PairJoinResponse { secret }))
}

/// Waits until the slot is no longer in `state` (or for `timeout`
/// seconds), then answers where it is, with the message the caller waits
/// for: the hello for the creator once `joined`, the reply for the joiner
/// once `replied`.
#[utoipa::path(get, path = "/api/v1/pair/{slot}/wait", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, minimum = 1, maximum = 999_999, description = "the code's number"), PairWaitQuery),
    responses((status = 200, body = PairWaitResponse),
        (status = 400, body = ErrorBody, description = "the slot or the query does not parse"),
        (status = 401, body = ErrorBody, description = "neither the creator's token nor the joiner's secret"),
        (status = 404, body = ErrorBody, description = "no such slot: it expired (or is another device's)"),
        (status = 429, body = ErrorBody, description = "too many waits on this slot, or this account holds its share of waits; retry after `Retry-After` seconds"),
        (status = 503, body = ErrorBody, description = "the server is shutting down, or holds as many waits as it takes; retry after `Retry-After` seconds")))]
pub async fn wait(
    State(state): State<AppState>,
    headers: HeaderMap,
    SlotNumber(number): SlotNumber,
    query: Result<Query<PairWaitQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<PairWaitResponse>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (who, mut slot) = caller(&state, &headers, number).await?;
    // Per slot, not per device: the joiner has none yet.
    paused(
        state
            .limiter
            .wait(&format!("pair:{}:{number}", slot.device_id)),
    )
    .await?;
    let cap = PAIR_WAIT_MAX_SECS.min(state.config.waits.max_secs.max(1));
    let secs = match q.timeout {
        None | Some(0) => cap,
        Some(t) => t.min(cap),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(secs));
    // Counted as every wait is: within `--max-waiters`, and the slot's
    // account's share of them (its creator's; the joiner has none).
    let mut held = paused(state.waiters.enter(slot.user)).await?;
    loop {
        if slot.state != q.state || tokio::time::Instant::now() >= deadline {
            let message = match (who, slot.state) {
                (Caller::Creator, PairState::Joined) => slot.hello,
                (Caller::Joiner, PairState::Replied) => slot.reply,
                _ => None,
            };
            return Ok(Json(PairWaitResponse {
                state: slot.state,
                message: message.map(Into::into),
            }));
        }
        let woken = held.commits.changed();
        tokio::select! {
            () = tokio::time::sleep(POLL_EVERY) => {}
            Ok(()) = woken => {}
            _ = held.closed.wait_for(|c| *c) => {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::Unavailable,
                    "the server is shutting down; retry",
                );
                e.retry_after = Some(1);
                return Err(e);
            }
        }
        slot = live(&state, number).await?;
    }
}

/// Adds the joiner's device to the creator's account and answers its fresh
/// token, which the creator seals into its reply (the server stores it
/// hashed, as every token). Only while the slot is `joined`.
#[utoipa::path(post, path = "/api/v1/pair/{slot}/device", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, minimum = 1, maximum = 999_999, description = "the code's number"),
        crate::keyproof::Header),
    request_body = PairDeviceRequest,
    responses((status = 200, body = AuthResponse),
        (status = 400, body = ErrorBody, description = "a device name, or a `replaces` that no device id can be"),
        (status = 404, body = ErrorBody, description = "no such slot of this device: expired or mistyped"),
        (status = 409, body = ErrorBody, description = "`pairing_state`: the slot is not joined"),
        (status = 403, body = ErrorBody, description = "`key_proof_required`: the account's key proof header is missing or wrong; no device was made"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn device(
    State(state): State<AppState>,
    auth: Authed,
    proof: crate::keyproof::KeyProof,
    SlotNumber(number): SlotNumber,
    ApiJson(req): ApiJson<PairDeviceRequest>,
) -> ApiResult<Json<AuthResponse>> {
    super::accounts::check_device(&req.device)?;
    super::check_device_ids("replaces", &req.replaces)?;
    let slot = own(&state, &auth, number).await?;
    if slot.state != PairState::Joined {
        return Err(wrong_step(slot.state));
    }
    // A device token alone opens slots; a new device of the account, which
    // reads everything it holds, is minted only for the key's holder.
    proof
        .require(&state, auth.user_id, "making a device by pairing")
        .await?;
    let (mut device, token) = super::accounts::new_device(req.device)?;
    // The joiner's own device from before a key rotation goes in the same
    // step, so the new one takes its name.
    device.replaces = req.replaces;
    let device_id = device.id.clone();
    // One device per slot: asked again (the answer to the first call was
    // lost, so no one holds its token), the slot's earlier device goes in
    // the same step.
    let Some(device_name) = state
        .store
        .pair_mint(number, auth.user_id, device, now())
        .await?
    else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::PairingState,
            "this pairing moved on (answered, closed or expired) before its device was made; \
             start a new pairing",
        ));
    };
    tracing::info!(user = %auth.user_name, device = %device_id, by = %auth.device_id, "device added by pairing");
    Ok(Json(AuthResponse {
        token,
        device_id,
        user: auth.user_name,
        device_name,
    }))
}

/// Stores the creator's sealed reply for the joiner. Only while the slot
/// is `joined`.
#[utoipa::path(post, path = "/api/v1/pair/{slot}/reply", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, minimum = 1, maximum = 999_999, description = "the code's number")),
    request_body = PairReplyRequest,
    responses((status = 204, description = "stored; the joiner's wait answers it"),
        (status = 404, body = ErrorBody, description = "no such slot of this device: expired or mistyped"),
        (status = 409, body = ErrorBody, description = "`pairing_state`: the slot is not joined"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn reply(
    State(state): State<AppState>,
    auth: Authed,
    SlotNumber(number): SlotNumber,
    ApiJson(req): ApiJson<PairReplyRequest>,
) -> ApiResult<StatusCode> {
    check_message("reply", &req.reply.0)?;
    own(&state, &auth, number).await?;
    step(
        &state,
        number,
        PairState::Joined,
        PairStep {
            to: PairState::Replied,
            join_hash: None,
            message: Some(req.reply.0),
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Ends the slot. The joiner, once it holds the reply: `done`. The creator
/// (a wrong code, a declined device, giving up) or the joiner before any
/// reply: `closed`. Either way the slot keeps no message and takes nothing
/// more; ending an ended slot changes nothing.
#[utoipa::path(delete, path = "/api/v1/pair/{slot}", tag = "pairing", security(("bearer" = [])),
    params(("slot" = u32, Path, minimum = 1, maximum = 999_999, description = "the code's number")),
    responses((status = 204, description = "the slot is ended"),
        (status = 400, body = ErrorBody, description = "the slot is not a number from 1 to 999999"),
        (status = 404, body = ErrorBody, description = "no such slot: it expired (or is another device's)")))]
pub async fn close(
    State(state): State<AppState>,
    headers: HeaderMap,
    SlotNumber(number): SlotNumber,
) -> ApiResult<StatusCode> {
    let (who, mut slot) = caller(&state, &headers, number).await?;
    // A step the other side takes meanwhile fails the compare-and-set:
    // look again (a slot moves forward at most four times).
    loop {
        let to = match (who, slot.state) {
            (_, s) if s.is_final() => return Ok(StatusCode::NO_CONTENT),
            (Caller::Joiner, PairState::Replied) => PairState::Done,
            _ => PairState::Closed,
        };
        let ended = PairStep {
            to,
            join_hash: None,
            message: None,
        };
        if state
            .store
            .pair_step(number, slot.state, ended, now())
            .await?
        {
            tracing::info!(outcome = ?to, "pairing ended");
            state.waiters.devices_changed(slot.user);
            return Ok(StatusCode::NO_CONTENT);
        }
        slot = live(&state, number).await?;
    }
}
