//! Claude Code's lines as messages: `user` / `assistant` / `system` lines
//! with a `message` of content blocks (text, thinking, tool_use,
//! tool_result), `summary` lines as titles, the rest (file-history
//! snapshots, attachments, queue operations) no message.
//!
//! A thinking block's `signature` and a `redacted_thinking` block's `data`
//! are encrypted for the model alone: they are never read into a message.

use serde_json::Value;

use super::{Message, Reading, ToolCall, compact, output_text, str_field};

pub(super) fn read(v: &Value) -> Reading {
    let ts = str_field(v, "timestamp");
    let mut m = match v["type"].as_str() {
        Some("summary") => {
            return match v["summary"].as_str() {
                Some(s) => Reading::Title(s.to_owned()),
                None => Reading::Hidden,
            };
        }
        Some(role @ ("user" | "assistant")) => blocks(role, &v["message"]["content"]),
        Some("system") => system(v),
        _ => return Reading::Hidden,
    };
    if v["isCompactSummary"] == true {
        m.role = "system".into();
        m.text = format!("Summary of the conversation so far:\n{}", m.text);
    } else if v["isMeta"] == true && m.role == "user" {
        m.role = "system".into();
    }
    if m.text.is_empty() && m.tool_calls.is_empty() && m.reasoning.is_none() {
        return Reading::Hidden;
    }
    m.ts = ts;
    // A compaction boundary starts a new root (`parentUuid: null`); its
    // `logicalParentUuid` says which conversation it continues, so readers
    // show one branch through it.
    let shown_parent = (v["parentUuid"].is_null())
        .then(|| str_field(v, "logicalParentUuid"))
        .flatten();
    Reading::Message(m, shown_parent)
}

/// A compaction boundary, or another system note with text.
fn system(v: &Value) -> Message {
    let mut m = Message::empty("system");
    if v["subtype"] == "compact_boundary" {
        let meta = &v["compactMetadata"];
        let mut text = "Conversation compacted".to_owned();
        let trigger = meta["trigger"].as_str();
        let tokens = meta["preTokens"].as_u64();
        match (trigger, tokens) {
            (Some(t), Some(n)) => text.push_str(&format!(" ({t}, {n} tokens before)")),
            (Some(t), None) => text.push_str(&format!(" ({t})")),
            (None, Some(n)) => text.push_str(&format!(" ({n} tokens before)")),
            (None, None) => {}
        }
        m.text = text;
    } else if let Some(s) = v["content"].as_str() {
        m.text = s.to_owned();
    }
    m
}

/// A `user` or `assistant` message from its content: a string, or blocks.
fn blocks(role: &str, content: &Value) -> Message {
    let mut m = Message::empty(role);
    let blocks = match content {
        Value::String(s) => {
            m.text = s.clone();
            return m;
        }
        Value::Array(b) => b,
        _ => return m,
    };
    let mut text: Vec<String> = Vec::new();
    let mut thinking: Vec<String> = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => text.extend(str_field(b, "text")),
            Some("thinking") => thinking.extend(str_field(b, "thinking")),
            Some("tool_use" | "server_tool_use") => {
                m.tool_calls
                    .extend(str_field(b, "name").map(|name| ToolCall {
                        id: str_field(b, "id"),
                        name,
                        arguments: compact(&b["input"]),
                    }))
            }
            Some("tool_result") => {
                m.role = "tool".into();
                m.tool_call_id = str_field(b, "tool_use_id");
                let out = output_text(&b["content"]);
                text.push(if b["is_error"] == true {
                    format!("error: {out}")
                } else {
                    out
                });
            }
            Some("image") => text.push("[image]".into()),
            // `redacted_thinking` and anything unknown: nothing to read.
            _ => {}
        }
    }
    m.text = text.join("\n");
    if !thinking.is_empty() {
        m.reasoning = Some(thinking.join("\n"));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::super::Reading;
    use super::*;

    fn msg(line: &str) -> (Message, Option<String>) {
        match read(&serde_json::from_str(line).unwrap()) {
            Reading::Message(m, p) => (m, p),
            _ => panic!("not a message: {line}"),
        }
    }

    #[test]
    fn blocks_thinking_and_tools() {
        let (m, _) = msg(
            r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"thinking","thinking":"check it","signature":"U0VDUkVU"},{"type":"redacted_thinking","data":"RU5DUllQVEVE"},{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a"}}]},"uuid":"u","timestamp":"2024-01-01T10:00:03.000Z"}"#,
        );
        assert_eq!(
            (m.role.as_str(), m.text.as_str()),
            ("assistant", "Reading.")
        );
        assert_eq!(m.reasoning.as_deref(), Some("check it"));
        assert_eq!(m.tool_calls[0].name, "Read");
        assert_eq!(m.tool_calls[0].arguments, r#"{"file_path":"/a"}"#);
        let all = format!("{m:?}");
        assert!(!all.contains("U0VDUkVU") && !all.contains("RU5DUllQVEVE"));
        let (m, _) = msg(
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"hello"}]}]}}"#,
        );
        assert_eq!(
            (m.role.as_str(), m.text.as_str(), m.tool_call_id.as_deref()),
            ("tool", "hello", Some("toolu_1"))
        );
    }

    #[test]
    fn compaction_continues_its_logical_parent() {
        let (m, p) = msg(
            r#"{"type":"system","subtype":"compact_boundary","uuid":"c1","parentUuid":null,"logicalParentUuid":"t1","content":"Conversation compacted","compactMetadata":{"preTokens":2048,"trigger":"auto"}}"#,
        );
        assert_eq!(m.text, "Conversation compacted (auto, 2048 tokens before)");
        assert_eq!(p.as_deref(), Some("t1"));
        let (m, _) = msg(
            r#"{"type":"user","uuid":"cs1","parentUuid":"c1","isCompactSummary":true,"message":{"role":"user","content":[{"type":"text","text":"condensed"}]}}"#,
        );
        assert_eq!(m.role, "system");
        assert!(m.text.ends_with("condensed"));
        assert!(matches!(
            read(&serde_json::json!({"type":"file-history-snapshot"})),
            Reading::Hidden
        ));
        assert!(matches!(
            read(&serde_json::json!({"type":"summary","summary":"Fix","leafUuid":"x"})),
            Reading::Title(t) if t == "Fix"
        ));
    }
}
