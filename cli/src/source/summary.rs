//! One line of `evi sessions list` for another agent's session, read from
//! its file: the active branch (root to the newest leaf) counted as eVi's
//! is, the first thing the user asked, the project.

use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::ControlFlow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::paths::PathMap;
use super::{Agent, AgentFile};
use crate::transcript::entry_id::IdChain;
use crate::transcript::lines::walk_file;
use crate::transcript::summary::SessionSummary;

/// The fields of a line a summary reads, left as raw JSON: a line is
/// scanned once, and only what a row shows is decoded (the first prompt,
/// the times); tool outputs and message bodies are skipped over, never
/// built into values.
#[derive(Default, Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    timestamp: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cwd: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uuid: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "parentUuid")]
    parent_uuid: Option<&'a RawValue>,
}

/// A Codex payload's `type` and `role`.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
}

/// Whether `v` is the JSON string `s` (as agents write these: no escapes).
fn is(v: Option<&RawValue>, s: &str) -> bool {
    v.is_some_and(|v| {
        let t = v.get();
        t.len() == s.len() + 2 && t.starts_with('"') && t.ends_with('"') && &t[1..t.len() - 1] == s
    })
}

fn text(v: Option<&RawValue>) -> Option<String> {
    serde_json::from_str(v?.get()).ok()
}

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
        // One scan of the line for what a row needs, ids included (from the
        // line as every device agrees on it: the file's own bytes unless a
        // path was rewritten).
        let object = raw.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        let parsed = if object {
            serde_json::from_slice::<Fields<'_>>(raw).ok()
        } else {
            None
        };
        // Claude Code's tree is its `uuid` lines; the others (snapshots,
        // summaries) are no branch of the conversation.
        let (ids, in_tree) = match agent {
            Agent::ClaudeCode => {
                let own = match (&parsed, &canon) {
                    (Some(f), std::borrow::Cow::Borrowed(_)) => {
                        super::claude_code::ids_of(f.uuid, f.parent_uuid)
                    }
                    _ => super::claude_code::uuid_ids(&canon),
                };
                match own {
                    Some(ids) => (ids, true),
                    None => (crate::transcript::line::parse_head(&canon).ids, false),
                }
            }
            a => (a.explicit_ids(&canon), true),
        };
        let placed = chain.place(&canon, ids);
        let f = match parsed {
            Some(f) => f,
            // Valid JSON that is not an object is no fault, only empty.
            None if serde_json::from_slice::<serde::de::IgnoredAny>(raw).is_ok() => {
                Fields::default()
            }
            None => {
                invalid += 1;
                return ControlFlow::Continue(());
            }
        };
        let payload = match agent {
            Agent::Codex => f
                .payload
                .and_then(|p| serde_json::from_str::<Payload<'_>>(p.get()).ok()),
            _ => None,
        };
        if in_tree {
            let message = match agent {
                Agent::ClaudeCode => is(f.kind, "user") || is(f.kind, "assistant"),
                _ => {
                    is(f.kind, "response_item")
                        && payload.as_ref().is_some_and(|p| is(p.kind, "message"))
                }
            };
            if message {
                messages_ids.insert(placed.id.clone());
            }
            parents.entry(placed.id.clone()).or_insert(placed.parent);
            order.push(placed.id);
        }
        if let Some(ts) = text(f.timestamp) {
            if start.is_none() {
                start = Some(ts.clone());
            }
            end = Some(ts);
        }
        match agent {
            Agent::ClaudeCode => {
                if project.is_none() {
                    project = text(f.cwd);
                }
                if first.is_none() && is(f.kind, "user") {
                    first = f
                        .message
                        .and_then(|m| serde_json::from_str::<Value>(m.get()).ok())
                        .and_then(|m| claude_text(&m["content"]));
                }
            }
            _ => {
                // What `codex::meta` and `first_user_message` look at.
                let p = payload.as_ref();
                let wanted = is(f.kind, "session_meta")
                    || (is(f.kind, "event_msg") && p.is_some_and(|p| is(p.kind, "user_message")))
                    || (is(f.kind, "response_item")
                        && p.is_some_and(|p| is(p.kind, "message") && is(p.role, "user")));
                if wanted {
                    codex_lines.push(raw.to_vec());
                }
            }
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

/// The session files (not subagent transcripts) of the agents turned on in
/// `config` that `keep` keeps.
fn files(config: &crate::config::Config, keep: impl Fn(&AgentFile) -> bool) -> Vec<AgentFile> {
    super::enabled(config)
        .iter()
        .flat_map(|s| s.sessions())
        .filter(|f| f.stream.sub.is_none() && keep(f))
        .collect()
}

/// Reads `files` with the paths of `home`'s device.
struct Reader {
    map: PathMap,
    projects: super::project::Projects,
}

impl Reader {
    fn new(config: &crate::config::Config, home: &crate::home::EviHome) -> Self {
        Self {
            map: PathMap::new(&config.paths.map),
            projects: super::project::Projects::load(&home.sync_dir()),
        }
    }

    fn summarize(&self, f: &AgentFile) -> io::Result<SessionSummary> {
        summarize(f, &self.projects.map_for(&self.map, &f.stream))
    }
}

/// Every session of the agents turned on in `config`, `--agent` aside,
/// each read with the paths of `home`'s device.
pub fn all(
    config: &crate::config::Config,
    home: &crate::home::EviHome,
) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    by_prefix(config, home, "")
}

/// The sessions whose id starts with `prefix`, summarized (only those:
/// the others are not opened).
pub fn by_prefix(
    config: &crate::config::Config,
    home: &crate::home::EviHome,
    prefix: &str,
) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    let r = Reader::new(config, home);
    files(config, |f| f.stream.session.as_str().starts_with(prefix))
        .into_iter()
        .map(|f| {
            let s = r.summarize(&f);
            (f, s)
        })
        .collect()
}

