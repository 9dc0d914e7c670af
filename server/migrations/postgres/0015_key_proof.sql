-- SHA-256 of the account key's proof: as SQLite's 0019_key_proof.sql.
ALTER TABLE users ADD COLUMN IF NOT EXISTS key_proof_hash BYTEA;
