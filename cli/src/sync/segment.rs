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

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::iter;

use evi_shared::{Day, KeyedId, SessionId};
use hmac::Mac;

use super::identity::Identity;
use super::keys::{HmacSha256, SyncKeys};

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

// ---------------------------------------------------------------------------
// Sealing

/// Borrowed, unvalidated body: what the encoder writes. Public constructors
/// build it only from validated types; tests build bad ones directly.
pub(crate) enum BodyRef<'a> {
    Entries {
        session: &'a [u8],
        entries: Vec<RawEntry<'a>>,
    },
    Journal {
        device: &'a [u8],
        lines: &'a [JournalLine],
    },
}

pub(crate) struct RawEntry<'a> {
    pub id: &'a [u8],
    pub parent: Option<&'a [u8]>,
    pub day: &'a [u8],
    pub line: &'a [u8],
}

impl BodyRef<'_> {
    fn kind(&self) -> SegmentKind {
        match self {
            Self::Entries { .. } => SegmentKind::Entries,
            Self::Journal { .. } => SegmentKind::Journal,
        }
    }

    fn outer_ids(&self, keys: &SyncKeys) -> (KeyedId, Vec<KeyedId>) {
        match self {
            Self::Entries { session, entries } => (
                keys.keyed_raw(&[b"session", session]),
                entries
                    .iter()
                    .map(|e| keys.keyed_raw(&[b"entry", session, e.id]))
                    .collect(),
            ),
            Self::Journal { device, lines } => (
                keys.keyed_raw(&[b"journal-stream", device]),
                lines
                    .iter()
                    .map(|l| keys.keyed_raw(&[b"journal-entry", device, &l.seq.to_be_bytes()]))
                    .collect(),
            ),
        }
    }

    fn write_body<W: Write>(&self, w: &mut W) -> io::Result<()> {
        match self {
            Self::Entries { session, entries } => {
                write_lp(w, session)?;
                write_count(w, entries.len())?;
                for e in entries {
                    write_lp(w, e.id)?;
                    match e.parent {
                        Some(p) => {
                            w.write_all(&[1])?;
                            write_lp(w, p)?;
                        }
                        None => w.write_all(&[0])?,
                    }
                    if e.day.len() != 10 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "day must be 10 bytes",
                        ));
                    }
                    w.write_all(e.day)?;
                    write_lp(w, e.line)?;
                }
            }
            Self::Journal { device, lines } => {
                write_lp(w, device)?;
                write_count(w, lines.len())?;
                for l in lines.iter() {
                    w.write_all(&l.seq.to_be_bytes())?;
                    write_lp(w, &l.line)?;
                }
            }
        }
        Ok(())
    }
}

