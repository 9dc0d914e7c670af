//! A transcript line as a message people read: role, text, tool calls.
//!
//! eVi and the models behind it write content in several shapes (a string,
//! a list of typed parts, OpenAI- or Anthropic-style tool calls); this module
//! folds them into one, and keeps a line that is not JSON as its raw text.
//! Other agents' lines (each agent's reader, [`crate::agents::Reader`])
//! fold into the same model, so every face (show, export, the web viewer) renders every
//! agent's sessions through one code path.

mod fields;
pub mod outline;

use serde_json::Value;

use crate::source::Agent;
use crate::transcript::line::{LineFault, original_bytes, parse_head};

/// One tool call an assistant turn asked for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ToolCall {
    pub id: Option<String>,
    pub name: String,
    /// Arguments as compact JSON text.
    pub arguments: String,
}

/// A line, readable.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub text: String,
    pub ts: Option<String>,
    /// Name of the tool on tool turns.
    pub tool_name: Option<String>,
    /// Id of the call a tool turn answers.
    pub tool_call_id: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// What the model said it thought, where it is plain text (Claude
    /// Code's thinking, Codex's reasoning summaries); encrypted reasoning is
    /// never read into it.
    pub reasoning: Option<String>,
    /// Set when the line is not a JSON object: `text` is then the raw line.
    pub fault: Option<LineFault>,
}

/// What a line of a session is to a reader.
#[derive(Debug, Clone)]
pub enum Reading {
    /// A message, and the entry readers show it under when that is not its
    /// parent in the tree (Claude Code's compaction boundary continues its
    /// `logicalParentUuid`).
    Message(Message, Option<String>),
    /// The session's title (Claude Code's `summary` lines).
    Title(String),
    /// Nothing to read (bookkeeping of the agent): not shown, and its
    /// children are shown under its parent.
    Hidden,
}

pub(crate) fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

pub(crate) fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tool_call(v: &Value) -> Option<ToolCall> {
    let f = v.get("function").unwrap_or(v);
    let name = str_field(f, "name")?;
    let args = ["arguments", "args", "input"]
        .iter()
        .find_map(|k| f.get(*k))
        .map(compact)
        .unwrap_or_default();
    Some(ToolCall {
        id: str_field(v, "id"),
        name,
        arguments: args,
    })
}

/// Text of a `content` value, and any tool calls embedded as parts.
fn content_text(content: Option<&Value>, calls: &mut Vec<ToolCall>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut out: Vec<String> = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("tool_use") => calls.extend(tool_call(p)),
                    Some("tool_result") => out.push(content_text(p.get("content"), calls)),
                    Some("image" | "image_url") => out.push("[image]".into()),
                    _ => match p {
                        Value::String(s) => out.push(s.clone()),
                        _ => out.extend(str_field(p, "text")),
                    },
                }
            }
            out.join("\n")
        }
        Some(other) => other.to_string(),
    }
}

