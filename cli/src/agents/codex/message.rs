//! Codex's rollout lines as messages: `response_item`s (messages,
//! reasoning summaries, function and tool calls and their outputs) and
//! `compacted` records. `session_meta`, `turn_context` and `event_msg`
//! lines repeat what the response items say (or say nothing to read), so
//! they are no message. Rollouts older than the `payload` wrapper hold the
//! response items bare; they read the same.
//!
//! A reasoning item's `encrypted_content` is for the model alone: it is
//! never read into a message, only its `summary` (and plain `content`).

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::message::outline::{
    LineOutline, Obj, Outline, agent_line, is_object, joined_nonempty, output_nonempty, raw_fields,
    str_nonempty, string, time,
};
use crate::message::{Message, Reading, ToolCall, compact, output_text, str_field};
use crate::transcript::line::Role;

/// Every key of a line [`read`] looks at, but for a bare response item
/// (one without `payload`), which is read whole.
pub(super) const KEYS: &[&str] = &["type", "payload", "timestamp"];

pub(super) fn read(v: &Value) -> Reading {
    let item = match v["type"].as_str() {
        Some("response_item") => &v["payload"],
        Some("compacted") => {
            let mut m = Message::empty("system");
            m.text = format!(
                "Conversation compacted:\n{}",
                v["payload"]["message"].as_str().unwrap_or_default()
            );
            m.ts = str_field(v, "timestamp");
            return Reading::Message(m, None);
        }
        Some("session_meta" | "turn_context" | "event_msg") | None => return Reading::Hidden,
        Some(_) if v.get("payload").is_none() => v,
        Some(_) => return Reading::Hidden,
    };
    let Some(mut m) = response_item(item) else {
        return Reading::Hidden;
    };
    if m.text.is_empty() && m.tool_calls.is_empty() && m.reasoning.is_none() {
        return Reading::Hidden;
    }
    m.ts = str_field(v, "timestamp");
    Reading::Message(m, None)
}

fn response_item(p: &Value) -> Option<Message> {
    let call = |name: Option<String>, args: &Value| {
        let mut m = Message::empty("assistant");
        m.tool_calls.push(ToolCall {
            id: str_field(p, "call_id"),
            name: name.unwrap_or_else(|| "tool".into()),
            arguments: compact(args),
        });
        m
    };
    Some(match p["type"].as_str()? {
        "message" => {
            let parts: Vec<&str> = p["content"]
                .as_array()
                .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
                .unwrap_or_default();
            let text = output_text(&p["content"]);
            let role = match p["role"].as_str() {
                // What Codex puts before the user's words (environment,
                // AGENTS.md instructions) is context, not something asked.
                Some("user") if !parts.is_empty() && parts.iter().all(|t| is_context(t)) => {
                    "system"
                }
                Some("developer" | "system") => "system",
                Some(r) => r,
                None => "other",
            };
            let mut m = Message::empty(role);
            m.text = text;
            m
        }
        "reasoning" => {
            let texts = |key: &str| -> Vec<String> {
                p[key]
                    .as_array()
                    .map(|a| a.iter().filter_map(|b| str_field(b, "text")).collect())
                    .unwrap_or_default()
            };
            let mut said = texts("summary");
            if said.is_empty() {
                said = texts("content");
            }
            let mut m = Message::empty("assistant");
            m.reasoning = (!said.is_empty()).then(|| said.join("\n"));
            m
        }
        "function_call" => call(str_field(p, "name"), &p["arguments"]),
        "custom_tool_call" => call(str_field(p, "name"), &p["input"]),
        "local_shell_call" => call(Some("shell".into()), &p["action"]),
        "web_search_call" => call(Some("web_search".into()), &p["action"]),
        "function_call_output" | "custom_tool_call_output" => {
            let mut m = Message::empty("tool");
            m.tool_call_id = str_field(p, "call_id");
            m.text = shell_output(output_text(&p["output"]));
            m
        }
        _ => return None,
    })
}

