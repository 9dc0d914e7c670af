//! The HTTP API of `evi-server`, as plain serde types both sides use.
//!
//! Every path is under `/api/v1` except `/healthz`. All bodies are JSON except
//! blob uploads and downloads (`application/octet-stream`). Every call except
//! register, login, capabilities and health needs `Authorization: Bearer TOKEN`.
//!
//! Compatibility rules: fields added later carry `#[serde(default)]`, so an
//! older peer's message still parses; unknown fields are ignored; an unknown
//! error code parses as [`ErrorCode::Unknown`]. Types holding a password or a
//! token redact it in their `Debug` output so it never reaches a log.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::KeyedId;

#[cfg(feature = "openapi")]
use utoipa::{IntoParams, ToSchema};

/// Path prefix of every versioned endpoint.
pub const API_PREFIX: &str = "/api/v1";

/// Opaque bytes carried as standard (padded) base64 in JSON.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Base64Bytes(pub Vec<u8>);

impl fmt::Debug for Base64Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Base64Bytes({} bytes)", self.0.len())
    }
}

impl From<Vec<u8>> for Base64Bytes {
    fn from(v: Vec<u8>) -> Self {
        Self(v)
    }
}

impl Serialize for Base64Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&B64.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Base64Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        B64.decode(s.as_bytes())
            .map(Self)
            .map_err(|e| serde::de::Error::custom(format!("invalid base64: {e}")))
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Base64Bytes {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Byte,
            )))
            .description(Some("standard base64"))
            .pattern(Some(base64_pattern(None)))
            .into()
    }
}

/// A regular expression for exactly the strings [`Base64Bytes`] decodes:
/// standard alphabet, padded, no stray bits in the last character (the
/// decoder refuses those), of at most `max_bytes` decoded bytes when given.
#[cfg(feature = "openapi")]
pub fn base64_pattern(max_bytes: Option<usize>) -> String {
    const QUAD: &str = "[A-Za-z0-9+/]{4}";
    const ONE: &str = "[A-Za-z0-9+/][AQgw]==";
    const TWO: &str = "[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=";
    let Some(max) = max_bytes else {
        return format!("^(?:{QUAD})*(?:{ONE}|{TWO})?$");
    };
    let (quads, rest) = (max / 3, max % 3);
    let tail = match rest {
        0 => String::new(),
        1 => format!("(?:{ONE})?"),
        _ => format!("(?:{ONE}|{TWO})?"),
    };
    if quads == 0 {
        return format!("^{tail}$");
    }
    // Fewer whole quads than the limit allows, with any tail; or exactly
    // as many, with a tail that fits in what is left.
    format!(
        "^(?:(?:{QUAD}){{0,{}}}(?:{ONE}|{TWO})?|(?:{QUAD}){{{quads}}}{tail})$",
        quads - 1
    )
}
#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Base64Bytes {}

