//! The key rotation calls (see evi-server's `routes/rotation.rs`).

use evi_shared::api::{RotationBeginResponse, RotationCommitRequest, RotationCommitResponse};

use super::{Client, ClientError};

impl Client {
    /// Opens (or opens again) the staging account of a rotation.
    pub fn rotation_begin(&self) -> Result<RotationBeginResponse, ClientError> {
        self.post("/rotation", &serde_json::json!({}))
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
