//! The bulk wire: a push batch and a pull page as one framed binary body,
//! so ciphertext travels as its own bytes (base64 in JSON cost a third more
//! bytes and a pass over each on both sides).
//!
//! A body is the magic `EVIF`, a version byte (1), then frames:
//!
//! ```text
//! tag: u8 | head_len: u32 BE | head: JSON, head_len bytes | body_len: u32 BE | body
//! ```
//!
//! - push (`POST /api/v1/records`, `Content-Type: application/vnd.evi.frames`):
//!   one [`Tag::Segment`] frame per segment, head [`SegmentHead`], body the
//!   segment's age ciphertext; then one [`Tag::End`] frame, head `{}`.
//! - pull (`GET /api/v1/records` with `Accept: application/vnd.evi.frames`):
//!   one [`Tag::Record`] frame per record, head [`RecordHead`], body the
//!   ciphertext; then one [`Tag::End`] frame, head [`PageEnd`].
//!
//! The end frame is required: a body cut short (a connection lost mid-page)
//! is an error, never a shorter page. The small JSON heads keep the
//! metadata readable and extensible; only the bulk is binary.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::KeyedId;

/// The media type of a framed body.
pub const CONTENT_TYPE: &str = "application/vnd.evi.frames";

/// What every framed body starts with.
pub const MAGIC: &[u8; 5] = b"EVIF\x01";

/// Longest frame head accepted: room for the ids of a segment of many tiny
/// entries, far below what would let a peer make the reader allocate wildly.
pub const MAX_HEAD_BYTES: u32 = 16 << 20;

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// A segment to store (push).
    Segment = b'S',
    /// A stored record (pull).
    Record = b'R',
    /// The last frame of a body.
    End = b'E',
}

impl Tag {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            b'S' => Some(Self::Segment),
            b'R' => Some(Self::Record),
            b'E' => Some(Self::End),
            _ => None,
        }
    }
}

/// A segment's metadata in a push frame (its ciphertext is the frame body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentHead {
    /// Keyed stream (session) id.
    pub stream: KeyedId,
    /// What the segment holds, e.g. `entries` or `journal`: `[a-z0-9_-]{1,32}`.
    pub kind: String,
    /// Keyed ids of the entries inside; at least one.
    pub entry_ids: Vec<KeyedId>,
    /// What the segment refers to and what it forgets, in the clear (see
    /// [`crate::blob_refs`]). Empty from older clients.
    #[serde(default, flatten)]
    pub refs: crate::blob_refs::SegmentRefs,
    /// Keyed id of the stream whose forget takes this one too (see
    /// [`crate::forget`]): a Claude Code subagent transcript's session.
    /// Absent from older clients, and on every other segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<KeyedId>,
}

/// A record's metadata in a pull frame (its ciphertext is the frame body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordHead {
    pub seq: u64,
    pub stream: KeyedId,
    pub kind: String,
    pub entry_ids: Vec<KeyedId>,
    /// The device that pushed it, as in the JSON page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// The end frame's head of a pull page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PageEnd {
    /// Cursor for the next call: the last seq in this page (or `after` if empty).
    pub next_after: u64,
    /// Whether records after `next_after` existed when this page was read.
    pub more: bool,
}

/// Why a framed body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("not a framed evi body (bad magic or version)")]
    BadMagic,
    #[error("unknown frame tag {0:#04x}")]
    BadTag(u8),
    #[error("frame head of {0} bytes is over the limit")]
    HeadTooLarge(u32),
    #[error("frame body of {got} bytes is over the limit of {max}")]
    BodyTooLarge { got: u32, max: u32 },
    #[error("the body ended before its end frame")]
    Truncated,
    #[error("data after the end frame")]
    TrailingData,
    #[error("bad frame head: {0}")]
    BadHead(#[from] serde_json::Error),
    #[error("reading the body: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Self::Truncated
        } else {
            Self::Io(e)
        }
    }
}

/// One frame as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub tag: Tag,
    pub head: Vec<u8>,
    pub body: Vec<u8>,
}

impl Frame {
    /// The head parsed as `T`.
    pub fn head<'a, T: Deserialize<'a>>(&'a self) -> Result<T, FrameError> {
        Ok(serde_json::from_slice(&self.head)?)
    }
}

/// The bytes before a frame's body: tag, head length, head, body length.
/// A writer that streams the body from elsewhere sends this, then exactly
/// `body_len` bytes.
pub fn frame_prefix(tag: Tag, head: &[u8], body_len: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + head.len());
    out.push(tag as u8);
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    out.extend_from_slice(head);
    out.extend_from_slice(&body_len.to_be_bytes());
    out
}

/// Appends a whole frame to `out`.
pub fn write_frame(out: &mut Vec<u8>, tag: Tag, head: &impl Serialize, body: &[u8]) {
    let head = serde_json::to_vec(head).expect("frame heads serialize");
    let len = u32::try_from(body.len()).expect("a frame body fits in u32");
    out.extend_from_slice(&frame_prefix(tag, &head, len));
    out.extend_from_slice(body);
}

/// The size [`write_frame`] adds for a body of `body_len` bytes under a
/// head of `head_len` bytes.
pub fn frame_size(head_len: usize, body_len: usize) -> usize {
    9 + head_len + body_len
}

/// Reads frames from a body, checking the magic first and every length
/// against its limit before allocating.
pub struct FrameReader<R> {
    inner: R,
    max_body: u32,
    started: bool,
    ended: bool,
}

impl<R: Read> FrameReader<R> {
    /// A reader that refuses bodies over `max_body` bytes.
    pub fn new(inner: R, max_body: u32) -> Self {
        Self {
            inner,
            max_body,
            started: false,
            ended: false,
        }
    }

