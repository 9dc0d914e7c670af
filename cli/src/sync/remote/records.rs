//! Records on the wire as the client sends and reads them: the framed binary
//! body ([`evi_shared::frames`]) with a server that speaks it, the JSON forms
//! with an older one. Push and pull see only these types, whichever it was.

use std::io::Read;

use evi_shared::api::{PullResponse, PushRequest, Segment};
use evi_shared::forget::changes_history;
use evi_shared::frames::{
    self, FrameError, FrameReader, PageEnd, RecordHead, SegmentHead, Tag, frame_size,
};

/// A sealed segment on its way up.
#[derive(Debug, Clone)]
pub struct OutSegment {
    pub head: SegmentHead,
    pub ciphertext: Vec<u8>,
}

/// A record as pulled, not yet verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledRecord {
    pub head: RecordHead,
    pub ciphertext: Vec<u8>,
}

/// One pull page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub records: Vec<PulledRecord>,
    /// Cursor for the next call.
    pub next_after: u64,
    /// Whether more records existed when the page was read.
    pub more: bool,
}

/// Bytes of keyed id in a head, quoted, with its comma.
const ID_IN_JSON: u64 = 67;

impl OutSegment {
    /// What this segment adds to a batch body: exact enough to keep a batch
    /// under the server's limit (ids dominate the head; the rest is a bound).
    pub fn wire_size(&self, framed: bool) -> u64 {
        let ids = self.head.entry_ids.len() + self.head.refs.len();
        let head = (ids as u64 + 1) * ID_IN_JSON + 3 * 16 + 64;
        let body = self.ciphertext.len() as u64;
        if framed {
            frame_size(head as usize, body as usize) as u64
        } else {
            body.div_ceil(3) * 4 + head + 64
        }
    }
}

/// A push batch being cut. On the framed wire each segment is written into
/// the body as it joins and its ciphertext dropped, so a batch's bytes are
/// held once, never as segments and again as the body; the JSON form (older
/// servers) keeps the segments until it is sent.
#[derive(Debug)]
pub enum OutBatch {
    Framed {
        body: Vec<u8>,
        segments: usize,
        /// Whether a segment changes history (see [`Self::changes_history`]).
        changes: bool,
    },
    Json(Vec<OutSegment>),
}

impl OutBatch {
    /// A batch for up to `room` bytes (reserved at once on the framed wire,
    /// so the body never grows by copying).
    pub fn new(framed: bool, room: u64) -> Self {
        if framed {
            let mut body = Vec::with_capacity(room as usize + 64);
            body.extend_from_slice(frames::MAGIC);
            Self::Framed {
                body,
                segments: 0,
                changes: false,
            }
        } else {
            Self::Json(Vec::new())
        }
    }

