//! What waits, for people: the entries kept in `sync/pending/` (eVi's) and
//! `sync/pending-agents/` (other agents'), grouped by session, each group
//! with why it waits, worked out now from the file it waits for (so a line
//! finished since reads `ready`, and one left for a day `abandoned`). What
//! `evi sync status` lists, and any face may.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::source::{Agent, StreamName};
use crate::sync::engine::pending::{PendingStore, WaitReason, Waiting, abandoned};
use crate::sync::error::{IoContext, SyncError};
use crate::sync::state::context::SyncContext;

/// Entries of one session (and, for eVi's, one day) that wait for one
/// reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingGroup {
    /// The session: eVi's id, another agent's stream name
    /// (`claude-code/<id>`, a subagent transcript's `claude-code/<id>/<stem>`).
    pub session: String,
    pub agent: Agent,
    /// The day of eVi's file they go to (another agent's session is one
    /// file: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub day: Option<String>,
    pub entries: u64,
    /// `partial_line` (the file ends in a line its agent is still writing),
    /// `abandoned` (that line was not touched for 24 hours: the next sync
    /// gives up on it, see [`crate::sync::engine::pending`]),
    /// `blob_missing` (the line's blob is not on the server yet),
    /// `not_placed` (another agent's entries whose place here is not known
    /// yet: no line naming the project has arrived, or a subagent
    /// transcript's session file is not here), `agent_off` (kept for an
    /// agent turned off since), `ready` (the next sync applies them).
    pub reason: &'static str,
    /// When the first of them had to wait (RFC 3339 UTC).
    pub since: String,
}

/// Everything that waits, eVi's first.
pub fn waiting(ctx: &SyncContext) -> Result<Vec<WaitingGroup>, SyncError> {
    let store = PendingStore::<evi_shared::SessionId>::load(ctx.paths.dir.join("pending"))
        .ctx(|| "cannot read sync/pending".into())?;
    let mut out = Vec::new();
    for (session, list) in store.sessions() {
        for w in list {
            let path = ctx
                .home
                .transcripts_dir()
                .join(w.day.as_str())
                .join(format!("{session}.jsonl"));
            let reason = match w.reason {
                WaitReason::PartialLine => file_reason(&path),
                r => r.as_str(),
            };
            let day = Some(w.day.to_string());
            add(&mut out, session.as_str(), Agent::Evi, day, reason, w);
        }
    }
    let agents = crate::source::apply::waiting(ctx)?;
    if agents.is_empty() {
        return Ok(out);
    }
    let files: std::collections::HashMap<StreamName, PathBuf> = (ctx.sources.iter())
        .flat_map(|s| s.sessions())
        .map(|f| (f.stream, f.path))
        .collect();
    for (stream, list) in agents {
        let on = ctx.sources.iter().any(|s| s.agent == stream.agent);
        let session = StreamName {
            sub: None,
            ..stream.clone()
        };
        let reason = |w: &Waiting| match (w.reason, files.get(&stream)) {
            (WaitReason::BlobMissing, _) => "blob_missing",
            _ if !on => "agent_off",
            (_, Some(path)) => file_reason(path),
            // A subagent transcript goes beside its session's file.
            (_, None) if stream.sub.is_some() => match files.contains_key(&session) {
                true => "ready",
                false => "not_placed",
            },
            (WaitReason::NotPlaced, None) => "not_placed",
            // Its file is gone: the next sync places it again.
            (_, None) => "ready",
        };
        let name = stream.to_string();
        for w in &list {
            add(&mut out, &name, stream.agent, None, reason(w), w);
        }
    }
    Ok(out)
}

/// Adds `w` to the last group when it is of the same session, day and
/// reason, else starts a group.
fn add(
    out: &mut Vec<WaitingGroup>,
    session: &str,
    agent: Agent,
    day: Option<String>,
    reason: &'static str,
    w: &Waiting,
) {
    match out.last_mut() {
        Some(last) if last.session == session && last.day == day && last.reason == reason => {
            last.entries += 1;
        }
        _ => out.push(WaitingGroup {
            session: session.to_owned(),
            agent,
            day,
            entries: 1,
            reason,
            since: w.since.clone(),
        }),
    }
}

/// Why entries wait for the line `path` ends in: `partial_line` or
/// `abandoned` while it ends mid-line, `ready` once it does not (or is
/// gone: the next sync decides again).
fn file_reason(path: &Path) -> &'static str {
    let Ok(m) = std::fs::metadata(path) else {
        return "ready";
    };
    let mid_line = m.len() > 0
        && matches!(
            crate::sync::engine::apply::ends_in_newline(path, m.len()),
            Ok(false)
        );
    match mid_line {
        false => "ready",
        true if m.modified().is_ok_and(abandoned) => "abandoned",
        true => "partial_line",
    }
}
