//! Rebuilding a conversation from a session's active branch, as an agent
//! takes it back: user, assistant and tool messages in order, every tool call
//! with an id and every tool result pointing at its call.
//!
//! Transcripts do not always carry tool call ids. Missing ones are made up
//! deterministically from the entry id (`call_<entry id>_<n>`), so every device
//! rebuilds exactly the same conversation from the same branch; a tool result
//! without a `tool_call_id` answers the oldest call still unanswered.

use std::collections::VecDeque;
use std::io;

use serde::Serialize;

use crate::message::Message;
use crate::transcript::SessionTree;

/// A tool call as agents expect it (OpenAI shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumedCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: ResumedFunction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumedFunction {
    pub name: String,
    pub arguments: String,
}

/// One message of the rebuilt conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumedMessage {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ResumedCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The transcript entry this message comes from.
    pub entry_id: String,
}

/// The rebuilt conversation of a session.
#[derive(Debug, Clone, Serialize)]
pub struct Resumed {
    pub session: String,
    pub messages: Vec<ResumedMessage>,
    /// Entries of the branch that are not messages (lines that are not JSON).
    pub skipped_lines: usize,
}

/// Rebuilds the active branch of `tree`.
pub fn rebuild(tree: &SessionTree) -> io::Result<Resumed> {
    let mut fetch = tree.fetcher();
    let mut messages = Vec::new();
    let mut skipped = 0;
    let mut open_calls: VecDeque<(String, String)> = VecDeque::new();
    for i in tree.active_branch() {
        let e = &tree.entries[i];
        let msg = Message::from_line(&fetch.fetch(e.at)?);
        if msg.fault.is_some() {
            skipped += 1;
            continue;
        }
        let mut out = ResumedMessage {
            role: msg.role.clone(),
            content: msg.text.clone(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            entry_id: e.id.clone(),
        };
        for (n, c) in msg.tool_calls.iter().enumerate() {
            let id = c.id.clone().unwrap_or_else(|| format!("call_{}_{n}", e.id));
            open_calls.push_back((id.clone(), c.name.clone()));
            out.tool_calls.push(ResumedCall {
                id,
                kind: "function",
                function: ResumedFunction {
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                },
            });
        }
        if msg.role == "tool" {
            let answered = match &msg.tool_call_id {
                Some(id) => {
                    open_calls.retain(|(c, _)| c != id);
                    Some(id.clone())
                }
                None => open_calls.pop_front().map(|(id, _)| id),
            };
            out.tool_call_id = Some(answered.unwrap_or_else(|| format!("call_{}_result", e.id)));
            out.name = msg.tool_name.clone();
        }
        messages.push(out);
    }
    Ok(Resumed {
        session: tree.id.to_string(),
        messages,
        skipped_lines: skipped,
    })
}