/// The text of a tool's output as Codex shows it: its shell tool returns a
/// JSON string `{"output": "…", "metadata": {…}}`, whose `output` is what
/// ran and printed (shown and searched with its real line breaks, not as
/// escaped JSON). Kept whole when that is empty, so a tool line reads
/// non-empty exactly when the outline says so.
fn shell_output(text: String) -> String {
    #[derive(Deserialize)]
    struct Shell {
        output: String,
    }
    match serde_json::from_str::<Shell>(&text) {
        Ok(Shell { output }) if !output.is_empty() && text.trim_start().starts_with('{') => output,
        _ => text,
    }
}

fn is_context(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with('<') || t.starts_with("# AGENTS.md")
}

agent_line! {
    /// The fields of a line [`outline`] reads: those [`read`] and
    /// [`super::files::meta`] look at, and those of eVi's head.
    struct Line<'a> {
        timestamp;
        /// `null` reads as absent; any other value than an object makes the
        /// line one to read whole.
        #[serde(borrow, default)]
        payload: Option<Obj<Payload<'a>>>,
    }
}

raw_fields! {
    /// A `payload`: the fields of a response item, and of a `session_meta`'s
    /// [`super::files::Meta`].
    struct Payload<'a> {
        kind = "type", role, content, summary, output, id, timestamp, cwd,
        model_provider, cli_version,
    }
}

raw_fields! {
    /// A content, summary or output part: the fields read of it. A part that
    /// is not an object makes the line one to read whole.
    struct Part<'a> { kind = "type", text }
}

/// The parts of an array value (`Some(empty)` for any other value).
fn parts(raw: Option<&RawValue>) -> Option<Vec<Part<'_>>> {
    match raw {
        Some(r) if r.get().starts_with('[') => {
            let parts: Vec<Obj<Part<'_>>> = serde_json::from_str(r.get()).ok()?;
            Some(parts.into_iter().map(|Obj(p)| p).collect())
        }
        _ => Some(Vec::new()),
    }
}

/// What [`read`] makes of a line, without making the message: `None` for
/// a line it cannot vouch for (see [`crate::message::outline`]).
pub(super) fn outline(raw: &[u8]) -> Option<LineOutline> {
    if !is_object(raw) {
        return None;
    }
    let l: Line<'_> = serde_json::from_slice(raw).ok()?;
    let head = l.head();
    if head.wrapped() {
        return None;
    }
    let kind = l.kind.and_then(string);
    let message = |role: Role| Outline::Message {
        role,
        ts: time(l.timestamp),
        fault: None,
        shown_parent: None,
    };
    let mut project = None;
    let outline = match kind.as_deref() {
        Some("response_item") => match &l.payload {
            Some(Obj(p)) => match item_role(p)? {
                Some(role) => message(role),
                None => Outline::Hidden,
            },
            None => Outline::Hidden,
        },
        Some("compacted") => message(Role::System),
        Some("session_meta") => {
            project = l.payload.as_ref().and_then(|Obj(p)| meta_cwd(p));
            Outline::Hidden
        }
        Some("turn_context" | "event_msg") | None => Outline::Hidden,
        // A bare response item of an older rollout: read whole.
        Some(_) if l.payload.is_none() => return None,
        Some(_) => Outline::Hidden,
    };
    Some(LineOutline {
        ids: head.ids(),
        outline,
        project,
    })
}

/// The `cwd` of a `session_meta` payload that reads as a
/// [`super::files::Meta`] (`Some(None)`: it has none).
fn meta_cwd(p: &Payload<'_>) -> Option<Option<String>> {
    // An optional string field: absent or `null`, else a string.
    let optional = |raw: Option<&RawValue>| match raw {
        None => Some(None),
        Some(r) if r.get() == "null" => Some(None),
        Some(r) => string(r).map(|s| Some(s.into_owned())),
    };
    p.id.and_then(string)?;
    p.timestamp.and_then(string)?;
    optional(p.model_provider)?;
    optional(p.cli_version)?;
    optional(p.cwd)
}

