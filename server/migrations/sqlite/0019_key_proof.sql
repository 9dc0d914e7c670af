-- SHA-256 of the account key's proof (see server/src/keyproof.rs): calls
-- that change the account's history or key must show the proof, which a
-- device token alone is not. NULL for an account made before proofs,
-- until one of its devices sets it.
ALTER TABLE users ADD COLUMN key_proof_hash BLOB;
