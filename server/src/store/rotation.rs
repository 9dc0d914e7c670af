//! Key rotation in the store: a staging account, and the one transaction
//! that swaps it in.
//!
//! Keyed ids and every ciphertext change with the key, so a rotation cannot
//! rewrite an account in place without a window where some records open
//! under one key and some under the other. Instead the rotating device
//! fills a *staging account*: a users row of its own (`staging_of` names
//! the account it will replace; its name starts with `~`, which no
//! registered name can, and its password hash verifies nothing) with one
//! device whose token only that rotation holds. It pushes and uploads
//! there through the ordinary routes, so merge by entry id, forgets and
//! quotas work as for any account, and a rerun after a kill finds what it
//! staged (uploads are idempotent by keyed id).
//!
//! [`Store::rotation_commit`](super::Store::rotation_commit) then, in one
//! transaction: checks that the staging account holds a key check value
//! and that the old account has no record after the `through_seq` the
//! rotating device carried; deletes the devices to revoke; moves every
//! other device to the staging account (the rotating one at the new
//! generation, the rest at the old, so they get `key_rotated`); gives the
//! staging account the old one's name, password, creation time and
//! invites; and marks the old account retired under a `~retired-` name.
//! Any request sees either the old account whole or the new one whole.
//!
//! A retired account has no device, so nothing reads it; its rows and
//! files (body packs, blobs) are deleted by [`crate::rotation::purge`] right
//! after the commit, and again at every start until none is left.

use super::UserId;

/// The staging account's name for account `user`.
pub fn staging_name(user: UserId) -> String {
    format!("~staging-{user}")
}

/// A retired account's name (free for nobody: `~` starts no user name).
pub fn retired_name(user: UserId) -> String {
    format!("~retired-{user}")
}

/// What `password_hash` holds for a staging account: no PHC string, so no
/// password verifies against it.
pub const NO_PASSWORD: &str = "!staging";

/// The tables holding an account's rows besides `users`, deleted (in one
/// transaction, before the account's row) when a retired account goes.
pub const ACCOUNT_TABLES: &[&str] = &[
    "records",
    "entries",
    "blobs",
    "damaged_records",
    "forgotten_streams",
    "forget_compactions",
    "pair_slots",
    "blob_refs",
    "blob_collections",
];

/// When and from which device the account's key was rotated: told to a
/// device whose key is older.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    pub at: i64,
    pub by: String,
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The account's id until now (retired: its data is to purge).
    pub old_user: UserId,
    /// The account's id from now on (the staging account's).
    pub new_user: UserId,
    pub generation: i64,
    /// The device ids revoked, of those asked for.
    pub revoked: Vec<String>,
}

/// Why a commit changed nothing, besides the store's own errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitRefused {
    #[error("no rotation was begun for this account (or it was committed already)")]
    NotBegun,
    #[error("the staging account holds no key check value yet")]
    NoKeyCheck,
    #[error("the account holds records up to seq {newest}, after the {through} carried")]
    Behind { newest: u64, through: u64 },
}
