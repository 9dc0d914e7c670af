//! Gemini CLI: `$GEMINI_CLI_HOME/.gemini` (default `~/.gemini`).
//!
//! A session is `tmp/<slug>/chats/session-<YYYY-MM-DDTHH-MM>-<id8>.jsonl`
//! (see [`layout`]): an append-only log whose first line is the session's
//! metadata (`sessionId`, `projectHash`, `startTime`, …), then messages
//! (objects with a string `id`), `$set` records that update the metadata
//! (or, with `messages`, replace the whole history) and `$rewindTo`
//! records. Gemini reads it as a state: a later message line with the same
//! `id` replaces the earlier one.
//!
//! # Entries
//!
//! A line is an entry, every one of them: its id is derived from its bytes
//! and the line before it (the chain of `DESIGN.md`), never from Gemini's
//! message `id`, which repeats when a message is updated in place. So two
//! versions of one message are two entries, and merge by id keeps both.
//! A line pull must write with ids of its own (a branch another device
//! added after an earlier line) carries them as `eviId` and `eviParentId`
//! in front ([`with_ids`]): Gemini takes a line with a string `id` for a
//! message, so the `id`/`parentId` eVi gives other agents' lines would
//! read as one. A line that is not a JSON object goes as
//! `{"eviId":…,"eviParentId":…,"eviRawLine":"<base64>"}`, which Gemini
//! passes over (no `id`, no `$set`, no `sessionId`).
//!
//! # Paths
//!
//! The lines name no path Gemini resumes by: only a SHA-256 of the project
//! folder (`projectHash`), which Gemini does not check when it resumes, so
//! the file is carried byte for byte. Where the session's project is travels
//! in its project entry (`dir`, see [`crate::source::project`]), and pull
//! writes the file in the folder Gemini itself uses for that project here
//! ([`layout::slug_for`]).

pub mod layout;
pub mod message;

use std::path::{Path, PathBuf};

use base64::Engine as _;

use super::{AgentKind, Landing};
use crate::message::Reading;
use crate::source::AgentFile;
use crate::sync::Entry;
use crate::transcript::entry_id::ExplicitIds;

pub struct Gemini;

impl AgentKind for Gemini {
    fn title(&self) -> &'static str {
        "Gemini CLI"
    }

    /// `$GEMINI_CLI_HOME` names a home: the folder is `.gemini` in it.
    fn default_folder(&self) -> Option<PathBuf> {
        let home = std::env::var_os("GEMINI_CLI_HOME")
            .filter(|v| !v.is_empty())
            .or_else(|| std::env::var_os("HOME"))?;
        Some(Path::new(&home).join(".gemini"))
    }

    fn sessions(&self, root: &Path) -> Vec<AgentFile> {
        layout::sessions(root)
    }

    fn sessions_dir(&self, root: &Path) -> PathBuf {
        root.join("tmp")
    }

    fn target(&self, at: &Landing<'_>) -> Option<PathBuf> {
        layout::target(at.root, at.stream, at.lines, at.map, at.dir)
    }

    fn project_of_file(&self, path: &Path) -> Option<String> {
        layout::project_of_file(path)
    }

    fn explicit_ids(&self, raw: &[u8]) -> ExplicitIds {
        explicit_ids(raw)
    }

    fn with_ids(&self, e: &Entry, _has_id: bool, _is_object: bool) -> Vec<u8> {
        with_ids(e)
    }

    fn read_line(&self, raw: &[u8]) -> Option<Reading> {
        Some(message::read(raw))
    }

    /// `gemini --resume <id>`, run in its project.
    fn resume_program(&self) -> &'static [&'static str] {
        &["gemini", "--resume"]
    }
}

/// The keys pull's ids go under, first in the object.
const ID_HEAD: &[u8] = b"{\"eviId\":";
const PARENT_KEY: &[u8] = b",\"eviParentId\":";

/// The ids a Gemini line names: only those pull put in front of it
/// ([`with_ids`]); every other line's id is derived.
fn explicit_ids(raw: &[u8]) -> ExplicitIds {
    read_ids(raw).unwrap_or_default()
}