    /// The next frame; `None` once the end frame has been read (and nothing
    /// follows it). The end frame itself is returned first, for its head.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.ended {
            let mut extra = [0u8; 1];
            return match self.inner.read(&mut extra)? {
                0 => Ok(None),
                _ => Err(FrameError::TrailingData),
            };
        }
        if !self.started {
            let mut magic = [0u8; MAGIC.len()];
            self.inner
                .read_exact(&mut magic)
                .map_err(|_| FrameError::BadMagic)?;
            if &magic != MAGIC {
                return Err(FrameError::BadMagic);
            }
            self.started = true;
        }
        let mut tag = [0u8; 1];
        self.inner.read_exact(&mut tag)?;
        let tag = Tag::from_byte(tag[0]).ok_or(FrameError::BadTag(tag[0]))?;
        let head_len = self.read_u32()?;
        if head_len > MAX_HEAD_BYTES {
            return Err(FrameError::HeadTooLarge(head_len));
        }
        let head = self.read_exact_vec(head_len)?;
        let body_len = self.read_u32()?;
        if body_len > self.max_body {
            return Err(FrameError::BodyTooLarge {
                got: body_len,
                max: self.max_body,
            });
        }
        let body = self.read_exact_vec(body_len)?;
        if tag == Tag::End {
            self.ended = true;
        }
        Ok(Some(Frame { tag, head, body }))
    }

    fn read_u32(&mut self) -> Result<u32, FrameError> {
        let mut b = [0u8; 4];
        self.inner.read_exact(&mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    /// Reads `len` bytes without trusting `len` for the allocation: a peer
    /// that announces more than it sends costs only what it sent.
    fn read_exact_vec(&mut self, len: u32) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::with_capacity((len as usize).min(1 << 20));
        let got = (&mut self.inner).take(len as u64).read_to_end(&mut out)?;
        if got != len as usize {
            return Err(FrameError::Truncated);
        }
        Ok(out)
    }
}

/// Starts a framed body.
pub fn start_body() -> Vec<u8> {
    MAGIC.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: char) -> KeyedId {
        c.to_string().repeat(64).parse().unwrap()
    }

    fn page() -> Vec<u8> {
        let mut out = start_body();
        let head = RecordHead {
            seq: 7,
            stream: id('a'),
            kind: "entries".into(),
            entry_ids: vec![id('b'), id('c')],
            device: Some("dev".into()),
        };
        write_frame(&mut out, Tag::Record, &head, b"\x00\xffcipher");
        write_frame(
            &mut out,
            Tag::End,
            &PageEnd {
                next_after: 7,
                more: true,
            },
            &[],
        );
        out
    }

    #[test]
    fn a_page_round_trips() {
        let body = page();
        let mut r = FrameReader::new(&body[..], 1 << 20);
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(f.tag, Tag::Record);
        assert_eq!(f.body, b"\x00\xffcipher");
        let head: RecordHead = f.head().unwrap();
        assert_eq!(head.seq, 7);
        assert_eq!(head.entry_ids, vec![id('b'), id('c')]);
        let end = r.next_frame().unwrap().unwrap();
        assert_eq!(end.tag, Tag::End);
        assert_eq!(
            end.head::<PageEnd>().unwrap(),
            PageEnd {
                next_after: 7,
                more: true
            }
        );
        assert!(r.next_frame().unwrap().is_none());
    }

    #[test]
    fn a_body_cut_anywhere_is_an_error_not_a_shorter_page() {
        let body = page();
        for cut in 0..body.len() {
            let mut r = FrameReader::new(&body[..cut], 1 << 20);
            let mut result = Ok(());
            loop {
                match r.next_frame() {
                    Ok(Some(_)) => continue,
                    Ok(None) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            assert!(
                result.is_err(),
                "cut at {cut} of {} read as whole",
                body.len()
            );
        }
    }

    #[test]
    fn limits_and_garbage_are_refused() {
        let body = page();
        assert!(matches!(
            FrameReader::new(&body[..], 3).next_frame(),
            Err(FrameError::BodyTooLarge { got: 8, max: 3 })
        ));
        assert!(matches!(
            FrameReader::new(&b"{\"segments\":[]}"[..], 10).next_frame(),
            Err(FrameError::BadMagic)
        ));
        let mut bad = start_body();
        bad.push(b'X');
        assert!(matches!(
            FrameReader::new(&bad[..], 10).next_frame(),
            Err(FrameError::BadTag(b'X'))
        ));
        // A huge announced head is refused before anything is allocated.
        let mut huge = start_body();
        huge.push(b'S');
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            FrameReader::new(&huge[..], 10).next_frame(),
            Err(FrameError::HeadTooLarge(_))
        ));
        // A large announced body with little behind it is truncated, cheaply.
        let mut short = start_body();
        short.extend_from_slice(&frame_prefix(Tag::Segment, b"{}", 1 << 30));
        short.extend_from_slice(b"abc");
        assert!(matches!(
            FrameReader::new(&short[..], u32::MAX).next_frame(),
            Err(FrameError::Truncated)
        ));
        let mut trailing = body.clone();
        trailing.push(0);
        let mut r = FrameReader::new(&trailing[..], 1 << 20);
        r.next_frame().unwrap();
        r.next_frame().unwrap();
        assert!(matches!(r.next_frame(), Err(FrameError::TrailingData)));
    }

    #[test]
    fn frame_size_is_what_write_frame_adds() {
        let mut out = Vec::new();
        write_frame(&mut out, Tag::Segment, &serde_json::json!({}), b"12345");
        assert_eq!(out.len(), frame_size(2, 5));
    }
}
