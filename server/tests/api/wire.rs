//! A small client for the framed wire (`application/vnd.evi.frames`), the
//! way the real client will speak it: bodies built and read with
//! `evi_shared::frames`.

use evi_shared::KeyedId;
use evi_shared::frames::{self, FrameReader, PageEnd, RecordHead, SegmentHead, Tag};
use reqwest::StatusCode;
use serde_json::Value;

use crate::common::{Api, kid};

/// A segment for a framed push: (stream, kind, entry ids, ciphertext).
#[derive(Debug, Clone)]
pub struct Seg {
    pub head: SegmentHead,
    pub body: Vec<u8>,
}

/// A segment with one entry id and `len` bytes of ciphertext that differ
/// from record to record (so a body read from the wrong offset shows).
pub fn seg(stream: u64, entry: u64, len: usize) -> Seg {
    let body = (0..len)
        .map(|i| (entry as usize * 31 + i * 7) as u8)
        .collect();
    Seg {
        head: SegmentHead {
            stream: id(1, stream),
            kind: "entries".into(),
            entry_ids: vec![id(2, entry)],
            refs: Default::default(),
            group: None,
        },
        body,
    }
}

pub fn id(tag: u8, n: u64) -> KeyedId {
    kid(tag, n).parse().unwrap()
}

/// The framed body of a push.
pub fn push_body(segs: &[Seg]) -> Vec<u8> {
    let mut out = frames::start_body();
    for s in segs {
        frames::write_frame(&mut out, Tag::Segment, &s.head, &s.body);
    }
    frames::write_frame(&mut out, Tag::End, &serde_json::json!({}), &[]);
    out
}

/// A pulled page: records (head, body) and its end frame.
#[derive(Debug)]
pub struct FramedPage {
    pub records: Vec<(RecordHead, Vec<u8>)>,
    pub end: PageEnd,
    /// Bytes of the whole response body.
    pub wire_bytes: usize,
}

impl Api {
    /// POSTs raw bytes to `/api/v1/records` with this content type.
    pub async fn post_records_raw(
        &self,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .http
            .post(format!("{}/api/v1/records", self.base))
            .bearer_auth(self.token.as_deref().unwrap())
            .body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let resp = req.send().await.unwrap();
        let st = resp.status();
        let text = resp.text().await.unwrap();
        (
            st,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A framed push; asserts 200 and returns the JSON answer.
    pub async fn push_frames(&self, segs: &[Seg]) -> Value {
        let (st, v) = self
            .post_records_raw(Some(frames::CONTENT_TYPE), push_body(segs))
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v
    }

    /// One framed page; asserts 200 and the framed content type.
    pub async fn pull_frames_page(&self, after: u64, limit: Option<u32>) -> FramedPage {
        let mut url = format!("{}/api/v1/records?after={after}", self.base);
        if let Some(l) = limit {
            url.push_str(&format!("&limit={l}"));
        }
        let resp = self
            .http
            .get(url)
            .bearer_auth(self.token.as_deref().unwrap())
            .header("accept", frames::CONTENT_TYPE)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            frames::CONTENT_TYPE
        );
        let bytes = resp.bytes().await.unwrap().to_vec();
        let mut r = FrameReader::new(&bytes[..], u32::MAX);
        let mut records = Vec::new();
        let mut end = None;
        while let Some(f) = r.next_frame().unwrap() {
            match f.tag {
                Tag::Record => records.push((f.head::<RecordHead>().unwrap(), f.body)),
                Tag::End => end = Some(f.head::<PageEnd>().unwrap()),
                Tag::Segment => panic!("a segment frame in a pull page"),
            }
        }
        FramedPage {
            records,
            end: end.expect("the page has its end frame"),
            wire_bytes: bytes.len(),
        }
    }

    /// Every record, following cursors through framed pages.
    pub async fn pull_all_frames(&self) -> (Vec<(RecordHead, Vec<u8>)>, Vec<FramedPage>) {
        let mut after = 0;
        let mut all = Vec::new();
        let mut pages = Vec::new();
        loop {
            let mut p = self.pull_frames_page(after, None).await;
            after = p.end.next_after;
            all.append(&mut p.records);
            let more = p.end.more;
            pages.push(p);
            if !more {
                return (all, pages);
            }
            assert!(pages.len() < 10_000, "pagination does not end");
        }
    }
}
