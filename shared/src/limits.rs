//! Limits both sides enforce. The server advertises its own values through the
//! capabilities call; these are the defaults and the hard format bounds.

/// Longest session id accepted anywhere (it names a file on the device).
pub const SESSION_ID_MAX_LEN: usize = 128;

/// Length in hex characters of a keyed id (HMAC-SHA256 output).
pub const KEYED_ID_HEX_LEN: usize = 64;

/// Default largest push request body, in bytes, as sent (JSON or framed).
pub const DEFAULT_MAX_BATCH_BYTES: u64 = 8 * 1024 * 1024;

/// Default largest blob, in bytes (the age ciphertext as uploaded).
pub const DEFAULT_MAX_BLOB_BYTES: u64 = 64 * 1024 * 1024;

/// Default most devices in one page of `GET /api/v1/devices`.
pub const DEFAULT_MAX_PAGE_DEVICES: u32 = 500;

/// Default most records in one pull page.
pub const DEFAULT_MAX_PAGE_RECORDS: u32 = 1000;

/// Default most bytes in one pull page, as sent on either wire (a single
/// larger record is still sent alone, so a page always makes progress).
pub const DEFAULT_MAX_PAGE_BYTES: u64 = 4 * 1024 * 1024;

/// Longest user name; names use `[A-Za-z0-9._-]`.
pub const USER_NAME_MAX_LEN: usize = 64;

/// Longest device name, in characters (printable text).
pub const DEVICE_NAME_MAX_LEN: usize = 128;

/// Shortest and longest accepted password, in characters.
pub const PASSWORD_MIN_LEN: usize = 8;
pub const PASSWORD_MAX_LEN: usize = 1024;

/// Most entry ids in one pushed segment: the server refuses more (400), and
/// the client cuts a segment there. 10,000 ids are about 670 kB of a batch.
pub const MAX_ENTRY_IDS_PER_SEGMENT: usize = 10_000;

/// Longest record `kind` (`[a-z0-9_-]`).
pub const KIND_MAX_LEN: usize = 32;

/// Largest key check value, in bytes.
pub const KEY_CHECK_MAX_BYTES: usize = 4096;

/// Most names in one blobs `missing` or `purge` call.
pub const MAX_NAMES_PER_CALL: usize = 10_000;

/// Largest opaque message a pairing slot relays (the creator's offer and
/// reply, the joiner's hello): a PAKE message, a MAC and a sealed identity
/// with its token fit in well under 1 KiB.
pub const PAIR_MESSAGE_MAX_BYTES: usize = 4096;

/// Default lifetime of a pairing slot, in seconds (`--pair-ttl`).
pub const DEFAULT_PAIR_TTL_SECS: u64 = 600;

/// Longest one pairing long poll waits before it answers "not yet".
pub const PAIR_WAIT_MAX_SECS: u32 = 25;

/// Highest slot number: numbers are reused from 1 up, so codes stay short.
pub const PAIR_SLOT_MAX: u32 = 999_999;
