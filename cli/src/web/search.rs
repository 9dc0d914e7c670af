//! `GET /api/search`: the list page's full-text search, through the very
//! engine `evi sessions search` runs ([`crate::search`]): the same index
//! (`sync/search.db`, brought up to date incrementally before each search),
//! the same query parsing, the same errors. A query is never FTS syntax, so
//! a hostile one is searched for literally or refused with what to type.
//! It finds the sessions of the agents `[agents]` turns on too, as
//! `evi sessions search` does (`agent=` filters as `--agent`).
//!
//! The index is a cache: updating it is the one write a search makes, and
//! it never touches a transcript.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use evi_shared::SessionId;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::api::{blocking, query, scan};
use super::error::ApiError;
use crate::search::agents::{by_stream, hit_session};
use crate::search::find::{Filter, since_day};
use crate::search::query::Query as SearchQuery;
use crate::search::snippet::{Part, snippet};
use crate::search::{IndexError, index_path, with_index};
use crate::source::Agent;

/// Hits per search, by default and at most.
const LIMIT: (usize, usize) = (20, 200);

/// How long a search waits for another evi updating the index; a page
/// would rather say "busy" than hang.
const WAIT: Duration = Duration::from_secs(10);

/// The roles `--role` accepts.
const ROLES: [&str; 4] = ["user", "assistant", "tool", "system"];

#[derive(Debug, Deserialize)]
pub struct SearchParams {
    q: Option<String>,
    role: Option<String>,
    /// Text, so that an empty field (the page's "Any time") means none.
    days: Option<String>,
    /// An agent's name (`evi`, `claude-code`, `codex`, `gemini`, `opencode`); empty for every agent.
    agent: Option<String>,
    limit: Option<usize>,
}

/// One hit: a row of `evi sessions search --json`, with the session's
/// title (or first message) for the page to show.
#[derive(Debug, Serialize)]
pub struct HitView {
    session: String,
    short_id: String,
    agent: Agent,
    /// What the page opens the session by: its id, or for another agent's
    /// session its stream name (`claude-code/<id>`), which names it alone.
    open: String,
    title: Option<String>,
    entry: String,
    role: String,
    ts: Option<String>,
    day: String,
    score: f64,
    snippet: Vec<Part>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    query: String,
    hits: Vec<HitView>,
}

pub async fn search(
    State(state): State<AppState>,
    q: Result<Query<SearchParams>, QueryRejection>,
) -> Result<Json<Results>, ApiError> {
    let p = query(q)?;
    let text = p.q.unwrap_or_default();
    let parsed = SearchQuery::parse(&text).map_err(|e| {
        let mut err = ApiError::bad_request(e.to_string())
            .hinted("search for words and \"quoted phrases\"; every one must match");
        err.code = "bad_query";
        err
    })?;
    let role = match p.role.as_deref().filter(|r| !r.is_empty()) {
        Some(r) if ROLES.contains(&r) => Some(r.to_owned()),
        Some(r) => {
            return Err(ApiError::bad_request(format!("unknown role `{r}`"))
                .hinted(format!("use one of {}", ROLES.join(", "))));
        }
        None => None,
    };
    let limit = p.limit.unwrap_or(LIMIT.0).clamp(1, LIMIT.1);
    let days = match p.days.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
        Some(d) => Some(d.parse::<u32>().map_err(|_| {
            ApiError::bad_request(format!("days must be a number of days, not `{d}`"))
                .hinted("use days=7 for the last week, or leave it out for any time")
        })?),
        None => None,
    };
    let since = days.map(since_day);
    let agent = match p.agent.as_deref().filter(|a| !a.is_empty()) {
        Some(a) => Some(Agent::from_name(a).ok_or_else(|| {
            ApiError::bad_request(format!("unknown agent `{a}`")).hinted(format!(
                "use agent={}, or leave it out for every agent",
                Agent::names_in_words()
            ))
        })?),
        None => None,
    };
    blocking(move || {
        let catalog = scan(&state)?;
        let lib = &state.inner.library;
        let home = lib.home();
        let filter = Filter {
            role: role.as_deref(),
            since_day: since.as_deref(),
            agent,
            limit,
        };
        let agents = lib.agent_search_sessions();
        let found = with_index(home, WAIT, |ix| {
            ix.search(&catalog, &agents, &parsed, &filter)
        })
        .map_err(|e| index_error(home, e))?;
        let files = by_stream(&agents);
        let mut hits = Vec::with_capacity(found.len());
        for f in found {
            let h = f.hit;
            let named = hit_session(&h.session);
            let (summary, short_id) = if named.agent == Agent::Evi {
                let id = h.session.parse::<SessionId>().ok();
                // A hit's session is in the catalog the index was updated from.
                let summary = id
                    .as_ref()
                    .filter(|id| catalog.sessions.contains_key(*id))
                    .and_then(|id| lib.summary(&catalog, id).ok());
                let short = id
                    .as_ref()
                    .map_or_else(|| h.session.clone(), |id| catalog.short_id(id));
                (summary, short)
            } else {
                let summary = files
                    .get(&h.session)
                    .and_then(|a| lib.agent_summary(&a.file, &a.map).ok());
                (summary, named.short_id.unwrap_or_default())
            };
            hits.push(HitView {
                short_id,
                agent: named.agent,
                open: h.session.clone(),
                title: summary.and_then(|s| s.title.or(s.first_message)),
                snippet: snippet(&f.text, parsed.all_tokens()),
                ts: h.ts.and_then(crate::transcript::summary::rfc3339),
                session: named.id,
                entry: h.entry,
                role: h.role,
                day: h.day,
                score: h.score,
            });
        }
        Ok(Json(Results { query: text, hits }))
    })
    .await
}

fn index_error(home: &crate::home::EviHome, e: IndexError) -> ApiError {
    match e {
        IndexError::Busy => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "search_busy",
            e.to_string(),
        ),
        e => {
            let mut err = ApiError::internal("the search failed", e);
            err.code = "search_failed";
            err.hinted(format!(
                "the index is a cache: removing {} makes the next search rebuild it",
                index_path(home).display()
            ))
        }
    }
}