fn write_lp<W: Write>(w: &mut W, b: &[u8]) -> io::Result<()> {
    let len = u32::try_from(b.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "field over 4 GiB"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(b)
}

fn write_count<W: Write>(w: &mut W, n: usize) -> io::Result<()> {
    let n = u32::try_from(n)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many entries"))?;
    w.write_all(&n.to_be_bytes())
}

fn mac_prefix(mac: &mut HmacSha256, kind: SegmentKind) {
    mac.update(&(MAC_DOMAIN.len() as u32).to_be_bytes());
    mac.update(MAC_DOMAIN);
    mac.update(&[FORMAT_VERSION]);
    let name = kind.as_str().as_bytes();
    mac.update(&(name.len() as u32).to_be_bytes());
    mac.update(name);
}

fn mac_suffix(mac: &mut HmacSha256, body_len: u64, stream: &KeyedId, ids: &[KeyedId]) {
    mac.update(&body_len.to_be_bytes());
    mac.update(&64u32.to_be_bytes());
    mac.update(stream.as_str().as_bytes());
    mac.update(&(ids.len() as u32).to_be_bytes());
    for id in ids {
        mac.update(&64u32.to_be_bytes());
        mac.update(id.as_str().as_bytes());
    }
}

/// Counts and MACs what passes through, and refuses to pass the size limit.
struct MacTee<W> {
    inner: W,
    mac: HmacSha256,
    len: u64,
}

impl<W: Write> Write for MacTee<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.mac.update(&buf[..n]);
        self.len += n as u64;
        if self.len > MAX_PLAINTEXT_BYTES {
            return Err(io::Error::other(TooLargeMarker));
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes the whole plaintext (header, body, MAC) to `out`. Returns `out`
/// and the MAC.
pub(crate) fn write_plaintext<W: Write>(
    keys: &SyncKeys,
    body: &BodyRef<'_>,
    stream: &KeyedId,
    ids: &[KeyedId],
    mut out: W,
) -> io::Result<(W, [u8; 32])> {
    let kind = body.kind();
    out.write_all(MAGIC)?;
    out.write_all(&[FORMAT_VERSION, kind.code()])?;
    let mut mac = keys.segment_mac();
    mac_prefix(&mut mac, kind);
    let tee = MacTee {
        inner: out,
        mac,
        len: 0,
    };
    let mut buffered = BufWriter::with_capacity(BUF, tee);
    body.write_body(&mut buffered)?;
    let MacTee {
        inner: mut out,
        mut mac,
        len,
    } = buffered.into_inner().map_err(|e| e.into_error())?;
    mac_suffix(&mut mac, len, stream, ids);
    let tag: [u8; 32] = mac.finalize().into_bytes().into();
    out.write_all(&tag)?;
    Ok((out, tag))
}

fn seal_body(
    keys: &SyncKeys,
    identity: &Identity,
    body: &BodyRef<'_>,
) -> Result<SealedSegment, SegmentError> {
    let (stream, entry_ids) = body.outer_ids(keys);
    let enc =
        age::Encryptor::with_recipients(iter::once(identity.recipient() as &dyn age::Recipient))
            .map_err(|e| SegmentError::Encrypt(e.to_string()))?;
    let run = || -> io::Result<Vec<u8>> {
        let age_w = enc.wrap_output(Vec::new())?;
        let zw = zstd::stream::write::Encoder::new(age_w, ZSTD_LEVEL)?;
        let (zw, _) = write_plaintext(keys, body, &stream, &entry_ids, zw)?;
        zw.finish()?.finish()
    };
    let ciphertext = run().map_err(|e| {
        if is_marked::<TooLargeMarker>(&e) {
            SegmentError::TooLarge {
                limit: MAX_PLAINTEXT_BYTES,
            }
        } else {
            SegmentError::Encrypt(e.to_string())
        }
    })?;
    Ok(SealedSegment {
        stream,
        kind: body.kind(),
        entry_ids,
        ciphertext,
    })
}

/// Seals entries of one session into one segment, in the given order.
pub fn seal(
    keys: &SyncKeys,
    identity: &Identity,
    session: &SessionId,
    entries: &[Entry],
) -> Result<SealedSegment, SegmentError> {
    if entries.is_empty() {
        return Err(SegmentError::Empty);
    }
    let mut seen = HashSet::with_capacity(entries.len());
    for e in entries {
        if !seen.insert(e.id.as_str()) {
            return Err(SegmentError::Duplicate(e.id.clone()));
        }
        if e.line.contains(&b'\n') {
            return Err(SegmentError::NewlineInLine(e.id.clone()));
        }
    }
    let body = BodyRef::Entries {
        session: session.as_str().as_bytes(),
        entries: entries
            .iter()
            .map(|e| RawEntry {
                id: e.id.as_bytes(),
                parent: e.parent.as_deref().map(str::as_bytes),
                day: e.day.as_str().as_bytes(),
                line: &e.line,
            })
            .collect(),
    };
    seal_body(keys, identity, &body)
}

/// Seals journal lines of one device into one segment, in the given order.
pub fn seal_journal(
    keys: &SyncKeys,
    identity: &Identity,
    device: &str,
    lines: &[JournalLine],
) -> Result<SealedSegment, SegmentError> {
    check_device(device)?;
    if lines.is_empty() {
        return Err(SegmentError::Empty);
    }
    let mut seen = HashSet::with_capacity(lines.len());
    for l in lines {
        if !seen.insert(l.seq) {
            return Err(SegmentError::Duplicate(l.seq.to_string()));
        }
        if l.line.contains(&b'\n') {
            return Err(SegmentError::NewlineInLine(l.seq.to_string()));
        }
    }
    seal_body(
        keys,
        identity,
        &BodyRef::Journal {
            device: device.as_bytes(),
            lines,
        },
    )
}

/// Whether `device` may name a journal stream (and so a folder).
pub fn check_device(device: &str) -> Result<(), SegmentError> {
    device
        .parse::<SessionId>()
        .map(|_| ())
        .map_err(|_| SegmentError::BadDevice(device.to_owned()))
}

// ---------------------------------------------------------------------------
// Opening

#[derive(Debug)]
struct TooLargeMarker;
impl std::fmt::Display for TooLargeMarker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("plaintext size limit exceeded")
    }
}
impl std::error::Error for TooLargeMarker {}