/// The text of content parts (`text` fields), images as `[image]`, one
/// part a line.
fn parts_text(parts: &[Value]) -> String {
    parts
        .iter()
        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
            Some(t) if t.ends_with("image") => Some("[image]".into()),
            _ => str_field(p, "text"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool's output as text: a string, content parts, or an object whose
/// `content` is one of those.
pub(crate) fn output_text(out: &Value) -> String {
    match out {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts_text(parts),
        Value::Object(o) => o
            .get("content")
            .map_or_else(|| out.to_string(), output_text),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Message {
    pub(crate) fn empty(role: &str) -> Self {
        Self {
            role: role.to_owned(),
            text: String::new(),
            ts: None,
            tool_name: None,
            tool_call_id: None,
            tool_calls: Vec::new(),
            reasoning: None,
            fault: None,
        }
    }

    /// Reads a line of `agent`'s session (without `\n`).
    pub fn read(agent: Agent, raw: &[u8]) -> Reading {
        if let Some(reading) = agent.kind().read_line(raw) {
            return reading;
        }
        let Some(reader) = agent.kind().reader() else {
            return Reading::Message(Self::from_line(raw), None);
        };
        // The keys the reader looks at, in one pass, when they are enough.
        if let Some(v) = fields::trimmed(raw, reader.keys)
            && (reader.trimmed_enough)(&v)
        {
            return (reader.read)(&v);
        }
        Self::read_whole(agent, raw)
    }

    /// [`Self::read`] from a `Value` of the whole line: what the shortcuts
    /// of [`fields`] and [`outline`] stand for.
    pub(crate) fn read_whole(agent: Agent, raw: &[u8]) -> Reading {
        if let Some(reading) = agent.kind().read_line(raw) {
            return reading;
        }
        let Some(reader) = agent.kind().reader() else {
            return Reading::Message(Self::from_line(raw), None);
        };
        let read = reader.read;
        // Pull's wrapper and lines that are not JSON objects read as eVi's.
        let head = parse_head(raw);
        match (head.wrapped, head.fault) {
            (false, None) => match serde_json::from_slice::<Value>(raw) {
                Ok(v) => read(&v),
                Err(_) => Reading::Message(Self::from_line(raw), None),
            },
            _ => Reading::Message(Self::from_line(raw), None),
        }
    }

    /// What the tree needs of a line of another agent's session, read in
    /// one pass without building the message (see [`outline`]); `None`
    /// when the line is to be read whole ([`Self::read`]).
    pub fn outline(agent: Agent, raw: &[u8]) -> Option<outline::LineOutline> {
        (agent.kind().reader()?.outline)(raw)
    }

    /// The message of an entry of `agent`'s session (a line that reads as
    /// none, which the tree never makes an entry, is an empty `other`).
    pub fn of(agent: Agent, raw: &[u8]) -> Self {
        match Self::read(agent, raw) {
            Reading::Message(m, _) => m,
            Reading::Title(t) => Self {
                text: t,
                ..Self::empty("system")
            },
            Reading::Hidden => Self::empty("other"),
        }
    }

    /// Reads a raw transcript line (without `\n`).
    pub fn from_line(raw: &[u8]) -> Self {
        let head = parse_head(raw);
        let wrapped = head.wrapped.then(|| original_bytes(raw)).flatten();
        let value = match (&wrapped, head.fault) {
            (None, None) => serde_json::from_slice::<Value>(raw).ok(),
            _ => None,
        };
        let Some(v) = value else {
            let bytes = wrapped.as_deref().unwrap_or(raw);
            return Self {
                role: "invalid".into(),
                text: String::from_utf8_lossy(bytes).into_owned(),
                ts: None,
                tool_name: None,
                tool_call_id: None,
                tool_calls: Vec::new(),
                reasoning: None,
                fault: Some(if std::str::from_utf8(bytes).is_ok() {
                    LineFault::NotJson
                } else {
                    LineFault::NotUtf8
                }),
            };
        };
        let mut calls: Vec<ToolCall> = v
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(tool_call).collect())
            .unwrap_or_default();
        let text = content_text(v.get("content"), &mut calls);
        Self {
            role: str_field(&v, "role").unwrap_or_else(|| "other".into()),
            text,
            ts: str_field(&v, "ts"),
            tool_name: str_field(&v, "tool_name").or_else(|| str_field(&v, "name")),
            tool_call_id: str_field(&v, "tool_call_id"),
            tool_calls: calls,
            reasoning: None,
            fault: None,
        }
    }
}

/// `v` without the reasoning that is encrypted for the model alone:
/// Codex's `encrypted_content`, Claude Code's thinking `signature` and
/// `redacted_thinking` `data`. Exports of other agents' lines pass through
/// this, so they never show it.
pub fn without_encrypted(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("encrypted_content");
            match o.get("type").and_then(Value::as_str) {
                Some("thinking") => {
                    o.remove("signature");
                }
                Some("redacted_thinking") => {
                    o.remove("data");
                }
                _ => {}
            }
            o.values_mut().for_each(without_encrypted);
        }
        Value::Array(a) => a.iter_mut().for_each(without_encrypted),
        _ => {}
    }
}

/// Strips eVi's `[ongoing goal: …]` prefix from a first user message.
pub fn strip_goal(text: &str) -> &str {
    let t = text.trim_start();
    if let Some(rest) = t.strip_prefix("[ongoing goal:")
        && let Some(end) = rest.find(']')
    {
        return rest[end + 1..].trim_start();
    }
    t
}

/// Cuts `text` to at most `width` characters on one line, with `…`.
pub fn one_line(text: &str, width: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        return flat;
    }
    let mut out: String = flat.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_tool_calls() {
        let m = Message::from_line(
            br#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls\"}"}}]}"#,
        );
        assert_eq!(m.tool_calls[0].name, "bash");
        assert_eq!(m.tool_calls[0].arguments, r#"{"cmd":"ls"}"#);
    }

    #[test]
    fn parts_and_goal() {
        let m = Message::from_line(
            br#"{"role":"user","content":[{"type":"text","text":"[ongoing goal: ship it] fix the test"}]}"#,
        );
        assert_eq!(strip_goal(&m.text), "fix the test");
        assert_eq!(one_line("a  b\nc", 10), "a b c");
        assert_eq!(one_line("abcdefghijkl", 5), "abcd…");
    }

    #[test]
    fn encrypted_reasoning_is_dropped() {
        let mut v: Value = serde_json::from_str(
            r#"{"payload":{"type":"reasoning","summary":[],"encrypted_content":"e1"},"message":{"content":[{"type":"thinking","thinking":"t","signature":"s1"},{"type":"redacted_thinking","data":"d1"}]}}"#,
        )
        .unwrap();
        without_encrypted(&mut v);
        let s = v.to_string();
        assert!(
            !s.contains("e1") && !s.contains("s1") && !s.contains("d1"),
            "{s}"
        );
        assert!(s.contains(r#""thinking":"t""#));
    }

    #[test]
    fn wrapper_reads_as_original() {
        let m = Message::from_line(br#"{"id":"d","parentId":"p","eviRawLine":"bm90IGpzb24="}"#);
        assert_eq!(m.text, "not json");
        assert_eq!(m.fault, Some(LineFault::NotJson));
    }
}
