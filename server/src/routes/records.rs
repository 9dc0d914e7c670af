//! Push (a batch of encrypted segments, merged by entry id) and pull (pages
//! of records after a cursor), each on two wires: JSON with base64
//! ciphertext (older clients) and the framed binary body
//! (`application/vnd.evi.frames`, see [`super::framed`]).
//!
//! A push writes its bodies to the body store first (durable), then commits
//! the rows that point at them: a row never points at a missing body.

use axum::Json;
use axum::extract::{FromRequest as _, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse as _, Response};
use evi_shared::KeyedId;
use evi_shared::api::{
    DamagedMarked, DamagedSeqs, EntryIds, ErrorBody, KnownEntries, PullQuery, PullResponse,
    PushQuery, PushRequest, PushResponse, Record,
};
use evi_shared::frames::{self, PageEnd};
use evi_shared::limits::{KIND_MAX_LEN, MAX_ENTRY_IDS_PER_SEGMENT, MAX_NAMES_PER_CALL};

use super::framed::{self, Incoming, PushWire};
use super::{ApiJson, body_bytes};
use crate::AppState;
use crate::auth::Authed;
use crate::bodies::BodyError;
use crate::error::{ApiError, ApiResult};
use crate::fault::Fault;
use crate::keyproof::KeyProof;
use crate::store::{
    NewRecord, PageCost, PushOutcome, StoreError, StoredBody, StoredRecord, is_disk_full,
};

/// The OpenAPI schema of a framed body: binary, described in
/// [`evi_shared::frames`].
pub struct FramedBody;

impl utoipa::PartialSchema for FramedBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Binary,
            )))
            .description(Some(
                "`EVIF` 0x01, then frames `tag u8 | head_len u32 BE | JSON head | body_len u32 BE | body`. \
                 Push: `S` frames (head {stream, kind, entry_ids}, body the ciphertext), then `E` (head {}). \
                 Pull: `R` frames (head {seq, stream, kind, entry_ids, device?}), then `E` (head {next_after, more}). \
                 A body without its `E` frame is truncated.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for FramedBody {}

fn check_kind(kind: &str) -> ApiResult<()> {
    let ok = !kind.is_empty()
        && kind.len() <= KIND_MAX_LEN
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "kind must be 1 to {KIND_MAX_LEN} of a-z 0-9 _ -"
        )))
    }
}

fn check_segment(s: &mut Incoming) -> ApiResult<()> {
    check_kind(&s.kind)?;
    if s.entry_ids.is_empty() {
        return Err(ApiError::bad_request(
            "a segment needs at least one entry id",
        ));
    }
    if s.entry_ids.len() > MAX_ENTRY_IDS_PER_SEGMENT {
        return Err(ApiError::bad_request(format!(
            "a segment holds at most {MAX_ENTRY_IDS_PER_SEGMENT} entry ids, this one {}: \
             split it into several segments",
            s.entry_ids.len()
        )));
    }
    if s.refs.len() > MAX_ENTRY_IDS_PER_SEGMENT {
        return Err(ApiError::bad_request(format!(
            "a segment names at most {MAX_ENTRY_IDS_PER_SEGMENT} blobs and forgotten ids, this one {}",
            s.refs.len()
        )));
    }
    // Only a `forget-lines` record forgets entries: on any other the list
    // means nothing, and is dropped rather than acted on (the record is
    // stored as it would be without it).
    if s.kind != evi_shared::blob_refs::FORGET_LINES_KIND {
        s.refs.forgets.clear();
    }
    Ok(())
}

/// Stores a batch of segments; answered only once it is durable. Segments
/// whose entry ids are all stored already are dropped, so a retry adds
/// nothing. The body is JSON or framed, by `Content-Type`; the answer is JSON.
#[utoipa::path(post, path = "/api/v1/records", tag = "records", security(("bearer" = [])),
    request_body(description = "A batch of segments: JSON with base64 ciphertext, or framed binary.",
        content((PushRequest = "application/json"), (FramedBody = "application/vnd.evi.frames"))),
    responses((status = 200, body = PushResponse), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 507, body = ErrorBody, description = "`quota_exceeded` (the account's quota, without `per_item`; with it, what does not fit is named in `over_quota` instead) or `storage_full` (the server's disk); nothing was stored"), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "`unavailable`: the object store holding bodies did not answer; nothing was stored: retry after `Retry-After`"),
        (status = 403, body = ErrorBody, description = "`key_proof_required`: the batch holds a forget, its undo or forgotten lines, and the account's key proof header is missing or wrong; nothing was stored")),
    params(PushQuery, crate::keyproof::Header))]