/// Stable error codes of the `{code, message}` error body. The code is the
/// contract; the message is for people and may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: the body or query does not parse or breaks a format rule.
    BadRequest,
    /// 400: a stream id, entry id or blob name is not 64 lowercase hex.
    InvalidId,
    /// 401: no token, an unknown token, or a revoked device's token.
    Unauthorized,
    /// 401: login with a wrong user name or password (never says which).
    InvalidCredentials,
    /// 403: this server does not accept new accounts.
    RegistrationClosed,
    /// 403: registration needs an invite code and this one is missing, unknown or used.
    InvalidInvite,
    /// 403: the server's operator disabled the account (`evi-server admin
    /// disable`): its tokens and logins are refused, its data kept, until
    /// the operator enables it again.
    AccountDisabled,
    /// 404: no such device or blob (for this user).
    NotFound,
    /// 405: the path does not take this method (the `Allow` header lists
    /// those it takes).
    MethodNotAllowed,
    /// 408: the request body stopped arriving (nothing for the server's
    /// body timeout); the request may be sent again.
    RequestTimeout,
    /// 409: the user name is taken.
    UserExists,
    /// 409: the account already holds a different key check value.
    KeyCheckMismatch,
    /// 403: this call changes the account's history or key (a forget or
    /// its undo, a damage report, a key rotation's begin or commit, a new
    /// device from a pairing) and needs the [`KEY_PROOF_HEADER`] of the
    /// account's key, which a device token alone is not. Nothing changed.
    KeyProofRequired,
    /// 409: the account holds another key proof (set by a device whose key
    /// is not this one): the account's password replaces it (`PUT
    /// /key-check` with `password`; `evi sync login` does it).
    KeyProofMismatch,
    /// 413: the request is larger than the advertised limit.
    PayloadTooLarge,
    /// 415: the request body's `Content-Type` is not one this endpoint reads
    /// (JSON bodies must say `application/json`).
    UnsupportedMediaType,
    /// 421: the request's `Host` is not the server's configured public URL
    /// (the message names that URL).
    MisdirectedRequest,
    /// 429: too many attempts; retry after the `Retry-After` seconds.
    RateLimited,
    /// 500: the server failed; the request may be retried.
    Internal,
    /// 503: the server is shutting down or overloaded; retry.
    Unavailable,
    /// 507: storing this would pass the account's quota; nothing was stored.
    QuotaExceeded,
    /// 507: the server's disk is full; nothing of the request was stored,
    /// and the same request succeeds once the operator has made room.
    StorageFull,
    /// 409: the pairing slot is not at the step this call belongs to (a
    /// second device joined first, or it ended): start a new pairing.
    PairingState,
    /// 409: the account's key was rotated on another device after this
    /// device last synced: its key opens nothing the account holds now.
    /// The message says when and from which device; the device must be
    /// paired again (`evi sync join`) before it syncs.
    KeyRotated,
    /// 409: the account holds records newer than the `through_seq` a key
    /// rotation's commit named: carry those into the staging account too,
    /// then commit again (nothing was changed).
    RotationBehind,
    /// 409: a key rotation's staging account is not ready to be swapped in
    /// (it holds no key check value yet): run the rotation again, which
    /// sets it before committing (nothing was changed).
    RotationNotReady,
    /// 409: the staging account being filled is another device's rotation:
    /// the one the calling device began was abandoned when that device
    /// began its own (any device with the current key may abandon a
    /// rotation left unfinished). Nothing was changed; running the
    /// rotation again begins it anew, abandoning the other in turn.
    RotationAbandoned,
    /// A code this version does not know (sent by a newer server).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimited | Self::Internal | Self::Unavailable | Self::RequestTimeout
        )
    }
}

/// Body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// How a server admits new accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Registration {
    Open,
    Invite,
    Closed,
}

impl fmt::Display for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Open => "open",
            Self::Invite => "invite",
            Self::Closed => "closed",
        })
    }
}

/// `GET /api/v1/capabilities` (no auth): the limits this server enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Capabilities {
    /// Largest `POST /records` body in bytes (413 past it).
    pub max_batch_bytes: u64,
    /// Largest blob upload in bytes (413 past it).
    pub max_blob_bytes: u64,
    /// Most records in one pull page.
    pub max_page_records: u32,
    /// Most bytes in one pull page, counted as sent (ids, heads and bodies;
    /// base64 on the JSON page): a single larger record still comes alone.
    /// Older servers counted only ciphertext on the JSON page.
    pub max_page_bytes: u64,
    pub registration: Registration,
    /// Whether `POST /records` takes, and `GET /records` can answer, the
    /// framed binary body of [`crate::frames`] (false from older servers,
    /// which only speak the JSON forms).
    #[serde(default)]
    pub frames: bool,
    /// Whether `POST /records/known` exists (false from older servers).
    #[serde(default)]
    pub known_entries: bool,
    /// Whether `POST /records/damaged` exists (false from older servers).
    #[serde(default)]
    pub damage_reports: bool,
    /// Whether `GET /records` takes `stream` (false from older servers,
    /// which would ignore it and answer every stream).
    #[serde(default)]
    pub stream_pull: bool,
    /// Longest `GET /records/wait` in seconds, or 0 when the server has no
    /// such endpoint (older servers).
    #[serde(default)]
    pub max_wait_secs: u32,
}