/// The role of the message [`response_item`] makes of `p` (`Some(None)`:
/// none, or an empty one); `None` when unsure.
fn item_role(p: &Payload<'_>) -> Option<Option<Role>> {
    let kind = p.kind.and_then(string);
    Some(match kind.as_deref() {
        Some("message") => {
            let parts = parts(p.content)?;
            let said = if p.content.is_some_and(|c| c.get().starts_with('[')) {
                joined_nonempty(parts.iter().filter_map(|b| {
                    if b.kind
                        .and_then(string)
                        .is_some_and(|t| t.ends_with("image"))
                    {
                        return Some(true);
                    }
                    b.text.and_then(str_nonempty)
                }))
            } else {
                output_nonempty(p.content)?
            };
            if !said {
                return Some(None);
            }
            let all_context = || {
                let texts: Vec<_> = parts
                    .iter()
                    .filter_map(|b| b.text.and_then(string))
                    .collect();
                !texts.is_empty() && texts.iter().all(|t| is_context(t))
            };
            match p.role.and_then(string).as_deref() {
                Some("user") if all_context() => Role::System,
                Some("developer" | "system") => Role::System,
                Some(r) => Role::of(r),
                None => Role::Other,
            }
            .into()
        }
        Some("reasoning") => {
            let said = |raw| -> Option<bool> {
                Some(
                    parts(raw)?
                        .iter()
                        .any(|b| b.text.and_then(str_nonempty).is_some()),
                )
            };
            (said(p.summary)? || said(p.content)?).then_some(Role::Assistant)
        }
        Some("function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call") => {
            Some(Role::Assistant)
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            output_nonempty(p.output)?.then_some(Role::Tool)
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(line: &str) -> Message {
        match read(&serde_json::from_str(line).unwrap()) {
            Reading::Message(m, _) => m,
            _ => panic!("not a message: {line}"),
        }
    }

    #[test]
    fn items_read_as_messages() {
        let m = msg(
            r#"{"timestamp":"2024-01-01T10:00:03.000Z","type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"Checking directory"}],"content":null,"encrypted_content":"ZW5jcnlwdGVk"}}"#,
        );
        assert_eq!(m.reasoning.as_deref(), Some("Checking directory"));
        assert!(!format!("{m:?}").contains("ZW5jcnlwdGVk"));
        assert_eq!(m.ts.as_deref(), Some("2024-01-01T10:00:03.000Z"));
        let m = msg(
            r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"call_002"}}"#,
        );
        assert_eq!(m.tool_calls[0].name, "shell");
        assert_eq!(m.tool_calls[0].arguments, r#"{"command":["ls"]}"#);
        let m = msg(r#"{"type":"function_call_output","call_id":"call_001","output":"ok"}"#);
        assert_eq!((m.role.as_str(), m.text.as_str()), ("tool", "ok"));
        // The shell tool's JSON-wrapped output reads as what it printed.
        let m = msg(
            r#"{"type":"function_call_output","call_id":"c","output":"{\"output\":\"a.txt\\nb.txt\",\"metadata\":{\"exit_code\":0}}"}"#,
        );
        assert_eq!(m.text, "a.txt\nb.txt");
        let m =
            msg(r#"{"type":"function_call_output","call_id":"c","output":"{\"output\":\"\"}"}"#);
        assert_eq!(m.text, r#"{"output":""}"#);
        let m = msg(
            r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>x</environment_context>"}]}}"#,
        );
        assert_eq!(m.role, "system");
        for hidden in [
            r#"{"type":"event_msg","payload":{"type":"user_message","message":"hi"}}"#,
            r#"{"type":"response_item","payload":{"type":"reasoning","summary":[],"encrypted_content":"eA=="}}"#,
            r#"{"record_type":"state"}"#,
        ] {
            assert!(
                matches!(
                    read(&serde_json::from_str(hidden).unwrap()),
                    Reading::Hidden
                ),
                "{hidden}"
            );
        }
    }
}
