//! The session page's rewind dialog: the checkpoints written during the
//! session's time span, and undoing from one of them with exactly
//! `evi rewind SEQ` (the same [`crate::checkpoints::rewind`] code).
//!
//! - `GET /api/sessions/{id}/checkpoints`: this device's checkpoints whose
//!   time falls within the session's first and last entry, and those of
//!   every pulled device's journal (listed only: their paths are that
//!   device's, and a rewind undoes this device's writes alone).
//! - `GET /api/rewind/plan?seq=N`: `evi rewind N --dry-run`: every write
//!   it would undo, newest first (all writes from N on, the session's or
//!   not, as the CLI does), what would become of each, and the plan's
//!   digest.
//! - `POST /api/rewind` `{seq, digest}`: the rewind, only if the journal
//!   still picks the writes the plan showed (checked under the rewind
//!   lock); otherwise it is refused, nothing is touched, and the answer
//!   (409 `plan_changed`) carries the plan made anew for the page to show
//!   and confirm again. The POST passes [`super::access`]'s guard like
//!   the pull button's: this origin, this run's CSRF token.

use std::path::Path;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::api::{blocking, query, session_index};
use super::error::ApiError;
use crate::checkpoints::devices::pulled;
use crate::checkpoints::journal::{Checkpoint, Journal};
use crate::checkpoints::rewind::{Outcome, Report, RewindError, Target, rewind, rewind_planned};
use crate::transcript::summary::rfc3339;

/// One checkpoint as the dialog lists it.
#[derive(Debug, Serialize)]
struct Row {
    seq: u64,
    ts: Option<String>,
    path: String,
    op: String,
    restorable: bool,
    not_restorable: Option<&'static str>,
    /// This device's only: how many writes a rewind from here undoes
    /// (this one and every later one).
    #[serde(skip_serializing_if = "Option::is_none")]
    undoes: Option<usize>,
}

#[derive(Debug, Serialize)]
struct Span {
    start: Option<String>,
    end: Option<String>,
}

#[derive(Debug, Serialize)]
struct DeviceRows {
    /// The pulled journal's folder name (`laptop-5zb7x0qa`).
    name: String,
    checkpoints: Vec<Row>,
}

/// `GET /api/sessions/{id}/checkpoints`.
#[derive(Debug, Serialize)]
pub struct Checkpoints {
    span: Span,
    /// This device's, newest first.
    checkpoints: Vec<Row>,
    /// Checkpoints in this device's journal, in the span or not.
    total: usize,
    /// Bytes of a journal line eVi is still writing (a rewind waits).
    pending_bytes: u64,
    devices: Vec<DeviceRows>,
}

fn read_journal(path: &Path) -> Result<Journal, ApiError> {
    Journal::read(path)
        .map_err(|e| ApiError::internal(&format!("cannot read {}", path.display()), e))
}

pub async fn checkpoints(
    State(state): State<AppState>,
    UrlPath(prefix): UrlPath<String>,
) -> Result<Json<Checkpoints>, ApiError> {
    blocking(move || {
        let (index, _) = session_index(&state, &prefix)?;
        // eVi's checkpoints are of eVi's sessions: another agent's has none.
        let evi = index.tree.agent == crate::source::Agent::Evi;
        let times = index
            .tree
            .entries
            .iter()
            .filter(|_| evi)
            .filter_map(|e| e.ts);
        let (start, end) = (times.clone().min(), times.max());
        let within = |c: &Checkpoint| match (c.ts_ms, start, end) {
            (Some(t), Some(s), Some(e)) => s <= t && t <= e,
            _ => false,
        };
        let cp = state.inner.library.home().checkpoints_dir();
        let blobs = cp.join("blobs");
        let row = |c: &Checkpoint, undoes| {
            let blob_here = c.blob.as_ref().is_some_and(|b| blobs.join(b).is_file());
            let why = c.not_restorable(blob_here);
            Row {
                seq: c.seq,
                ts: c.ts_ms.and_then(rfc3339),
                path: c.path.clone(),
                op: c.op.as_str().to_owned(),
                restorable: why.is_none(),
                not_restorable: why,
                undoes,
            }
        };
        let journal = read_journal(&cp.join("journal.jsonl"))?;
        let rows = journal
            .checkpoints
            .iter()
            .rev()
            .filter(|c| within(c))
            .map(|c| {
                let undoes = journal
                    .checkpoints
                    .iter()
                    .filter(|o| o.seq >= c.seq)
                    .count();
                row(c, Some(undoes))
            })
            .collect();
        let mut devices = Vec::new();
        for d in pulled(&cp).map_err(|e| ApiError::internal("cannot list pulled journals", e))? {
            let j = read_journal(&d.path)?;
            let rows: Vec<Row> = j
                .checkpoints
                .iter()
                .rev()
                .filter(|c| within(c))
                .map(|c| row(c, None))
                .collect();
            if !rows.is_empty() {
                devices.push(DeviceRows {
                    name: d.name,
                    checkpoints: rows,
                });
            }
        }
        Ok(Json(Checkpoints {
            span: Span {
                start: start.and_then(rfc3339),
                end: end.and_then(rfc3339),
            },
            checkpoints: rows,
            total: journal.checkpoints.len(),
            pending_bytes: journal.pending_bytes,
            devices,
        }))
    })
    .await
}