/// `POST /api/v1/register` (no auth): creates the account and its first device.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RegisterRequest {
    /// `[A-Za-z0-9._-]`, 1 to 64 characters. Names compare without regard
    /// to case (`Alice` and `alice` are one account); the account keeps the
    /// spelling it registered with, which login answers with.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub user: String,
    /// 8 to 1024 characters.
    pub password: String,
    /// Device name shown in the device list.
    pub device: String,
    /// One-time code from `evi-server invite` when registration is `invite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invite: Option<String>,
}

impl fmt::Debug for RegisterRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisterRequest")
            .field("user", &self.user)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// `POST /api/v1/login` (no auth): adds a device to an existing account.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct LoginRequest {
    /// As at registration, in any case (400 if it breaks the rule).
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9._-]{1,64}$"))]
    pub user: String,
    pub password: String,
    pub device: String,
}

impl fmt::Debug for LoginRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginRequest")
            .field("user", &self.user)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// Answer to `POST /api/v1/register` and `POST /api/v1/login`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct AuthResponse {
    /// Bearer token of the new device; shown once, stored by the server only hashed.
    pub token: String,
    pub device_id: String,
    pub user: String,
    /// The name the server gave the device, which may differ from the one
    /// asked for: a name another live device of the account already has
    /// becomes `NAME-2` (or `NAME-3`, …). Empty from servers older than this
    /// field.
    #[serde(default)]
    pub device_name: String,
}

impl fmt::Debug for AuthResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthResponse")
            .field("device_id", &self.device_id)
            .field("user", &self.user)
            .field("device_name", &self.device_name)
            .finish_non_exhaustive()
    }
}

/// One device in `GET /api/v1/devices`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Device {
    pub id: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// Last authenticated request, to within a minute.
    pub last_seen_at: DateTime<Utc>,
    /// Whether this is the device whose token made the call.
    pub current: bool,
    /// The generation of the account's key this device was last given
    /// (1 for the key `evi sync init` made, one more for each
    /// `evi sync key rotate`); 0 from servers older than this field.
    #[serde(default)]
    pub key_generation: u64,
    /// Whether that is the account's current key: a device that is not
    /// must be paired again before it syncs. True from older servers.
    #[serde(default = "yes")]
    pub current_key: bool,
}

fn yes() -> bool {
    true
}

/// `GET /api/v1/devices`: a page of the account's devices that hold a
/// valid token, by id. `DELETE /api/v1/devices/{id}` revokes one (204); its
/// token then gets 401.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DevicesResponse {
    pub devices: Vec<Device>,
    /// Where the next page starts (its `after`), when there are more;
    /// absent on the last page, and from older servers, which send every
    /// device at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// Query of `GET /api/v1/devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct DevicesQuery {
    /// Most devices in the page; the server's `--max-page-devices` (500
    /// unless set) when absent or larger (0 counts as 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        param(value_type = Option<u64>, minimum = 0, maximum = 4294967295_u64)
    )]
    pub limit: Option<u32>,
    /// The `next` of the page before: devices with a larger id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// `POST /api/v1/password`: changes the password and revokes every other device.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PasswordChangeRequest {
    pub old_password: String,
    pub new_password: String,
}

impl fmt::Debug for PasswordChangeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PasswordChangeRequest { .. }")
    }
}

/// Answer to `POST /api/v1/password`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PasswordChangeResponse {
    /// How many other devices lost their token.
    pub revoked_devices: u64,
}

/// `GET /api/v1/key-check`: the account's key check value, if a device set one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KeyCheckResponse {
    pub key_check: Option<Base64Bytes>,
    /// Whether the account holds a key proof (see [`KEY_PROOF_HEADER`]):
    /// a device of an account made before proofs sets it once.
    #[serde(default)]
    pub key_proof: bool,
}

/// Header carrying the key proof: 64 lowercase hex of 32 bytes the
/// account's key derives (HKDF, label `evi-sync-v1 key-proof`), of which
/// the server keeps only the SHA-256. Sent only on the calls that need it
/// ([`ErrorCode::KeyProofRequired`]): a device token does not change the
/// account's history or key, the key does.
pub const KEY_PROOF_HEADER: &str = "evi-key-proof";

