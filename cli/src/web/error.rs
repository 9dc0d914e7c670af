//! The viewer's one error type: every failure answers a stable JSON
//! `{code, message, hint?}` with a status that says whose fault it is, as
//! evi-server does.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A failed request, as the page (or a script) reads it.
#[derive(Debug, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    /// Stable, for scripts: `session_not_found`, `ambiguous_session`,
    /// `entry_not_found`, `ambiguous_entry`, `bad_request`, `bad_host`,
    /// `token_required`, `csrf`, `sync_not_set_up`, `pull_failed`,
    /// `bad_query`, `search_busy`, `search_failed`, `no_checkpoint`,
    /// `rewind_busy`, `journal_pending`, `plan_changed`,
    /// `not_found`, `internal`.
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Ids an ambiguous prefix matches (at most 20).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<String>,
    /// For `session_not_found`: whether the page can offer to pull it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_available: Option<bool>,
    /// For `plan_changed`: the plan made anew from the journal as it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Box<serde_json::Value>>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            hint: None,
            matches: Vec::new(),
            pull_available: None,
            plan: None,
        }
    }

    pub fn hinted(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// A failure on this side (a file that cannot be read), also logged on
    /// the terminal that runs `evi web`.
    pub fn internal(what: &str, cause: impl std::fmt::Display) -> Self {
        let message = format!("{what}: {cause}");
        eprintln!("evi web: {message}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(&self)).into_response()
    }
}
