//! The key rotation calls (see evi-server's `routes/rotation.rs`).

use evi_shared::api::{
    RotationBeginRequest, RotationBeginResponse, RotationCommitRequest, RotationCommitResponse,
};

use super::{Client, ClientError};

impl Client {
    /// Opens (or opens again) the staging account of a rotation to the key
    /// whose check value is `key_check` (abandoning another device's).
    pub fn rotation_begin(&self, key_check: &[u8]) -> Result<RotationBeginResponse, ClientError> {
        self.post(
            "/rotation",
            &RotationBeginRequest {
                key_check: Some(key_check.to_vec().into()),
            },
        )
    }

    /// Swaps the staging account in, revoking the devices `revoke` names.
    pub fn rotation_commit(
        &self,
        through_seq: u64,
        revoke: &[String],
    ) -> Result<RotationCommitResponse, ClientError> {
        self.post(
            "/rotation/commit",
            &RotationCommitRequest {
                through_seq,
                revoke: revoke.to_vec(),
            },
        )
    }
}
