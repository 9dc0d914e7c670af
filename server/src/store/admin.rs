//! What `evi-server admin` reads and changes in the store: the accounts
//! with what they hold, disabling one, and retiring one for deletion (its
//! rows and files then go as a retired rotation's do, see
//! [`crate::rotation::purge`]). The SQLite side is `sqlite_admin.rs`, the
//! Postgres side `postgres/admin.rs`.

use super::UserId;

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
}