/// `seq` as `evi rewind SEQ` reads it: 0 is the latest write only.
fn target(seq: u64) -> Target {
    if seq == 0 {
        Target::Latest
    } else {
        Target::From(seq)
    }
}

/// One write of a plan or of a rewind done.
#[derive(Debug, Serialize)]
struct Step {
    seq: u64,
    ts: Option<String>,
    path: String,
    op: String,
    /// Plan: `restore`, `delete` or `already_gone`; done: `restored`,
    /// `deleted` or `already_gone`; either: `failed` (cannot be undone).
    action: &'static str,
    /// Why not, for `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

/// What a plan shows and what a rewind did.
#[derive(Debug, Serialize)]
pub struct Plan {
    seq: u64,
    /// What the confirm sends back: the journal's writes this plan picks.
    digest: String,
    /// Newest first.
    steps: Vec<Step>,
    /// Writes undone (or that would be).
    undone: usize,
    failed: usize,
    /// Checkpoints in the journal after it (or now, for a plan).
    left: usize,
}

fn plan_of(seq: u64, report: &Report) -> Plan {
    let steps = report
        .undone
        .iter()
        .map(|u| {
            let (action, why) = match &u.outcome {
                Outcome::WouldRestore => ("restore", None),
                Outcome::WouldDelete => ("delete", None),
                Outcome::Restored { .. } => ("restored", None),
                Outcome::Deleted => ("deleted", None),
                Outcome::AlreadyGone => ("already_gone", None),
                Outcome::Failed(e) => ("failed", Some(e.to_string())),
            };
            let c = &u.checkpoint;
            Step {
                seq: c.seq,
                ts: c.ts_ms.and_then(rfc3339),
                path: c.path.clone(),
                op: c.op.as_str().to_owned(),
                action,
                why,
            }
        })
        .collect();
    Plan {
        seq,
        digest: report.digest.clone(),
        steps,
        undone: report.undone.len() - report.failed(),
        failed: report.failed(),
        left: report.left,
    }
}

fn rewind_error(e: RewindError) -> ApiError {
    let conflict = |code, e: &RewindError| ApiError::new(StatusCode::CONFLICT, code, e.to_string());
    match &e {
        RewindError::Empty(_) | RewindError::NoSuchSeq { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "no_checkpoint", e.to_string())
                .hinted("reload the dialog: the checkpoints it lists are the journal's now")
        }
        RewindError::Lock(crate::checkpoints::lock::LockError::Busy) => {
            conflict("rewind_busy", &e).hinted("wait for the other rewind, then try again")
        }
        RewindError::Pending(_) => conflict("journal_pending", &e)
            .hinted("eVi is writing a file: wait for it to finish, then plan again"),
        RewindError::Changed { .. } => conflict("plan_changed", &e)
            .hinted("the plan below is the journal's now: confirm it, or cancel"),
        RewindError::Trim(_) => ApiError::internal("the files were put back, but", e),
        _ => ApiError::internal("the rewind could not start", e),
    }
}

#[derive(Debug, Deserialize)]
pub struct PlanQuery {
    seq: u64,
}

/// `GET /api/rewind/plan?seq=N`.
pub async fn plan(
    State(state): State<AppState>,
    q: Result<Query<PlanQuery>, QueryRejection>,
) -> Result<Json<Plan>, ApiError> {
    let seq = query(q)?.seq;
    let cp = state.inner.library.home().checkpoints_dir();
    blocking(move || {
        let report = rewind(&cp, target(seq), true, |_| {}).map_err(rewind_error)?;
        Ok(Json(plan_of(seq, &report)))
    })
    .await
}

#[derive(Debug, Deserialize)]
pub struct Confirm {
    seq: u64,
    /// The digest of the plan the page showed.
    digest: String,
}

/// `POST /api/rewind`.
pub async fn confirm(
    State(state): State<AppState>,
    body: Result<Json<Confirm>, JsonRejection>,
) -> Result<Json<Plan>, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let cp = state.inner.library.home().checkpoints_dir();
    blocking(move || {
        match rewind_planned(&cp, target(req.seq), &req.digest, |_| {}) {
            Ok(report) => Ok(Json(plan_of(req.seq, &report))),
            Err(e @ RewindError::Changed { .. }) => {
                let mut err = rewind_error(e);
                // Planned anew, for the page to show; if even that fails,
                // the refusal stands on its own.
                err.plan = rewind(&cp, target(req.seq), true, |_| {})
                    .ok()
                    .and_then(|r| serde_json::to_value(plan_of(req.seq, &r)).ok())
                    .map(Box::new);
                Err(err)
            }
            Err(e) => Err(rewind_error(e)),
        }
    })
    .await
}
