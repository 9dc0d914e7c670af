//! The framed wire of `/api/v1/records` (see [`evi_shared::frames`]): reading
//! a push body, and streaming a pull page body from the body store.
//!
//! A pull page streams: only its rows (metadata) are in memory; each
//! record's frame prefix goes out, then its body in chunks straight from the
//! store. A failure after the first byte aborts the response body, so the
//! client sees a body without its end frame (truncated), never a shorter
//! page that reads as whole.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use evi_shared::frames::{self, FrameError, FrameReader, PageEnd, RecordHead, Tag};
use futures_util::{StreamExt as _, TryStreamExt as _, stream};

use super::json_error;
use crate::bodies::BodyStore;
use crate::error::{ApiError, echo};
use crate::store::{PageCost, StoredBody, StoredRecord, UserId};

/// A segment as received, on either wire.
pub struct Incoming {
    pub stream: evi_shared::KeyedId,
    pub kind: String,
    pub entry_ids: Vec<evi_shared::KeyedId>,
    pub refs: evi_shared::blob_refs::SegmentRefs,
    pub group: Option<evi_shared::KeyedId>,
    pub body: Bytes,
}

/// Which wire a push body is in, by its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushWire {
    Json,
    Frames,
}

/// `application/json` or `application/vnd.evi.frames`; anything else, or
/// no type, is 415 (see [`crate::crosssite`]: a body type a web page could
/// send cross-site never reaches a handler).
pub fn push_wire(headers: &HeaderMap) -> Result<PushWire, ApiError> {
    match crate::crosssite::essence(headers).as_deref() {
        Some("application/json") => Ok(PushWire::Json),
        Some(frames::CONTENT_TYPE) => Ok(PushWire::Frames),
        Some(_) => Err(ApiError::unsupported_media_type(format!(
            "a push body is application/json or {}, not {:?}",
            frames::CONTENT_TYPE,
            echo(
                headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap_or("(not text)")
            )
        ))),
        None => Err(ApiError::unsupported_media_type(format!(
            "a push body is application/json or {}: say which in Content-Type",
            frames::CONTENT_TYPE
        ))),
    }
}

/// Whether the client asked for a framed pull page.
pub fn wants_frames(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(frames::CONTENT_TYPE)))
}

fn frame_error(e: FrameError) -> ApiError {
    match e {
        FrameError::BadHead(e) => json_error("invalid frame head", &e),
        e => ApiError::bad_request(format!("invalid framed body: {e}")),
    }
}

/// The segments of a framed push body: segment frames, then the end frame.
pub fn read_push(body: &[u8]) -> Result<Vec<Incoming>, ApiError> {
    let max = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut r = FrameReader::new(body, max);
    let mut out = Vec::new();
    while let Some(f) = r.next_frame().map_err(frame_error)? {
        match f.tag {
            Tag::Segment => {
                let head: frames::SegmentHead = f.head().map_err(frame_error)?;
                out.push(Incoming {
                    stream: head.stream,
                    kind: head.kind,
                    entry_ids: head.entry_ids,
                    refs: head.refs,
                    group: head.group,
                    body: Bytes::from(f.body),
                });
            }
            Tag::End => {}
            Tag::Record => {
                return Err(ApiError::bad_request(
                    "invalid framed body: a push holds segment frames, not record frames",
                ));
            }
        }
    }
    Ok(out)
}

fn head_of(r: &StoredRecord) -> RecordHead {
    RecordHead {
        seq: r.seq,
        stream: r.stream.clone(),
        kind: r.kind.clone(),
        entry_ids: r.entry_ids.clone(),
        device: r.device_id.clone(),
    }
}

fn head_json(r: &StoredRecord) -> Vec<u8> {
    serde_json::to_vec(&head_of(r)).expect("record heads serialize")
}

/// What a page costs besides its records: the magic and the largest end frame.
fn page_overhead() -> u64 {
    let end = serde_json::to_vec(&PageEnd {
        next_after: u64::MAX,
        more: false,
    })
    .expect("page ends serialize");
    (frames::MAGIC.len() + frames::frame_size(end.len(), 0)) as u64
}

/// The byte budget for records in a framed page of at most `max_page_bytes`
/// on the wire, and the cost of each record: its whole frame.
pub fn page_budget(max_page_bytes: u64) -> (u64, PageCost) {
    let cost: PageCost =
        Arc::new(|r| frames::frame_size(head_json(r).len(), r.body.len() as usize) as u64);
    (max_page_bytes.saturating_sub(page_overhead()), cost)
}

/// Bodies up to this size are read whole, several at once (up to this
/// total per read), and go out as one chunk with their frame prefixes; larger
/// ones stream in chunks. A run of neighbours in one pack is one ranged read
/// (one GET on a bucket, see [`crate::bodies::objects`]).
const SMALL_RUN_BYTES: u64 = 512 * 1024;

