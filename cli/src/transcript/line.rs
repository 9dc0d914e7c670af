//! What a reader needs from one raw line, without parsing the whole message:
//! its explicit ids, timestamp and role. A line that is not a JSON object (or
//! not UTF-8) is still an entry; it is only flagged.

use base64::Engine as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::entry_id::ExplicitIds;

/// The speaker of a transcript line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    Tool,
    System,
    /// A JSON object with no (or an unknown) role.
    Other,
    /// Not a JSON object at all.
    Invalid,
}

impl Role {
    /// The role a message names (see [`crate::message::Message::role`]).
    pub fn of(role: &str) -> Self {
        match role {
            "user" => Self::User,
            "assistant" => Self::Assistant,
            "tool" => Self::Tool,
            "system" => Self::System,
            "invalid" => Self::Invalid,
            _ => Self::Other,
        }
    }
}

/// How a line failed to be a JSON object, for readers to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineFault {
    NotUtf8,
    NotJson,
}

/// The parts of a line the tree needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineHead {
    pub ids: ExplicitIds,
    /// Milliseconds since the epoch, from an RFC 3339 `ts`.
    pub ts: Option<i64>,
    pub role: Role,
    pub fault: Option<LineFault>,
    /// The line is pull's wrapper for a non-object branch line.
    pub wrapped: bool,
    /// The line is a session title (see [`super::title`]), not a message.
    pub title: bool,
    /// The line records a checkout at a handoff (see [`super::git_state`]).
    pub git_state: bool,
}

/// A field that is present (possibly `null`), as opposed to absent.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "parentId", deserialize_with = "present")]
    parent_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    role: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "eviRawLine", deserialize_with = "present")]
    raw_line: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "type", deserialize_with = "present")]
    kind: Option<&'a RawValue>,
}

fn as_string(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

/// Parses an RFC 3339 timestamp into epoch milliseconds.
pub fn parse_ts(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn is_object(raw: &[u8]) -> bool {
    raw.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// Reads the head of a line (`raw` without its `\n`).
pub fn parse_head(raw: &[u8]) -> LineHead {
    let invalid = |fault| LineHead {
        ids: ExplicitIds::default(),
        ts: None,
        role: Role::Invalid,
        fault: Some(fault),
        wrapped: false,
        title: false,
        git_state: false,
    };
    let head: Head<'_> = match is_object(raw).then(|| serde_json::from_slice(raw)) {
        Some(Ok(h)) => h,
        _ if std::str::from_utf8(raw).is_err() => return invalid(LineFault::NotUtf8),
        _ => return invalid(LineFault::NotJson),
    };
    let id = head.id.and_then(as_string);
    let parent = head.parent_id.map(|p| {
        serde_json::from_str::<Option<String>>(p.get())
            .ok()
            .flatten()
    });
    let wrapped = id.is_some() && head.raw_line.and_then(as_string).is_some();
    let role = match head.role.and_then(as_string).as_deref() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some("system") => Role::System,
        _ if wrapped => Role::Invalid,
        _ => Role::Other,
    };
    let kind = head
        .kind
        .and_then(as_string)
        .filter(|_| role == Role::System);
    let title = kind.as_deref() == Some(super::title::TITLE_TYPE);
    let git_state = kind.as_deref() == Some(super::git_state::GIT_STATE_TYPE);
    LineHead {
        ids: ExplicitIds { id, parent },
        ts: head.ts.and_then(as_string).as_deref().and_then(parse_ts),
        role,
        fault: wrapped.then_some(LineFault::NotJson),
        wrapped,
        title,
        git_state,
    }
}

/// The explicit ids of a line, as [`parse_head`] reads them, without
/// parsing the line when it cannot hold them: a line in which neither key
/// is written out and no letter is escaped (so neither key can be spelled
/// another way) has none. Most lines are so; push reads every line's ids
/// on the one thread all lines go through, and a JSON pass over each was a
/// tenth of that thread's time.
pub fn explicit_ids(raw: &[u8]) -> ExplicitIds {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Built once: building a searcher per line and needle was a percent of
    // a push's CPU.
    static ID: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"id\""));
    static PARENT: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"parentId\""));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u00"));
    // `\u004.`, `\u006.`, `\u007.`: an escaped ASCII letter (`I`, `a`-`z`).
    let escaped_letter = || {
        ESCAPE
            .find_iter(raw)
            .any(|i| matches!(raw.get(i + 4), Some(b'4' | b'6' | b'7')))
    };
    if ID.find(raw).is_some() || PARENT.find(raw).is_some() || escaped_letter() {
        parse_head(raw).ids
    } else {
        ExplicitIds::default()
    }
}