fn read_ids(raw: &[u8]) -> Option<ExplicitIds> {
    let rest = raw.strip_prefix(ID_HEAD)?;
    let (id, n) = one_value::<String>(rest)?;
    let rest = rest[n..].strip_prefix(PARENT_KEY)?;
    let (parent, n) = one_value::<Option<String>>(rest)?;
    matches!(rest.get(n), Some(b',' | b'}')).then_some(ExplicitIds {
        id: Some(id),
        parent: Some(parent),
    })
}

/// The JSON value at the start of `raw`, and how many bytes it took.
fn one_value<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Option<(T, usize)> {
    let mut it = serde_json::Deserializer::from_slice(raw).into_iter::<T>();
    let v = it.next()?.ok()?;
    Some((v, it.byte_offset()))
}

/// `e`'s line as pull writes it when it would not read back with its id
/// and parent: `eviId` and `eviParentId` in front (see the module's
/// promises), with a newline.
fn with_ids(e: &Entry) -> Vec<u8> {
    let id = serde_json::to_string(&e.id).expect("a string");
    let parent = serde_json::to_string(&e.parent).expect("string or null");
    let mut out = Vec::with_capacity(e.line.len() + id.len() + parent.len() + 32);
    out.extend_from_slice(ID_HEAD);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(PARENT_KEY);
    out.extend_from_slice(parent.as_bytes());
    let object = e.line.first() == Some(&b'{')
        && serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&e.line).is_ok();
    if object {
        let rest = &e.line[1..];
        if rest.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'}') {
            out.push(b',');
        }
        out.extend_from_slice(rest);
    } else {
        let raw = base64::engine::general_purpose::STANDARD.encode(&e.line);
        out.extend_from_slice(format!(",\"eviRawLine\":\"{raw}\"}}").as_bytes());
    }
    out.push(b'\n');
    out
}

/// The original bytes of a line [`with_ids`] wrapped (it was no JSON
/// object).
pub fn raw_line(v: &serde_json::Value) -> Option<Vec<u8>> {
    let b64 = v.get("eviRawLine")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, parent: Option<&str>, line: &[u8]) -> Entry {
        Entry {
            id: id.to_owned(),
            parent: parent.map(str::to_owned),
            day: crate::source::agent_day(),
            line: line.to_vec(),
            line_blob: None,
        }
    }

    #[test]
    fn own_lines_have_derived_ids_even_with_a_message_id() {
        let own = br#"{"id":"29f2ef84","timestamp":"t","type":"gemini","content":"x"}"#;
        assert_eq!(explicit_ids(own), ExplicitIds::default());
        assert_eq!(
            explicit_ids(br#"{"$set":{"lastUpdated":"t"}}"#),
            ExplicitIds::default()
        );
    }

    #[test]
    fn pulls_ids_read_back_and_are_no_message_id() {
        for (line, parent) in [
            (
                &br#"{"id":"m1","type":"user","content":[{"text":"hi"}]}"#[..],
                Some("p"),
            ),
            (br#"{"$set":{"lastUpdated":"t"}}"#, None),
            (br#"{}"#, Some("p")),
            (b"not json", Some("p")),
            (b"  {\"id\":\"m2\"}", None),
        ] {
            let e = entry("e1", parent, line);
            let out = with_ids(&e);
            let body = &out[..out.len() - 1];
            let ids = explicit_ids(body);
            assert_eq!(ids.id.as_deref(), Some("e1"));
            assert_eq!(ids.parent, Some(parent.map(str::to_owned)));
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            let original: Option<serde_json::Value> =
                (line[0] == b'{').then(|| serde_json::from_slice(line).unwrap());
            match original {
                Some(o) => assert_eq!(v.get("id"), o.get("id"), "Gemini's message id kept"),
                None => {
                    assert!(v.get("id").is_none(), "no message id Gemini would read");
                    assert_eq!(raw_line(&v).unwrap(), line);
                }
            }
        }
    }
}
