//! Segments: many entries of one stream, sealed in one age file.
//!
//! # Promises
//!
//! [`seal`] / [`seal_journal`] turn the entries of one session (or the
//! journal lines of one device) into a [`SealedSegment`]: the keyed stream id
//! and entry ids the server stores it under, and a standard age file (one
//! X25519 recipient stanza, to the identity's own recipient) that `age -d -i
//! identity.txt` opens to a zstd stream of the plaintext below.
//!
//! [`open`] returns the content only if every check passes, each failure a
//! distinct [`SegmentError`]: age decrypts and authenticates the ciphertext
//! ([`SegmentError::Decrypt`]); it decompresses ([`SegmentError::Decompress`])
//! to at most [`MAX_PLAINTEXT_BYTES`] ([`SegmentError::TooLarge`], a zip-bomb
//! bound; zstd windows above 2^[`MAX_WINDOW_LOG`] are refused too); the
//! plaintext parses ([`SegmentError::Malformed`], [`SegmentError::Version`]);
//! the MAC verifies under this identity's segment key ([`SegmentError::Mac`]:
//! forged by someone holding only the recipient, or altered); the segment was
//! opened under the kind, stream id and entry ids it was sealed for
//! ([`SegmentError::KindMismatch`], [`SegmentError::StreamMismatch`],
//! [`SegmentError::EntryIdsMismatch`]: the server swapped or replayed it);
//! and the session id, device name and days are well formed
//! ([`SegmentError::BadSessionId`], [`SegmentError::BadDevice`],
//! [`SegmentError::BadDay`]).
//!
//! # Plaintext format, version 1
//!
//! Integers are big-endian; `lp(x) = u32 len(x) || x`.
//!
//! ```text
//! plaintext    = "EVISEG" || u8 version (=1) || u8 kind || body || mac[32]
//! kind         = 1 (entries) | 2 (journal)
//! body/entries = lp(session_id) || u32 count || count * entry
//! entry        = lp(id) || u8 has_parent (0|1) || [lp(parent) if 1]
//!                || day[10] (ASCII YYYY-MM-DD) || lp(line)
//! body/journal = lp(device) || u32 count || count * (u64 seq || lp(line))
//! mac          = HMAC-SHA256(segment MAC key,
//!                  lp("evi-segment-v1") || u8 version || lp(kind name)
//!                  || body || u64 len(body)
//!                  || lp(stream id) || u32 count || count * lp(entry id))
//! ```
//!
//! `kind name` is `entries` or `journal`; stream and entry ids are the keyed
//! ids as 64 ASCII hex characters ([`super::keys`]): for entries
//! `session_key(session_id)` and `entry_key(session_id, id)` per entry, for
//! journals `journal_stream_key(device)` and `journal_entry_key(device, seq)`.
//! Lines are raw bytes (any bytes but `\n`). A segment holds at least one
//! entry and no entry id (or journal seq) twice. Journal device names follow
//! the session id rule (`[A-Za-z0-9._-]{1,128}`, no leading dot) because they
//! name a folder on pulling devices.
//!
//! The ciphertext is `age(zstd(plaintext))`, zstd level 3, one or more frames.

mod open;
mod seal;

use evi_shared::{Day, KeyedId, SessionId};

pub use open::open;
#[cfg(test)]
pub(crate) use seal::{BodyRef, RawEntry, seal_raw_for_test, write_plaintext};
pub use seal::{check_device, seal, seal_journal, seal_unchecked_for_tests};

/// Plaintext format version written by this code.
pub const FORMAT_VERSION: u8 = 1;
/// Largest decompressed plaintext accepted (and produced), in bytes.
pub const MAX_PLAINTEXT_BYTES: u64 = 256 * 1024 * 1024;
/// Largest zstd window accepted when opening (2^24 = 16 MiB of decoder memory).
pub const MAX_WINDOW_LOG: u32 = 24;