pub async fn push(
    State(state): State<AppState>,
    auth: Authed,
    proof: KeyProof,
    query: Result<Query<PushQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> ApiResult<Json<PushResponse>> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let segments = match framed::push_wire(req.headers())? {
        PushWire::Json => {
            let ApiJson(req) = ApiJson::<PushRequest>::from_request(req, &state).await?;
            req.segments
                .into_iter()
                .map(|s| Incoming {
                    stream: s.stream,
                    kind: s.kind,
                    entry_ids: s.entry_ids,
                    refs: evi_shared::blob_refs::SegmentRefs {
                        refs: s.refs,
                        forgets: s.forgets,
                        forget_blobs: s.forget_blobs,
                    },
                    group: s.group,
                    body: s.ciphertext.0.into(),
                })
                .collect()
        }
        PushWire::Frames => framed::read_push(&body_bytes(req, &state).await?)?,
    };
    let mut segments = segments;
    for s in &mut segments {
        check_segment(s)?;
    }
    // A token alone adds records; undoing what the key's holder stored
    // (a forget, its undo, forgotten lines) needs the key.
    if segments
        .iter()
        .any(|s| evi_shared::forget::changes_history(&s.kind, &s.refs))
    {
        proof
            .require(&state, auth.user_id, "a push of a forget or its undo")
            .await?;
    }
    let (segments, mut over_quota) = if query.per_item {
        fit_quota(&state, &auth, segments).await?
    } else {
        ((0..).zip(segments).collect(), Vec::new())
    };
    let (index, segments): (Vec<u32>, Vec<Incoming>) = segments.into_iter().unzip();
    let mut out = store_segments(&state, &auth, segments, query.per_item).await?;
    // Refused at the commit (another push took the room meanwhile): named
    // by their index in the request, like those refused before.
    over_quota.extend(out.over_quota.iter().map(|&i| index[i as usize]));
    over_quota.sort_unstable();
    out.over_quota = over_quota;
    let forgotten = out.forgotten.iter().map(|&i| index[i as usize]).collect();
    let blob_missing = out
        .blob_missing
        .iter()
        .map(|&i| index[i as usize])
        .collect();
    if out.compact {
        state.compactor.wake();
    }
    if out.collect_blobs {
        state.blob_collector.wake();
    }
    if !out.over_quota.is_empty() {
        tracing::info!(
            refused = out.over_quota.len(),
            stored = out.stored,
            "push over the account's quota: stored what fits, refused the rest"
        );
    }
    if out.stored > 0 {
        state.waiters.committed(auth.user_id, out.newest_seq);
    }
    state.metrics.records_stored.inc_by(out.stored);
    state.metrics.records_dropped.inc_by(out.dropped);
    Ok(Json(PushResponse {
        stored: out.stored,
        dropped: out.dropped,
        newest_seq: out.newest_seq,
        over_quota: out.over_quota,
        forgotten,
        blob_missing,
    }))
}

/// With a quota: the segments that fit, with their index in the batch, and
/// the indexes of those that do not (and of every later segment of their
/// streams), decided before any body is written so that a refused body
/// never takes room on disk. A segment whose entries are all known costs
/// nothing (the commit drops it). The commit checks again: what another
/// push took meanwhile is refused there.
async fn fit_quota(
    state: &AppState,
    auth: &Authed,
    segments: Vec<Incoming>,
) -> Result<(Vec<(u32, Incoming)>, Vec<u32>), StoreError> {
    let user = auth.user_id;
    let indexed: Vec<(u32, Incoming)> = (0..).zip(segments).collect();
    let Some(quota) = auth.quota else {
        return Ok((indexed, Vec::new()));
    };
    let ids: Vec<KeyedId> = indexed
        .iter()
        .flat_map(|(_, s)| s.entry_ids.iter().cloned())
        .collect();
    let known: std::collections::HashSet<KeyedId> = state
        .store
        .known_entries(user, ids)
        .await?
        .into_iter()
        .collect();
    let mut used = state.store.usage(user).await?.bytes_used;
    let mut refused_streams = std::collections::HashSet::new();
    let (mut kept, mut refused) = (Vec::new(), Vec::new());
    for (i, s) in indexed {
        if refused_streams.contains(&s.stream) {
            refused.push(i);
            continue;
        }
        if !s.entry_ids.iter().all(|id| known.contains(id)) {
            let cost = crate::store::record_cost(s.body.len() as u64, s.entry_ids.len());
            if used.saturating_add(cost) > quota {
                refused_streams.insert(s.stream.clone());
                refused.push(i);
                continue;
            }
            used += cost;
        }
        kept.push((i, s));
    }
    Ok((kept, refused))
}

