//! Codex's rollout lines as messages: `response_item`s (messages,
//! reasoning summaries, function and tool calls and their outputs) and
//! `compacted` records. `session_meta`, `turn_context` and `event_msg`
//! lines repeat what the response items say (or say nothing to read), so
//! they are no message. Rollouts older than the `payload` wrapper hold the
//! response items bare; they read the same.
//!
//! A reasoning item's `encrypted_content` is for the model alone: it is
//! never read into a message, only its `summary` (and plain `content`).

use serde_json::Value;

use super::{Message, Reading, ToolCall, compact, output_text, str_field};

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
            m.text = output_text(&p["output"]);
            m
        }
        _ => return None,
    })
}

fn is_context(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with('<') || t.starts_with("# AGENTS.md")
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