const MAGIC: &[u8; 6] = b"EVISEG";
const MAC_DOMAIN: &[u8] = b"evi-segment-v1";
const ZSTD_LEVEL: i32 = 3;
const BUF: usize = 64 * 1024;

/// What a segment holds, as the server's record `kind` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// Transcript entries of one session.
    Entries,
    /// Checkpoint journal lines of one device.
    Journal,
}

impl SegmentKind {
    /// The record kind on the wire: `entries` or `journal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Entries => "entries",
            Self::Journal => "journal",
        }
    }

    fn code(self) -> u8 {
        match self {
            Self::Entries => 1,
            Self::Journal => 2,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(Self::Entries),
            2 => Some(Self::Journal),
            _ => None,
        }
    }
}

impl std::fmt::Display for SegmentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SegmentKind {
    type Err = SegmentError;
    fn from_str(s: &str) -> Result<Self, SegmentError> {
        match s {
            "entries" => Ok(Self::Entries),
            "journal" => Ok(Self::Journal),
            other => Err(SegmentError::UnknownKind(other.to_owned())),
        }
    }
}

/// One transcript entry: its id, parent, day folder, and raw line bytes
/// (without the newline; may be any bytes, not only UTF-8 JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub parent: Option<String>,
    pub day: Day,
    pub line: Vec<u8>,
}

/// One checkpoint journal line of a device, with its sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalLine {
    pub seq: u64,
    pub line: Vec<u8>,
}

/// A sealed segment and the outer ids to store it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSegment {
    pub stream: KeyedId,
    pub kind: SegmentKind,
    pub entry_ids: Vec<KeyedId>,
    /// A standard binary age file.
    pub ciphertext: Vec<u8>,
}

/// The verified content of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenedSegment {
    Entries {
        session: SessionId,
        entries: Vec<Entry>,
    },
    Journal {
        device: String,
        lines: Vec<JournalLine>,
    },
}

/// Why a segment could not be sealed or opened. All are permanent for the
/// given bytes: retrying the same ciphertext cannot help; a pull should
/// refuse the record and report it.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error(
        "segment does not decrypt with this identity (altered, truncated, or encrypted to another key): {0}"
    )]
    Decrypt(String),
    #[error("segment decrypted but is not a valid zstd stream: {0}")]
    Decompress(String),
    #[error("segment expands past the {limit}-byte limit (refused as a possible zip bomb)")]
    TooLarge { limit: u64 },
    #[error("segment plaintext is malformed: {0}")]
    Malformed(String),
    #[error("segment format version {0} is not supported by this evi (upgrade evi)")]
    Version(u8),
    #[error("unknown segment kind {0:?}")]
    UnknownKind(String),
    #[error(
        "segment MAC does not verify: it was not sealed with this identity's keys, or was altered"
    )]
    Mac,
    #[error("segment was stored as kind {outer} but holds {inner}: the server relabelled it")]
    KindMismatch {
        outer: SegmentKind,
        inner: SegmentKind,
    },
    #[error(
        "segment served under stream id {outer} belongs to stream {inner}: the server swapped or replayed it"
    )]
    StreamMismatch { outer: KeyedId, inner: KeyedId },
    #[error(
        "segment served with entry ids that do not match its entries (first difference at position {index}): the server swapped or replayed it"
    )]
    EntryIdsMismatch { index: usize },
    #[error("segment holds a bad session id: {0}")]
    BadSessionId(evi_shared::IdError),
    #[error(
        "segment holds a bad device name {0:?}: use 1 to 128 of A-Z a-z 0-9 . _ -, not starting with a dot"
    )]
    BadDevice(String),
    #[error("segment holds a bad day: {0}")]
    BadDay(evi_shared::IdError),
    #[error("a segment needs at least one entry")]
    Empty,
    #[error("entry {0:?} appears twice in one segment")]
    Duplicate(String),
    #[error("entry {0:?} has a line containing a newline")]
    NewlineInLine(String),
    #[error("could not encrypt the segment: {0}")]
    Encrypt(String),
}

#[cfg(test)]
mod tests;
