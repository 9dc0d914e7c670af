//! `/api/…`: the JSON the page reads. A listing row is exactly a row of
//! `evi sessions list --json` (another agent's session with its `agent` and
//! `project`, as there), a session page exactly what
//! `evi sessions show --json` prints (a page of it): the same types.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use evi_shared::{Day, SessionId};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::error::ApiError;
use super::library::Listed;
use crate::search::agents::AgentSession;
use crate::source::Agent;
use crate::sync::state::SyncState;
use crate::transcript::Catalog;
use crate::transcript::catalog::SessionFile;
use crate::transcript::summary::SessionSummary;
use crate::transcript::view::{MessageView, PageRequest, SessionPage, TreeIndex, ViewError};

/// Sessions per listing page, by default and at most.
const LIST_LIMIT: (usize, usize) = (50, 500);
/// Messages per session page, by default and at most.
const PAGE_LIMIT: (usize, usize) = (50, 500);
/// Bytes of a message's text (and of each call's arguments) in a page: the
/// rest is one click away (`/entries/ID`), so one huge tool output does not
/// make a page huge.
pub const TEXT_LIMIT: usize = 16 * 1024;

/// Runs file work off the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal("a request failed", e))?
}

pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad_request(format!("bad query: {}", e.body_text())))
}

pub(super) fn scan(state: &AppState) -> Result<Catalog, ApiError> {
    state
        .inner
        .library
        .catalog()
        .map_err(|e| ApiError::internal("cannot read the transcripts folder", e))
}

/// The tree index of the session `prefix` names (cached by the library),
/// and its shortest unambiguous id: what every per-session call starts
/// from. An eVi session's first, else another agent's turned on here.
pub(super) fn session_index(
    state: &AppState,
    prefix: &str,
) -> Result<(Arc<TreeIndex>, String), ApiError> {
    let catalog = scan(state)?;
    let lib = &state.inner.library;
    let read = |e| ApiError::internal("cannot read the session", e);
    if catalog.matching(prefix).is_empty() {
        let mut found = lib.agent_sessions(prefix);
        if found.len() == 1 {
            let file = found.pop().expect("one");
            let index = lib.agent_index(&file).map_err(read)?;
            let short = index.summary.short_id.clone();
            return Ok((index, short));
        }
        if found.len() > 1 {
            let mut e = ApiError::bad_request(format!(
                "`{prefix}` matches {} sessions of other agents",
                found.len()
            ))
            .hinted("type more characters of the id");
            e.code = "ambiguous_session";
            e.matches = found
                .iter()
                .take(20)
                .map(|f| f.stream.to_string())
                .collect();
            return Err(e);
        }
    }
    let (id, _) = resolve(state, &catalog, prefix)?;
    let index = lib.index(&catalog, id).map_err(read)?;
    Ok((index, catalog.short_id(id)))
}

/// The session an id or unambiguous prefix names, as the CLI resolves it.
fn resolve<'c>(
    state: &AppState,
    catalog: &'c Catalog,
    prefix: &str,
) -> Result<(&'c SessionId, &'c [SessionFile]), ApiError> {
    match catalog.matching(prefix).as_slice() {
        [id] => Ok((id, catalog.sessions[*id].as_slice())),
        [] => {
            let sync = SyncState::is_set_up(state.inner.library.home());
            let mut e = ApiError::new(
                StatusCode::NOT_FOUND,
                "session_not_found",
                format!("no session matches `{prefix}` on this device"),
            );
            e.pull_available = Some(sync);
            Err(if sync {
                e.hinted("pull it from the sync server (the Pull button, or `evi sync pull`)")
            } else {
                e.hinted(
                    "if it was written on another device, set up sync here (`evi sync login`) \
                     and pull it",
                )
            })
        }
        many => {
            let mut e =
                ApiError::bad_request(format!("`{prefix}` matches {} sessions", many.len()))
                    .hinted("type more characters of the id");
            e.code = "ambiguous_session";
            e.matches = many.iter().take(20).map(|id| id.to_string()).collect();
            Err(e)
        }
    }
}

