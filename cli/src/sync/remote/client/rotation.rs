//! The key rotation calls (see evi-server's `routes/rotation.rs`).

use evi_shared::api::{
    RotationBeginRequest, RotationBeginResponse, RotationCommitRequest, RotationCommitResponse,
};

use super::{Client, ClientError};
use crate::sync::seal::keys::SyncKeys;

impl Client {
    /// Opens (or opens again) the staging account of a rotation to the key
    /// `new` (abandoning another device's), proving the current key.
    pub fn rotation_begin(&self, new: &SyncKeys) -> Result<RotationBeginResponse, ClientError> {
        self.post_proven(
            "/rotation",
            &RotationBeginRequest {
                key_check: Some(new.key_check_value().to_vec().into()),
                key_proof_hash: Some(new.key_proof_hash().to_vec().into()),
            },
        )
    }

    /// Swaps the staging account in, revoking the devices `revoke` names.
    pub fn rotation_commit(
        &self,
        through_seq: u64,
        revoke: &[String],
    ) -> Result<RotationCommitResponse, ClientError> {
        self.post_proven(
            "/rotation/commit",
            &RotationCommitRequest {
                through_seq,
                revoke: revoke.to_vec(),
            },
        )
    }
}
