//! Forgetting another agent's session (Claude Code, Codex): its files in
//! the agent's folder here go to the trash, and come back to where they
//! were with an undo.
//!
//! A stream is one file: a Claude Code session, one of its subagent
//! transcripts, or a Codex rollout. A forget of a Claude Code session's
//! own stream takes every subagent transcript beside it too ([`StreamName::covers`]),
//! those this device has whether or not the device that forgot it knew of
//! them: they go into the session's trash folder with its file, and come
//! back with it. (A subagent transcript can also be forgotten alone, by
//! its own stream.) The files are found where this device keeps them
//! (their own paths, as `[paths]` and pull placed them), so every device
//! removes its own copy. An agent not turned on here has no files to move:
//! the tombstone is only noted.
//!
//! The new-life rule holds as for eVi's sessions, by the line's top-level
//! `timestamp` (both agents write one): a Claude Code session's lines
//! written after the forget and never pushed are kept beside it as
//! `<id>-after-forget.jsonl`, a session of its own, and its subagents'
//! as that session's (`<id>-after-forget/subagents/<stem>.jsonl`: under
//! the forgotten session they would be forgotten again). A subagent
//! transcript forgotten alone lives on beside itself as
//! `<stem>-after-forget.jsonl`. A Codex rollout is named and found by the
//! id in its first line, which a new life would not have: such lines stay
//! in the trash with the rest (an undo brings them back), and the report
//! says so.

use std::path::{Path, PathBuf};

use super::apply::{Applied, Revived, append_lines, lines_after_forget};
use super::trash;
use crate::source::{AgentFile, StreamName};
use crate::sync::error::{IoContext, SyncError};
use crate::sync::state::context::SyncContext;