/// `PUT /api/v1/key-check`: sets the value if unset (200); the same value again
/// is 200; a different value is 409 `key_check_mismatch`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KeyCheckRequest {
    pub key_check: Base64Bytes,
    /// SHA-256 of the key's proof (see [`KEY_PROOF_HEADER`]): set if the
    /// account holds none; the same again is 200; another is 409
    /// `key_proof_mismatch` unless `password` is the account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_proof_hash: Option<Base64Bytes>,
    /// The account's password, to replace a key proof hash set by another
    /// key (only with `key_check` the account's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl fmt::Debug for KeyCheckRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyCheckRequest")
            .field("key_check", &self.key_check)
            .field("key_proof_hash", &self.key_proof_hash)
            .finish_non_exhaustive()
    }
}

/// One encrypted segment in a push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Segment {
    /// Keyed stream (session) id.
    pub stream: KeyedId,
    /// What the segment holds, e.g. `entries` or `journal`: `[a-z0-9_-]{1,32}`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9_-]{1,32}$"))]
    pub kind: String,
    /// Keyed ids of the entries inside; at least one. The segment is dropped
    /// when every one of them is already stored for this user.
    pub entry_ids: Vec<KeyedId>,
    pub ciphertext: Base64Bytes,
    /// Keyed names of the blobs the segment's content refers to (see
    /// [`crate::blob_refs`], as the next two). Empty from older clients.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<KeyedId>,
    /// Of a `forget-lines` record: keyed entry ids forgotten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgets: Vec<KeyedId>,
    /// Of a `forget-lines` record: keyed blob names forgotten.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forget_blobs: Vec<KeyedId>,
    /// Keyed id of the stream whose forget takes this one too (see
    /// [`crate::forget`]): a Claude Code subagent transcript's session.
    /// Absent from older clients, and on every other segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<KeyedId>,
}

/// `POST /api/v1/records`: stores a batch; answered once it is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PushRequest {
    pub segments: Vec<Segment>,
}

/// Answer to `POST /api/v1/records`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PushResponse {
    /// Segments stored as new records.
    pub stored: u64,
    /// Segments dropped because all their entry ids were already stored.
    pub dropped: u64,
    /// The user's newest seq after this batch (0 if the account has no record).
    pub newest_seq: u64,
    /// With `per_item` asked ([`PushQuery`]): the segments, by their index
    /// in the batch, that the account's quota had no room for, in order.
    /// Nothing of them was stored, nor any later segment of their streams
    /// in this batch (a stream's records keep their order); everything else
    /// was. Empty from older servers, which refuse the whole batch instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over_quota: Vec<u32>,
    /// The segments, by their index in the batch, refused because their
    /// stream was forgotten (see [`crate::forget`]): nothing of them was
    /// stored. The client applies the stream's tombstone instead of sending
    /// them again. Empty from older servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgotten: Vec<u32>,
    /// The segments, by their index in the batch, refused because a blob
    /// they refer to ([`crate::blob_refs::SegmentRefs::refs`]) is not
    /// stored (never uploaded, or deleted as unreferenced just before):
    /// nothing of them was stored, nor any later segment of their streams
    /// in this batch. The client uploads the blobs again and resends them.
    /// Empty from older servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blob_missing: Vec<u32>,
}

/// Query of `POST /api/v1/records`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema, IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct PushQuery {
    /// Store what fits the account's quota and name the rest in
    /// `over_quota` (a 200), instead of refusing the whole batch with 507
    /// `quota_exceeded`. Off for older clients, which read a 200 as all
    /// stored. Older servers ignore it and refuse the whole batch.
    #[serde(default)]
    pub per_item: bool,
}

/// Body of `POST /api/v1/records/known`: keyed entry ids, at most
/// [`crate::limits::MAX_NAMES_PER_CALL`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct EntryIds {
    pub entry_ids: Vec<KeyedId>,
}

/// Answer to `POST /api/v1/records/known`: the asked ids some record of this
/// user already holds, in the order asked. A client that cannot tell what an
/// interrupted push delivered asks this before sealing, so a segment never
/// carries again what the server has (it would be stored whole, and its
/// known entries twice).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct KnownEntries {
    pub known: Vec<KeyedId>,
}

