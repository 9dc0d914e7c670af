//! Opening: decryption, the decompression limits, and parsing and checking
//! the plaintext (the format is in the parent module's docs).

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader, Read};
use std::iter;

use evi_shared::{Day, IdError, KeyedId, SessionId};
use hmac::Mac;

use super::layout::{
    FLAG_LINE_BLOB, FLAG_PARENT, TooLargeMarker, check_device, is_marked, journal_ids, mac_prefix,
    mac_suffix, session_ids,
};
use super::{
    BUF, Entry, FORMAT_VERSION, JournalLine, LineBlob, MAGIC, MAX_PLAINTEXT_BYTES, MAX_WINDOW_LOG,
    MIN_FORMAT_VERSION, OpenedSegment, SegmentError, SegmentKind,
};
use crate::sync::seal::identity::Identity;
use crate::sync::seal::keys::{HmacSha256, SyncKeys};
use crate::sync::seal::zstd_context::decompress_from;

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
        // huge allocation. Each step at most doubles it and reserves exactly
        // that, so a long line ends at its length, not at the next power of
        // two (up to twice its bytes, held as long as the page is).
        let mut v = Vec::with_capacity(n.min(BUF as u64) as usize);
        while (v.len() as u64) < n {
            let step = (n - v.len() as u64).min(v.len().max(BUF) as u64);
            v.reserve_exact(step as usize);
            if (&mut self.r).take(step).read_to_end(&mut v)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
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
    /// `(len, sha256)` of a line stored as a blob.
    blob: Option<(u64, [u8; 32])>,
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

fn parse_body<R: BufRead>(
    p: &mut Parser<R>,
    version: u8,
    kind: SegmentKind,
) -> io::Result<RawBody> {
    let malformed = |m: &str| io::Error::other(MalformedMarker(m.to_owned()));
    match kind {
        SegmentKind::Entries => {
            let session = p.lp()?;
            let count = p.u32()?;
            let mut entries = Vec::with_capacity(count.min(4096) as usize);
            for _ in 0..count {
                let id = p.lp()?;
                // Format 1 has a 0|1 parent byte where format 2 has flags.
                let flags = match (version, p.u8()?) {
                    (1, f @ (0 | 1)) => f,
                    (1, _) => return Err(malformed("bad parent flag")),
                    (_, f) if f & !(FLAG_PARENT | FLAG_LINE_BLOB) == 0 => f,
                    (_, _) => return Err(malformed("unknown entry flags")),
                };
                let parent = match flags & FLAG_PARENT {
                    0 => None,
                    _ => Some(p.lp()?),
                };
                let day = p.exact::<10>()?;
                let (line, blob) = match flags & FLAG_LINE_BLOB {
                    0 => (p.lp()?, None),
                    _ => (Vec::new(), Some((p.u64()?, p.exact::<32>()?))),
                };
                entries.push(RawOwnedEntry {
                    id,
                    parent,
                    day,
                    line,
                    blob,
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
    let input = BufReader::with_capacity(BUF, AgeTagged(payload));
    decompress_from(input, MAX_WINDOW_LOG, |zr| {
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
    })
    .map_err(|e| SegmentError::Decompress(e.to_string()))?
}

/// The parsing and checking half of [`open`], on a plaintext already
/// decrypted and decompressed: what the fuzz targets drive (a fuzzer cannot
/// get past age's authentication to reach it through [`open`]).
pub fn open_plaintext_bytes(
    keys: &SyncKeys,
    plaintext: &[u8],
    stream: &KeyedId,
    kind: SegmentKind,
    entry_ids: &[KeyedId],
) -> Result<OpenedSegment, SegmentError> {
    let mut p = Parser {
        r: plaintext,
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
    let version = head[6];
    if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
        return Err(SegmentError::Version(version));
    }
    let inner_kind = SegmentKind::from_code(head[7])
        .ok_or_else(|| SegmentError::Malformed(format!("unknown kind code {}", head[7])))?;
    mac_prefix(&mut p.mac, version, inner_kind);
    let body = parse_body(p, version, inner_kind).map_err(read_err)?;
    let mut tag = [0u8; 32];
    p.raw_exact(&mut tag).map_err(read_err)?;
    let mut probe = [0u8; 1];
    match p.r.read(&mut probe).map_err(read_err)? {
        0 => {}
        _ => return Err(SegmentError::Malformed("data after the MAC".into())),
    }

    // Ids as the sealer computed them, from the inner content.
    let (inner_stream, inner_ids) = match &body {
        RawBody::Entries { session, entries } => {
            session_ids(keys, session, entries.iter().map(|e| &e.id[..]))
        }
        RawBody::Journal { device, lines } => journal_ids(keys, version, device, lines),
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
            let name = String::from_utf8_lossy(&session);
            let stream = match name.contains('/') {
                true => Some(crate::source::StreamName::parse(&name).ok_or_else(|| {
                    SegmentError::BadSessionId(IdError::Session(name.to_string()))
                })?),
                false => None,
            };
            let session = match &stream {
                Some(s) => s.session.clone(),
                None => name
                    .parse::<SessionId>()
                    .map_err(SegmentError::BadSessionId)?,
            };
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
                let line_blob = match e.blob {
                    None => None,
                    Some((0, _)) => {
                        return Err(SegmentError::BadLineBlob {
                            id,
                            reason: "the length is 0",
                        });
                    }
                    // 32 bytes by construction, lowercase by `hex::encode`.
                    Some((len, sha)) => Some(LineBlob {
                        sha256_hex: hex::encode(sha),
                        len,
                    }),
                };
                out.push(Entry {
                    id,
                    parent,
                    day,
                    line: e.line,
                    line_blob,
                });
            }
            Ok(match stream {
                Some(stream) => OpenedSegment::AgentEntries {
                    stream,
                    entries: out,
                },
                None => OpenedSegment::Entries {
                    session,
                    entries: out,
                },
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
            // One entry per id: the seq in format 1, the content from 2 on
            // (where seqs may repeat after a rewind).
            let mut seqs = HashSet::with_capacity(lines.len());
            let mut contents = HashSet::with_capacity(lines.len());
            for l in &lines {
                let what = || format!("journal line {}", l.seq);
                let fresh = match version {
                    1 => seqs.insert(l.seq),
                    _ => contents.insert(&l.line[..]),
                };
                if !fresh {
                    return Err(SegmentError::Duplicate(what()));
                }
                if l.line.contains(&b'\n') {
                    return Err(SegmentError::NewlineInLine(what()));
                }
            }
            Ok(OpenedSegment::Journal { device, lines })
        }
    }
}