/// The bytes a reader should treat as the line's content: for pull's
/// `eviRawLine` wrapper, the original line it carries.
pub fn original_bytes(raw: &[u8]) -> Option<Vec<u8>> {
    #[derive(Deserialize)]
    struct Wrapper {
        #[serde(rename = "eviRawLine")]
        raw_line: String,
    }
    let w: Wrapper = serde_json::from_slice(raw).ok()?;
    base64::engine::general_purpose::STANDARD
        .decode(w.raw_line)
        .ok()
}

/// A blank line (only ASCII white space) is not an entry.
pub fn is_blank(raw: &[u8]) -> bool {
    raw.iter().all(|b| b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_without_a_parse_are_those_of_a_parse() {
        let lines: &[&[u8]] = &[
            br#"{"role":"user","content":"hi"}"#,
            br#"{"id":"a1","parentId":null,"role":"user"}"#,
            br#"{"id":"a1","parentId":"p0","content":"x"}"#,
            br#"{"role":"assistant","tool_calls":[{"id":"call_1"}]}"#,
            br#"{"\u0069d":"esc","role":"user"}"#,
            br#"{"i\u0064":"esc","parentI\u0064":"p"}"#,
            br#"{"content":"a \\u0069 b \n c"}"#,
            br#"{"content":"\u00e9t\u00e9"}"#,
            br#"not json "id" at all"#,
            b"{\"id\":\"x\xff\"}",
            br#"[1,2]"#,
            br#"{"id":7}"#,
        ];
        for l in lines {
            let got = explicit_ids(l);
            assert_eq!(got, parse_head(l).ids, "{}", String::from_utf8_lossy(l));
        }
        let escaped = explicit_ids(br#"{"\u0069d":"esc"}"#);
        assert_eq!(escaped.id.as_deref(), Some("esc"));
    }

    #[test]
    fn parent_null_is_present() {
        let h = parse_head(br#"{"id":"a","parentId":null,"role":"user"}"#);
        assert_eq!(h.ids.id.as_deref(), Some("a"));
        assert_eq!(h.ids.parent, Some(None));
        assert_eq!(h.role, Role::User);
    }

    #[test]
    fn absent_parent_is_none() {
        let h = parse_head(br#"{"role":"assistant","ts":"2026-06-08T21:14:01Z"}"#);
        assert_eq!(h.ids.parent, None);
        assert_eq!(h.ts, parse_ts("2026-06-08T21:14:01Z"));
    }

    #[test]
    fn non_objects_are_flagged() {
        assert_eq!(parse_head(b"[1,2]").fault, Some(LineFault::NotJson));
        assert_eq!(parse_head(b"\xff\xfe raw").fault, Some(LineFault::NotUtf8));
        assert_eq!(
            parse_head(br#"{"role":"user","content":"cut"#).fault,
            Some(LineFault::NotJson)
        );
    }

    #[test]
    fn wrapper_round_trips() {
        let raw = br#"{"id":"d00d","parentId":"p","eviRawLine":"bm90IGpzb24="}"#;
        assert!(parse_head(raw).wrapped);
        assert_eq!(original_bytes(raw).unwrap(), b"not json");
    }
}