/// Body of `POST /api/v1/records/damaged`: seqs of records whose body
/// arrived whole and failed the client's checks (age, the MAC, the ids it
/// was served under), at most [`crate::limits::MAX_NAMES_PER_CALL`]. The
/// server cannot check that claim (it is blind), and needs not: marking a
/// record only lets a later push carrying its entries store them again, and
/// drops the marked row once another record holds all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DamagedSeqs {
    /// Seqs of this user's records, each at most 2^63 - 1.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<u64>, maximum = 9223372036854775807_u64))]
    #[serde(deserialize_with = "whole_numbers")]
    pub seqs: Vec<u64>,
}

/// Non-negative integers as JSON Schema counts them: `883.0` is the
/// integer 883 there (and in JavaScript clients), so it is taken as one; a
/// fraction, a negative number or one past 2^64 is refused.
fn whole_numbers<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    let numbers = Vec::<serde_json::Number>::deserialize(d)?;
    numbers.iter().map(as_whole::<D::Error>).collect()
}

/// One such number (see [`whole_numbers`]).
fn whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    as_whole(&serde_json::Number::deserialize(d)?)
}

fn as_whole<E: serde::de::Error>(n: &serde_json::Number) -> Result<u64, E> {
    n.as_u64()
        .or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(f))
                .map(|f| f as u64)
        })
        .ok_or_else(|| E::custom(format!("{n} is not a seq (a whole number, at least 0)")))
}

/// Answer to `POST /api/v1/records/damaged`: how many of the seqs name a
/// record of this user that is now marked (already marked ones count).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct DamagedMarked {
    pub marked: u64,
}

/// Query of `GET /api/v1/records`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema, IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct PullQuery {
    /// Return records with a seq greater than this (0 for all); a seq is at
    /// most 2^63 - 1.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(maximum = 9223372036854775807_u64))]
    pub after: u64,
    /// Most records wanted; capped by the server's `max_page_records` (0
    /// counts as 1).
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        param(value_type = Option<u64>, minimum = 0, maximum = 4294967295_u64)
    )]
    pub limit: Option<u32>,
    /// Only the records of this keyed stream (a session's
    /// `session_key`, which the client computes: the server never learns
    /// the session id), still in seq order after `after`: one session
    /// fetched alone, whatever the history's size. Absent: every stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<KeyedId>,
}

/// One stored record in a pull page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Record {
    pub seq: u64,
    pub stream: KeyedId,
    #[cfg_attr(feature = "openapi", schema(pattern = "^[a-z0-9_-]{1,32}$"))]
    pub kind: String,
    pub entry_ids: Vec<KeyedId>,
    pub ciphertext: Base64Bytes,
    /// Id of the device that pushed it (absent for records stored by older
    /// servers). A device passes over its own records when it pulls; a server
    /// that lies here can only withhold records, which it always could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// `GET /api/v1/records?after=SEQ&limit=N[&stream=ID]`: a page of records in
/// seq order (of one stream with `stream`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PullResponse {
    pub records: Vec<Record>,
    /// Cursor for the next call: the last seq in this page (or `after` if empty).
    pub next_after: u64,
    /// Whether records after `next_after` existed when this page was read.
    pub more: bool,
}

/// Query of `GET /api/v1/records/wait`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema, IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct WaitQuery {
    /// The calling device's pull cursor: the wait answers once a record
    /// with a greater seq that another device pushed has committed.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(maximum = 9223372036854775807_u64))]
    pub after: u64,
    /// Longest wait in seconds; capped by the server's `max_wait_secs`
    /// (absent or 0: the cap).
    #[serde(default)]
    #[cfg_attr(
        feature = "openapi",
        param(value_type = Option<u64>, minimum = 0, maximum = 4294967295_u64)
    )]
    pub timeout: Option<u32>,
}

/// `GET /api/v1/records/wait?after=SEQ&timeout=SECS`: a long poll. Answers
/// as soon as another device's record newer than `after` commits (at once
/// if one has), or when the wait times out; 503 with `Retry-After` when the
/// server holds as many waits as it takes, 429 past the per-device rate.
/// Holding the connection costs the server no thread and no database
/// connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WaitResponse {
    /// Records after `after` that other devices pushed (records stored
    /// without a device count): 0 when the wait timed out.
    pub pending: u64,
}