/// The newest sessions (by their last time) of `agent`, or of every agent
/// turned on, that `keep` keeps: at least `limit` of them when there are,
/// newest first. An agent only appends, so a file's last line is no newer
/// than its modification time: files are read newest first by that time,
/// and reading stops once `limit` sessions are kept that are all newer
/// than the next file was modified, so a list reads the few sessions it
/// shows and not the whole folder.
pub fn recent(
    config: &crate::config::Config,
    home: &crate::home::EviHome,
    agent: Option<super::Agent>,
    limit: usize,
    keep: impl Fn(&SessionSummary) -> bool,
) -> Vec<(AgentFile, io::Result<SessionSummary>)> {
    let r = Reader::new(config, home);
    let mut by_time: Vec<(Option<std::time::SystemTime>, AgentFile)> =
        files(config, |f| agent.is_none_or(|a| a == f.stream.agent))
            .into_iter()
            .map(|f| {
                (
                    std::fs::metadata(&f.path).and_then(|m| m.modified()).ok(),
                    f,
                )
            })
            .collect();
    by_time.sort_by_key(|f| std::cmp::Reverse(f.0));
    let mut out: Vec<(AgentFile, io::Result<SessionSummary>)> = Vec::new();
    // The last times of the kept sessions, newest first.
    let mut ends: Vec<i64> = Vec::new();
    for (modified, f) in by_time {
        if ends.len() >= limit
            && let Some(m) = modified
        {
            let m = chrono::DateTime::<chrono::Utc>::from(m).timestamp_millis();
            // A second of slack for file times coarser than the lines'.
            if m + 1000 < ends[limit - 1] {
                break;
            }
        }
        let s = r.summarize(&f);
        match &s {
            Ok(sum) if !keep(sum) => continue,
            Ok(sum) => {
                let end = sum
                    .end
                    .as_deref()
                    .and_then(crate::transcript::line::parse_ts)
                    .unwrap_or(i64::MIN);
                let at = ends.partition_point(|&e| e >= end);
                ends.insert(at, end);
            }
            Err(_) => {}
        }
        out.push((f, s));
    }
    out
}
