//! Register, log in, change the password, and the account's key check value.

use axum::Json;
use axum::extract::State;
use evi_shared::api::{
    AuthResponse, ErrorBody, KeyCheckRequest, KeyCheckResponse, LoginRequest,
    PasswordChangeRequest, PasswordChangeResponse, RegisterRequest, Registration,
};
use evi_shared::limits::{
    DEVICE_NAME_MAX_LEN, KEY_CHECK_MAX_BYTES, PASSWORD_MAX_LEN, PASSWORD_MIN_LEN, USER_NAME_MAX_LEN,
};

use super::ApiJson;
use crate::AppState;
use crate::auth::{self, Authed};
use crate::error::{ApiError, ApiResult};
use crate::ratelimit::ClientIp;
use crate::store::NewDevice;
use axum::http::StatusCode;
use evi_shared::api::ErrorCode;

fn check_user(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= USER_NAME_MAX_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "user name must be 1 to {USER_NAME_MAX_LEN} of A-Z a-z 0-9 . _ -"
        )))
    }
}

pub(super) fn check_device(name: &str) -> ApiResult<()> {
    if !crate::device_name::is_valid(name) {
        return Err(ApiError::bad_request(format!(
            "device name must be 1 to {DEVICE_NAME_MAX_LEN} characters of printable text, with \
             something visible and no control or text-direction characters"
        )));
    }
    Ok(())
}

/// Lengths count characters, as the document's `minLength` and `maxLength`
/// do.
fn check_password(p: &str) -> ApiResult<()> {
    if !(PASSWORD_MIN_LEN..=PASSWORD_MAX_LEN).contains(&p.chars().count()) {
        return Err(ApiError::bad_request(format!(
            "password must be {PASSWORD_MIN_LEN} to {PASSWORD_MAX_LEN} characters"
        )));
    }
    Ok(())
}

pub(super) fn new_device(name: String) -> ApiResult<(NewDevice, String)> {
    let (token, token_hash) = auth::new_token()?;
    Ok((
        NewDevice {
            id: ulid::Ulid::new().to_string().to_lowercase(),
            name,
            token_hash,
            now: chrono::Utc::now().timestamp(),
            replaces: None,
        },
        token,
    ))
}

/// Creates an account (when registration is open, or with an invite code)
/// and its first device.
#[utoipa::path(post, path = "/api/v1/register", tag = "accounts", request_body = RegisterRequest,
    responses((status = 200, body = AuthResponse), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn register(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    ApiJson(req): ApiJson<RegisterRequest>,
) -> ApiResult<Json<AuthResponse>> {
    // Validated before anything keeps state about it (the name becomes a
    // limiter key).
    check_user(&req.user)?;
    check_device(&req.device)?;
    check_password(&req.password)?;
    state.limiter.register(ip)?;
    // Read at each registration: `evi-server admin registration` changes
    // it for every replica at once.
    let invite_hash = match state.registration().await? {
        Registration::Closed => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::RegistrationClosed,
                "this server does not accept new accounts",
            ));
        }
        Registration::Open => None,
        Registration::Invite => {
            Some(req.invite.as_deref().map(auth::token_hash).ok_or_else(|| {
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    ErrorCode::InvalidInvite,
                    "this server registers new accounts only with an invite code: its operator \
                     makes one on the server machine with `evi-server invite --data DIR` \
                     (DIR: the server's data folder)",
                )
            })?)
        }
    };
    // The code before the hash: a wrong code costs no argon2 run, so
    // guessing codes cannot tie up the hashing permits. Answering a wrong
    // code faster than a right one tells the caller nothing the 403 does not:
    // the lookup is by the code's SHA-256, so its time depends on no prefix
    // of the code, and the name check stays after it (no code, no word on
    // which names are taken).
    if let Some(h) = invite_hash
        && !state
            .store
            .invite_usable(h, chrono::Utc::now().timestamp())
            .await?
    {
        return Err(crate::store::StoreError::InvalidInvite.into());
    }
    let hash = state.passwords.hash(req.password).await?;
    let (device, token) = new_device(req.device)?;
    let device_id = device.id.clone();
    // A new account has no other device: the name stays as asked.
    let device_name = device.name.clone();
    state
        .store
        .create_user(&req.user, hash, invite_hash, device)
        .await?;
    tracing::info!(user = %req.user, device = %device_id, "account registered");
    Ok(Json(AuthResponse {
        token,
        device_id,
        user: req.user,
        device_name,
    }))
}

