//! The text of a line that the index holds: what a person reads in
//! `evi sessions show`, not the JSON around it.
//!
//! That is the message text (a string content, the text parts of a content
//! array, tool results), the tool's name on a tool turn, and for each tool
//! call its name and the string values of its arguments (the command that
//! ran, the file it touched), never the JSON keys. A line that is not JSON
//! is indexed as its raw text, as `show` prints it.
//!
//! Other agents' lines (Claude Code, Codex) are read through the same
//! message model as `show` reads them ([`Message::read`]): their text, the
//! plain reasoning (Claude Code's thinking, Codex's reasoning summaries),
//! tool calls and outputs. Encrypted reasoning (Codex's
//! `encrypted_content`, Claude Code's thinking `signature` and
//! `redacted_thinking` `data`) is never read into a message, so it is never
//! indexed, and a search for it finds nothing. Lines that are no message
//! (bookkeeping, titles) are not indexed at all ([`agent_message`]).

use serde_json::Value;

use crate::message::{Message, Reading};
use crate::source::Agent;
use crate::transcript::line::Role;

/// The indexed text of a raw line of an eVi transcript (without `\n`).
pub fn body(raw: &[u8]) -> String {
    message_body(Message::from_line(raw))
}

/// The message of a line of `agent`'s session that readers show as one
/// (`None`: a title or bookkeeping line, which is not indexed).
pub fn agent_message(agent: Agent, raw: &[u8]) -> Option<Message> {
    match Message::read(agent, raw) {
        Reading::Message(m, _) => Some(m),
        Reading::Title(_) | Reading::Hidden => None,
    }
}

/// The indexed text of a line of `agent`'s session, as [`body`] is of an
/// eVi line (empty for a line that is no message).
pub fn agent_body(agent: Agent, raw: &[u8]) -> String {
    match agent {
        Agent::Evi => body(raw),
        _ => agent_message(agent, raw)
            .map(message_body)
            .unwrap_or_default(),
    }
}

/// The text of a message a person reads: its text, its plain reasoning,
/// the tool's name, each call's name and argument values.
pub fn message_body(msg: Message) -> String {
    let mut out = msg.text;
    let mut push = |s: &str| {
        if !s.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(s);
        }
    };
    if let Some(r) = &msg.reasoning {
        push(r);
    }
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

    #[test]
    fn agents_lines_index_what_readers_show_never_encrypted_reasoning() {
        let claude = br#"{"parentUuid":null,"type":"assistant","uuid":"u1","message":{"role":"assistant","content":[{"type":"thinking","thinking":"the bound is off","signature":"U0lHTkFUVVJF"},{"type":"redacted_thinking","data":"UkVEQUNURUQ="},{"type":"text","text":"reading it"},{"type":"tool_use","id":"t1","name":"Read","input":{"file_path":"src/lexer.rs"}}]}}"#;
        let b = agent_body(Agent::ClaudeCode, claude);
        for want in ["reading it", "the bound is off", "Read", "src/lexer.rs"] {
            assert!(b.contains(want), "{want}: {b}");
        }
        for secret in ["U0lHTkFUVVJF", "UkVEQUNURUQ", "signature", "file_path"] {
            assert!(!b.contains(secret), "{secret}: {b}");
        }
        let codex = br#"{"timestamp":"2026-01-20T10:00:03.000Z","type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"Checking directory"}],"content":null,"encrypted_content":"RU5DUllQVEVE"}}"#;
        let b = agent_body(Agent::Codex, codex);
        assert_eq!(b, "Checking directory");
        // Bookkeeping is no message: nothing to index.
        let meta = br#"{"type":"session_meta","payload":{"id":"x","cwd":"/p"}}"#;
        assert!(agent_message(Agent::Codex, meta).is_none());
    }
}