#[derive(Debug)]
struct MalformedMarker(String);
impl std::fmt::Display for MalformedMarker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for MalformedMarker {}

#[derive(Debug)]
struct AgeStreamError(String);
impl std::fmt::Display for AgeStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for AgeStreamError {}

fn is_marked<T: std::error::Error + 'static>(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<T>())
}

/// Tags errors of the age payload stream so they are told apart from zstd's.
struct AgeTagged<R>(R);
impl<R: Read> Read for AgeTagged<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0
            .read(buf)
            .map_err(|e| io::Error::other(AgeStreamError(e.to_string())))
    }
}

/// Passes at most `MAX_PLAINTEXT_BYTES`, then fails if more follows.
struct Limited<R> {
    inner: R,
    left: u64,
}
impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::other(TooLargeMarker)),
            };
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Reads the plaintext, MAC-ing exactly the body bytes.
struct Parser<R> {
    r: R,
    mac: HmacSha256,
    body_len: u64,
}

impl<R: BufRead> Parser<R> {
    fn raw_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.r.read_exact(buf)
    }
    fn exact<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        self.mac.update(&b);
        self.body_len += N as u64;
        Ok(b)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.exact::<1>()?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_be_bytes(self.exact()?))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_be_bytes(self.exact()?))
    }
    fn lp(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as u64;
        // Grows as data arrives past 64 KiB: a forged length cannot force a
        // huge allocation.
        let mut v = Vec::with_capacity(n.min(BUF as u64) as usize);
        (&mut self.r).take(n).read_to_end(&mut v)?;
        if v.len() as u64 != n {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.mac.update(&v);
        self.body_len += n;
        Ok(v)
    }
}

struct RawOwnedEntry {
    id: Vec<u8>,
    parent: Option<Vec<u8>>,
    day: [u8; 10],
    line: Vec<u8>,
}

enum RawBody {
    Entries {
        session: Vec<u8>,
        entries: Vec<RawOwnedEntry>,
    },
    Journal {
        device: Vec<u8>,
        lines: Vec<JournalLine>,
    },
}

fn parse_body<R: BufRead>(p: &mut Parser<R>, kind: SegmentKind) -> io::Result<RawBody> {
    let malformed = |m: &str| io::Error::other(MalformedMarker(m.to_owned()));
    match kind {
        SegmentKind::Entries => {
            let session = p.lp()?;
            let count = p.u32()?;
            let mut entries = Vec::with_capacity(count.min(4096) as usize);
            for _ in 0..count {
                let id = p.lp()?;
                let parent = match p.u8()? {
                    0 => None,
                    1 => Some(p.lp()?),
                    _ => return Err(malformed("bad parent flag")),
                };
                let day = p.exact::<10>()?;
                let line = p.lp()?;
                entries.push(RawOwnedEntry {
                    id,
                    parent,
                    day,
                    line,
                });
            }
            Ok(RawBody::Entries { session, entries })
        }
        SegmentKind::Journal => {
            let device = p.lp()?;
            let count = p.u32()?;
            let mut lines = Vec::with_capacity(count.min(4096) as usize);
            for _ in 0..count {
                let seq = p.u64()?;
                let line = p.lp()?;
                lines.push(JournalLine { seq, line });
            }
            Ok(RawBody::Journal { device, lines })
        }
    }
}

