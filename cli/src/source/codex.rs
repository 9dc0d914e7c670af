//! Codex: `$CODEX_HOME` (default `~/.codex`).
//!
//! A session is `sessions/YYYY/MM/DD/rollout-<timestamp>-<id>.jsonl`; its
//! first line is a `session_meta` record holding the id, the start time and
//! the `cwd`. Lines carry no ids: every entry's is derived, as eVi's are.
//! Pull writes a session this device lacks under the day and name its
//! `session_meta` gives.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use walkdir::WalkDir;

use super::{Agent, AgentFile, StreamName};

/// Length of the UUID that ends a rollout file's stem.
const ID_LEN: usize = 36;

/// The session id of a rollout file name.
pub fn id_of_file(name: &str) -> Option<&str> {
    let stem = name.strip_prefix("rollout-")?.strip_suffix(".jsonl")?;
    let at = stem.len().checked_sub(ID_LEN)?;
    let id = stem.get(at..)?;
    (at > 0 && stem.as_bytes()[at - 1] == b'-').then_some(id)
}

/// Every rollout under `root/sessions`.
pub fn sessions(root: &Path) -> Vec<AgentFile> {
    let mut out = Vec::new();
    for e in WalkDir::new(root.join("sessions"))
        .min_depth(4)
        .max_depth(4)
        .sort_by_file_name()
        .into_iter()
        .flatten()
    {
        if !e.file_type().is_file() {
            continue;
        }
        let session = e
            .file_name()
            .to_str()
            .and_then(id_of_file)
            .and_then(|id| id.parse().ok());
        if let Some(session) = session {
            out.push(AgentFile {
                stream: StreamName {
                    agent: Agent::Codex,
                    session,
                    sub: None,
                },
                path: e.into_path(),
            });
        }
    }
    out
}

/// What a rollout's `session_meta` line says.
#[derive(Debug, Clone, Deserialize)]
pub struct Meta {
    pub id: String,
    pub timestamp: String,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub model_provider: Option<String>,
    #[serde(default)]
    pub cli_version: Option<String>,
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    payload: Option<Meta>,
}

/// The `session_meta` among `lines`, if any.
pub fn meta<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<Meta> {
    lines.into_iter().find_map(|l| {
        let line: Line = serde_json::from_slice(l).ok()?;
        (line.kind.as_deref() == Some("session_meta")).then_some(line.payload?)
    })
}

/// The first thing the user asked: an `event_msg` `user_message`, else the
/// first user `input_text` that is not context Codex put there (`<…>`).
pub fn first_user_message<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    let mut fallback = None;
    for l in lines {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(l) else {
            continue;
        };
        let p = &v["payload"];
        match (v["type"].as_str(), p["type"].as_str()) {
            (Some("event_msg"), Some("user_message")) => {
                if let Some(m) = p["message"].as_str() {
                    return Some(m.to_owned());
                }
            }
            (Some("response_item"), Some("message"))
                if p["role"] == "user" && fallback.is_none() =>
            {
                fallback = p["content"].as_array().and_then(|c| {
                    c.iter()
                        .filter_map(|b| b["text"].as_str())
                        .find(|t| !t.trim_start().starts_with('<') && !t.starts_with("# AGENTS.md"))
                        .map(str::to_owned)
                });
            }
            _ => {}
        }
    }
    fallback
}

/// `sessions/YYYY/MM/DD/rollout-YYYY-MM-DDTHH-MM-SS-<id>.jsonl` from the
/// start time in `session_meta` (UTC: the other device's local time is not
/// known; Codex finds a rollout by its id, not its folder).
pub fn target(root: &Path, stream: &StreamName, lines: &[&[u8]]) -> Option<PathBuf> {
    let meta = meta(lines.iter().copied())?;
    if meta.id != stream.session.as_str() {
        return None;
    }
    let t = chrono::DateTime::parse_from_rfc3339(&meta.timestamp)
        .ok()?
        .with_timezone(&chrono::Utc);
    Some(
        root.join("sessions")
            .join(t.format("%Y/%m/%d").to_string())
            .join(format!(
                "rollout-{}-{}.jsonl",
                t.format("%Y-%m-%dT%H-%M-%S"),
                stream.session
            )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_names() {
        assert_eq!(
            id_of_file("rollout-2025-05-07T17-24-21-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl"),
            Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e")
        );
        assert_eq!(id_of_file("rollout-x.jsonl"), None);
        assert_eq!(id_of_file("other.jsonl"), None);
    }
}