/// Adds a device to an existing account. A wrong user and a wrong password
/// get the same answer in about the same time. A device name another device
/// of the account already has becomes `NAME-2` (`NAME-3`, …); the answer
/// says which name the device got.
#[utoipa::path(post, path = "/api/v1/login", tag = "accounts", request_body = LoginRequest,
    responses((status = 200, body = AuthResponse), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`account_disabled`: the right password, of an account the operator disabled"),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn login(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    ApiJson(req): ApiJson<LoginRequest>,
) -> ApiResult<Json<AuthResponse>> {
    // Validated before anything keeps state about it (the name becomes a
    // limiter key). The name rule is public, so this says nothing about
    // which accounts exist.
    check_user(&req.user)?;
    check_device(&req.device)?;
    let attempt = state.limiter.login(ip, &req.user)?;
    state.limiter.check_shared(ip, &req.user).await?;
    let creds = state.store.credentials(&req.user).await?;
    let hash = creds.as_ref().map(|c| c.password_hash.clone());
    let ok = state.passwords.verify(req.password, hash).await?;
    let Some(creds) = creds.filter(|_| ok) else {
        // At info, one line per failure with the name tried and the
        // client's address (the limiter's, behind a trusted proxy too):
        // what fail2ban matches (deploy/README.md). The limiter bounds how
        // many such lines one address can cause; what it refuses is counted
        // in the flood line instead.
        tracing::info!(user = %req.user, %ip, "login failed");
        state.limiter.failed_shared(ip, &req.user).await?;
        return Err(ApiError::invalid_credentials());
    };
    attempt.succeeded();
    // Said only to the password's holder, so it tells nobody else which
    // accounts exist.
    if creds.disabled {
        return Err(ApiError::account_disabled());
    }
    let user_id = creds.user_id;
    let (device, token) = new_device(req.device)?;
    let device_id = device.id.clone();
    let device_name = state.store.add_device(user_id, device).await?;
    tracing::info!(user = %creds.name, device = %device_id, name = %device_name, "logged in");
    Ok(Json(AuthResponse {
        token,
        device_id,
        user: creds.name,
        device_name,
    }))
}

/// 401 unless `password` is the account's of the calling device; wrong
/// ones count against that device's limit (429 past it). Keyed by the
/// device, never by the user: other people's login failures cannot hold
/// up the owner's own devices.
async fn verify_own_password(state: &AppState, auth: &Authed, password: String) -> ApiResult<()> {
    let attempt = state.limiter.password_change(&auth.device_id)?;
    let hash = state
        .store
        .credentials(&auth.user_name)
        .await?
        .filter(|c| c.user_id == auth.user_id)
        .map(|c| c.password_hash);
    if !state.passwords.verify(password, hash).await? {
        return Err(ApiError::invalid_credentials());
    }
    attempt.succeeded();
    Ok(())
}

/// Changes the password and revokes every other device of the account.
#[utoipa::path(post, path = "/api/v1/password", tag = "accounts", security(("bearer" = [])),
    request_body = PasswordChangeRequest,
    responses((status = 200, body = PasswordChangeResponse), (status = 401, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn change_password(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<PasswordChangeRequest>,
) -> ApiResult<Json<PasswordChangeResponse>> {
    check_password(&req.new_password)?;
    verify_own_password(&state, &auth, req.old_password).await?;
    let new_hash = state.passwords.hash(req.new_password).await?;
    let revoked_devices = state
        .store
        .change_password(auth.user_id, new_hash, &auth.device_id)
        .await?;
    state.waiters.devices_changed(auth.user_id);
    tracing::info!(user = %auth.user_name, revoked_devices, "password changed");
    // A key rotation another device began ended with its device.
    super::rotation::spawn_purge(&state);
    Ok(Json(PasswordChangeResponse { revoked_devices }))
}

/// The account's key check value, if a device stored one.
#[utoipa::path(get, path = "/api/v1/key-check", tag = "accounts", security(("bearer" = [])),
    responses((status = 200, body = KeyCheckResponse), (status = 401, body = ErrorBody)))]
pub async fn get_key_check(
    State(state): State<AppState>,
    auth: Authed,
) -> ApiResult<Json<KeyCheckResponse>> {
    let v = state.store.key_check(auth.user_id).await?;
    let proof = state.store.key_proof_hash(auth.user_id).await?;
    Ok(Json(KeyCheckResponse {
        key_check: v.map(Into::into),
        key_proof: proof.is_some(),
    }))
}

/// Stores the key check value if none is set (a different value is 409),
/// and the key proof's hash (see [`crate::keyproof`]) if none is set: one
/// set by another key only with the account's password.
#[utoipa::path(put, path = "/api/v1/key-check", tag = "accounts", security(("bearer" = [])),
    request_body = KeyCheckRequest,
    responses((status = 200, body = KeyCheckResponse), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody, description = "`key_check_mismatch`: the account has another key; `key_proof_mismatch`: it holds another key proof, and no right password came with this one"),
        (status = 401, body = ErrorBody), (status = 429, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`storage_full`: the server's disk is full; nothing was stored")))]
pub async fn put_key_check(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<KeyCheckRequest>,
) -> ApiResult<Json<KeyCheckResponse>> {
    let v = req.key_check.0;
    if v.is_empty() || v.len() > KEY_CHECK_MAX_BYTES {
        return Err(ApiError::bad_request(format!(
            "key check must be 1 to {KEY_CHECK_MAX_BYTES} bytes"
        )));
    }
    if let Some(h) = &req.key_proof_hash {
        crate::keyproof::check_hash("key_proof_hash", &h.0)?;
    }
    state.store.set_key_check(auth.user_id, v.clone()).await?;
    // The value matched (or was set): this device claims the account's key.
    // Its proof is taken if the account holds none; replacing another is
    // for the password's holder, as a password change is.
    let replace = match req.password {
        Some(password) => {
            verify_own_password(&state, &auth, password).await?;
            true
        }
        None => false,
    };
    if let Some(h) = req.key_proof_hash {
        state
            .store
            .set_key_proof_hash(auth.user_id, h.0, replace)
            .await?;
        if replace {
            tracing::info!(user = %auth.user_name, device = %auth.device_id,
                "key proof set with the account's password");
        }
    }
    let proof = state.store.key_proof_hash(auth.user_id).await?;
    Ok(Json(KeyCheckResponse {
        key_check: Some(v.into()),
        key_proof: proof.is_some(),
    }))
}
