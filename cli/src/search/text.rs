//! The text of a line that the index holds: what a person reads in
//! `evi sessions show`, not the JSON around it.
//!
//! That is the message text (a string content, the text parts of a content
//! array, tool results), the tool's name on a tool turn, and for each tool
//! call its name and the string values of its arguments (the command that
//! ran, the file it touched), never the JSON keys. A line that is not JSON
//! is indexed as its raw text, as `show` prints it.

use serde_json::Value;

use crate::message::Message;
use crate::transcript::line::Role;

/// The indexed text of a raw line (without `\n`).
pub fn body(raw: &[u8]) -> String {
    let msg = Message::from_line(raw);
    let mut out = msg.text;
    let mut push = |s: &str| {
        if !s.is_empty() {
            out.push('\n');
            out.push_str(s);
        }
    };
    if let Some(name) = &msg.tool_name {
        push(name);
    }
    for call in &msg.tool_calls {
        push(&call.name);
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(v) => string_leaves(&v, &mut push),
            Err(_) => push(&call.arguments),
        }
    }
    out
}

fn string_leaves(v: &Value, push: &mut impl FnMut(&str)) {
    match v {
        Value::String(s) => push(s),
        Value::Array(a) => a.iter().for_each(|v| string_leaves(v, push)),
        Value::Object(o) => o.values().for_each(|v| string_leaves(v, push)),
        Value::Number(n) => push(&n.to_string()),
        Value::Bool(_) | Value::Null => {}
    }
}

/// The role as `--role` and the JSON output name it.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
        Role::System => "system",
        Role::Other => "other",
        Role::Invalid => "invalid",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_tool_names_and_argument_values_not_keys() {
        let raw = br#"{"role":"assistant","content":[{"type":"text","text":"running it"}],"tool_calls":[{"id":"c1","function":{"name":"bash","arguments":"{\"command\":\"cargo migrate\"}"}}]}"#;
        let b = body(raw);
        assert!(b.contains("running it"), "{b}");
        assert!(b.contains("bash") && b.contains("cargo migrate"), "{b}");
        assert!(!b.contains("command") && !b.contains("function"), "{b}");
        let tool = br#"{"role":"tool","tool_name":"grep","content":"src/auth.rs:12"}"#;
        assert_eq!(body(tool), "src/auth.rs:12\ngrep");
    }
}
