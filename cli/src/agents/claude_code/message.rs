//! Claude Code's lines as messages: `user` / `assistant` / `system` lines
//! with a `message` of content blocks (text, thinking, tool_use,
//! tool_result), `summary` lines as titles, the rest (file-history
//! snapshots, attachments, queue operations) no message.
//!
//! A thinking block's `signature` and a `redacted_thinking` block's `data`
//! are encrypted for the model alone: they are never read into a message.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;

use crate::message::outline::{
    LineOutline, Obj, Outline, agent_line, is_null, is_object, is_str, is_true, joined_nonempty,
    output_nonempty, raw_fields, str_nonempty, string, time,
};
use crate::message::{Message, Reading, ToolCall, compact, output_text, str_field};
use crate::transcript::entry_id::ExplicitIds;
use crate::transcript::line::Role;

/// Every key of a line [`read`] looks at.
pub(super) const KEYS: &[&str] = &[
    "type",
    "timestamp",
    "summary",
    "message",
    "isCompactSummary",
    "isMeta",
    "parentUuid",
    "logicalParentUuid",
    "subtype",
    "compactMetadata",
    "content",
];

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

agent_line! {
    /// The fields of a line [`outline`] reads: those [`read`] looks at, and
    /// those of eVi's head.
    struct Line<'a> {
        uuid, parent_uuid = "parentUuid", logical_parent_uuid = "logicalParentUuid",
        timestamp, cwd, subtype, content, summary,
        is_compact_summary = "isCompactSummary", is_meta = "isMeta";
        /// `null` reads as absent; any other value than an object makes the
        /// line one to read whole.
        #[serde(borrow, default)]
        message: Option<Obj<MessageFields<'a>>>,
    }
}

#[derive(Deserialize)]
struct MessageFields<'a> {
    #[serde(borrow, default)]
    content: Content<'a>,
}

/// A message's `content` as [`blocks`] reads it, decoding no text.
#[derive(Default)]
enum Content<'a> {
    /// Neither a string nor an array: no text.
    #[default]
    Nothing,
    /// A string: whether it is non-empty.
    Text(bool),
    Blocks(Vec<Block<'a>>),
}

raw_fields! {
    /// A content block: the fields [`blocks`] reads. A block that is not an
    /// object makes the line one to read whole.
    struct Block<'a> { kind = "type", text, thinking, name, content, is_error }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("message content")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(!s.is_empty()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(Obj(b)) = seq.next_element::<Obj<Block<'a>>>()? {
                    blocks.push(b);
                }
                Ok(Content::Blocks(blocks))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Content::Nothing)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Content::Nothing)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Content::Nothing)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Content::Nothing)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Content::Nothing)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Content::Nothing)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// What [`read`] makes of a line, without making the message: `None` for
/// a line it cannot vouch for (see [`crate::message::outline`]).
pub(super) fn outline(raw: &[u8]) -> Option<LineOutline> {
    if !is_object(raw) {
        return None;
    }
    let mut l: Line<'_> = serde_json::from_slice(raw).ok()?;
    let head = l.head();
    if head.wrapped() {
        return None;
    }
    // `uuid_ids`: a string `uuid` is the id, `parentUuid` the parent.
    let ids = match l.uuid.and_then(string) {
        Some(id) => ExplicitIds {
            id: Some(id.into_owned()),
            parent: Some(l.parent_uuid.and_then(string).map(Into::into)),
        },
        None => head.ids(),
    };
    let project = l
        .cwd
        .and_then(string)
        .filter(|c| c.starts_with('/'))
        .map(|c| Some(c.into_owned()));
    let outline = match l.kind.and_then(string).as_deref() {
        Some("summary") if l.summary.and_then(string).is_some() => Outline::Title,
        Some(role @ ("user" | "assistant")) => {
            let content = l.message.take().map(|Obj(m)| m.content).unwrap_or_default();
            message_outline(&l, role, content)?
        }
        Some("system") => {
            let said = is_str(l.subtype, "compact_boundary")
                || l.content.and_then(str_nonempty).unwrap_or(false);
            message_outline(&l, "system", Content::Text(said))?
        }
        _ => Outline::Hidden,
    };
    Some(LineOutline {
        ids,
        outline,
        project,
    })
}

/// The rest of [`read`] for a line of `role` whose content is `content`.
fn message_outline(l: &Line<'_>, role: &str, content: Content<'_>) -> Option<Outline> {
    let mut role = role;
    let said = match content {
        Content::Nothing => false,
        Content::Text(nonempty) => nonempty,
        Content::Blocks(blocks) => {
            let mut pieces = Vec::new();
            let mut more = false;
            for b in &blocks {
                match b.kind.and_then(string).as_deref() {
                    Some("text") => pieces.extend(b.text.and_then(str_nonempty)),
                    Some("thinking") => more |= b.thinking.and_then(str_nonempty).is_some(),
                    Some("tool_use" | "server_tool_use") => {
                        more |= b.name.and_then(str_nonempty).is_some()
                    }
                    Some("tool_result") => {
                        role = "tool";
                        pieces.push(output_nonempty(b.content)? || is_true(b.is_error));
                    }
                    Some("image") => pieces.push(true),
                    _ => {}
                }
            }
            more || joined_nonempty(pieces)
        }
    };
    let said = if is_true(l.is_compact_summary) {
        role = "system";
        true
    } else {
        if is_true(l.is_meta) && role == "user" {
            role = "system";
        }
        said
    };
    if !said {
        return Some(Outline::Hidden);
    }
    Some(Outline::Message {
        role: Role::of(role),
        ts: time(l.timestamp),
        fault: None,
        shown_parent: is_null(l.parent_uuid)
            .then(|| l.logical_parent_uuid.and_then(string).map(Into::into))
            .flatten(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Reading;

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
