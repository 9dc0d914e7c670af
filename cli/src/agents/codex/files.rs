//! Codex's files: `$CODEX_HOME` (default `~/.codex`).
//!
//! A session is `sessions/YYYY/MM/DD/rollout-<timestamp>-<id>.jsonl`; its
//! first line is a `session_meta` record holding the id, the start time and
//! the `cwd`. Lines carry no ids: every entry's is derived, as eVi's are.
//! Pull writes a session this device lacks under the day and name its
//! `session_meta` gives, in this device's local time, as Codex names its
//! files. Its `cwd`s are rewritten for a project that is elsewhere here, as
//! Claude Code's are ([`crate::agents::Agent::localize`]): Codex's "latest in this
//! folder" (`codex resume --last`, its picker) matches on them.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::source::{Agent, AgentFile, StreamName};

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
    for e in crate::agents::files_below(&root.join("sessions"), 4..=4) {
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

/// What a rollout says of its thread, read as Codex's own import reads it
/// into its index ([`super::index`]): its `session_meta`, its last
/// `turn_context`, its last token count, its first user message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// `session_meta` fields by name, as Codex writes them in its index: a
    /// string as the string, anything else as its JSON text.
    pub meta: std::collections::BTreeMap<String, String>,
    /// `session_meta.git`: `commit_hash`, `branch`, `repository_url`.
    pub git: std::collections::BTreeMap<String, String>,
    /// The last `turn_context`'s permission profile (else its sandbox
    /// policy), approval policy, model and reasoning effort.
    pub sandbox_policy: Option<String>,
    pub approval_mode: Option<String>,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    /// The last token count's total.
    pub tokens_used: Option<i64>,
    /// Whether a `user_message` event is there.
    pub has_user_event: bool,
    pub first_user_message: Option<String>,
}

/// A JSON value as Codex writes one in a text column: a string as itself,
/// anything else as its JSON text (as the rollout holds it: the same bytes).
fn column_text(raw: &serde_json::value::RawValue) -> String {
    serde_json::from_str::<String>(raw.get()).unwrap_or_else(|_| raw.get().to_owned())
}

/// The [`Facts`] of a rollout's lines.
pub fn facts<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Facts {
    use serde_json::value::RawValue;
    type Fields<'b> = std::collections::BTreeMap<String, &'b RawValue>;
    #[derive(Deserialize)]
    struct Line<'b> {
        #[serde(rename = "type")]
        kind: Option<String>,
        #[serde(borrow)]
        payload: Option<Fields<'b>>,
    }
    let mut out = Facts::default();
    let mut kept: Vec<&'a [u8]> = Vec::new();
    let mut seen_meta = false;
    for l in lines {
        kept.push(l);
        let Ok(line) = serde_json::from_slice::<Line<'_>>(l) else {
            continue;
        };
        let Some(p) = line.payload else { continue };
        let text = |k: &str| {
            p.get(k)
                .filter(|v| v.get() != "null")
                .map(|v| column_text(v))
        };
        match line.kind.as_deref() {
            Some("session_meta") if !seen_meta => {
                seen_meta = true;
                for (k, v) in &p {
                    if v.get() != "null" && k != "git" {
                        out.meta.insert(k.clone(), column_text(v));
                    }
                }
                if let Some(git) = p
                    .get("git")
                    .and_then(|g| serde_json::from_str::<Fields<'_>>(g.get()).ok())
                {
                    for (k, v) in git.iter().filter(|(_, v)| v.get() != "null") {
                        out.git.insert(k.clone(), column_text(v));
                    }
                }
            }
            Some("turn_context") => {
                out.sandbox_policy = text("permission_profile").or_else(|| text("sandbox_policy"));
                out.approval_mode = text("approval_policy");
                out.model = text("model");
                out.reasoning_effort = text("effort");
            }
            Some("event_msg") => match text("type").as_deref() {
                Some("token_count") => {
                    let total = p.get("info").and_then(|i| {
                        serde_json::from_str::<serde_json::Value>(i.get()).ok()?
                            ["total_token_usage"]["total_tokens"]
                            .as_i64()
                    });
                    if let Some(t) = total {
                        out.tokens_used = Some(t.max(0));
                    }
                }
                Some("user_message") => out.has_user_event = true,
                _ => {}
            },
            _ => {}
        }
    }
    out.first_user_message = first_user_message(kept);
    out
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
/// start time in `session_meta`, in this device's local time: the name
/// Codex gives a rollout it starts at that moment (the time in the name is
/// the one `session_meta` records, to the second).
pub fn target(root: &Path, stream: &StreamName, lines: &[&[u8]]) -> Option<PathBuf> {
    target_in(root, stream, lines, &chrono::Local)
}