/// Query of `GET /api/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(ToSchema, IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct StatusQuery {
    /// The calling device's pull cursor: when given, the answer counts
    /// `pending_for_device` after it.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(maximum = 9223372036854775807_u64))]
    pub after: Option<u64>,
}

/// `GET /api/v1/status?after=SEQ`: what the account holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StatusResponse {
    pub newest_seq: u64,
    pub records: u64,
    pub entries: u64,
    pub blobs: u64,
    /// What the quota counts: record ciphertext and blob bytes, plus a fixed
    /// cost for each record, entry id and blob (the rows that index them).
    /// Servers before that counted only ciphertext and blob bytes.
    pub bytes_used: u64,
    /// The per-user quota, if the server sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
    /// Records with a seq above the query's `after` that the calling device
    /// did not push (records stored without a device count): what its pull
    /// would apply. Absent without `after`, and from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_for_device: Option<u64>,
}

/// Body of `POST /api/v1/blobs/missing` and `POST /api/v1/blobs/purge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BlobNames {
    pub names: Vec<KeyedId>,
}

/// Answer to `POST /api/v1/blobs/missing`: the asked names this user has not
/// uploaded, in the order asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct MissingResponse {
    pub missing: Vec<KeyedId>,
}

/// Query of `PUT /api/v1/blobs/{name}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct BlobPutQuery {
    /// For a part or the manifest of a blob sent in parts: the keyed name
    /// the whole blob would have, which is the name records declare in
    /// `refs` (see [`crate::blob_refs`]). The server ties the upload to it,
    /// so the parts and the manifest are deleted with the whole once no
    /// record refers to it. Absent for a blob stored whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_of: Option<KeyedId>,
}

/// Answer to `PUT /api/v1/blobs/{name}` (raw body, streamed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct BlobStored {
    pub name: KeyedId,
    pub size: u64,
    /// False when the blob was already stored (the upload was ignored).
    pub created: bool,
}

/// Answer to `POST /api/v1/blobs/purge`, the only call that deletes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PurgeResponse {
    /// How many of the named blobs existed and were deleted.
    pub purged: u64,
}

/// `POST /api/v1/rotation` (a device holding the account's current key):
/// opens the staging account a key rotation fills, or opens it again to
/// resume (what was staged stays). The answer carries a fresh token of
/// the staging account's one device (an earlier one stops working): it
/// pushes records and uploads blobs like any device, and they stay out of
/// sight of the account's devices until `POST /api/v1/rotation/commit`.
///
/// An account has one staging account, held by the device that began it
/// for one new key. A begin from that device with that key resumes it;
/// any other abandons it (its token stops working, what it staged is
/// deleted) and opens a new one: a rotation left unfinished on a lost
/// device never blocks the account. Revoking the device that began a
/// rotation abandons it too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RotationBeginRequest {
    /// The new key's check value: the staging account takes it at once,
    /// and a begin with another one is another rotation. Absent from older
    /// clients (then the device alone says whose rotation it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_check: Option<Base64Bytes>,
    /// SHA-256 of the new key's proof: the staging account holds it, and
    /// the account after the commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_proof_hash: Option<Base64Bytes>,
}

/// Answer to `POST /api/v1/rotation`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RotationBeginResponse {
    /// Bearer token of the staging account's device.
    pub token: String,
    /// The key generation the commit will make current.
    pub generation: u64,
    /// Whether the staging account is new: nothing is staged, and the
    /// rotation carries everything from the first record (false from older
    /// servers, which said nothing).
    #[serde(default)]
    pub fresh: bool,
    /// Whether a rotation another device began and left unfinished was
    /// abandoned to open this one.
    #[serde(default)]
    pub abandoned: bool,
    /// The name of the device that began it (absent when no device of the
    /// account has its id any more, a revoked one say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandoned_by: Option<String>,
}

impl fmt::Debug for RotationBeginResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RotationBeginResponse")
            .field("generation", &self.generation)
            .field("fresh", &self.fresh)
            .field("abandoned", &self.abandoned)
            .field("abandoned_by", &self.abandoned_by)
            .finish_non_exhaustive()
    }
}