/// Runs fetched ahead of the one being sent, in order. Each read from a
/// bucket waits a round trip before its first byte (tens of ms on S3, and
/// on a server that delays small writes), so reading one run after the
/// other left a page waiting on the sum of them; with this many in flight
/// a page of the default 4 MiB is about one round trip. It bounds memory
/// too: at most `RUNS_AHEAD` x [`SMALL_RUN_BYTES`] (4 MiB, the default
/// page) of read-ahead per pull, and a large body opened ahead holds only
/// what its connection buffers until it is its turn.
const RUNS_AHEAD: usize = 8;

/// Consecutive records sent together: small ones read in one go, or one
/// large body streamed.
enum Run {
    Small(Vec<StoredRecord>),
    Large(StoredRecord),
}

fn runs(records: Vec<StoredRecord>) -> Vec<Run> {
    let mut out = Vec::new();
    let mut small = Vec::new();
    let mut small_bytes = 0;
    for r in records {
        let len = r.body.len();
        if (len > SMALL_RUN_BYTES || small_bytes + len > SMALL_RUN_BYTES) && !small.is_empty() {
            out.push(Run::Small(std::mem::take(&mut small)));
            small_bytes = 0;
        }
        if len > SMALL_RUN_BYTES {
            out.push(Run::Large(r));
        } else {
            small_bytes += len;
            small.push(r);
        }
    }
    if !small.is_empty() {
        out.push(Run::Small(small));
    }
    out
}

fn prefix_of(r: &StoredRecord) -> Vec<u8> {
    frames::frame_prefix(
        Tag::Record,
        &head_json(r),
        u32::try_from(r.body.len()).unwrap_or(u32::MAX),
    )
}

/// The frames of a run of small records, as one chunk.
async fn small_run(
    bodies: &dyn BodyStore,
    user: UserId,
    records: Vec<StoredRecord>,
) -> std::io::Result<Bytes> {
    let refs = records
        .iter()
        .filter_map(|r| match &r.body {
            StoredBody::Stored(rf) => Some(rf.clone()),
            StoredBody::Inline(_) => None,
        })
        .collect();
    let mut read = bodies
        .read_small(user, refs)
        .await
        .map_err(std::io::Error::other)?
        .into_iter();
    let mut out = Vec::new();
    for r in &records {
        out.extend_from_slice(&prefix_of(r));
        match &r.body {
            StoredBody::Inline(b) => out.extend_from_slice(b),
            StoredBody::Stored(_) => {
                let b = read
                    .next()
                    .ok_or_else(|| std::io::Error::other("body store returned too few bodies"))?;
                out.extend_from_slice(&b);
            }
        }
    }
    Ok(Bytes::from(out))
}

/// The chunks of one run: its read starts when the run is fetched ahead,
/// and its bytes go out when the runs before it have.
async fn run_chunks(bodies: Arc<dyn BodyStore>, user: UserId, run: Run) -> ChunkStream {
    match run {
        Run::Small(records) => {
            let chunk = small_run(&*bodies, user, records).await;
            stream::once(async move { chunk }).boxed()
        }
        Run::Large(r) => {
            let prefix = stream::once(std::future::ready(Ok(Bytes::from(prefix_of(&r)))));
            match r.body {
                StoredBody::Inline(b) => prefix
                    .chain(stream::once(async move { Ok(Bytes::from(b)) }))
                    .boxed(),
                StoredBody::Stored(rf) => match bodies.open(user, &rf).await {
                    Ok(body) => prefix.chain(body).boxed(),
                    Err(e) => stream::once(async move { Err(std::io::Error::other(e)) }).boxed(),
                },
            }
        }
    }
}

type ChunkStream = futures_util::stream::BoxStream<'static, std::io::Result<Bytes>>;

/// The framed page body, streamed, with up to [`RUNS_AHEAD`] runs read
/// ahead of the one going out, in seq order. `ticket` is let go when the
/// last body has been read (or the client went away).
pub fn page_body(
    bodies: Arc<dyn BodyStore>,
    user: UserId,
    records: Vec<StoredRecord>,
    end: PageEnd,
    ticket: crate::bodies::readers::ReadTicket,
) -> Body {
    let start = stream::once(async { Ok::<_, std::io::Error>(Bytes::from_static(frames::MAGIC)) });
    let records = stream::iter(runs(records))
        .map(move |run| run_chunks(bodies.clone(), user, run))
        .buffered(RUNS_AHEAD)
        .flatten();
    let mut end_frame = Vec::new();
    frames::write_frame(&mut end_frame, Tag::End, &end, &[]);
    let end = stream::once(async move {
        drop(ticket);
        Ok(Bytes::from(end_frame))
    });
    let all = start.chain(records).chain(end).inspect_err(|e| {
        tracing::error!(error = %e, "pull page aborted mid-body: the client sees it truncated");
    });
    Body::from_stream(all)
}
