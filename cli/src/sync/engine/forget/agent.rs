//! Forgetting another agent's session (Claude Code, Codex): its files in
//! the agent's folder here go to the trash, and come back to where they
//! were with an undo.
//!
//! A stream is one file: a Claude Code session, one of its subagent
//! transcripts (each its own stream, each forgotten with its own
//! tombstone), or a Codex rollout. The file is found where this device
//! keeps it (its own path, as `[paths]` and pull placed it), so every
//! device removes its own copy. An agent not turned on here has no files
//! to move: the tombstone is only noted.
//!
//! The new-life rule holds as for eVi's sessions, by the line's top-level
//! `timestamp` (both agents write one): a Claude Code session's lines
//! written after the forget and never pushed are kept beside it as
//! `<id>-after-forget.jsonl`, a session of its own. A Codex rollout is
//! named and found by the id in its first line, which a new life would not
//! have: such lines stay in the trash with the rest (an undo brings them
//! back), and the report says so.

use std::path::{Path, PathBuf};

use super::apply::{Applied, Revived, append_lines, lines_after_forget};
use super::trash;
use crate::source::{Agent, StreamName};
use crate::sync::error::{IoContext, SyncError};
use crate::sync::state::context::SyncContext;

/// The files of `stream` in its agent's folder here (none when the agent
/// is not turned on).
pub fn stream_files(ctx: &SyncContext, stream: &StreamName) -> Vec<PathBuf> {
    ctx.sources
        .iter()
        .filter(|s| s.agent == stream.agent)
        .flat_map(crate::source::Source::sessions)
        .filter(|f| f.stream == *stream)
        .map(|f| f.path)
        .collect()
}

/// A line's top-level `timestamp`, in ms since the epoch.
fn agent_ts(line: &[u8]) -> Option<i64> {
    #[derive(serde::Deserialize)]
    struct Ts<'a> {
        #[serde(borrow)]
        timestamp: Option<&'a str>,
    }
    let t: Ts<'_> = serde_json::from_slice(line).ok()?;
    crate::transcript::line::parse_ts(t.timestamp?)
}

/// Where a Claude Code stream's new life goes: beside its file, the stem
/// with `-after-forget`.
fn revive_path(path: &Path) -> Option<PathBuf> {
    let stem = path.file_stem()?.to_str()?;
    let name = format!("{stem}-after-forget.jsonl");
    // A name the source reads as a session again (128 characters at most).
    name.strip_suffix(".jsonl")?
        .parse::<evi_shared::SessionId>()
        .ok()?;
    Some(path.with_file_name(name))
}

/// Moves the files of `stream` into the trash and forgets their push
/// state and waiting entries; with `revive`, first keeps the lines written
/// after `at_ms` that were never pushed from here (see the module doc).
pub(super) fn trash_agent_stream(
    ctx: &mut SyncContext,
    stream: &StreamName,
    at_ms: i64,
    revive: bool,
    applied: &mut Applied,
) -> Result<(), SyncError> {
    let name = stream.to_string();
    crate::source::apply::discard_waiting(ctx, stream)?;
    let files = stream_files(ctx, stream);
    if files.is_empty() {
        return Ok(());
    }
    let key = stream.state_key();
    let mut kept: Vec<(PathBuf, Vec<Vec<u8>>)> = Vec::new();
    if revive {
        let pushed = ctx.state.files.get(&key).map_or(0, |f| f.offset);
        for path in &files {
            let lines = lines_after_forget(path, pushed, at_ms, agent_ts)
                .ctx(|| format!("cannot read {}", path.display()))?;
            if lines.is_empty() {
                continue;
            }
            match (stream.agent, revive_path(path)) {
                (Agent::ClaudeCode, Some(to)) => kept.push((to, lines)),
                _ => applied.remarks.push(format!(
                    "{} lines of {name} were written after it was forgotten; a {} session \
                     cannot live on under another name, so they are in sync/trash/ with it \
                     (`evi sessions forget --undo {name}` brings it all back)",
                    lines.len(),
                    stream.agent.name()
                )),
            }
        }
    }
    trash::move_in_agent(&ctx.home, &name, &files, at_ms)
        .ctx(|| format!("cannot move session {name} into sync/trash/"))?;
    ctx.state.files.remove(&key);
    ctx.state.skip.remove(&name);
    ctx.state.session_cursors.remove(&name);
    applied.trashed.push(name.clone());
    for (to, lines) in kept {
        append_lines(&to, &lines).ctx(|| format!("cannot write {}", to.display()))?;
        let to_name = to
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let to_stream = match &stream.sub {
            None => format!("{}/{to_name}", stream.agent.name()),
            Some(_) => format!("{}/{}/{to_name}", stream.agent.name(), stream.session),
        };
        applied.revived.push(Revived {
            from: name.clone(),
            to: to_stream,
            lines: lines.len() as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_line_is_dated_by_its_timestamp() {
        let at = agent_ts(br#"{"type":"user","timestamp":"2026-01-01T00:00:10.5Z","uuid":"u"}"#);
        assert_eq!(
            at,
            crate::transcript::line::parse_ts("2026-01-01T00:00:10.5Z")
        );
        assert_eq!(agent_ts(br#"{"type":"summary"}"#), None);
        assert_eq!(
            revive_path(Path::new("/c/projects/-p/abc.jsonl")).unwrap(),
            Path::new("/c/projects/-p/abc-after-forget.jsonl")
        );
    }
}