fn view_error(e: ViewError) -> ApiError {
    match e {
        ViewError::NoEntry { .. } => {
            ApiError::new(StatusCode::NOT_FOUND, "entry_not_found", e.to_string())
        }
        ViewError::AmbiguousEntry { .. } => {
            let mut err = ApiError::bad_request(e.to_string());
            err.code = "ambiguous_entry";
            err
        }
        ViewError::Io { .. } => ApiError::internal("cannot read the session", e),
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    /// Words every listed session's first message, id or project must
    /// contain.
    q: Option<String>,
    /// Only sessions with a file of this day (another agent's session: with
    /// a message of this day, local time).
    day: Option<String>,
    /// Only this agent's sessions (an agent's name: `evi`, `claude-code`, `codex`, `gemini`, `opencode`).
    agent: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

/// `GET /api/sessions`.
#[derive(Debug, Serialize)]
pub struct Listing {
    /// Newest first, as `evi sessions list --json` rows.
    sessions: Vec<SessionSummary>,
    /// Sessions that match, on all pages.
    total: usize,
    offset: usize,
    next_offset: Option<usize>,
    /// Every day folder of eVi's sessions, newest first, with its number
    /// of sessions (other agents' files have no day folders).
    days: Vec<DayCount>,
    /// The agents whose sessions are listed here (eVi's and those
    /// `[agents]` turns on): what `agent=` can be.
    agents: Vec<Agent>,
}

#[derive(Debug, Serialize)]
struct DayCount {
    day: Day,
    sessions: usize,
}

pub async fn list(
    State(state): State<AppState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Listing>, ApiError> {
    let q = query(q)?;
    let day = match q.day.as_deref().filter(|d| !d.is_empty()) {
        Some(d) => Some(d.parse::<Day>().map_err(|e| {
            ApiError::bad_request(e.to_string()).hinted("use a day such as 2026-06-08")
        })?),
        None => None,
    };
    let only = match q.agent.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => Some(Agent::from_name(a).ok_or_else(|| {
            ApiError::bad_request(format!("unknown agent `{a}`")).hinted(format!(
                "use agent={}, or leave it out for every agent",
                Agent::names_in_words()
            ))
        })?),
        None => None,
    };
    let limit = q.limit.unwrap_or(LIST_LIMIT.0).clamp(1, LIST_LIMIT.1);
    let offset = q.offset.unwrap_or(0);
    let words: Vec<String> =
        q.q.unwrap_or_default()
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
    blocking(move || {
        let catalog = scan(&state)?;
        let lib = &state.inner.library;
        let read = |e| ApiError::internal("cannot read a session", e);
        let evi: Vec<(SystemTime, Listed<'_>)> = catalog
            .by_recency()
            .into_iter()
            .filter(|_| only.is_none_or(|a| a == Agent::Evi))
            .filter(|(_, files)| day.is_none_or(|d| files.iter().any(|f| f.day == d)))
            .map(|(id, files)| {
                let mtime = files.last().map_or(SystemTime::UNIX_EPOCH, |f| f.mtime);
                (mtime, Listed::Evi(id))
            })
            .collect();
        let agent_files = match only {
            Some(Agent::Evi) => Vec::new(),
            _ => lib.agent_list_sessions(),
        };
        let others = agent_candidates(&agent_files, only, day);
        // A day filter needs another agent's messages read to decide.
        let read_all = !words.is_empty() || (day.is_some() && !others.is_empty());
        let items = newest_first(evi, others);
        let (sessions, total) = if !read_all {
            let page: Vec<_> = items.iter().skip(offset).take(limit).copied().collect();
            (lib.summaries(&catalog, &page).map_err(read)?, items.len())
        } else {
            let all = lib.summaries(&catalog, &items).map_err(read)?;
            let hits: Vec<_> = all
                .into_iter()
                .filter(|s| matches(s, &words))
                .filter(|s| s.agent == Agent::Evi || day.is_none_or(|d| active_on(s, d)))
                .collect();
            let total = hits.len();
            (hits.into_iter().skip(offset).take(limit).collect(), total)
        };
        let end = offset.saturating_add(sessions.len());
        Ok(Json(Listing {
            sessions,
            total,
            offset,
            next_offset: (end < total).then_some(end),
            days: day_counts(&catalog),
            agents: lib.agent_names(),
        }))
    })
    .await
}

/// The sessions of `files` the list may show, newest first by their file's
/// modification time: those of `only` (every agent's when `None`), and with
/// a `day`, those written to on it or since (an agent only appends, so a
/// file last written before the day holds nothing of it).
fn agent_candidates<'a>(
    files: &'a [AgentSession],
    only: Option<Agent>,
    day: Option<Day>,
) -> Vec<(SystemTime, Listed<'a>)> {
    let from = day.and_then(|d| local_midnight(d.as_str()));
    let mut v: Vec<(SystemTime, Listed<'a>)> = files
        .iter()
        .filter(|a| only.is_none_or(|o| o == a.file.stream.agent))
        .filter_map(|a| {
            let mtime = std::fs::metadata(&a.file.path)
                .and_then(|m| m.modified())
                .ok()?;
            Some((mtime, Listed::Agent(a)))
        })
        .filter(|(mtime, _)| from.is_none_or(|f| *mtime >= f))
        .collect();
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    v
}

/// eVi's sessions (in the catalog's order of recency) and other agents'
/// (newest first), merged newest first by when their files were last
/// written: each list keeps its own order.
fn newest_first<'a>(
    evi: Vec<(SystemTime, Listed<'a>)>,
    others: Vec<(SystemTime, Listed<'a>)>,
) -> Vec<Listed<'a>> {
    let mut out = Vec::with_capacity(evi.len() + others.len());
    let mut a = evi.into_iter().peekable();
    let mut b = others.into_iter().peekable();
    loop {
        let take_b = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => y.0 > x.0,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => return out,
        };
        let next = if take_b { b.next() } else { a.next() };
        out.extend(next.map(|(_, item)| item));
    }
}

/// Local midnight starting `day` (`YYYY-MM-DD`).
fn local_midnight(day: &str) -> Option<SystemTime> {
    use chrono::{Local, NaiveDate, TimeZone};
    let d = NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    let t = Local
        .from_local_datetime(&d.and_hms_opt(0, 0, 0)?)
        .earliest()?;
    Some(SystemTime::from(t))
}

/// Whether another agent's session has messages on `day` (local time):
/// the day is within its first and last message's days.
fn active_on(s: &SessionSummary, day: Day) -> bool {
    let local = |t: &Option<String>| {
        let ms = t.as_deref().and_then(crate::transcript::line::parse_ts)?;
        let t = chrono::DateTime::from_timestamp_millis(ms)?.with_timezone(&chrono::Local);
        Some(t.format("%Y-%m-%d").to_string())
    };
    match (local(&s.start), local(&s.end)) {
        (Some(a), Some(b)) => a.as_str() <= day.as_str() && day.as_str() <= b.as_str(),
        _ => false,
    }
}

/// Every word is in the title, the first message, the id or the project
/// (case ignored).
fn matches(s: &SessionSummary, words: &[String]) -> bool {
    let text = format!(
        "{}\n{}\n{}\n{}",
        s.id,
        s.title.as_deref().unwrap_or_default(),
        s.first_message.as_deref().unwrap_or_default(),
        s.project.as_deref().unwrap_or_default()
    )
    .to_lowercase();
    words.iter().all(|w| text.contains(w.as_str()))
}

fn day_counts(catalog: &Catalog) -> Vec<DayCount> {
    let mut counts = std::collections::BTreeMap::<Day, usize>::new();
    for files in catalog.sessions.values() {
        let mut days: Vec<Day> = files.iter().map(|f| f.day).collect();
        days.dedup();
        for d in days {
            *counts.entry(d).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .rev()
        .map(|(day, sessions)| DayCount { day, sessions })
        .collect()
}

#[derive(Debug, Deserialize)]
pub struct PageQuery {
    /// Any entry on the wanted branch (default: the active branch).
    through: Option<String>,
    /// Open on the page that holds this entry (of the branch through it,
    /// unless `through` names another): where a search hit links to.
    /// Overrides `offset`.
    entry: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
}

/// `GET /api/sessions/{id}`: a page of a branch.
pub async fn session(
    State(state): State<AppState>,
    Path(prefix): Path<String>,
    q: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<SessionPage>, ApiError> {
    let q = query(q)?;
    blocking(move || {
        let (index, short_id) = session_index(&state, &prefix)?;
        let limit = q.limit.unwrap_or(PAGE_LIMIT.0).clamp(1, PAGE_LIMIT.1);
        let entry = q.entry.as_deref().filter(|e| !e.is_empty());
        let through = q.through.as_deref().filter(|t| !t.is_empty()).or(entry);
        let offset = match entry {
            Some(e) => {
                // Its 1-based place on its branch.
                let n = index
                    .tree
                    .path_to(index.entry(e).map_err(view_error)?)
                    .len();
                n.saturating_sub(1) / limit * limit
            }
            None => q.offset.unwrap_or(0),
        };
        let mut page = index
            .page(&PageRequest {
                through,
                offset,
                limit: Some(limit),
                text_limit: Some(TEXT_LIMIT),
            })
            .map_err(view_error)?;
        page.session.short_id = short_id;
        Ok(Json(page))
    })
    .await
}

/// `GET /api/sessions/{id}/entries/{entry}`: one entry, whole.
pub async fn entry(
    State(state): State<AppState>,
    Path((prefix, entry)): Path<(String, String)>,
) -> Result<Json<MessageView>, ApiError> {
    blocking(move || {
        let (index, _) = session_index(&state, &prefix)?;
        index.entry_view(&entry).map(Json).map_err(view_error)
    })
    .await
}

/// `GET /api/health`: what is serving, for `evi sessions open` and people.
#[derive(Debug, Serialize)]
pub struct Health {
    service: &'static str,
    version: &'static str,
    home: String,
    sync: bool,
}

pub async fn health(State(state): State<AppState>) -> Json<Health> {
    let home = state.inner.library.home();
    Json(Health {
        service: "evi web",
        version: env!("CARGO_PKG_VERSION"),
        home: home.root().display().to_string(),
        sync: SyncState::is_set_up(home),
    })
}

#[derive(Debug, Deserialize)]
pub struct PullRequest {
    /// The session id (or prefix) the page wants.
    session: String,
}

/// `POST /api/pull`.
#[derive(Debug, Serialize)]
pub struct PullAnswer {
    /// Entries and sessions the pull brought in.
    entries: u64,
    sessions: u64,
    /// The full id of the session asked for, when it is here now.
    found: Option<String>,
}

pub async fn pull(
    State(state): State<AppState>,
    body: Result<Json<PullRequest>, JsonRejection>,
) -> Result<Json<PullAnswer>, ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let home = state.inner.library.home().clone();
    if !SyncState::is_set_up(&home) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "sync_not_set_up",
            "this eVi home is not set up for sync, so there is nothing to pull from",
        )
        .hinted("run `evi sync login --server URL --user NAME` in a terminal, then try again"));
    }
    // The session the page names: a local prefix stands for its id (the
    // page may hold a stale copy's), anything else is a whole id.
    let wanted = {
        let state = state.clone();
        let session = req.session.clone();
        blocking(move || {
            let catalog = scan(&state)?;
            crate::sync::engine::one_session::wanted(&catalog, &session)
                .map_err(|e| ApiError::bad_request(e.to_string()))
        })
        .await?
    };
    // One pull at a time from this viewer; a concurrent `evi sync` holds
    // the home's sync lock, which pull waits for like any sync command.
    let one = state.inner.pulling.lock().await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    // Its own thread: the sync client is blocking and runs its own runtime.
    std::thread::spawn(move || {
        let _ = tx.send(super::pull::pull(&home, &wanted));
    });
    let report = rx
        .await
        .map_err(|e| ApiError::internal("the pull stopped", e))?
        .map_err(|e| {
            let mut err = ApiError::new(StatusCode::BAD_GATEWAY, "pull_failed", e.message);
            err.hint = (!e.hints.is_empty()).then(|| e.hints.join("; "));
            err
        })?;
    drop(one);
    let found = blocking(move || {
        let catalog = scan(&state)?;
        Ok(match catalog.matching(&req.session).as_slice() {
            [id] => Some(id.to_string()),
            _ => None,
        })
    })
    .await?;
    Ok(Json(PullAnswer {
        entries: report.entries,
        sessions: report.sessions,
        found,
    }))
}
