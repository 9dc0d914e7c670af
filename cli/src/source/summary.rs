//! One line of `evi sessions list` for another agent's session, read from
//! its file: the active branch (root to the newest leaf) counted as eVi's
//! is, the first thing the user asked, the project.

use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::ControlFlow;

use serde_json::Value;

use super::paths::PathMap;
use super::{Agent, AgentFile};
use crate::transcript::entry_id::IdChain;
use crate::transcript::lines::walk_file;
use crate::transcript::summary::SessionSummary;

/// Summarises `file` (read as this device holds it).
pub fn summarize(file: &AgentFile, map: &PathMap) -> io::Result<SessionSummary> {
    let agent = file.stream.agent;
    let mut chain = IdChain::default();
    let mut parents: HashMap<String, Option<String>> = HashMap::new();
    let mut order = Vec::new();
    let (mut start, mut end, mut first, mut project) = (None, None, None, None);
    let mut invalid = 0;
    let mut messages_ids: HashSet<String> = HashSet::new();
    let mut codex_lines = Vec::new();
    walk_file(&file.path, 0, |_, raw| {
        let canon = agent.canonical(raw, map);
        let ids = agent.explicit_ids(&canon);
        // Claude Code's tree is its `uuid` lines; the others (snapshots,
        // summaries) are no branch of the conversation.
        let in_tree = agent != Agent::ClaudeCode || super::claude_code::uuid_ids(&canon).is_some();
        let placed = chain.place(&canon, ids);
        let Ok(v) = serde_json::from_slice::<Value>(raw) else {
            invalid += 1;
            return ControlFlow::Continue(());
        };
        if in_tree {
            let p = &v["payload"];
            let message = match agent {
                Agent::ClaudeCode => v["type"] == "user" || v["type"] == "assistant",
                _ => v["type"] == "response_item" && p["type"] == "message",
            };
            if message {
                messages_ids.insert(placed.id.clone());
            }
            parents.entry(placed.id.clone()).or_insert(placed.parent);
            order.push(placed.id);
        }
        if let Some(ts) = v["timestamp"].as_str() {
            start.get_or_insert_with(|| ts.to_owned());
            end = Some(ts.to_owned());
        }
        match agent {
            Agent::ClaudeCode => {
                if project.is_none() {
                    project = v["cwd"].as_str().map(str::to_owned);
                }
                if first.is_none() && v["type"] == "user" {
                    first = claude_text(&v["message"]["content"]);
                }
            }
            _ => codex_lines.push(raw.to_vec()),
        }
        ControlFlow::Continue(())
    })?;
    if agent == Agent::Codex {
        let lines = codex_lines.iter().map(Vec::as_slice);
        first = super::codex::first_user_message(lines.clone());
        project = super::codex::meta(lines)
            .and_then(|m| m.cwd)
            .map(|c| map.local(&c));
    }
    let referenced: HashSet<&str> = parents.values().flatten().map(String::as_str).collect();
    let leaves: Vec<&String> = order
        .iter()
        .filter(|id| !referenced.contains(id.as_str()))
        .collect();
    // The active branch: root to the newest leaf.
    let mut messages = 0;
    let mut seen = HashSet::new();
    let mut at = leaves.last().map(|s| s.as_str());
    while let Some(id) = at.filter(|id| seen.insert(*id)) {
        messages += usize::from(messages_ids.contains(id));
        at = parents.get(id).and_then(|p| p.as_deref());
    }
    let id = file.stream.to_string();
    let session = file.stream.session.to_string();
    Ok(SessionSummary {
        short_id: session.chars().take(8).collect(),
        id: match &file.stream.sub {
            None => session,
            Some(_) => id,
        },
        start: start
            .and_then(|s| crate::transcript::line::parse_ts(&s))
            .and_then(crate::transcript::summary::rfc3339),
        end: end
            .and_then(|s| crate::transcript::line::parse_ts(&s))
            .and_then(crate::transcript::summary::rfc3339),
        messages,
        branches: leaves.len().max(1),
        first_message: first,
        title: None,
        days: Vec::new(),
        invalid_lines: invalid,
        git_state: None,
        agent,
        project,
    })
}

/// The text of a Claude Code user message: a string, or its first `text`
/// block (a tool result is not something the user asked).
fn claude_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => blocks
            .iter()
            .find(|b| b["type"] == "text")
            .and_then(|b| b["text"].as_str())
            .map(str::to_owned),
        _ => None,
    }
}

/// Every session of the agents turned on in `config`, `--agent` aside.
pub fn all(config: &crate::config::Config) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    let map = PathMap::new(&config.paths.map);
    super::enabled(config)
        .iter()
        .flat_map(|s| s.sessions())
        .filter(|f| f.stream.sub.is_none())
        .map(|f| {
            let s = summarize(&f, &map);
            (f, s)
        })
        .collect()
}
