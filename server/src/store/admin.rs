//! What `evi-server admin` reads and changes in the store: the accounts
//! with what they hold, disabling one, a quota per account, retiring one
//! for deletion (its rows and files then go as a retired rotation's do, see
//! [`crate::rotation::purge`]), the invites, and the registration mode. The
//! SQLite side is `sqlite/admin.rs`, the Postgres side `postgres/admin.rs`.

use evi_shared::api::Registration;

use super::UserId;

/// `users.quota_bytes` meaning "no quota", whatever `--quota-bytes` says
/// (NULL means "the server's `--quota-bytes`").
pub const NO_QUOTA: i64 = -1;

/// The quota an account's requests are held to: its own when the operator
/// set one (`-1`: none), else the server's default.
pub fn effective_quota(own: Option<i64>, default: Option<u64>) -> Option<u64> {
    match own {
        None => default,
        Some(q) => u64::try_from(q).ok(),
    }
}

/// The quota of a rotation's staging account, whose account stores
/// `copy_of` bytes: the account's quota, and no more than a copy of what
/// the account holds, with room for the records its other devices push
/// meanwhile and for a new key's records sealing a little larger. Without
/// the second bound a staging account was a second quota's worth of room
/// beside the account's (issue 46, finding 5).
pub fn staging_quota(quota: Option<u64>, copy_of: i64) -> Option<u64> {
    let copy = u64::try_from(copy_of).unwrap_or(0);
    let room = copy
        .saturating_add(copy / 4)
        .saturating_add(STAGING_SLACK_BYTES);
    Some(quota.map_or(room, |q| q.min(room)))
}

/// Bytes a staging account may hold beyond a copy of its account's (see
/// [`staging_quota`]).
pub const STAGING_SLACK_BYTES: u64 = 8 << 20;

/// The `server_settings` name of the registration mode.
pub const REGISTRATION: &str = "registration";

/// The registration mode as `server_settings` stores it; `None` for a value
/// this binary does not know (a newer server's), which then counts as not
/// set.
pub fn parse_registration(v: &str) -> Option<Registration> {
    match v {
        "open" => Some(Registration::Open),
        "invite" => Some(Registration::Invite),
        "closed" => Some(Registration::Closed),
        _ => None,
    }
}

/// One invite as the operator's list shows it. The code itself is not
/// stored (only its SHA-256), so an invite is named by its hash's first
/// hex digits, which say nothing about the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InviteRow {
    pub code_hash: Vec<u8>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    /// The account that registered with it (its current name), if used.
    pub used_by: Option<String>,
}

/// One account as the operator's list shows it. Staging and retired
/// accounts (names starting with `~`) are not listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountRow {
    pub id: UserId,
    pub name: String,
    pub created_at: i64,
    pub devices: i64,
    /// The latest `last_seen_at` of its devices (updated at most once a
    /// minute per device); `None` without devices.
    pub last_seen_at: Option<i64>,
    pub records: i64,
    pub entries: i64,
    pub blobs: i64,
    /// What the quota counts (see [`super::record_cost`]).
    pub bytes_used: i64,
    pub disabled_at: Option<i64>,
    /// The operator's quota for this account (`users.quota_bytes`): `None`
    /// for the server's default, [`NO_QUOTA`] for none.
    pub quota_bytes: Option<i64>,
}
