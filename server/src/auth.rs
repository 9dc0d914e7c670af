//! Passwords (argon2id, m = 19 MiB, t = 2) and device tokens (256 random
//! bits, stored only as SHA-256, compared in constant time), and the
//! [`Authed`] extractor every protected handler takes.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::store::UserId;

/// Argon2id cost: OWASP's minimum (19 MiB, 2 passes, 1 lane).
pub const ARGON2_M_KIB: u32 = 19 * 1024;
pub const ARGON2_T: u32 = 2;
const TOKEN_PREFIX: &str = "evi_";
/// How stale `last_seen_at` may get before an authenticated request updates it.
const TOUCH_AFTER_SECS: i64 = 60;

fn argon2() -> Argon2<'static> {
    let params = Params::new(ARGON2_M_KIB, ARGON2_T, 1, None).expect("valid argon2 params");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes and verifies passwords off the async threads, a bounded number at a
/// time so a burst of logins cannot exhaust memory.
pub struct Passwords {
    permits: Semaphore,
    /// Verified against when the user does not exist, so an unknown user
    /// costs the same time as a wrong password.
    dummy: String,
}

impl Passwords {
    pub fn new() -> Self {
        let dummy = hash_now("not a real password").expect("hash dummy password");
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            permits: Semaphore::new(cores.max(2)),
            dummy,
        }
    }

    pub async fn hash(&self, password: String) -> ApiResult<String> {
        let _permit = self.permits.acquire().await.map_err(ApiError::internal)?;
        tokio::task::spawn_blocking(move || hash_now(&password))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)
    }

    /// True if `password` matches `hash`; with no hash, burns the same time
    /// and returns false.
    pub async fn verify(&self, password: String, hash: Option<String>) -> ApiResult<bool> {
        let _permit = self.permits.acquire().await.map_err(ApiError::internal)?;
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.dummy.clone());
        let ok = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&hash)
                .map(|h| argon2().verify_password(password.as_bytes(), &h).is_ok())
                .unwrap_or(false)
        })
        .await
        .map_err(ApiError::internal)?;
        Ok(ok && known)
    }
}

impl Default for Passwords {
    fn default() -> Self {
        Self::new()
    }
}

fn hash_now(password: &str) -> Result<String, argon2::password_hash::Error> {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).map_err(|_| argon2::password_hash::Error::Crypto)?;
    let salt = SaltString::encode_b64(&raw)?;
    Ok(argon2()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

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
        })
    }
}