    pub fn add(&mut self, seg: OutSegment) {
        match self {
            Self::Framed {
                body,
                segments,
                changes,
            } => {
                *changes |= changes_history(&seg.head.kind, &seg.head.refs);
                frames::write_frame(body, Tag::Segment, &seg.head, &seg.ciphertext);
                *segments += 1;
            }
            Self::Json(segs) => segs.push(seg),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Framed { segments, .. } => *segments,
            Self::Json(segs) => segs.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a segment of the batch is a forget, its undo or forgotten
    /// lines: the push then carries the key proof.
    pub fn changes_history(&self) -> bool {
        match self {
            Self::Framed { changes, .. } => *changes,
            Self::Json(segs) => segs
                .iter()
                .any(|s| changes_history(&s.head.kind, &s.head.refs)),
        }
    }

    /// The finished framed body (with its end frame); `None` for JSON.
    pub fn into_framed(self) -> Result<Vec<u8>, Vec<OutSegment>> {
        match self {
            Self::Framed { mut body, .. } => {
                frames::write_frame(&mut body, Tag::End, &serde_json::json!({}), &[]);
                Ok(body)
            }
            Self::Json(segs) => Err(segs),
        }
    }
}

/// A push batch as the JSON request older servers take.
pub fn json_batch(segments: Vec<OutSegment>) -> PushRequest {
    PushRequest {
        segments: segments
            .into_iter()
            .map(|s| Segment {
                stream: s.head.stream,
                kind: s.head.kind,
                entry_ids: s.head.entry_ids,
                ciphertext: s.ciphertext.into(),
                refs: s.head.refs.refs,
                forgets: s.head.refs.forgets,
                forget_blobs: s.head.refs.forget_blobs,
                group: s.head.group,
            })
            .collect(),
    }
}

/// Reads a framed pull page: record frames, then the end frame. A body cut
/// short is an error, never a shorter page.
pub fn read_framed_page(body: impl Read, max_body: u32) -> Result<Page, FrameError> {
    let mut reader = FrameReader::new(body, max_body);
    let mut page = Page::default();
    while let Some(frame) = reader.next_frame()? {
        match frame.tag {
            Tag::Record => {
                let head: RecordHead = frame.head()?;
                page.records.push(PulledRecord {
                    head,
                    ciphertext: frame.body,
                });
            }
            Tag::End => {
                let end: PageEnd = frame.head()?;
                page.next_after = end.next_after;
                page.more = end.more;
            }
            Tag::Segment => return Err(FrameError::BadTag(Tag::Segment as u8)),
        }
    }
    Ok(page)
}

impl From<PullResponse> for Page {
    fn from(r: PullResponse) -> Self {
        Self {
            records: r
                .records
                .into_iter()
                .map(|r| PulledRecord {
                    head: RecordHead {
                        seq: r.seq,
                        stream: r.stream,
                        kind: r.kind,
                        entry_ids: r.entry_ids,
                        device: r.device,
                    },
                    ciphertext: r.ciphertext.0,
                })
                .collect(),
            next_after: r.next_after,
            more: r.more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use evi_shared::KeyedId;

    fn id(c: char) -> KeyedId {
        c.to_string().repeat(64).parse().unwrap()
    }

    fn seg(ids: usize, body: usize) -> OutSegment {
        OutSegment {
            head: SegmentHead {
                stream: id('a'),
                kind: "entries".into(),
                entry_ids: (0..ids).map(|_| id('b')).collect(),
                refs: Default::default(),
                group: None,
            },
            ciphertext: vec![7; body],
        }
    }

    fn framed(segs: Vec<OutSegment>) -> Vec<u8> {
        let mut b = OutBatch::new(true, 1 << 20);
        for s in segs {
            b.add(s);
        }
        b.into_framed().unwrap()
    }

    #[test]
    fn wire_size_bounds_both_encodings() {
        for (ids, body) in [(1, 0), (1, 10), (300, 4 << 20), (5000, 100)] {
            let s = seg(ids, body);
            let size = framed(vec![s.clone()]).len() as u64;
            assert!(s.wire_size(true) + 32 >= size, "{ids} {body}");
            let json = serde_json::to_vec(&json_batch(vec![s.clone()]))
                .unwrap()
                .len() as u64;
            assert!(s.wire_size(false) + 32 >= json, "{ids} {body}");
        }
    }

    #[test]
    fn a_framed_batch_reads_back_as_the_server_would() {
        let body = framed(vec![seg(2, 5), seg(1, 0)]);
        let mut json = OutBatch::new(false, 0);
        json.add(seg(1, 0));
        assert_eq!(json.len(), 1);
        assert!(
            json.into_framed().is_err(),
            "a JSON batch has no framed body"
        );
        let mut r = FrameReader::new(&body[..], 1 << 20);
        let f = r.next_frame().unwrap().unwrap();
        assert_eq!(f.tag, Tag::Segment);
        assert_eq!(f.head::<SegmentHead>().unwrap().entry_ids.len(), 2);
        assert_eq!(f.body, vec![7; 5]);
        assert_eq!(r.next_frame().unwrap().unwrap().tag, Tag::Segment);
        assert_eq!(r.next_frame().unwrap().unwrap().tag, Tag::End);
        assert!(r.next_frame().unwrap().is_none());
    }

    #[test]
    fn a_page_without_its_end_frame_is_refused() {
        let mut body = frames::MAGIC.to_vec();
        let head = RecordHead {
            seq: 3,
            stream: id('a'),
            kind: "entries".into(),
            entry_ids: vec![id('c')],
            device: None,
        };
        frames::write_frame(&mut body, Tag::Record, &head, b"x");
        assert!(matches!(
            read_framed_page(&body[..], 100),
            Err(FrameError::Truncated)
        ));
        frames::write_frame(
            &mut body,
            Tag::End,
            &PageEnd {
                next_after: 3,
                more: false,
            },
            &[],
        );
        let page = read_framed_page(&body[..], 100).unwrap();
        assert_eq!(page.records.len(), 1);
        assert_eq!(page.records[0].head.seq, 3);
        assert_eq!(page.next_after, 3);
        assert!(!page.more);
    }
}
