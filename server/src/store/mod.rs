//! Storage behind a trait: handlers see only [`Store`], so another backend
//! (Postgres) is one more implementation and no handler changes.
//!
//! Every method that changes data returns only once the change is durable.
//! `push` assigns per-user seqs so that commit order equals seq order.

use async_trait::async_trait;
use evi_shared::KeyedId;

pub mod sqlite;

pub type UserId = i64;

/// Errors worth telling apart. Only `Backend` is worth retrying.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("user name is taken")]
    UserExists,
    #[error("invite code missing, unknown or used")]
    InvalidInvite,
    #[error("a different key check value is stored")]
    KeyCheckMismatch,
    #[error("quota exceeded")]
    QuotaExceeded,
    #[error("not found")]
    NotFound,
    #[error("storage backend: {0}")]
    Backend(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A device to create, with the SHA-256 of its fresh token.
#[derive(Debug, Clone)]
pub struct NewDevice {
    pub id: String,
    pub name: String,
    pub token_hash: [u8; 32],
    pub now: i64,
}

/// The device a token belongs to.
#[derive(Debug, Clone)]
pub struct TokenOwner {
    pub user_id: UserId,
    pub user_name: String,
    pub device_id: String,
    pub token_hash: [u8; 32],
    pub last_seen_at: i64,
}

#[derive(Debug, Clone)]
pub struct DeviceRow {
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub last_seen_at: i64,
}

/// A segment to store, ids already validated.
#[derive(Debug, Clone)]
pub struct NewRecord {
    /// The device that pushed it.
    pub device_id: String,
    pub stream: KeyedId,
    pub kind: String,
    pub entry_ids: Vec<KeyedId>,
    pub ciphertext: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushOutcome {
    pub stored: u64,
    pub dropped: u64,
    pub newest_seq: u64,
}

#[derive(Debug, Clone)]
pub struct StoredRecord {
    pub seq: u64,
    pub stream: KeyedId,
    pub kind: String,
    pub entry_ids: Vec<KeyedId>,
    pub ciphertext: Vec<u8>,
    pub device_id: Option<String>,
}

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

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Creates a user and its first device; with `invite`, consumes that
    /// invite in the same transaction.
    async fn create_user(
        &self,
        name: &str,
        password_hash: String,
        invite_hash: Option<[u8; 32]>,
        device: NewDevice,
    ) -> StoreResult<UserId>;
    /// The user's id and password hash, if the user exists.
    async fn credentials(&self, name: &str) -> StoreResult<Option<(UserId, String)>>;
    async fn add_device(&self, user: UserId, device: NewDevice) -> StoreResult<()>;
    async fn token_owner(&self, token_hash: [u8; 32]) -> StoreResult<Option<TokenOwner>>;
    async fn touch_device(&self, device_id: &str, now: i64) -> StoreResult<()>;
    async fn devices(&self, user: UserId) -> StoreResult<Vec<DeviceRow>>;
    /// Deletes the device and so its token; `NotFound` if it is not this user's.
    async fn revoke_device(&self, user: UserId, device_id: &str) -> StoreResult<()>;
    /// Sets a new password hash and deletes every device but `keep`; returns
    /// how many were deleted.
    async fn change_password(&self, user: UserId, hash: String, keep: &str) -> StoreResult<u64>;
    async fn key_check(&self, user: UserId) -> StoreResult<Option<Vec<u8>>>;
    /// Sets the value if unset; `KeyCheckMismatch` if a different one is set.
    async fn set_key_check(&self, user: UserId, value: Vec<u8>) -> StoreResult<()>;
    /// Stores the segments whose entry ids are not all known, in one
    /// transaction; `QuotaExceeded` stores nothing.
    async fn push(
        &self,
        user: UserId,
        records: Vec<NewRecord>,
        quota: Option<u64>,
    ) -> StoreResult<PushOutcome>;
    /// Records with seq > `after`, at most `limit` and about `max_bytes` of
    /// ciphertext (at least one record if any).
    async fn pull(&self, user: UserId, after: u64, limit: u32, max_bytes: u64)
    -> StoreResult<Page>;
    async fn usage(&self, user: UserId) -> StoreResult<Usage>;
    /// The subset of `names` this user has no blob for, in the given order.
    async fn missing_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>>;
    async fn blob_size(&self, user: UserId, name: &KeyedId) -> StoreResult<Option<u64>>;
    /// Records a blob whose file is in place; false if it was already recorded.
    async fn add_blob(
        &self,
        user: UserId,
        name: &KeyedId,
        size: u64,
        quota: Option<u64>,
    ) -> StoreResult<bool>;
    /// Forgets these blobs; returns the names that existed (their files are
    /// the caller's to delete).
    async fn purge_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>>;
    async fn create_invite(&self, code_hash: [u8; 32], now: i64) -> StoreResult<()>;
}
