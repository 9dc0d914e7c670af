//! Sealing: the plaintext encoding, its MAC, and the age + zstd layers
//! around it (the format is in the parent module's docs).

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{self, BufWriter, Write};
use std::iter;

use evi_shared::{KeyedId, SessionId};
use hmac::Mac;

use super::layout::{
    FLAG_LINE_BLOB, FLAG_PARENT, TooLargeMarker, check_device, is_marked, journal_ids, mac_prefix,
    mac_suffix, session_ids,
};
use super::{
    BUF, Entry, FORMAT_VERSION, JournalLine, MAGIC, MAX_PLAINTEXT_BYTES, SealedSegment,
    SegmentError, SegmentKind, ZSTD_LEVEL,
};
use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::{HmacSha256, SyncKeys};
use crate::sync::seal::zstd_context::compress_into;

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
    /// `(len, sha256)` of a line stored as a blob (format 2 only).
    pub blob: Option<(u64, [u8; 32])>,
}

impl<'a> TryFrom<&'a Entry> for RawEntry<'a> {
    type Error = SegmentError;

    /// Checks what the encoder cannot: a line blob's name and length, and
    /// that such an entry carries no line bytes beside it.
    fn try_from(e: &'a Entry) -> Result<Self, SegmentError> {
        let blob = match &e.line_blob {
            None => None,
            Some(b) => {
                let bad = |reason| SegmentError::BadLineBlob {
                    id: e.id.clone(),
                    reason,
                };
                if !is_lower_hex_sha256(&b.sha256_hex) {
                    return Err(bad("the SHA-256 is not 64 lowercase hex characters"));
                }
                if b.len == 0 {
                    return Err(bad("the length is 0"));
                }
                if !e.line.is_empty() {
                    return Err(bad("the entry also carries line bytes"));
                }
                let mut sha = [0u8; 32];
                hex::decode_to_slice(&b.sha256_hex, &mut sha)
                    .map_err(|_| bad("the SHA-256 is not hex"))?;
                Some((b.len, sha))
            }
        };
        Ok(Self {
            id: e.id.as_bytes(),
            parent: e.parent.as_deref().map(str::as_bytes),
            day: e.day.as_str().as_bytes(),
            line: &e.line,
            blob,
        })
    }
}

fn is_lower_hex_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

