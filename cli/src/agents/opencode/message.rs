//! A row's line as a message people read (`evi sessions show`, search, the
//! web viewer): a part's text under its message's role, a tool part as the
//! call and its output, reasoning as reasoning; session rows, message rows
//! and bookkeeping parts (steps, snapshots, patches) hidden. A session row
//! is not read as the title: its versions sit inside the chain, and a title
//! line is no entry of the tree, so the entries after it would read as a
//! separate root. Each version of a row is a line: a part OpenCode changed
//! after it was synced reads once per version.

use serde_json::Value;

use crate::message::{Message, Reading, ToolCall, compact};

/// The keys of a row's line [`read`] looks at.
pub const KEYS: &[&str] = &["table", "role", "row"];

/// Reads a row's line of an OpenCode session (anything else in a mirror,
/// which only ever holds rows, is hidden).
pub fn read(v: &Value) -> Reading {
    match v["table"].as_str() {
        Some("part") => part(v),
        _ => Reading::Hidden,
    }
}

fn ts(row: &Value) -> Option<String> {
    let ms = row["time_created"].as_i64()?;
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

fn message(role: &str, row: &Value) -> Message {
    Message {
        ts: ts(row),
        ..Message::empty(role)
    }
}

/// A column holding JSON: embedded as it is, or a string of it (one that
/// spans lines).
fn json(col: &Value) -> Option<Value> {
    match col {
        Value::String(s) => serde_json::from_str(s).ok(),
        Value::Null => None,
        other => Some(other.clone()),
    }
}

fn part(v: &Value) -> Reading {
    let row = &v["row"];
    let Some(data) = json(&row["data"]) else {
        return Reading::Hidden;
    };
    let role = v["role"].as_str().unwrap_or("assistant");
    let text = |k: &str| data[k].as_str().unwrap_or_default().to_owned();
    let m = match data["type"].as_str() {
        Some("text") if data["synthetic"] != Value::Bool(true) => Message {
            text: text("text"),
            ..message(role, row)
        },
        Some("reasoning") => Message {
            reasoning: Some(text("text")),
            ..message("assistant", row)
        },
        Some("file") => Message {
            text: format!("[file: {}]", data["filename"].as_str().unwrap_or("?")),
            ..message(role, row)
        },
        Some("tool") => {
            let state = &data["state"];
            let out = state["output"]
                .as_str()
                .or_else(|| state["error"].as_str())
                .unwrap_or_default();
            Message {
                text: out.to_owned(),
                tool_name: data["tool"].as_str().map(str::to_owned),
                tool_call_id: data["callID"].as_str().map(str::to_owned),
                tool_calls: vec![ToolCall {
                    id: data["callID"].as_str().map(str::to_owned),
                    name: text("tool"),
                    arguments: compact(&state["input"]),
                }],
                ..message("tool", row)
            }
        }
        _ => return Reading::Hidden,
    };
    Reading::Message(m, None)
}

#[cfg(test)]
mod tests {
    use crate::agents::Agent;
    use crate::message::{Message, Reading};

    fn read(raw: &[u8]) -> Reading {
        Message::read(Agent::OpenCode, raw)
    }

    #[test]
    fn parts_read_under_their_role() {
        let user = br#"{"table":"part","role":"user","row":{"id":"p1","time_created":1796600132209,"data":{"type":"text","text":"hi"}}}"#;
        let Reading::Message(m, _) = read(user) else {
            panic!()
        };
        assert_eq!((m.role.as_str(), m.text.as_str()), ("user", "hi"));
        assert_eq!(m.ts.as_deref(), Some("2026-12-06T23:35:32.209Z"));
        // With pull's ids in front, and `data` kept as a string of JSON.
        let pulled = br#"{"id":"e1","parentId":null,"table":"part","role":"user","row":{"id":"p1","data":"{\"type\":\"text\",\"text\":\"a\\nb\"}"}}"#;
        let Reading::Message(m, _) = read(pulled) else {
            panic!()
        };
        assert_eq!(m.text, "a\nb");
        let tool = br#"{"table":"part","role":"assistant","row":{"id":"p2","data":{"type":"tool","tool":"bash","callID":"c1","state":{"input":{"command":"ls"},"output":"a.txt"}}}}"#;
        let Reading::Message(m, _) = read(tool) else {
            panic!()
        };
        assert_eq!(m.tool_calls[0].name, "bash");
        assert_eq!(m.text, "a.txt");
        let step = br#"{"table":"part","role":"assistant","row":{"id":"p3","data":{"type":"step-start"}}}"#;
        assert!(matches!(read(step), Reading::Hidden));
        let session = br#"{"table":"session","row":{"id":"s","title":"Fix it"}}"#;
        assert!(matches!(read(session), Reading::Hidden));
        assert!(matches!(read(b"{\"role\":\"user\"}"), Reading::Hidden));
    }
}