fn read_err(e: io::Error) -> SegmentError {
    if is_marked::<AgeStreamError>(&e) {
        SegmentError::Decrypt(e.to_string())
    } else if is_marked::<TooLargeMarker>(&e) {
        SegmentError::TooLarge {
            limit: MAX_PLAINTEXT_BYTES,
        }
    } else if e.kind() == io::ErrorKind::UnexpectedEof {
        SegmentError::Malformed("plaintext ends early".into())
    } else if is_marked::<MalformedMarker>(&e) {
        SegmentError::Malformed(e.to_string())
    } else {
        SegmentError::Decompress(e.to_string())
    }
}

/// Opens a segment stored under `stream`, `kind` and `entry_ids`, checking
/// everything listed in the module docs before returning any content.
pub fn open(
    keys: &SyncKeys,
    identity: &Identity,
    stream: &KeyedId,
    kind: SegmentKind,
    entry_ids: &[KeyedId],
    ciphertext: &[u8],
) -> Result<OpenedSegment, SegmentError> {
    let dec = age::Decryptor::new_buffered(ciphertext)
        .map_err(|e| SegmentError::Decrypt(e.to_string()))?;
    let payload = dec
        .decrypt(iter::once(identity.age_identity() as &dyn age::Identity))
        .map_err(|e| SegmentError::Decrypt(e.to_string()))?;
    let mut zr = zstd::stream::read::Decoder::new(AgeTagged(payload))
        .map_err(|e| SegmentError::Decompress(e.to_string()))?;
    zr.window_log_max(MAX_WINDOW_LOG)
        .map_err(|e| SegmentError::Decompress(e.to_string()))?;
    let limited = Limited {
        inner: zr,
        left: MAX_PLAINTEXT_BYTES,
    };
    let mut p = Parser {
        r: BufReader::with_capacity(BUF, limited),
        mac: keys.segment_mac(),
        body_len: 0,
    };
    open_plaintext(keys, &mut p, stream, kind, entry_ids)
}

