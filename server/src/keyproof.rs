//! Proof of the account's key, asked of the calls that change an account's
//! history or key: a forget or its undo (and a `forget-lines` record), a
//! damage report, a key rotation's begin and commit, and the device a
//! pairing makes.
//!
//! Why: a device token is a bearer secret that can leak apart from the key
//! (a copied config, a proxy's log, a backup). With only a token, a thief
//! could add records, which every device refuses by their MAC, but before
//! proofs it could also undo what the key's holder did: mark records damaged
//! and replace them, push an `unforget` and replay a forgotten session,
//! begin a rotation that blocked the owner's, or mint itself devices.
//!
//! The proof is 32 bytes the key derives (HKDF, label `evi-sync-v1
//! key-proof`), sent in [`KEY_PROOF_HEADER`] only on those calls; the
//! server keeps its SHA-256 (`users.key_proof_hash`), as it keeps a token's,
//! and compares in constant time. It is set with the key check value
//! (`PUT /key-check`): by the first device of a new account, or, for an
//! account made before proofs, by the first of its devices that runs a
//! version that knows them (until then such an account takes a token's
//! word, as before). Once set, only the account's password replaces it,
//! and a rotation's commit puts the new key's in its place.
//!
//! Its limits: a server (or whoever runs it) can still withhold or drop
//! records, and a token still reads and adds ciphertext; devices notice
//! what they cannot open. The proof guards what the server would otherwise
//! carry out on a token's word.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use evi_shared::api::{ErrorCode, KEY_PROOF_HEADER};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::store::UserId;

/// The proof a request carried, if any: 64 lowercase hex of 32 bytes, or
/// 400.
#[derive(Debug, Clone, Default)]
pub struct KeyProof(Option<[u8; 32]>);

impl KeyProof {
    fn parse(v: &str) -> Option<[u8; 32]> {
        if v.len() != 64 || !v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(v, &mut out).ok()?;
        Some(out)
    }

    /// 403 `key_proof_required` unless this is the proof of `user`'s key
    /// (an account that holds no proof hash yet takes any call, as before
    /// proofs).
    pub async fn require(&self, state: &AppState, user: UserId, what: &str) -> ApiResult<()> {
        let Some(stored) = state.store.key_proof_hash(user).await? else {
            return Ok(());
        };
        let shown = self.0.map(|p| Sha256::digest(p).to_vec());
        if shown.is_some_and(|h| bool::from(h.ct_eq(&stored))) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::KeyProofRequired,
            format!(
                "{what} needs proof of the account's key (header {KEY_PROOF_HEADER}), not only \
                 a device token; nothing was changed: run it with an up-to-date evi on a device \
                 that holds the key"
            ),
        ))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for KeyProof {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(v) = parts.headers.get(KEY_PROOF_HEADER) else {
            return Ok(Self(None));
        };
        v.to_str()
            .ok()
            .and_then(Self::parse)
            .map(|p| Self(Some(p)))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{KEY_PROOF_HEADER} is the key's proof: 64 lowercase hex characters"
                ))
            })
    }
}

/// The header as the API document lists it, on the routes that ask for it.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub struct Header {
    /// The account key's proof, 64 lowercase hex: needed once the account
    /// holds a proof hash (see `GET /key-check`'s `key_proof`).
    #[param(rename = "evi-key-proof", value_type = String, required = false, pattern = "^[0-9a-f]{64}$", min_length = 64, max_length = 64)]
    #[allow(dead_code)]
    evi_key_proof: Option<String>,
}

/// A proof hash as a request carries it: 32 bytes, or 400.
pub fn check_hash(field: &str, hash: &[u8]) -> ApiResult<()> {
    if hash.len() != 32 {
        return Err(ApiError::bad_request(format!(
            "{field} is the SHA-256 of the key proof: 32 bytes, not {}",
            hash.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::KeyProof;

    #[test]
    fn only_64_hex_is_a_proof() {
        let hex = "ab".repeat(32);
        assert_eq!(KeyProof::parse(&hex), Some([0xab; 32]));
        assert_eq!(KeyProof::parse(&hex[..62]), None);
        assert_eq!(KeyProof::parse(&"zz".repeat(32)), None);
        assert_eq!(
            KeyProof::parse(&"AB".repeat(32)),
            None,
            "lowercase, as documented"
        );
    }
}
