//! One session in a line: what `evi sessions list --json` prints per session
//! and what the web viewer's list shows. One type for both, so the two can
//! never drift apart.

use std::io;

use chrono::TimeZone;
use evi_shared::Day;
use serde::Serialize;

use super::git_state::RecordedTree;
use super::line::Role;
use super::tree::SessionTree;
use crate::message::{Message, strip_goal};

/// A session's summary (`sessions list --json`, `GET /api/sessions`).
#[derive(Debug, Clone, Serialize)]
pub struct SessionSummary {
    pub id: String,
    pub short_id: String,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Entries on the active branch.
    pub messages: usize,
    /// Leaves of the tree.
    pub branches: usize,
    pub first_message: Option<String>,
    /// The newest title given with `evi sessions title`, if any.
    pub title: Option<String>,
    pub days: Vec<Day>,
    pub invalid_lines: usize,
    /// The working tree the newest handoff recorded (absent when none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_state: Option<RecordedTree>,
    /// Whose session it is (`evi`, `claude-code`, `codex`).
    pub agent: crate::source::Agent,
    /// Its project as it is on this device (other agents' sessions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
}

impl SessionSummary {
    /// Summarises a loaded tree; `short_id` is the session's shortest
    /// unambiguous prefix in its catalog.
    pub fn of(tree: &SessionTree, short_id: String) -> io::Result<Self> {
        let active = tree.active_branch();
        let mut fetch = tree.fetcher();
        let first_message = active
            .iter()
            .find(|&&i| tree.entries[i].role == Role::User)
            .map(|&i| fetch.fetch(tree.entries[i].at))
            .transpose()?
            .map(|raw| strip_goal(&Message::of(tree.agent, &raw).text).to_owned());
        let start = active.iter().find_map(|&i| tree.entries[i].ts);
        let end = active.iter().rev().find_map(|&i| tree.entries[i].ts);
        let mut days: Vec<Day> = tree.files.iter().map(|f| f.day).collect();
        days.dedup();
        // Other agents' files have no day folders (their entries carry a
        // constant day in sync).
        if tree.agent != crate::source::Agent::Evi {
            days.clear();
        }
        Ok(Self {
            id: tree.id.to_string(),
            short_id,
            start: start.and_then(rfc3339),
            end: end.and_then(rfc3339),
            messages: active.len(),
            branches: tree.leaves().len(),
            first_message,
            title: tree.latest_title()?,
            days,
            invalid_lines: tree.entries.iter().filter(|e| e.fault.is_some()).count(),
            git_state: tree.latest_git_state()?.map(|(ts, state)| RecordedTree {
                ts: ts.and_then(rfc3339),
                summary: state.summary(),
                state,
            }),
            agent: tree.agent,
            project: tree.project.clone(),
        })
    }
}

/// An epoch-millisecond time as RFC 3339 in UTC, the form of every time in
/// JSON output.
pub fn rfc3339(ms: i64) -> Option<String> {
    chrono::Utc
        .timestamp_millis_opt(ms)
        .single()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
