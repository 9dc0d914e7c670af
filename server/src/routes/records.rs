//! Push (a batch of encrypted segments, merged by entry id) and pull (pages
//! of records after a cursor).

use axum::Json;
use axum::extract::{Query, State};
use evi_shared::api::{ErrorBody, PullQuery, PullResponse, PushRequest, PushResponse, Record};
use evi_shared::limits::KIND_MAX_LEN;

use super::ApiJson;
use crate::AppState;
use crate::auth::Authed;
use crate::error::{ApiError, ApiResult};
use crate::store::NewRecord;

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

/// Stores a batch of segments; answered only once it is durable. Segments
/// whose entry ids are all stored already are dropped, so a retry adds nothing.
#[utoipa::path(post, path = "/api/v1/records", tag = "records", security(("bearer" = [])),
    request_body = PushRequest,
    responses((status = 200, body = PushResponse), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 507, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn push(
    State(state): State<AppState>,
    auth: Authed,
    ApiJson(req): ApiJson<PushRequest>,
) -> ApiResult<Json<PushResponse>> {
    let mut records = Vec::with_capacity(req.segments.len());
    for s in req.segments {
        check_kind(&s.kind)?;
        if s.entry_ids.is_empty() {
            return Err(ApiError::bad_request(
                "a segment needs at least one entry id",
            ));
        }
        records.push(NewRecord {
            device_id: auth.device_id.clone(),
            stream: s.stream,
            kind: s.kind,
            entry_ids: s.entry_ids,
            ciphertext: s.ciphertext.0,
        });
    }
    let out = state
        .store
        .push(auth.user_id, records, state.config.quota_bytes)
        .await?;
    state.metrics.records_stored.inc_by(out.stored);
    state.metrics.records_dropped.inc_by(out.dropped);
    Ok(Json(PushResponse {
        stored: out.stored,
        dropped: out.dropped,
        newest_seq: out.newest_seq,
    }))
}

/// Records with a seq above `after`, in seq order, bounded by count and bytes.
#[utoipa::path(get, path = "/api/v1/records", tag = "records", security(("bearer" = [])),
    params(PullQuery),
    responses((status = 200, body = PullResponse), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub async fn pull(
    State(state): State<AppState>,
    auth: Authed,
    query: Result<Query<PullQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<PullResponse>> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let max = state.config.limits.max_page_records;
    let limit = q.limit.unwrap_or(max).clamp(1, max);
    let page = state
        .store
        .pull(
            auth.user_id,
            q.after,
            limit,
            state.config.limits.max_page_bytes,
        )
        .await?;
    let next_after = page.records.last().map_or(q.after, |r| r.seq);
    Ok(Json(PullResponse {
        records: page
            .records
            .into_iter()
            .map(|r| Record {
                seq: r.seq,
                stream: r.stream,
                kind: r.kind,
                entry_ids: r.entry_ids,
                ciphertext: r.ciphertext.into(),
                device: r.device_id,
            })
            .collect(),
        next_after,
        more: page.more,
    }))
}
