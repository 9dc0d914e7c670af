//! Sealing: the plaintext encoding, its MAC, and the age + zstd layers
//! around it (the format is in the parent module's docs).

use std::collections::HashSet;
use std::io::{self, BufWriter, Write};
use std::iter;

use evi_shared::{KeyedId, SessionId};
use hmac::Mac;

use super::open::{TooLargeMarker, is_marked};
use super::{
    BUF, Entry, FORMAT_VERSION, JournalLine, MAC_DOMAIN, MAGIC, MAX_PLAINTEXT_BYTES, SealedSegment,
    SegmentError, SegmentKind, ZSTD_LEVEL,
};
use crate::sync::identity::Identity;
use crate::sync::keys::{HmacSha256, SyncKeys};

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

impl<'a> From<&'a Entry> for RawEntry<'a> {
    fn from(e: &'a Entry) -> Self {
        Self {
            id: e.id.as_bytes(),
            parent: e.parent.as_deref().map(str::as_bytes),
            day: e.day.as_str().as_bytes(),
            line: &e.line,
        }
    }
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

pub(super) fn mac_prefix(mac: &mut HmacSha256, kind: SegmentKind) {
    mac.update(&(MAC_DOMAIN.len() as u32).to_be_bytes());
    mac.update(MAC_DOMAIN);
    mac.update(&[FORMAT_VERSION]);
    let name = kind.as_str().as_bytes();
    mac.update(&(name.len() as u32).to_be_bytes());
    mac.update(name);
}

pub(super) fn mac_suffix(mac: &mut HmacSha256, body_len: u64, stream: &KeyedId, ids: &[KeyedId]) {
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
        entries: entries.iter().map(RawEntry::from).collect(),
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