/// The files of `stream` in its agent's folder here, with the streams they
/// are (none when the agent is not turned on): a session's own file and
/// its subagents' transcripts, for a session's stream.
pub fn stream_files(ctx: &SyncContext, stream: &StreamName) -> Vec<AgentFile> {
    ctx.sources
        .iter()
        .filter(|s| s.agent == stream.agent)
        .flat_map(crate::source::Source::sessions)
        .filter(|f| stream.covers(&f.stream))
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

/// Where a Claude Code file's new life goes: beside it, the stem with
/// `-after-forget`; a subagent transcript of a forgotten session (not
/// forgotten alone), under the session's new life.
fn revive_path(forgotten: &StreamName, file: &AgentFile) -> Option<PathBuf> {
    let path = &file.path;
    let stem = path.file_stem()?.to_str()?;
    if file.stream.sub.is_some() && forgotten.sub.is_none() {
        // <project>/<session>/subagents/<stem>.jsonl
        let project = path.parent()?.parent()?.parent()?;
        let session = format!("{}-after-forget", file.stream.session);
        session.parse::<evi_shared::SessionId>().ok()?;
        return Some(
            project
                .join(session)
                .join("subagents")
                .join(format!("{stem}.jsonl")),
        );
    }
    let name = format!("{stem}-after-forget.jsonl");
    // A name the source reads as a session again (128 characters at most).
    name.strip_suffix(".jsonl")?
        .parse::<evi_shared::SessionId>()
        .ok()?;
    Some(path.with_file_name(name))
}

/// The stream a new life at `to` (from [`revive_path`]) syncs as.
fn revived_stream(forgotten: &StreamName, file: &AgentFile, to: &Path) -> String {
    let to_name = to.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let agent = file.stream.agent.name();
    match (&file.stream.sub, &forgotten.sub) {
        (None, _) => format!("{agent}/{to_name}"),
        (Some(_), Some(_)) => format!("{agent}/{}/{to_name}", file.stream.session),
        (Some(_), None) => format!("{agent}/{}-after-forget/{to_name}", file.stream.session),
    }
}

/// Moves the files of `stream` (with its subagents', for a session) into
/// one trash folder and forgets their push state and waiting entries;
/// with `revive`, first keeps the lines written after `at_ms` that were
/// never pushed from here (see the module doc).
pub(super) fn trash_agent_stream(
    ctx: &mut SyncContext,
    stream: &StreamName,
    at_ms: i64,
    revive: bool,
    applied: &mut Applied,
) -> Result<(), SyncError> {
    let name = stream.to_string();
    crate::source::apply::discard_waiting(ctx, stream)?;
    for (waiting, _) in crate::source::apply::waiting(ctx)? {
        if stream.covers(&waiting) {
            crate::source::apply::discard_waiting(ctx, &waiting)?;
        }
    }
    let files = stream_files(ctx, stream);
    if files.is_empty() {
        return Ok(());
    }
    let mut kept: Vec<(PathBuf, String, Vec<Vec<u8>>)> = Vec::new();
    if revive {
        for file in &files {
            let pushed = (ctx.state.files.get(&file.stream.state_key())).map_or(0, |f| f.offset);
            let lines = lines_after_forget(&file.path, pushed, at_ms, agent_ts)
                .ctx(|| format!("cannot read {}", file.path.display()))?;
            if lines.is_empty() {
                continue;
            }
            let lives_on = stream.agent.kind().lives_on_after_forget();
            match revive_path(stream, file).filter(|_| lives_on) {
                Some(to) => {
                    let to_stream = revived_stream(stream, file, &to);
                    kept.push((to, to_stream, lines));
                }
                _ => applied.remarks.push(format!(
                    "{} lines of {} were written after it was forgotten; a {} session \
                     cannot live on under another name, so they are in sync/trash/ with it \
                     (`evi sessions forget --undo {name}` brings it all back)",
                    lines.len(),
                    file.stream,
                    stream.agent.name()
                )),
            }
        }
    }
    let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    let dir = trash::move_in_agent(&ctx.home, &name, &paths, at_ms)
        .ctx(|| format!("cannot move session {name} into sync/trash/"))?;
    if let Some(dir) = dir {
        let meta =
            trash::read_meta(&dir).ctx(|| format!("cannot read the trash of session {name}"))?;
        let moved: Vec<(PathBuf, PathBuf)> = (meta.agent_files.iter())
            .map(|f| (f.from.clone(), dir.join(&f.name)))
            .collect();
        if let Some(source) = ctx.sources.iter().find(|s| s.agent == stream.agent) {
            let note = (stream.agent.kind()).after_trash(&source.root, stream, &moved);
            applied.remarks.extend(note);
        }
    }
    for file in &files {
        let of = file.stream.to_string();
        ctx.state.files.remove(&file.stream.state_key());
        ctx.state.skip.remove(&of);
        ctx.state.session_cursors.remove(&of);
    }
    applied.trashed.push(name.clone());
    for (to, to_stream, lines) in kept {
        append_lines(&to, &lines).ctx(|| format!("cannot write {}", to.display()))?;
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
        let file = |stream: &str, path: &str| AgentFile {
            stream: StreamName::parse(stream).unwrap(),
            path: path.into(),
        };
        let session = StreamName::parse("claude-code/abc").unwrap();
        let main = file("claude-code/abc", "/c/projects/-p/abc.jsonl");
        let to = revive_path(&session, &main).unwrap();
        assert_eq!(to, Path::new("/c/projects/-p/abc-after-forget.jsonl"));
        assert_eq!(
            revived_stream(&session, &main, &to),
            "claude-code/abc-after-forget"
        );
        // A subagent of the forgotten session lives on under its new life.
        let sub = file(
            "claude-code/abc/agent-1",
            "/c/projects/-p/abc/subagents/agent-1.jsonl",
        );
        let to = revive_path(&session, &sub).unwrap();
        assert_eq!(
            to,
            Path::new("/c/projects/-p/abc-after-forget/subagents/agent-1.jsonl")
        );
        assert_eq!(
            revived_stream(&session, &sub, &to),
            "claude-code/abc-after-forget/agent-1"
        );
        // A subagent forgotten alone, beside itself.
        let to = revive_path(&sub.stream, &sub).unwrap();
        assert_eq!(
            to,
            Path::new("/c/projects/-p/abc/subagents/agent-1-after-forget.jsonl")
        );
        assert_eq!(
            revived_stream(&sub.stream, &sub, &to),
            "claude-code/abc/agent-1-after-forget"
        );
    }
}
