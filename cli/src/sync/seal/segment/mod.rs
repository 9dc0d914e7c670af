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
//! and the session id, journal name, days and line blobs are well formed
//! ([`SegmentError::BadSessionId`], [`SegmentError::BadDevice`],
//! [`SegmentError::BadDay`], [`SegmentError::BadLineBlob`]).
//!
//! # Plaintext format
//!
//! Integers are big-endian; `lp(x) = u32 len(x) || x`. [`seal`] and
//! [`seal_journal`] write version 2 ([`FORMAT_VERSION`]); [`open`] reads
//! versions 1 and 2 (version 1 records stay on servers) and refuses any
//! other with [`SegmentError::Version`].
//!
//! ```text
//! plaintext    = "EVISEG" || u8 version (1|2) || u8 kind || body || mac[32]
//! kind         = 1 (entries) | 2 (journal)
//! mac          = HMAC-SHA256(segment MAC key,
//!                  lp("evi-segment-v1") || u8 version || lp(kind name)
//!                  || body || u64 len(body)
//!                  || lp(stream id) || u32 count || count * lp(entry id))
//!
//! version 2:
//! body/entries = lp(session_id) || u32 count || count * entry
//! entry        = lp(id) || u8 flags || [lp(parent) if flags & 1]
//!                || day[10] (ASCII YYYY-MM-DD)
//!                || (u64 len || sha256[32] if flags & 2, else lp(line))
//! flags        = bit 0: has a parent; bit 1: the line is stored as a blob;
//!                bits 2..7: zero
//! body/journal = lp(name) || u32 count || count * (u64 seq || lp(line))
//!
//! version 1 (opened, never written):
//! entry        = lp(id) || u8 has_parent (0|1) || [lp(parent) if 1]
//!                || day[10] (ASCII YYYY-MM-DD) || lp(line)
//! body/journal = lp(device) || u32 count || count * (u64 seq || lp(line))
//! ```
//!
//! The MAC covers the version byte, so a version 1 segment cannot be passed
//! off as version 2 or back. `kind name` is `entries` or `journal`; stream
//! and entry ids are the keyed ids as 64 ASCII hex characters
//! ([`crate::sync::seal::keys`]):
//!
//! | segment          | stream id                    | id of each entry / line          |
//! |------------------|------------------------------|----------------------------------|
//! | entries (v1, v2) | `session_key(session_id)`    | `entry_key(session_id, id)`      |
//! | journal v2       | `journal_stream_key(name)`   | `journal_line_key(name, line)`   |
//! | journal v1       | `journal_stream_key(device)` | `journal_entry_key(device, seq)` |
//!
//! Lines are raw bytes (any bytes but `\n`). A segment holds at least one
//! entry and no entry id twice: for entries the `id`, for version 2 journals
//! the line's content (a rewind trims the journal and later lines reuse
//! numbers, so `seq` is informative only and may repeat; [`seal_journal`]
//! keeps the first of identical lines), for version 1 journals the `seq`.
//!
//! A version 2 journal's `name` is the folder it lands in on other devices,
//! `<device name>-<short device id>` (see [`crate::sync::engine::journal`]): device
//! names repeat (a reinstall, two machines called `laptop`), the server's
//! device id does not. A version 1 journal's `device` is the bare device
//! name, and its folder too. Either way the name follows the session id rule
//! (`[A-Za-z0-9._-]{1,128}`, no leading dot, [`check_device`]) because it
//! names a folder.
//!
//! A line stored as a blob (flag bit 1) is one too large to travel inside a
//! segment: the entry carries its length (more than 0) and SHA-256 instead,
//! and the line's bytes travel as a checkpoint-style blob stored under
//! `blob_key(hex(sha256))`, verified against that SHA-256 and length when
//! fetched (its bytes, like any line's, hold no `\n`). Its id, parent and
//! day are in the segment like any other entry's, and the MAC binds the
//! blob's name and length to the entry. `sha256` is written as 32 raw bytes
//! and read back as 64 lowercase hex ([`LineBlob::sha256_hex`]).
//!
//! The ciphertext is `age(zstd(plaintext))`, zstd level 1 (see `ZSTD_LEVEL`), one or more frames.

mod layout;
mod open;
mod seal;

use evi_shared::{Day, KeyedId, SessionId};

pub use layout::check_device;
pub use open::{open, open_plaintext_bytes};
#[cfg(feature = "test-hooks")]
pub use seal::seal_unchecked_for_tests;
#[cfg(test)]
pub(crate) use seal::{BodyRef, RawEntry, seal_raw_for_test, write_plaintext};
pub use seal::{seal, seal_journal, seal_stream};

/// Plaintext format version written by this code.
pub const FORMAT_VERSION: u8 = 2;
/// The oldest format version [`open`] still reads.
pub const MIN_FORMAT_VERSION: u8 = 1;
/// Largest decompressed plaintext accepted (and produced), in bytes.
pub const MAX_PLAINTEXT_BYTES: u64 = 256 * 1024 * 1024;
/// Largest zstd window accepted when opening (2^24 = 16 MiB of decoder memory).
pub const MAX_WINDOW_LOG: u32 = 24;

const MAGIC: &[u8; 6] = b"EVISEG";
const MAC_DOMAIN: &[u8] = b"evi-segment-v1";
/// zstd level of segments. 1 rather than 3: on the bench home (358 MB of
/// transcripts, `cargo run --release -p evi --example push_stages`) it
/// compresses 30% faster for 9.7% more bytes (96.3 against 87.8 MB), and
/// zstd was the largest stage of a first push. Decoders take any level.
const ZSTD_LEVEL: i32 = 1;
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
    /// The line, or empty when it travels as a blob (`line_blob`).
    pub line: Vec<u8>,
    /// Set for a line too large for a segment: its bytes are the blob named
    /// by this SHA-256, and `line` is empty.
    pub line_blob: Option<LineBlob>,
}

/// Names the blob that holds an entry's line, and how long the line is:
/// enough for the puller to fetch, verify, and size it before it is joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineBlob {
    /// 64 lowercase hex characters: the SHA-256 of the line's bytes.
    pub sha256_hex: String,
    /// The line's length in bytes, more than 0.
    pub len: u64,
}

/// One checkpoint journal line of a device. `seq` is the line's position
/// when it was pushed, informative only: its identity is its content.
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
    /// The keyed names of the blobs it refers to, declared to the server
    /// (see [`evi_shared::blob_refs`]).
    pub refs: Vec<KeyedId>,
    /// Of a stream that belongs to a session (a Claude Code subagent
    /// transcript): the session's keyed stream id, declared to the server
    /// so a forget of the session takes it too (see [`evi_shared::forget`]).
    pub group: Option<KeyedId>,
}

/// The verified content of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenedSegment {
    Entries {
        session: SessionId,
        entries: Vec<Entry>,
    },
    /// Entries of another agent's session (its stream name holds a `/`).
    AgentEntries {
        stream: crate::source::StreamName,
        entries: Vec<Entry>,
    },
    Journal {
        /// The journal's name, which is the folder it lands in:
        /// `<device name>-<short device id>` (version 2) or the bare device
        /// name (version 1); checked with [`check_device`].
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
    #[error("entry {id:?} names its line's blob badly: {reason}")]
    BadLineBlob { id: String, reason: &'static str },
    #[error("could not encrypt the segment: {0}")]
    Encrypt(String),
}

#[cfg(test)]
mod tests;