/// Bodies first (one durable pack), then the rows in one transaction. A
/// pack that ends up referenced by no row (every segment a duplicate, quota,
/// a failed commit) is removed here, or by the sweep at the next start.
async fn store_segments(
    state: &AppState,
    auth: &Authed,
    segments: Vec<Incoming>,
    per_item: bool,
) -> Result<PushOutcome, StoreError> {
    let user = auth.user_id;
    let refs = state
        .bodies
        .put_batch(user, segments.iter().map(|s| s.body.clone()).collect())
        .await
        .map_err(|e| match e {
            BodyError::Io(io) if is_disk_full(&io) => StoreError::Full,
            BodyError::Unavailable(cause) => StoreError::Unavailable(cause),
            e => StoreError::Backend(e.to_string()),
        })?;
    crate::fault::crash_if(
        crate::fault::is(state.config.fault, Fault::CrashAfterBody) && !refs.is_empty(),
        "crash-after-body: aborting before the commit",
    );
    let pack = refs.first().map(|r| r.pack.clone());
    let records = segments
        .into_iter()
        .zip(refs)
        .map(|(s, body)| NewRecord {
            device_id: auth.device_id.clone(),
            stream: s.stream,
            kind: s.kind,
            entry_ids: s.entry_ids,
            refs: s.refs,
            group: s.group,
            body,
        })
        .collect();
    let result = state.store.push(user, records, auth.quota, per_item).await;
    if let Some(pack) = pack
        && !matches!(result, Ok(PushOutcome { stored: 1.., .. }))
    {
        let unused = match state.store.pack_referenced(user, &pack).await {
            Ok(referenced) => !referenced,
            Err(e) => {
                tracing::warn!(error = %e, %pack, "cannot tell whether a pack is used; the next start sweeps it");
                false
            }
        };
        if unused && let Err(e) = state.bodies.remove_pack(user, &pack).await {
            tracing::warn!(error = %e, %pack, "cannot remove an unused pack; the next start sweeps it");
        }
    }
    result
}

/// The JSON form of a stored record, its ciphertext left out (an empty
/// string): what it costs on a page besides the base64 of its body.
fn json_head(r: &StoredRecord) -> usize {
    let rec = Record {
        seq: r.seq,
        stream: r.stream.clone(),
        kind: r.kind.clone(),
        entry_ids: r.entry_ids.clone(),
        ciphertext: Vec::new().into(),
        device: r.device_id.clone(),
    };
    serde_json::to_vec(&rec).map_or(0, |v| v.len())
}

/// The byte budget for records in a JSON page of at most `max_page_bytes`
/// as sent, and the cost of each record: its whole JSON (ids, head and the
/// base64 of its body) and the comma before it.
fn json_page_budget(max_page_bytes: u64) -> (u64, PageCost) {
    let envelope = serde_json::to_vec(&PullResponse {
        records: Vec::new(),
        next_after: u64::MAX,
        more: false,
    })
    .map_or(0, |v| v.len());
    let cost: PageCost =
        std::sync::Arc::new(|r| (json_head(r) + 1) as u64 + r.body.len().div_ceil(3) * 4);
    (max_page_bytes.saturating_sub(envelope as u64), cost)
}

/// Records with a seq above `after`, in seq order (of one keyed stream
/// with `stream`: one session fetched alone), bounded by count and by
/// bytes as sent: a JSON page, or with `Accept: application/vnd.evi.frames`
/// a framed page, streamed. A framed page that fails mid-way is cut off
/// before its end frame.
#[utoipa::path(get, path = "/api/v1/records", tag = "records", security(("bearer" = [])),
    params(PullQuery),
    responses((status = 200, description = "A page of records, JSON or framed by the Accept header.",
            content((PullResponse = "application/json"), (FramedBody = "application/vnd.evi.frames"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 503, body = ErrorBody, description = "`unavailable`: the object store holding bodies did not answer: retry after `Retry-After`")))]
