//! A transcript line as a message people read: role, text, tool calls.
//!
//! eVi and the models behind it write content in several shapes (a string,
//! a list of typed parts, OpenAI- or Anthropic-style tool calls); this module
//! folds them into one, and keeps a line that is not JSON as its raw text.

use serde_json::Value;

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
    /// Set when the line is not a JSON object: `text` is then the raw line.
    pub fault: Option<LineFault>,
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn compact(v: &Value) -> String {
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

impl Message {
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
            fault: None,
        }
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
    fn wrapper_reads_as_original() {
        let m = Message::from_line(br#"{"id":"d","parentId":"p","eviRawLine":"bm90IGpzb24="}"#);
        assert_eq!(m.text, "not json");
        assert_eq!(m.fault, Some(LineFault::NotJson));
    }
}