/// [`target`] in the time zone `tz`.
fn target_in<Tz: chrono::TimeZone>(
    root: &Path,
    stream: &StreamName,
    lines: &[&[u8]],
    tz: &Tz,
) -> Option<PathBuf>
where
    Tz::Offset: std::fmt::Display,
{
    let meta = meta(lines.iter().copied())?;
    if meta.id != stream.session.as_str() {
        return None;
    }
    let t = chrono::DateTime::parse_from_rfc3339(&meta.timestamp)
        .ok()?
        .with_timezone(tz);
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
    fn a_pulled_rollout_is_named_in_local_time() {
        let stream = StreamName::parse("codex/01a24d55-8c2e-7723-9459-9259f26eecec").unwrap();
        let meta = br#"{"timestamp":"2026-12-06T21:49:41.873Z","type":"session_meta","payload":{"id":"01a24d55-8c2e-7723-9459-9259f26eecec","timestamp":"2026-12-06T21:49:41.817Z","cwd":"/p"}}"#;
        let east = chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap();
        assert_eq!(
            target_in(Path::new("/c"), &stream, &[meta], &east).unwrap(),
            Path::new(
                "/c/sessions/2026/12/07/rollout-2026-12-07T03-19-41-01a24d55-8c2e-7723-9459-9259f26eecec.jsonl"
            )
        );
        assert_eq!(
            target_in(Path::new("/c"), &stream, &[meta], &chrono::Utc).unwrap(),
            Path::new(
                "/c/sessions/2026/12/06/rollout-2026-12-06T21-49-41-01a24d55-8c2e-7723-9459-9259f26eecec.jsonl"
            )
        );
    }

    #[test]
    fn facts_are_read_as_codex_imports_them() {
        let lines: [&[u8]; 5] = [
            br#"{"type":"session_meta","payload":{"id":"t","timestamp":"2026-12-06T21:49:41.817Z","cwd":"/p","source":"exec","thread_source":"user","agent_role":null,"git":{"repository_url":"https://github.com/pat/app","branch":null}}}"#,
            br#"{"type":"turn_context","payload":{"cwd":"/p","approval_policy":"on-request","permission_profile":{"type":"managed","network":"restricted"},"model":"m1","sandbox_policy":{"type":"read-only"}}}"#,
            br#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context/>"},{"type":"input_text","text":"first"}]}}"#,
            br#"{"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"total_tokens":30}}}}"#,
            br#"{"type":"turn_context","payload":{"cwd":"/p","approval_policy":"never","sandbox_policy":"read-only","model":"m2","effort":"high"}}"#,
        ];
        let f = facts(lines);
        assert_eq!(f.meta["source"], "exec");
        assert_eq!(f.meta["thread_source"], "user");
        assert!(!f.meta.contains_key("agent_role"));
        assert_eq!(f.git["repository_url"], "https://github.com/pat/app");
        assert!(!f.git.contains_key("branch"));
        assert_eq!(f.sandbox_policy.as_deref(), Some("read-only"));
        assert_eq!(f.approval_mode.as_deref(), Some("never"));
        assert_eq!(f.model.as_deref(), Some("m2"));
        assert_eq!(f.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(f.tokens_used, Some(30));
        assert!(!f.has_user_event);
        assert_eq!(f.first_user_message.as_deref(), Some("first"));
        let f = facts(lines[..2].iter().copied());
        assert_eq!(
            f.sandbox_policy.as_deref(),
            Some(r#"{"type":"managed","network":"restricted"}"#),
            "the profile's JSON as the rollout holds it"
        );
    }

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