/// `POST /api/v1/rotation/commit` (the device that began the rotation):
/// in one transaction the staged data becomes the account's, the old
/// data goes, the calling device gets the new generation, the devices
/// named in `revoke` are deleted, and every other device is told
/// `key_rotated` until it is paired again. 409 `rotation_behind` when
/// the account holds records after `through_seq` (nothing changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RotationCommitRequest {
    /// The newest seq of the old account the staged data holds (`12.0`
    /// is taken as 12, as in [`DamagedSeqs`]).
    #[serde(deserialize_with = "whole_number")]
    pub through_seq: u64,
    /// Ids of the devices to revoke in the same step.
    #[serde(default)]
    pub revoke: Vec<String>,
}

/// Answer to `POST /api/v1/rotation/commit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RotationCommitResponse {
    /// The account's key generation from now on.
    pub generation: u64,
    /// The ids of the devices revoked.
    pub revoked: Vec<String>,
}

/// `POST /api/v1/pair` (a device of the account, the *creator*): opens a
/// pairing slot holding the creator's first PAKE message. The server
/// relays opaque bytes between the two devices and never sees the code's
/// words or the key they agree on (see `docs/design/pairing.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairOpenRequest {
    /// At most [`crate::limits::PAIR_MESSAGE_MAX_BYTES`].
    pub offer: Base64Bytes,
}

/// Answer to `POST /api/v1/pair`: the slot's number (the code's first
/// part, unique among the server's live slots) and when it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairOpenResponse {
    pub slot: u32,
    pub expires_at: DateTime<Utc>,
}

/// `GET /api/v1/pair/{slot}` (no token: the new device has none yet): the
/// creator's offer, while nobody has joined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairOfferResponse {
    pub offer: Base64Bytes,
    pub expires_at: DateTime<Utc>,
}

/// `POST /api/v1/pair/{slot}/join` (no token): the new device's one
/// message: its PAKE message, its key confirmation and its sealed name.
/// A slot takes one join; a second is 409 `pairing_state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairJoinRequest {
    /// At most [`crate::limits::PAIR_MESSAGE_MAX_BYTES`].
    pub hello: Base64Bytes,
}

/// Answer to `POST /api/v1/pair/{slot}/join`: the secret the joiner shows
/// (`Authorization: Bearer …`) to wait for the reply and close the slot.
/// The server keeps only its SHA-256; it is no device token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairJoinResponse {
    pub secret: String,
}

impl fmt::Debug for PairJoinResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PairJoinResponse").finish_non_exhaustive()
    }
}

/// The steps of a pairing slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PairState {
    /// Waiting for the device that holds the code.
    Open,
    /// A device joined; the creator has not answered.
    Joined,
    /// The creator sent its sealed reply.
    Replied,
    /// The joiner took the reply: paired.
    Done,
    /// Ended without pairing: the creator found the joiner's key
    /// confirmation wrong (a mistyped code), its user declined, or either
    /// side gave up. The slot takes nothing more.
    Closed,
}

impl PairState {
    /// Whether the slot takes nothing more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Closed)
    }
}

/// Query of `GET /api/v1/pair/{slot}/wait`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct PairWaitQuery {
    /// Answer once the slot is no longer in this state.
    pub state: PairState,
    /// Seconds to wait at most (0 or absent: the server's longest, at most
    /// [`crate::limits::PAIR_WAIT_MAX_SECS`]).
    #[serde(default)]
    pub timeout: Option<u32>,
}

/// Answer to `GET /api/v1/pair/{slot}/wait`: the slot's state, with the
/// message the caller waits for once there is one (the joiner's hello for
/// the creator in `joined`, the creator's reply for the joiner in
/// `replied`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairWaitResponse {
    pub state: PairState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Base64Bytes>,
}

/// `POST /api/v1/pair/{slot}/device` (the creator, once joined and the
/// joiner's confirmation checked out): adds the new device to the account
/// and answers its fresh token ([`AuthResponse`]), which the creator seals
/// into its reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairDeviceRequest {
    pub device: String,
    /// The id of the device the new one replaces: a device of this account
    /// whose key a rotation made old (the joiner's own, from before the
    /// rotation). It is deleted in the same transaction that adds the new
    /// one, so the new one keeps its name; a device on the current key is
    /// left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// `POST /api/v1/pair/{slot}/reply` (the creator): the sealed reply