pub async fn pull(
    State(state): State<AppState>,
    auth: Authed,
    headers: HeaderMap,
    query: Result<Query<PullQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(q) = query.map_err(|e| {
        let msg = e.body_text();
        // IdError's message for keyed ids: see evi_shared::ids.
        if msg.contains("keyed id") {
            ApiError::invalid_id(msg)
        } else {
            ApiError::bad_request(msg)
        }
    })?;
    super::check_cursor(q.after)?;
    let max = state.config.limits.max_page_records;
    let limit = q.limit.unwrap_or(max).clamp(1, max);
    let max_bytes = state.config.limits.max_page_bytes;
    let frames = framed::wants_frames(&headers);
    let (budget, cost): (u64, PageCost) = if frames {
        framed::page_budget(max_bytes)
    } else {
        json_page_budget(max_bytes)
    };
    // Held until the last body is read: a compaction does not remove a
    // pack this pull may read (see `bodies::readers`).
    let ticket = state.compactor.readers().enter();
    let page = state
        .store
        .pull(auth.user_id, q.after, q.stream, limit, budget, cost)
        .await?;
    if crate::fault::is(state.config.fault, crate::fault::Fault::SlowPullBodies) {
        // The line a test waits for before it changes what the pull read.
        tracing::info!(
            records = page.records.len(),
            "fault slow-pull-bodies: holding a pull between reading where its bodies are and reading them"
        );
        tokio::time::sleep(crate::fault::SLOW_PULL).await;
    }
    let next_after = page.records.last().map_or(q.after, |r| r.seq);
    let mut resp = if frames {
        let end = PageEnd {
            next_after,
            more: page.more,
        };
        let body = framed::page_body(
            state.bodies.clone(),
            auth.user_id,
            page.records,
            end,
            ticket,
        );
        let mut resp = Response::new(body);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(frames::CONTENT_TYPE),
        );
        resp
    } else {
        // The JSON page is whole in memory anyway (bounded by max_page_bytes).
        let refs = page
            .records
            .iter()
            .filter_map(|r| match &r.body {
                StoredBody::Stored(rf) => Some(rf.clone()),
                StoredBody::Inline(_) => None,
            })
            .collect();
        let mut read = state
            .bodies
            .read_small(auth.user_id, refs)
            .await
            .map_err(|e| match e {
                BodyError::Unavailable(cause) => ApiError::storage_unavailable(cause),
                e => ApiError::internal(e),
            })?
            .into_iter();
        let mut records = Vec::with_capacity(page.records.len());
        for r in page.records {
            let ciphertext = match r.body {
                StoredBody::Inline(b) => b,
                StoredBody::Stored(_) => read
                    .next()
                    .ok_or_else(|| ApiError::internal("body store returned too few bodies"))?
                    .to_vec(),
            };
            records.push(Record {
                seq: r.seq,
                stream: r.stream,
                kind: r.kind,
                entry_ids: r.entry_ids,
                ciphertext: ciphertext.into(),
                device: r.device_id,
            });
        }
        drop(ticket);
        Json(PullResponse {
            records,
            next_after,
            more: page.more,
        })
        .into_response()
    };
    resp.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("accept"));
    Ok(resp)
}

/// Marks records a device found damaged (see [`DamagedSeqs`]): their
/// entries count as lacking from now on, so a device that has them sends
/// them again (`evi sync verify --repair`), and the marked row goes once a
/// later record holds them all.
#[utoipa::path(post, path = "/api/v1/records/damaged", tag = "records", security(("bearer" = [])),
    request_body = DamagedSeqs, params(crate::keyproof::Header),
    responses((status = 200, body = DamagedMarked), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "`key_proof_required`: the account's key proof header is missing or wrong; nothing was marked")))]
pub async fn damaged(
    State(state): State<AppState>,
    auth: Authed,
    proof: KeyProof,
    ApiJson(req): ApiJson<DamagedSeqs>,
) -> ApiResult<Json<DamagedMarked>> {
    if req.seqs.len() > MAX_NAMES_PER_CALL {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_NAMES_PER_CALL} seqs per call"
        )));
    }
    // Seqs are SQLite integers: a larger one names no record, and would
    // wrap in the query.
    if let Some(seq) = req.seqs.iter().find(|&&s| s > i64::MAX as u64) {
        return Err(ApiError::bad_request(format!(
            "seq {seq} names no record: a seq is at most {}",
            i64::MAX
        )));
    }
    // A marked record is replaced by the next push of its entries: a
    // token alone could swap the key holder's records for its own.
    proof
        .require(&state, auth.user_id, "a damage report")
        .await?;
    // Each seq once: `marked` counts records, whichever backend.
    let mut seqs = req.seqs;
    seqs.sort_unstable();
    seqs.dedup();
    let marked = state.store.mark_damaged(auth.user_id, seqs).await?;
    Ok(Json(DamagedMarked { marked }))
}

/// Which of the asked entry ids this user's records already hold. A client
/// asks after a push it could not finish, so what it seals next carries only
/// what the server lacks.
#[utoipa::path(post, path = "/api/v1/records/known", tag = "records", security(("bearer" = [])),
    request_body = EntryIds,
    responses((status = 200, body = KnownEntries), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn known(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<EntryIds>,
) -> ApiResult<Json<KnownEntries>> {
    if req.entry_ids.len() > MAX_NAMES_PER_CALL {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_NAMES_PER_CALL} entry ids per call"
        )));
    }
    let known = state
        .store
        .known_entries(auth.user_id, req.entry_ids)
        .await?;
    Ok(Json(KnownEntries { known }))
}
