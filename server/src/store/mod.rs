//! Storage behind a trait: handlers see only [`Store`], so another backend
//! (Postgres) is one more implementation and no handler changes.
//!
//! Every method that changes data returns only once the change is durable.
//! `push` assigns per-user seqs so that commit order equals seq order.
//! What a push admits, and in which order its forgets and the records they
//! replace go, is decided once, in [`push_plan`]: each backend reads the
//! facts and executes the steps with its own SQL.
//!
//! The store keeps record metadata; record bodies are in a
//! [`BodyStore`](crate::bodies::BodyStore), written before the rows that
//! point at them commit (see [`crate::bodies`]).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use evi_shared::KeyedId;
use evi_shared::limits::DEVICE_NAME_MAX_LEN;

use crate::bodies::{BodyRef, PackName};

pub mod admin;
pub mod blob_refs;
pub mod forget;
pub mod pairing;
pub mod postgres;
pub mod push_plan;
pub mod rotation;
pub mod sqlite;

pub use pairing::{NewPairSlot, PairSlot, PairStep};

pub type UserId = i64;

/// What a stored record costs against the quota besides its body: its row
/// (ids, kind, seq, body location) and index entries. Measured on SQLite:
/// about 205 bytes a row.
pub const RECORD_ROW_BYTES: u64 = 256;
/// What each entry id of a record costs: its 65 characters in the row and
/// its row in the table of known ids (about 111 bytes measured).
pub const ENTRY_ID_BYTES: u64 = 128;
/// What a blob costs besides its bytes: its row (about 86 bytes measured)
/// and its file's inode and directory entry.
pub const BLOB_ROW_BYTES: u64 = 256;

/// The quota cost of a record: every byte it stores, so that no shape of
/// push (many ids, no ciphertext) grows an account past its quota.
pub fn record_cost(body_len: u64, entry_ids: usize) -> u64 {
    body_len + RECORD_ROW_BYTES + ENTRY_ID_BYTES * entry_ids as u64
}

/// The quota cost of a blob of `size` bytes on disk.
pub fn blob_cost(size: u64) -> u64 {
    size + BLOB_ROW_BYTES
}