/// (identity, account, token, server URL) for the joiner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PairReplyRequest {
    /// At most [`crate::limits::PAIR_MESSAGE_MAX_BYTES`].
    pub reply: Base64Bytes,
}

#[cfg(test)]
mod tests {
    #[test]
    fn damaged_seqs_take_whole_numbers_in_any_json_form() {
        let ok: super::DamagedSeqs = serde_json::from_str(r#"{"seqs":[883, 7709.0, 0]}"#).unwrap();
        assert_eq!(ok.seqs, [883, 7709, 0]);
        for bad in [
            r#"{"seqs":[1.5]}"#,
            r#"{"seqs":[-1]}"#,
            r#"{"seqs":["1"]}"#,
            r#"{"seqs":[1e30]}"#,
        ] {
            assert!(
                serde_json::from_str::<super::DamagedSeqs>(bad).is_err(),
                "{bad}"
            );
        }
    }

    use super::*;

    #[test]
    fn a_rotation_commit_takes_a_whole_number_written_with_a_fraction_and_nothing_else() {
        let parse = |body: &str| serde_json::from_str::<RotationCommitRequest>(body);
        assert_eq!(parse(r#"{"through_seq": 12}"#).unwrap().through_seq, 12);
        assert_eq!(parse(r#"{"through_seq": 12.0}"#).unwrap().through_seq, 12);
        assert!(parse(r#"{"through_seq": 12.5}"#).is_err());
        assert!(parse(r#"{"through_seq": -1}"#).is_err());
        assert!(parse(r#"{"through_seq": "12"}"#).is_err());
    }

    #[test]
    fn base64_round_trip_and_errors() {
        let b = Base64Bytes(vec![0, 1, 2, 255]);
        let j = serde_json::to_string(&b).unwrap();
        assert_eq!(j, "\"AAEC/w==\"");
        assert_eq!(serde_json::from_str::<Base64Bytes>(&j).unwrap(), b);
        assert!(serde_json::from_str::<Base64Bytes>("\"***\"").is_err());
    }

    #[test]
    fn error_codes_are_snake_case_and_forward_compatible() {
        let e = ErrorBody {
            code: ErrorCode::KeyCheckMismatch,
            message: "x".into(),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"code":"key_check_mismatch","message":"x"}"#
        );
        let future: ErrorBody =
            serde_json::from_str(r#"{"code":"something_new","message":""}"#).unwrap();
        assert_eq!(future.code, ErrorCode::Unknown);
    }

    #[test]
    fn secrets_are_not_in_debug() {
        let r = LoginRequest {
            user: "u".into(),
            password: "hunter22".into(),
            device: "d".into(),
        };
        assert!(!format!("{r:?}").contains("hunter22"));
        let a = AuthResponse {
            token: "tok123".into(),
            device_id: "d".into(),
            user: "u".into(),
            device_name: "laptop-2".into(),
        };
        let shown = format!("{a:?}");
        assert!(!shown.contains("tok123"));
        assert!(shown.contains("laptop-2"));
    }

    #[test]
    fn optional_fields_default() {
        let r: RegisterRequest =
            serde_json::from_str(r#"{"user":"u","password":"p","device":"d"}"#).unwrap();
        assert_eq!(r.invite, None);
        let old: AuthResponse =
            serde_json::from_str(r#"{"token":"t","device_id":"d","user":"u"}"#).unwrap();
        assert_eq!(old.device_name, "");
        let q: PullQuery = serde_json::from_str("{}").unwrap();
        assert_eq!(q.after, 0);
        let q: StatusQuery = serde_json::from_str("{}").unwrap();
        assert_eq!(q.after, None);
        // An older server's status: the client falls back to its own count.
        let s: StatusResponse = serde_json::from_str(
            r#"{"newest_seq":4,"records":4,"entries":9,"blobs":0,"bytes_used":10}"#,
        )
        .unwrap();
        assert_eq!(s.pending_for_device, None);
        let bad = format!(
            r#"{{"stream":"{}","kind":"entries","entry_ids":["../x"],"ciphertext":""}}"#,
            "a".repeat(64)
        );
        assert!(serde_json::from_str::<Segment>(&bad).is_err());
    }
}