impl BodyRef<'_> {
    fn kind(&self) -> SegmentKind {
        match self {
            Self::Entries { .. } => SegmentKind::Entries,
            Self::Journal { .. } => SegmentKind::Journal,
        }
    }

    fn outer_ids(&self, keys: &SyncKeys, version: u8) -> (KeyedId, Vec<KeyedId>) {
        match self {
            Self::Entries { session, entries } => {
                session_ids(keys, session, entries.iter().map(|e| e.id))
            }
            Self::Journal { device, lines } => journal_ids(keys, version, device, lines),
        }
    }

    /// The keyed names of the blobs the content refers to, declared in the
    /// clear (see [`evi_shared::blob_refs`]): each line blob, and each blob
    /// a journal line names.
    fn refs(&self, keys: &SyncKeys) -> Vec<KeyedId> {
        let shas: std::collections::BTreeSet<String> = match self {
            Self::Entries { entries, .. } => entries
                .iter()
                .filter_map(|e| e.blob.map(|(_, sha)| hex::encode(sha)))
                .collect(),
            Self::Journal { lines, .. } => lines
                .iter()
                .filter_map(|l| crate::sync::state::pulled_journals::blob_of(&l.line))
                .collect(),
        };
        shas.iter().map(|s| keys.blob_key(s)).collect()
    }

    /// The group the stream belongs to, declared in the clear (see
    /// [`evi_shared::forget`]): the session's stream of a subagent
    /// transcript's.
    fn group(&self, keys: &SyncKeys) -> Option<KeyedId> {
        let Self::Entries { session, .. } = self else {
            return None;
        };
        let name = crate::source::StreamName::parse(std::str::from_utf8(session).ok()?)?;
        name.sub
            .is_some()
            .then(|| keys.stream_key(&name.session_stream().to_string()))
    }

    fn write_body<W: Write>(&self, w: &mut W, version: u8) -> io::Result<()> {
        let invalid = |m: &'static str| io::Error::new(io::ErrorKind::InvalidInput, m);
        match self {
            Self::Entries { session, entries } => {
                write_lp(w, session)?;
                write_count(w, entries.len())?;
                for e in entries {
                    write_lp(w, e.id)?;
                    if version == 1 {
                        if e.blob.is_some() {
                            return Err(invalid("format 1 has no line blobs"));
                        }
                        w.write_all(&[u8::from(e.parent.is_some())])?;
                    } else {
                        let mut flags = 0;
                        if e.parent.is_some() {
                            flags |= FLAG_PARENT;
                        }
                        if e.blob.is_some() {
                            flags |= FLAG_LINE_BLOB;
                        }
                        w.write_all(&[flags])?;
                    }
                    if let Some(p) = e.parent {
                        write_lp(w, p)?;
                    }
                    if e.day.len() != 10 {
                        return Err(invalid("day must be 10 bytes"));
                    }
                    w.write_all(e.day)?;
                    match &e.blob {
                        Some((len, sha)) => {
                            w.write_all(&len.to_be_bytes())?;
                            w.write_all(sha)?;
                        }
                        None => write_lp(w, e.line)?,
                    }
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

/// Writes the whole plaintext (header, body, MAC) in format `version` to
/// `out`. Returns `out` and the MAC.
pub(crate) fn write_plaintext<W: Write>(
    keys: &SyncKeys,
    version: u8,
    body: &BodyRef<'_>,
    stream: &KeyedId,
    ids: &[KeyedId],
    mut out: W,
) -> io::Result<(W, [u8; 32])> {
    let kind = body.kind();
    out.write_all(MAGIC)?;
    out.write_all(&[version, kind.code()])?;
    let mut mac = keys.segment_mac();
    mac_prefix(&mut mac, version, kind);
    let tee = MacTee {
        inner: out,
        mac,
        len: 0,
    };
    let mut buffered = BufWriter::with_capacity(BUF, tee);
    body.write_body(&mut buffered, version)?;
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
    version: u8,
    body: &BodyRef<'_>,
) -> Result<SealedSegment, SegmentError> {
    let (stream, entry_ids) = body.outer_ids(keys, version);
    let enc =
        age::Encryptor::with_recipients(iter::once(identity.recipient() as &dyn age::Recipient))
            .map_err(|e| SegmentError::Encrypt(e.to_string()))?;
    let run = || -> io::Result<Vec<u8>> {
        let age_w = enc.wrap_output(Vec::new())?;
        let (age_w, _) = compress_into(age_w, ZSTD_LEVEL, 0, |zw| {
            write_plaintext(keys, version, body, &stream, &entry_ids, zw).map(|(_, mac)| mac)
        })?;
        age_w.finish()
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
        refs: body.refs(keys),
        group: body.group(keys),
    })
}

/// Seals entries of one session into one segment, in the given order.
pub fn seal(
    keys: &SyncKeys,
    identity: &Identity,
    session: &SessionId,
    entries: &[Entry],
) -> Result<SealedSegment, SegmentError> {
    seal_stream(keys, identity, session.as_str(), entries)
}

/// [`seal`] for a session named by its stream name (see
/// [`crate::source::StreamName`]: an eVi session's is its bare id).
pub fn seal_stream(
    keys: &SyncKeys,
    identity: &Identity,
    stream: &str,
    entries: &[Entry],
) -> Result<SealedSegment, SegmentError> {
    if entries.is_empty() {
        return Err(SegmentError::Empty);
    }
    let mut seen = HashSet::with_capacity(entries.len());
    let mut raw = Vec::with_capacity(entries.len());
    for e in entries {
        if !seen.insert(e.id.as_str()) {
            return Err(SegmentError::Duplicate(e.id.clone()));
        }
        if e.line.contains(&b'\n') {
            return Err(SegmentError::NewlineInLine(e.id.clone()));
        }
        raw.push(RawEntry::try_from(e)?);
    }
    let body = BodyRef::Entries {
        session: stream.as_bytes(),
        entries: raw,
    };
    seal_body(keys, identity, FORMAT_VERSION, &body)
}

/// Seals the lines of one journal into one segment, in the given order.
/// `name` is the journal's name (`<device name>-<short device id>`, the
/// folder it lands in elsewhere). A line identical to an earlier one is the
/// same entry (ids are by content), so only the first is kept: the result
/// has one entry id per distinct line.
pub fn seal_journal(
    keys: &SyncKeys,
    identity: &Identity,
    name: &str,
    lines: &[JournalLine],
) -> Result<SealedSegment, SegmentError> {
    check_device(name)?;
    if lines.is_empty() {
        return Err(SegmentError::Empty);
    }
    let mut seen = HashSet::with_capacity(lines.len());
    let mut twice = false;
    for l in lines {
        if l.line.contains(&b'\n') {
            return Err(SegmentError::NewlineInLine(format!(
                "journal line {}",
                l.seq
            )));
        }
        twice |= !seen.insert(&l.line[..]);
    }
    let lines: Cow<'_, [JournalLine]> = if twice {
        let mut seen = HashSet::with_capacity(lines.len());
        Cow::Owned(
            lines
                .iter()
                .filter(|l| seen.insert(&l.line[..]))
                .cloned()
                .collect(),
        )
    } else {
        Cow::Borrowed(lines)
    };
    seal_body(
        keys,
        identity,
        FORMAT_VERSION,
        &BodyRef::Journal {
            device: name.as_bytes(),
            lines: &lines,
        },
    )
}

/// Tests of other crates only (the end-to-end tampering tests play a server
/// that holds a stolen identity): seals entries under any session id and
/// days, unvalidated, with a valid MAC and outer ids. `evi` never calls it,
/// and only a build with the `test-hooks` feature (the test crate's) has it;
/// `entries` are `(id, parent, day, line)`, each day exactly 10 bytes.
#[cfg(feature = "test-hooks")]
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
                blob: None,
            })
            .collect(),
    };
    seal_body(keys, identity, FORMAT_VERSION, &body)
}

/// Test-only: seal an arbitrary, possibly invalid body in format `version`
/// with valid MAC and ids.
#[cfg(test)]
pub(crate) fn seal_raw_for_test(
    keys: &SyncKeys,
    identity: &Identity,
    version: u8,
    body: &BodyRef<'_>,
) -> Result<SealedSegment, SegmentError> {
    seal_body(keys, identity, version, body)
}
