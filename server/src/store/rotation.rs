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
//! # One rotation at a time, held by the device that began it
//!
//! The staging account names the device that began it (`staging_by`) and
//! holds the new key's check value from the start (the begin carries it).
//! A begin from that device with that key resumes it; any other begin (a
//! device with the current key whose own rotation this is not, or the
//! same device with another new key) *abandons* it: its device (and so
//! its token) is deleted and the account is retired like one a commit
//! replaced, its rows and files purged, and a new staging account is
//! opened for the caller. So a rotation cut off on a device that was then
//! lost never blocks the account: the lost-device case is what rotation
//! is for. A revoke of the device that began a rotation (or a password
//! change, which revokes every other device) abandons it the same way,
//! in the revoke's transaction: no staging token outlives its device. A
//! commit from any device but the one that began the staging account is
//! refused ([`CommitRefused::NotYours`]), so a device whose rotation was
//! abandoned can never swap in another's.
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

/// What a begin did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begun {
    /// The generation the commit will make current.
    pub generation: i64,
    /// Whether the staging account is new (nothing staged): the caller
    /// carries everything from the start.
    pub fresh: bool,
    /// Whether a rotation another device began and left unfinished was
    /// abandoned by this begin.
    pub abandoned: bool,
    /// The name of the device that began it (none when no device of the
    /// account has its id any more).
    pub abandoned_by: Option<String>,
}

/// Which rotation a revoke or a password change abandons, by the device
/// that began it.
#[derive(Debug, Clone, Copy)]
pub enum Began<'a> {
    /// The one this device began (it is revoked).
    By(&'a str),
    /// Any but one this device began (every other device is revoked); one
    /// from before owners were kept too.
    NotBy(&'a str),
}

impl Began<'_> {
    pub fn matches(self, owner: Option<&str>) -> bool {
        match self {
            Self::By(d) => owner == Some(d),
            Self::NotBy(d) => owner != Some(d),
        }
    }
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
    #[error(
        "the rotation being staged is another device's: the one this device began was \
         abandoned when that one began (nothing was changed)"
    )]
    NotYours,
}

/// What a rotation's begin says of the new key: its check value and the
/// SHA-256 of its proof (see [`crate::keyproof`]), which the staging
/// account holds and the account holds after the commit. Older clients
/// send neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewKey {
    pub check: Option<Vec<u8>>,
    pub proof_hash: Option<Vec<u8>>,
}

/// Whether a begin from device `by` with the new key's check value
/// `key_check` goes on with the staging account that device `owner`
/// began, holding `staged_check`: the same key when both are known, else
/// the same device (a staging account from before owners were kept has
/// none, and any device resumes it, as then).
pub fn resumes(
    staged_check: Option<&[u8]>,
    owner: Option<&str>,
    key_check: Option<&[u8]>,
    by: &str,
) -> bool {
    match (staged_check, key_check) {
        (Some(a), Some(b)) => a == b,
        _ => owner.is_none_or(|o| o == by),
    }
}

#[cfg(test)]
mod tests {
    use super::resumes;

    #[test]
    fn a_begin_resumes_only_its_own_rotation() {
        // The same key: resumed, whoever began it (a rerun on the device).
        assert!(resumes(Some(b"k1"), Some("laptop"), Some(b"k1"), "laptop"));
        // Another key: another rotation, abandoned.
        assert!(!resumes(
            Some(b"k1"),
            Some("laptop"),
            Some(b"k2"),
            "desktop"
        ));
        assert!(!resumes(Some(b"k1"), Some("laptop"), Some(b"k2"), "laptop"));
        // An older client sends no key: the device decides.
        assert!(resumes(Some(b"k1"), Some("laptop"), None, "laptop"));
        assert!(!resumes(Some(b"k1"), Some("laptop"), None, "desktop"));
        // Nothing staged under a key yet: the device decides.
        assert!(!resumes(None, Some("laptop"), Some(b"k2"), "desktop"));
        // A staging account from before owners were kept.
        assert!(resumes(Some(b"k1"), None, None, "desktop"));
    }
}
