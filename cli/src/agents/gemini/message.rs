//! A line of a Gemini CLI session as a message people read (`show`,
//! `export`, search, the web viewer).
//!
//! Messages are objects with a string `id`: `user` (its `content`, a
//! string or parts), `gemini` (the model: its `content`, its `thoughts` as
//! reasoning, its `toolCalls` as tool calls with their results), `info`,
//! `warning` and `error` (system). A `$set` with a `summary` is the title;
//! the metadata line, other `$set` records (among them the whole history
//! Gemini repeats when it resumes) and `$rewindTo` are bookkeeping and not
//! shown. A line pull wrapped because it was no JSON object reads as its
//! original bytes.

use serde_json::Value;

use crate::message::{Message, Reading, ToolCall, compact, str_field};
use crate::transcript::line::LineFault;

/// Reads a line of a Gemini session (without `\n`).
pub fn read(raw: &[u8]) -> Reading {
    let Ok(v) = serde_json::from_slice::<Value>(raw) else {
        return Reading::Message(invalid(raw), None);
    };
    if !v.is_object() {
        return Reading::Message(invalid(raw), None);
    }
    if let Some(original) = super::raw_line(&v) {
        return Reading::Message(invalid(&original), None);
    }
    if let Some(set) = v.get("$set") {
        return match set.get("summary").and_then(Value::as_str) {
            Some(s) => Reading::Title(s.to_owned()),
            None => Reading::Hidden,
        };
    }
    let role = match (v.get("id").and_then(Value::as_str), str_field(&v, "type")) {
        (Some(_), Some(t)) if t == "user" => "user",
        (Some(_), Some(t)) if t == "gemini" => "assistant",
        (Some(_), Some(t)) if matches!(t.as_str(), "info" | "warning" | "error") => "system",
        _ => return Reading::Hidden,
    };
    let mut calls = Vec::new();
    let mut text = vec![content_text(v.get("content"))];
    for c in v
        .get("toolCalls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = str_field(c, "name") else {
            continue;
        };
        calls.push(ToolCall {
            id: str_field(c, "id"),
            name,
            arguments: c.get("args").map(compact).unwrap_or_default(),
        });
        let out = tool_output(c.get("result"));
        if !out.is_empty() {
            text.push(out);
        }
    }
    let thoughts: Vec<String> = (v
        .get("thoughts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten())
    .filter_map(|t| {
        let parts: Vec<&str> = ["subject", "description"]
            .iter()
            .filter_map(|k| t.get(*k).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join(": "))
    })
    .collect();
    text.retain(|t| !t.is_empty());
    Reading::Message(
        Message {
            role: role.to_owned(),
            text: text.join("\n"),
            ts: str_field(&v, "timestamp"),
            tool_name: None,
            tool_call_id: None,
            tool_calls: calls,
            reasoning: (!thoughts.is_empty()).then(|| thoughts.join("\n")),
            fault: None,
        },
        None,
    )
}

/// A line that is no JSON object, as its text.
fn invalid(raw: &[u8]) -> Message {
    Message {
        role: "invalid".into(),
        text: String::from_utf8_lossy(raw).into_owned(),
        ts: None,
        tool_name: None,
        tool_call_id: None,
        tool_calls: Vec::new(),
        reasoning: None,
        fault: Some(if std::str::from_utf8(raw).is_ok() {
            LineFault::NotJson
        } else {
            LineFault::NotUtf8
        }),
    }
}

/// The text of Gemini content: a string, or parts (`text`, inline data as
/// `[image]` or `[file]`), one part a line.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                _ if p.get("inlineData").is_some() || p.get("fileData").is_some() => {
                    let mime = p
                        .pointer("/inlineData/mimeType")
                        .or_else(|| p.pointer("/fileData/mimeType"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    Some(
                        if mime.starts_with("image/") {
                            "[image]"
                        } else {
                            "[file]"
                        }
                        .into(),
                    )
                }
                _ if p.get("thought").and_then(Value::as_bool) == Some(true) => None,
                _ => str_field(p, "text"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Object(_)) => content_text(Some(&Value::Array(vec![content.unwrap().clone()]))),
        _ => String::new(),
    }
}

/// A tool call's result: its function responses' `output` (else the whole
/// response), and any text parts.
fn tool_output(result: Option<&Value>) -> String {
    let Some(Value::Array(parts)) = result else {
        return String::new();
    };
    parts
        .iter()
        .filter_map(|p| match p.pointer("/functionResponse/response") {
            Some(r) => Some(
                r.get("output")
                    .or_else(|| r.get("error"))
                    .map_or_else(|| compact(r), compact),
            ),
            None => str_field(p, "text"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(line: &str) -> Message {
        match read(line.as_bytes()) {
            Reading::Message(m, _) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_read_as_gemini_shows_them() {
        let m = msg(
            r#"{"id":"e4","timestamp":"2026-12-06T23:36:22.098Z","type":"user","content":[{"text":"first question"}]}"#,
        );
        assert_eq!(
            (m.role.as_str(), m.text.as_str()),
            ("user", "first question")
        );
        assert_eq!(m.ts.as_deref(), Some("2026-12-06T23:36:22.098Z"));
        let m = msg(
            r#"{"id":"29","type":"gemini","content":"answer","thoughts":[{"subject":"Plan","description":"look"}],"toolCalls":[{"id":"c1","name":"read_file","args":{"path":"a"},"result":[{"functionResponse":{"id":"c1","name":"read_file","response":{"output":"contents"}}}],"status":"success"}],"model":"m"}"#,
        );
        assert_eq!(m.role, "assistant");
        assert_eq!(m.text, "answer\ncontents");
        assert_eq!(m.reasoning.as_deref(), Some("Plan: look"));
        assert_eq!(m.tool_calls[0].name, "read_file");
        assert_eq!(m.tool_calls[0].arguments, r#"{"path":"a"}"#);
        for hidden in [
            r#"{"sessionId":"s","projectHash":"h","startTime":"t","kind":"main"}"#,
            r#"{"$set":{"lastUpdated":"t"}}"#,
            r#"{"$set":{"messages":[{"id":"x","type":"user","content":"ctx"}]}}"#,
            r#"{"$rewindTo":"x"}"#,
        ] {
            assert!(
                matches!(read(hidden.as_bytes()), Reading::Hidden),
                "{hidden}"
            );
        }
        assert!(
            matches!(read(br#"{"$set":{"summary":"Fix it"}}"#), Reading::Title(t) if t == "Fix it")
        );
        assert_eq!(msg("cut {").fault, Some(LineFault::NotJson));
        assert_eq!(
            msg(r#"{"eviId":"e","eviParentId":null,"eviRawLine":"bm90IGpzb24="}"#).text,
            "not json"
        );
    }
}