fn open_plaintext<R: BufRead>(
    keys: &SyncKeys,
    p: &mut Parser<R>,
    stream: &KeyedId,
    outer_kind: SegmentKind,
    entry_ids: &[KeyedId],
) -> Result<OpenedSegment, SegmentError> {
    let mut head = [0u8; 8];
    p.raw_exact(&mut head).map_err(read_err)?;
    if &head[..6] != MAGIC {
        return Err(SegmentError::Malformed(
            "not an evi segment (bad magic)".into(),
        ));
    }
    if head[6] != FORMAT_VERSION {
        return Err(SegmentError::Version(head[6]));
    }
    let inner_kind = SegmentKind::from_code(head[7])
        .ok_or_else(|| SegmentError::Malformed(format!("unknown kind code {}", head[7])))?;
    mac_prefix(&mut p.mac, inner_kind);
    let body = parse_body(p, inner_kind).map_err(read_err)?;
    let mut tag = [0u8; 32];
    p.raw_exact(&mut tag).map_err(read_err)?;
    let mut probe = [0u8; 1];
    match p.r.read(&mut probe).map_err(read_err)? {
        0 => {}
        _ => return Err(SegmentError::Malformed("data after the MAC".into())),
    }

    // Ids as the sealer computed them, from the inner content.
    let (inner_stream, inner_ids) = match &body {
        RawBody::Entries { session, entries } => (
            keys.keyed_raw(&[b"session", session]),
            entries
                .iter()
                .map(|e| keys.keyed_raw(&[b"entry", session, &e.id]))
                .collect::<Vec<_>>(),
        ),
        RawBody::Journal { device, lines } => (
            keys.keyed_raw(&[b"journal-stream", device]),
            lines
                .iter()
                .map(|l| keys.keyed_raw(&[b"journal-entry", device, &l.seq.to_be_bytes()]))
                .collect(),
        ),
    };
    let mut mac = p.mac.clone();
    mac_suffix(&mut mac, p.body_len, &inner_stream, &inner_ids);
    mac.verify_slice(&tag).map_err(|_| SegmentError::Mac)?;

    // Authentic; now: was it served under the ids it was sealed for?
    if inner_kind != outer_kind {
        return Err(SegmentError::KindMismatch {
            outer: outer_kind,
            inner: inner_kind,
        });
    }
    if &inner_stream != stream {
        return Err(SegmentError::StreamMismatch {
            outer: stream.clone(),
            inner: inner_stream,
        });
    }
    if let Some(index) =
        (0..inner_ids.len().max(entry_ids.len())).find(|&i| inner_ids.get(i) != entry_ids.get(i))
    {
        return Err(SegmentError::EntryIdsMismatch { index });
    }

    // Well-formedness of everything that will name a file or be written.
    let utf8 = |b: Vec<u8>, what: &str| {
        String::from_utf8(b).map_err(|_| SegmentError::Malformed(format!("{what} is not UTF-8")))
    };
    match body {
        RawBody::Entries { session, entries } => {
            let session = String::from_utf8_lossy(&session)
                .parse::<SessionId>()
                .map_err(SegmentError::BadSessionId)?;
            if entries.is_empty() {
                return Err(SegmentError::Malformed("no entries".into()));
            }
            let mut seen = HashSet::with_capacity(entries.len());
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                let day = std::str::from_utf8(&e.day)
                    .map_err(|_| SegmentError::Malformed("day is not UTF-8".into()))?
                    .parse::<Day>()
                    .map_err(SegmentError::BadDay)?;
                let id = utf8(e.id, "entry id")?;
                if !seen.insert(id.clone()) {
                    return Err(SegmentError::Duplicate(id));
                }
                if e.line.contains(&b'\n') {
                    return Err(SegmentError::NewlineInLine(id));
                }
                let parent = e.parent.map(|p| utf8(p, "parent id")).transpose()?;
                out.push(Entry {
                    id,
                    parent,
                    day,
                    line: e.line,
                });
            }
            Ok(OpenedSegment::Entries {
                session,
                entries: out,
            })
        }
        RawBody::Journal { device, lines } => {
            let device = String::from_utf8(device).map_err(|e| {
                SegmentError::BadDevice(String::from_utf8_lossy(e.as_bytes()).into())
            })?;
            check_device(&device)?;
            if lines.is_empty() {
                return Err(SegmentError::Malformed("no journal lines".into()));
            }
            let mut seen = HashSet::with_capacity(lines.len());
            for l in &lines {
                if !seen.insert(l.seq) {
                    return Err(SegmentError::Duplicate(l.seq.to_string()));
                }
                if l.line.contains(&b'\n') {
                    return Err(SegmentError::NewlineInLine(l.seq.to_string()));
                }
            }
            Ok(OpenedSegment::Journal { device, lines })
        }
    }
}

/// Tests of other crates only (the end-to-end tampering tests play a server
/// that holds a stolen identity): seals entries under any session id and
/// days, unvalidated, with a valid MAC and outer ids. `evi` never calls it;
/// `entries` are `(id, parent, day, line)`, each day exactly 10 bytes.
#[doc(hidden)]
pub fn seal_unchecked_for_tests(
    keys: &SyncKeys,
    identity: &Identity,
    session: &str,
    entries: &[(&str, Option<&str>, &str, &[u8])],
) -> Result<SealedSegment, SegmentError> {
    let body = BodyRef::Entries {
        session: session.as_bytes(),
        entries: entries
            .iter()
            .map(|&(id, parent, day, line)| RawEntry {
                id: id.as_bytes(),
                parent: parent.map(str::as_bytes),
                day: day.as_bytes(),
                line,
            })
            .collect(),
    };
    seal_body(keys, identity, &body)
}

/// Test-only: seal an arbitrary, possibly invalid body with valid MAC and ids.
#[cfg(test)]
pub(crate) fn seal_raw_for_test(
    keys: &SyncKeys,
    identity: &Identity,
    body: &BodyRef<'_>,
) -> Result<SealedSegment, SegmentError> {
    seal_body(keys, identity, body)
}

#[cfg(test)]
mod tests;