/// Errors worth telling apart. Only `Backend` is worth retrying.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("user name is taken")]
    UserExists,
    #[error("invite code missing, unknown or used")]
    InvalidInvite,
    #[error("a different key check value is stored")]
    KeyCheckMismatch,
    #[error("a different key proof hash is stored")]
    KeyProofMismatch,
    #[error("quota exceeded")]
    QuotaExceeded,
    /// The disk holding the data is full (or over its filesystem quota);
    /// nothing of the write was kept.
    #[error("the server's disk is full")]
    Full,
    #[error("not found")]
    NotFound,
    /// Every pairing slot number is in use (503: slots expire in minutes).
    #[error("no free pairing slot")]
    NoFreeSlot,
    /// A key rotation's commit that changed nothing (see [`rotation`]).
    #[error(transparent)]
    Rotation(#[from] rotation::CommitRefused),
    #[error("storage backend: {0}")]
    Backend(String),
    /// The object store did not answer; nothing was kept (503, retried).
    #[error("object store unavailable: {0}")]
    Unavailable(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Whether an I/O error says the disk is full (`ENOSPC`, or `EDQUOT` of a
/// filesystem quota): the one storage failure the client is told apart,
/// as no retry within seconds changes it.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// A device to create, with the SHA-256 of its fresh token.
#[derive(Debug, Clone)]
pub struct NewDevice {
    pub id: String,
    pub name: String,
    pub token_hash: [u8; 32],
    pub now: i64,
    /// A device of the same account on an older key generation that this
    /// one replaces: deleted before the name is chosen, in the same
    /// transaction (a device on the current key is never).
    pub replaces: Option<String>,
}

/// An account as login finds it.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user_id: UserId,
    /// The name as registered (a login may spell it in another case).
    pub name: String,
    pub password_hash: String,
    /// Disabled by the operator (`evi-server admin disable`).
    pub disabled: bool,
}

/// The device a token belongs to.
#[derive(Debug, Clone)]
pub struct TokenOwner {
    pub user_id: UserId,
    pub user_name: String,
    pub device_id: String,
    pub token_hash: [u8; 32],
    pub last_seen_at: i64,
    /// Set when the account's key was rotated after this device was last
    /// given it: the device must be paired again (see [`rotation`]).
    pub rotated: Option<rotation::Rotated>,
    /// The account is disabled by the operator: its tokens open nothing.
    /// A rotation's staging device is refused with its account.
    pub disabled: bool,
    /// The account's own quota (see [`admin::effective_quota`]); a
    /// rotation's staging account has its account's.
    pub quota_bytes: Option<i64>,
    /// For a rotation's staging account: what its account stores now, of
    /// which the staging account holds a copy (see
    /// [`admin::staging_quota`]).
    pub copy_of_bytes: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct DeviceRow {
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub last_seen_at: i64,
    /// The key generation the device was last given.
    pub key_generation: i64,
    /// Whether that is the account's current one.
    pub current_key: bool,
}

/// A segment to store, ids already validated, its body already durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// The device that pushed it.
    pub device_id: String,
    pub stream: KeyedId,
    pub kind: String,
    pub entry_ids: Vec<KeyedId>,
    /// Blobs it refers to, and what it forgets (see [`blob_refs`]).
    pub refs: evi_shared::blob_refs::SegmentRefs,
    /// The stream whose forget takes this record too (see [`forget`]).
    pub group: Option<KeyedId>,
    pub body: BodyRef,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushOutcome {
    pub stored: u64,
    pub dropped: u64,
    pub newest_seq: u64,
    /// With `per_item`: indexes of the records the quota refused (see
    /// `PushResponse::over_quota`).
    pub over_quota: Vec<u32>,
    /// Indexes of the records refused because their stream is forgotten
    /// (see [`forget`]).
    pub forgotten: Vec<u32>,
    /// Whether a forget in this push left packs to compact (see
    /// [`crate::bodies::compact`]).
    pub compact: bool,
    /// Indexes of the records refused because a blob they refer to is not
    /// stored (see [`blob_refs`]).
    pub blob_missing: Vec<u32>,
    /// Whether this push left blobs to collect (see [`crate::blobs::collect`]).
    pub collect_blobs: bool,
}

/// Where a stored record's body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredBody {
    /// In the row itself: records stored before bodies left the database.
    Inline(Vec<u8>),
    /// In the body store.
    Stored(BodyRef),
}

impl StoredBody {
    pub fn len(&self) -> u64 {
        match self {
            Self::Inline(b) => b.len() as u64,
            Self::Stored(r) => r.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A record's metadata (its body is read separately, so a page's rows stay
/// small whatever its bodies weigh).
#[derive(Debug, Clone)]
pub struct StoredRecord {
    pub seq: u64,
    pub stream: KeyedId,
    pub kind: String,
    pub entry_ids: Vec<KeyedId>,
    pub body: StoredBody,
    pub device_id: Option<String>,
}

/// What a record costs against a page's byte budget: what its wire sends
/// for it (JSON with base64, or a frame).
pub type PageCost = Arc<dyn Fn(&StoredRecord) -> u64 + Send + Sync>;

#[derive(Debug, Clone)]
pub struct Page {
    pub records: Vec<StoredRecord>,
    pub more: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub newest_seq: u64,
    pub records: u64,
    pub entries: u64,
    pub blobs: u64,
    pub bytes_used: u64,
}

/// What the whole server holds, for the metrics: from the per-user counters
/// kept with every change, so one read of the users table, not a scan of
/// the records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub users: u64,
    pub devices: u64,
    pub records: u64,
    pub entries: u64,
    pub blobs: u64,
}

/// The name a new device gets when the account's live devices already use
/// the names for which `taken` is true: `asked` itself if free, else the
/// first free `asked-2`, `asked-3`, …, the base shortened so the whole
/// stays within [`DEVICE_NAME_MAX_LEN`] characters. Revoked
/// devices are deleted, so their names are free again. The backends
/// compare names as a list shows them ([`crate::device_name::shown`]:
/// `laptop` and `lap\u{200B}top` are one name, `Laptop` and `laptop` two).
pub fn unique_device_name(asked: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(asked) {
        return asked.to_owned();
    }
    // An account has finitely many devices, so some suffix is free.
    (2u64..)
        .map(|n| {
            let suffix = format!("-{n}");
            let base: String = asked
                .chars()
                .take(DEVICE_NAME_MAX_LEN.saturating_sub(suffix.len()))
                .collect();
            format!("{base}{suffix}")
        })
        .find(|candidate| !taken(candidate))
        .expect("a free suffix exists")
}

/// A pack on the compaction list (see [`crate::bodies::compact`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToCompact {
    pub user: UserId,
    pub pack: PackName,
    /// How long ago the records were pointed off it, by the store's clock
    /// (one clock for every replica); `None` before.
    pub repointed_ago: Option<std::time::Duration>,
}

/// [`ToCompact::repointed_ago`] from the milliseconds of the repoint and of
/// now, both read from the store's clock.
pub(crate) fn repointed_ago(at: Option<i64>, now: i64) -> Option<std::time::Duration> {
    at.map(|at| std::time::Duration::from_millis(now.saturating_sub(at).max(0) as u64))
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates a user and its first device (under the name asked for: the
    /// account has no other device yet); with `invite`, consumes that invite
    /// in the same transaction. `UserExists` if an account's name matches
    /// `name` in any ASCII case. The invite is checked before the name, so
    /// `UserExists` goes only to someone holding a valid code.
    async fn create_user(
        &self,
        name: &str,
        password_hash: String,
        invite_hash: Option<[u8; 32]>,
        device: NewDevice,
    ) -> StoreResult<UserId>;
    /// The account `name` names, in any ASCII case. A database from before
    /// names compared without case may hold several such accounts: then
    /// the one spelled exactly so, and none if no spelling is exact.
    async fn credentials(&self, name: &str) -> StoreResult<Option<Credentials>>;
    /// Adds a device and returns the name it got: `device.name`, or the
    /// first of `NAME-2`, `NAME-3`, … that no device of the account has
    /// (see [`unique_device_name`]). Choosing the name and inserting the
    /// device are one atomic step (one transaction under the user's write
    /// lock), so two concurrent logins never get the same name.
    async fn add_device(&self, user: UserId, device: NewDevice) -> StoreResult<String>;
    async fn token_owner(&self, token_hash: [u8; 32]) -> StoreResult<Option<TokenOwner>>;
    async fn touch_device(&self, device_id: &str, now: i64) -> StoreResult<()>;
    /// The account's devices by id, those after `after` (an id), at most
    /// `limit`.
    async fn devices(
        &self,
        user: UserId,
        after: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<DeviceRow>>;
    /// Deletes the device and so its token; `NotFound` if it is not this
    /// user's. A key rotation it began is abandoned in the same step (see
    /// [`rotation`]): whether one was (its staging account is to purge).
    async fn revoke_device(&self, user: UserId, device_id: &str) -> StoreResult<bool>;
    /// Sets a new password hash and deletes every device but `keep`
    /// (abandoning a key rotation another device began, see [`rotation`]);
    /// returns how many were deleted.
    async fn change_password(&self, user: UserId, hash: String, keep: &str) -> StoreResult<u64>;
    async fn key_check(&self, user: UserId) -> StoreResult<Option<Vec<u8>>>;
    /// Sets the value if unset; `KeyCheckMismatch` if a different one is set.
    async fn set_key_check(&self, user: UserId, value: Vec<u8>) -> StoreResult<()>;
    /// SHA-256 of the account key's proof, if one is set (see
    /// [`crate::keyproof`]).
    async fn key_proof_hash(&self, user: UserId) -> StoreResult<Option<Vec<u8>>>;
    /// Sets the proof hash if unset; the same again is fine; another is
    /// `KeyProofMismatch` unless `replace` (the caller showed the password).
    async fn set_key_proof_hash(
        &self,
        user: UserId,
        hash: Vec<u8>,
        replace: bool,
    ) -> StoreResult<()>;
    /// Stores the segments whose entry ids are not all known, in one
    /// transaction. The quota counts [`record_cost`] of each stored record:
    /// past it, without `per_item`, `QuotaExceeded` stores nothing; with
    /// `per_item`, a record that does not fit is refused (named in
    /// `over_quota`) with every later record of its stream, and the rest is
    /// stored. The rules, and their order, are [`push_plan`]'s.
    async fn push(
        &self,
        user: UserId,
        records: Vec<NewRecord>,
        quota: Option<u64>,
        per_item: bool,
    ) -> StoreResult<PushOutcome>;
    /// Records with seq > `after` (of `stream` only, when given: read
    /// through an index on (user, stream, seq), so one session costs its
    /// own records whatever the history's size), at most `limit` and at
    /// most `max_bytes` as counted by `cost` (at least one record if any).
    #[allow(clippy::too_many_arguments)]
    async fn pull(
        &self,
        user: UserId,
        after: u64,
        stream: Option<KeyedId>,
        limit: u32,
        max_bytes: u64,
        cost: PageCost,
    ) -> StoreResult<Page>;
    /// Every (user, pack) some record points at, and every pack on the
    /// compaction list (the compaction removes those, after its grace):
    /// what the orphan sweep keeps.
    async fn referenced_packs(&self) -> StoreResult<HashSet<(UserId, PackName)>>;
    /// Whether any record of `user` points at `pack`.
    async fn pack_referenced(&self, user: UserId, pack: &PackName) -> StoreResult<bool>;
    async fn usage(&self, user: UserId) -> StoreResult<Usage>;
    /// How many records with seq > `after` `device` did not push (those
    /// stored without a device count): what its pull would apply.
    async fn pending_for_device(&self, user: UserId, device: &str, after: u64) -> StoreResult<u64>;
    /// Marks the records of `seqs` (of this user) damaged: their entries no
    /// longer count as held, and [`Self::push`] drops a marked row once the
    /// records it stores hold all of its entries. How many seqs name a
    /// record.
    async fn mark_damaged(&self, user: UserId, seqs: Vec<u64>) -> StoreResult<u64>;
    /// The subset of `ids` some record of this user holds, in the given order.
    async fn known_entries(&self, user: UserId, ids: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>>;
    /// The subset of `names` this user has no blob for, in the given order.
    async fn missing_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>>;
    async fn blob_size(&self, user: UserId, name: &KeyedId) -> StoreResult<Option<u64>>;
    /// Records a blob whose file is in place; false if it was already
    /// recorded. The quota counts [`blob_cost`] of `size`. Refused while
    /// a blob of the name is collected, or was since `since_ms` (when the
    /// upload began: see [`blob_refs`]). `part_of`: the whole blob this is
    /// a part or the manifest of (see [`evi_shared::blob_refs`]).
    async fn add_blob(
        &self,
        user: UserId,
        name: &KeyedId,
        size: u64,
        quota: Option<u64>,
        since_ms: i64,
        part_of: Option<&KeyedId>,
    ) -> StoreResult<bool>;
    /// Forgets these blobs; returns the names that existed (their files are
    /// the caller's to delete).
    async fn purge_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>>;
    /// Stores an invite's hash; `expires_at`: when it stops working.
    async fn create_invite(
        &self,
        code_hash: [u8; 32],
        now: i64,
        expires_at: Option<i64>,
    ) -> StoreResult<()>;
    async fn totals(&self) -> StoreResult<Totals>;
    /// Whether an unused, unexpired invite has this hash: checked before a
    /// registration hashes its password (`create_user` checks again as it
    /// consumes it).
    async fn invite_usable(&self, code_hash: [u8; 32], now: i64) -> StoreResult<bool>;
    /// Opens a pairing slot under the lowest free number and returns it;
    /// expired slots go first. Picking the number and inserting are one
    /// atomic step (two creators, on any replica, never share a number).
    async fn pair_open(&self, slot: NewPairSlot) -> StoreResult<u32>;
    /// The slot `number` if it has not expired by `now`.
    async fn pair_slot(&self, number: u32, now: i64) -> StoreResult<Option<PairSlot>>;
    /// Moves the live slot `number` from `from` by `step`, as one
    /// compare-and-set; false if it was not in `from` (or expired).
    async fn pair_step(
        &self,
        number: u32,
        from: evi_shared::api::PairState,
        step: PairStep,
        now: i64,
    ) -> StoreResult<bool>;
    /// Adds `device` to `user`'s account as the device the live, joined
    /// slot `number` (of `user`) makes, in one transaction: the device this
    /// slot made before, if any, goes first, so that a slot holds one
    /// device however often it is asked (its creator's token could
    /// otherwise mint devices without end through one joined slot), and a
    /// creator whose answer was lost can ask again. The device's name, or
    /// `None` when the slot is not joined (or expired, or another's).
    async fn pair_mint(
        &self,
        number: u32,
        user: UserId,
        device: NewDevice,
        now: i64,
    ) -> StoreResult<Option<String>>;
    /// Blobs listed for collection and not collected yet, with their
    /// owner (see [`blob_refs`]); drops listings done long ago.
    async fn blobs_to_collect(&self) -> StoreResult<Vec<(UserId, KeyedId)>>;
    /// Deletes the row of listed blob `name`, and those of its parts and
    /// manifest, if no record refers to it; `None` when it is referred to
    /// again (and no longer listed, its bytes stay), else the pieces whose
    /// rows went, each listed in the same step (their bytes are removed
    /// and their listings marked done by the caller, before `name`'s).
    async fn collect_blob_row(
        &self,
        user: UserId,
        name: &KeyedId,
    ) -> StoreResult<Option<Vec<KeyedId>>>;
    /// Marks the collection of `name` done (its bytes are gone).
    async fn blob_collected(&self, user: UserId, name: &KeyedId) -> StoreResult<()>;
    /// Packs a forget left holding bodies of deleted records, with their
    /// owner and how long ago their records were pointed off them: what
    /// [`crate::bodies::compact`] rewrites, then removes.
    async fn packs_to_compact(&self) -> StoreResult<Vec<ToCompact>>;
    /// Where the bodies of `user`'s records still in `pack` are, by seq.
    async fn bodies_in_pack(
        &self,
        user: UserId,
        pack: &PackName,
    ) -> StoreResult<Vec<(u64, BodyRef)>>;
    /// Points each record of `moved` that is still in `from` at its new
    /// place, in one transaction, and records when (the store's clock) on
    /// `from`'s line of the list, unless an earlier call did; lists the new
    /// pack to compact when some of them were deleted meanwhile (a forget
    /// while they were copied). `moved` may be empty: the time is still
    /// recorded.
    async fn repoint_bodies(
        &self,
        user: UserId,
        from: &PackName,
        moved: Vec<(u64, BodyRef)>,
    ) -> StoreResult<()>;
    /// Takes `pack` off the packs to compact (it is gone).
    async fn compaction_done(&self, user: UserId, pack: &PackName) -> StoreResult<()>;
    /// Opens the staging account of a key rotation of `user` that device
    /// `by` begins, for the new key `key` (an older client sends neither
    /// its check value nor its proof hash), or finds the one it opened before (see
    /// [`rotation`]: another device's is abandoned), and gives it `device`
    /// as its only device (an earlier token stops working). `NotFound`
    /// when `user` is itself a staging account.
    async fn rotation_begin(
        &self,
        user: UserId,
        device: NewDevice,
        by: &str,
        key: rotation::NewKey,
    ) -> StoreResult<rotation::Begun>;
    /// Swaps the staging account in, in one transaction (see [`rotation`]).
    async fn rotation_commit(
        &self,
        user: UserId,
        device_id: &str,
        through_seq: u64,
        revoke: Vec<String>,
        now: i64,
    ) -> StoreResult<rotation::Committed>;
    /// Abandons every rotation begun before `begun_before` (its staging
    /// account retired, as an abandon by a revoke retires it, for
    /// [`crate::rotation::purge`]); how many.
    async fn expire_rotations(&self, begun_before: i64, now: i64) -> StoreResult<usize>;
    /// Accounts a rotation retired whose data is still to delete.
    /// Every account with what it holds, for the operator (see [`admin`]).
    async fn accounts(&self) -> StoreResult<Vec<admin::AccountRow>>;
    /// Disables the account (`at`: since when) or enables it (`None`);
    /// whether there is such an account.
    async fn set_disabled(&self, user: UserId, at: Option<i64>) -> StoreResult<bool>;
    /// Retires the account for deletion in one transaction: its devices
    /// (so its tokens) and a rotation under way go, its name is freed, and
    /// [`crate::rotation::purge`] deletes its rows and files. Whether there
    /// was such an account.
    async fn retire_account(&self, user: UserId, now: i64) -> StoreResult<bool>;
    /// Sets the account's own quota (`None`: the server's default; see
    /// [`admin::NO_QUOTA`]); whether there is such an account. A rotation
    /// under way is held to it too.
    async fn set_quota(&self, user: UserId, quota: Option<i64>) -> StoreResult<bool>;
    /// Every invite, used or not, oldest first.
    async fn invites(&self) -> StoreResult<Vec<admin::InviteRow>>;
    /// Makes the unused invite `code_hash` stop working at `at`; whether
    /// there was such an unused invite.
    async fn expire_invite(&self, code_hash: Vec<u8>, at: i64) -> StoreResult<bool>;
    /// Deletes the unused invite `code_hash`; whether there was one.
    async fn revoke_invite(&self, code_hash: Vec<u8>) -> StoreResult<bool>;
    /// The registration mode the operator set (by the server's
    /// `--registration` at its last start, or `evi-server admin
    /// registration`); `None` if never set.
    async fn registration(&self) -> StoreResult<Option<evi_shared::api::Registration>>;
    async fn set_registration(&self, mode: evi_shared::api::Registration) -> StoreResult<()>;
    async fn retired_users(&self) -> StoreResult<Vec<UserId>>;
    /// The blob names a retired account still holds (their files are the
    /// caller's to delete before [`Self::drop_retired`]).
    async fn retired_blobs(&self, user: UserId) -> StoreResult<Vec<KeyedId>>;
    /// Deletes every row of the retired account `user`, the account last.
    async fn drop_retired(&self, user: UserId) -> StoreResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn among<'a>(names: &'a [&'a str]) -> impl Fn(&str) -> bool + 'a {
        move |n| names.contains(&n)
    }

    #[test]
    fn a_free_name_is_kept_a_taken_one_gets_the_first_free_suffix() {
        assert_eq!(unique_device_name("laptop", among(&["phone"])), "laptop");
        assert_eq!(unique_device_name("laptop", among(&["laptop"])), "laptop-2");
        assert_eq!(
            unique_device_name("laptop", among(&["laptop", "laptop-2", "laptop-4"])),
            "laptop-3"
        );
        // A gap left by a revoked device is filled first.
        assert_eq!(
            unique_device_name("laptop", among(&["laptop", "laptop-3"])),
            "laptop-2"
        );
        assert_eq!(
            unique_device_name("laptop-2", among(&["laptop-2"])),
            "laptop-2-2"
        );
    }

    #[test]
    fn the_base_is_shortened_to_stay_within_the_limit() {
        let long = "a".repeat(DEVICE_NAME_MAX_LEN);
        let taken = [long.as_str()];
        let got = unique_device_name(&long, among(&taken));
        assert_eq!(got.len(), DEVICE_NAME_MAX_LEN);
        assert!(got.ends_with("a-2"));
        // The limit counts characters: 'é' is two bytes and one character.
        let wide = "é".repeat(DEVICE_NAME_MAX_LEN);
        let taken = [wide.as_str()];
        let got = unique_device_name(&wide, among(&taken));
        assert_eq!(got.chars().count(), DEVICE_NAME_MAX_LEN);
        assert!(got.ends_with("é-2"));
        // From ten on the suffix is longer and the base shorter: still unique.
        let mut taken = vec![long.clone()];
        for n in 2..=10 {
            let refs: Vec<&str> = taken.iter().map(String::as_str).collect();
            let got = unique_device_name(&long, among(&refs));
            assert_eq!(got.len(), DEVICE_NAME_MAX_LEN);
            assert!(got.ends_with(&format!("a-{n}")), "{got}");
            taken.push(got);
        }
    }
}
