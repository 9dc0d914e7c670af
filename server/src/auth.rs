//! Device tokens (256 random bits, stored only as SHA-256, compared in
//! constant time) and the [`Authed`] extractor every protected handler
//! takes; passwords are [`crate::passwords`]'.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::inflight::paused;
use crate::store::UserId;

pub use crate::passwords::{ARGON2_M_KIB, ARGON2_T, Passwords};

const TOKEN_PREFIX: &str = "evi_";
/// How stale `last_seen_at` may get before an authenticated request updates it.
const TOUCH_AFTER_SECS: i64 = 60;

/// A fresh bearer token (`evi_` + 64 hex of 32 random bytes) and its hash.
pub fn new_token() -> ApiResult<(String, [u8; 32])> {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(ApiError::internal)?;
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(raw));
    let hash = token_hash(&token);
    Ok((token, hash))
}

pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Random 128-bit one-time code for `evi-server invite`, and its hash.
pub fn new_invite() -> anyhow::Result<(String, [u8; 32])> {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let code = hex::encode(raw);
    let hash = token_hash(&code);
    Ok((code, hash))
}

/// The authenticated device of a request.
#[derive(Debug, Clone)]
pub struct Authed {
    pub user_id: UserId,
    pub user_name: String,
    pub device_id: String,
    /// The token's hash, to look the device up again while a long request
    /// runs (a rotation moves it to another account row).
    pub token_hash: [u8; 32],
    /// The quota this account is held to: its own, or the server's
    /// `--quota-bytes` (see [`crate::store::admin::effective_quota`]).
    pub quota: Option<u64>,
    /// This request's place among its account's requests in flight, given
    /// back when the handler ends (see [`crate::inflight`]).
    _place: std::sync::Arc<crate::inflight::Place>,
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Self> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(ApiError::unauthorized)?;
        let hash = token_hash(token);
        // An account at its share is refused before the lookup costs the
        // database anything.
        paused(state.inflight.refuse_early(&hash)).await?;
        let owner = state
            .store
            .token_owner(hash)
            .await?
            .ok_or_else(ApiError::unauthorized)?;
        // The lookup was by hash; check it again in constant time so no
        // comparison anywhere depends on where the bytes differ.
        if !bool::from(owner.token_hash.ct_eq(&hash)) {
            return Err(ApiError::unauthorized());
        }
        if owner.disabled {
            return Err(ApiError::account_disabled());
        }
        // A key older than the account's opens nothing it holds: the device
        // is told so (when, from where) on every call until it pairs again.
        if let Some(r) = &owner.rotated {
            return Err(ApiError::key_rotated(r));
        }
        // Counted before the deadline is lifted: an account past its share
        // gets 429 and its body stays under the deadline of the unknown.
        let place = paused(state.inflight.enter(owner.user_id, &hash)).await?;
        // A known sender: its body may take as long as its link needs.
        if let Some(d) = parts.extensions.get::<crate::deadline::Deadline>() {
            d.lift();
        }
        let now = chrono::Utc::now().timestamp();
        if now - owner.last_seen_at >= TOUCH_AFTER_SECS {
            let store = state.store.clone();
            let id = owner.device_id.clone();
            tokio::spawn(async move {
                if let Err(e) = store.touch_device(&id, now).await {
                    tracing::warn!(error = %e, "could not update device last_seen_at");
                }
            });
        }
        Ok(Authed {
            user_id: owner.user_id,
            user_name: owner.user_name,
            device_id: owner.device_id,
            token_hash: hash,
            quota: {
                let quota = crate::store::admin::effective_quota(
                    owner.quota_bytes,
                    state.config.quota_bytes,
                );
                match owner.copy_of_bytes {
                    Some(copy_of) => crate::store::admin::staging_quota(quota, copy_of),
                    None => quota,
                }
            },
            _place: std::sync::Arc::new(place),
        })
    }
}
