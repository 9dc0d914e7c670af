//! Password hashing (argon2id, m = 19 MiB, t = 2, one lane), off the async
//! threads and bounded whatever clients do.
//!
//! What it promises: at most one run per core at once, each on one of at
//! most that many 19 MiB work areas that are made on first use and then
//! reused, so hashing never holds more than cores × 19 MiB however many
//! logins arrive, hang up, or retry.
//!
//! - The permit of a run is moved into the blocking task and given back when
//!   the hash is done, not when the request is. A client that hangs up drops
//!   its request but not its argon2 run, so a permit tied to the request let
//!   every hang-up start one more run beside those still going (120 hung-up
//!   logins: 1.7 GB). A request dropped while it waits for a permit starts
//!   no run.
//! - The work area is kept, not freed: glibc serves a freed 19 MiB buffer's
//!   successor from a per-thread arena instead of a fresh mapping, and the
//!   arenas of the blocking threads keep what they once held (445 MB after
//!   120 logins run two at a time with an area per run).

use std::sync::{Arc, Mutex};

use argon2::password_hash::{Output, ParamsString, PasswordHash, Salt, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{ApiError, ApiResult};

/// Argon2id cost: OWASP's minimum (19 MiB, 2 passes, 1 lane).
pub const ARGON2_M_KIB: u32 = 19 * 1024;
pub const ARGON2_T: u32 = 2;

fn params() -> Params {
    Params::new(ARGON2_M_KIB, ARGON2_T, 1, None).expect("valid argon2 params")
}

type Area = Vec<Block>;

pub struct Passwords {
    permits: Arc<Semaphore>,
    /// Work areas not in use; never more than there are permits.
    areas: Arc<Mutex<Vec<Area>>>,
    /// Verified against when the user does not exist, so an unknown user
    /// costs the same time as a wrong password.
    dummy: String,
}

/// One run's permit and work area, both given back when it is dropped (in
/// the blocking task, once the hash is done).
struct Run {
    _permit: OwnedSemaphorePermit,
    area: Area,
    areas: Arc<Mutex<Vec<Area>>>,
}

impl Drop for Run {
    fn drop(&mut self) {
        let area = std::mem::take(&mut self.area);
        self.areas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(area);
    }
}

impl Passwords {
    pub fn new() -> Self {
        let mut area = new_area();
        let dummy = hash_with(&mut area, "not a real password").expect("hash dummy password");
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            permits: Arc::new(Semaphore::new(cores.max(2))),
            areas: Arc::new(Mutex::new(vec![area])),
            dummy,
        }
    }

    async fn run(&self) -> ApiResult<Run> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(ApiError::internal)?;
        let area = self
            .areas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_else(new_area);
        Ok(Run {
            _permit: permit,
            area,
            areas: self.areas.clone(),
        })
    }

    pub async fn hash(&self, password: String) -> ApiResult<String> {
        let mut run = self.run().await?;
        tokio::task::spawn_blocking(move || hash_with(&mut run.area, &password))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)
    }

    /// True if `password` matches `hash`; with no hash, burns the same time
    /// and returns false.
    pub async fn verify(&self, password: String, hash: Option<String>) -> ApiResult<bool> {
        let mut run = self.run().await?;
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.dummy.clone());
        let ok = tokio::task::spawn_blocking(move || verify_with(&mut run.area, &password, &hash))
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

fn new_area() -> Area {
    vec![Block::default(); params().block_count()]
}

/// A PHC string (`$argon2id$v=19$m=19456,t=2,p=1$SALT$HASH`), as
/// `PasswordHasher::hash_password` writes it, computed in `area`.
fn hash_with(area: &mut Area, password: &str) -> Result<String, argon2::password_hash::Error> {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).map_err(|_| argon2::password_hash::Error::Crypto)?;
    let salt = SaltString::encode_b64(&raw)?;
    let params = params();
    let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    let output = Output::init_with(Params::DEFAULT_OUTPUT_LEN, |out| {
        argon2
            .hash_password_into_with_memory(password.as_bytes(), &raw, out, &mut *area)
            .map_err(Into::into)
    })?;
    let salt: Salt<'_> = salt.as_salt();
    Ok(PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params)?,
        salt: Some(salt),
        hash: Some(output),
    }
    .to_string())
}

/// Whether `password` gives `phc`'s hash, computed in `area` (or in an area
/// of its own if `phc` asks for more memory than ours); the outputs are
/// compared in constant time.
fn verify_with(area: &mut Area, password: &str, phc: &str) -> bool {
    let check = || -> Result<bool, argon2::password_hash::Error> {
        let h = PasswordHash::new(phc)?;
        let (Some(salt), Some(want)) = (h.salt, h.hash) else {
            return Ok(false);
        };
        let algorithm = Algorithm::try_from(h.algorithm)?;
        let version = h.version.map(Version::try_from).transpose()?;
        let params = Params::try_from(&h)?;
        let mut own;
        let area = if params.block_count() <= area.len() {
            area
        } else {
            own = vec![Block::default(); params.block_count()];
            &mut own
        };
        let argon2 = Argon2::new(algorithm, version.unwrap_or_default(), params);
        let mut salt_buf = [0u8; Salt::MAX_LENGTH];
        let salt = salt.decode_b64(&mut salt_buf)?;
        let got = Output::init_with(want.len(), |out| {
            argon2
                .hash_password_into_with_memory(password.as_bytes(), salt, out, &mut *area)
                .map_err(Into::into)
        })?;
        // `Output`'s equality is constant-time.
        Ok(got == want)
    };
    check().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::{PasswordHasher, PasswordVerifier};

    /// What the server stored before this module computed hashes itself
    /// still verifies, and what it stores now verifies with the crate's own
    /// verifier: the format did not change.
    #[test]
    fn hashes_read_and_write_the_crates_format() {
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params());
        let salt = SaltString::encode_b64(&[7u8; 16]).unwrap();
        let old = argon2
            .hash_password(b"hunter42 hunter42", &salt)
            .unwrap()
            .to_string();
        let mut area = new_area();
        assert!(verify_with(&mut area, "hunter42 hunter42", &old));
        assert!(!verify_with(&mut area, "hunter42 hunter43", &old));
        let new = hash_with(&mut area, "correct horse").unwrap();
        assert!(new.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{new}");
        let parsed = PasswordHash::new(&new).unwrap();
        assert!(argon2.verify_password(b"correct horse", &parsed).is_ok());
        assert!(argon2.verify_password(b"correct horsf", &parsed).is_err());
        // A hash that asks for more memory than the area gets its own.
        let big = Params::new(ARGON2_M_KIB * 2, 1, 1, None).unwrap();
        let big = Argon2::new(Algorithm::Argon2id, Version::V0x13, big)
            .hash_password(b"pw pw pw pw", &salt)
            .unwrap()
            .to_string();
        assert!(verify_with(&mut area, "pw pw pw pw", &big));
        assert!(!verify_with(&mut area, "not it", "not a phc string"));
    }
}
