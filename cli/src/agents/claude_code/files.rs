//! Claude Code's files: `$CLAUDE_CONFIG_DIR` (default `~/.claude`).
//!
//! A session is `projects/<project folder>/<session id>.jsonl`, the folder
//! being the project's absolute path with every character outside
//! `[A-Za-z0-9]` replaced by `-` (which is how Claude Code finds a session
//! to resume from the directory it runs in). A subagent's transcript
//! `projects/<project folder>/<session id>/subagents/<stem>.jsonl` syncs as
//! a stream of its own, and lands beside its session's file. Lines carry
//! `uuid` and `parentUuid`: explicit ids; lines without (summaries,
//! file-history snapshots) take derived ids as eVi's do.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::source::paths::PathMap;
use crate::source::{Agent, AgentFile, StreamName};
use crate::transcript::entry_id::ExplicitIds;

/// The folder Claude Code keeps a project's sessions in.
pub fn project_folder(cwd: &str) -> String {
    cwd.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Every session (and subagent transcript) under `root/projects`.
pub fn sessions(root: &Path) -> Vec<AgentFile> {
    let projects = root.join("projects");
    let mut out = Vec::new();
    for e in crate::agents::files_below(&projects, 2..=4) {
        let Ok(rel) = e.path().strip_prefix(&projects) else {
            continue;
        };
        let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
        let stream = match parts[..] {
            [_, file] => file
                .strip_suffix(".jsonl")
                .and_then(|s| s.parse().ok())
                .map(|session| StreamName {
                    agent: Agent::ClaudeCode,
                    session,
                    sub: None,
                }),
            [_, session, "subagents", file] => {
                let sub = file.strip_suffix(".jsonl").and_then(|s| s.parse().ok());
                session
                    .parse()
                    .ok()
                    .zip(sub)
                    .map(|(session, sub)| StreamName {
                        agent: Agent::ClaudeCode,
                        session,
                        sub: Some(sub),
                    })
            }
            _ => None,
        };
        if let Some(stream) = stream {
            out.push(AgentFile {
                stream,
                path: e.into_path(),
            });
        }
    }
    out
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    uuid: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "parentUuid")]
    parent_uuid: Option<&'a RawValue>,
}

/// `uuid` / `parentUuid` of a Claude Code line, when it has a string `uuid`.
pub fn uuid_ids(raw: &[u8]) -> Option<ExplicitIds> {
    if raw.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let head: Head<'_> = serde_json::from_slice(raw).ok()?;
    ids_of(head.uuid, head.parent_uuid)
}

/// The ids a line's `uuid` and `parentUuid` values (raw JSON) give: an id
/// when `uuid` is a string, and the parent (`null`, absent or not a string:
/// a root).
pub fn ids_of(uuid: Option<&RawValue>, parent: Option<&RawValue>) -> Option<ExplicitIds> {
    let id = serde_json::from_str::<String>(uuid?.get()).ok()?;
    let parent = parent.and_then(|p| {
        serde_json::from_str::<Option<String>>(p.get())
            .ok()
            .flatten()
    });
    Some(ExplicitIds {
        id: Some(id),
        parent: Some(parent),
    })
}

/// The `cwd` of the first line that has one: the session's project.
pub fn cwd<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Option<String> {
    #[derive(Deserialize)]
    struct Cwd {
        cwd: Option<String>,
    }
    lines.into_iter().find_map(|l| {
        serde_json::from_slice::<Cwd>(l)
            .ok()
            .and_then(|c| c.cwd)
            .filter(|c| c.starts_with('/'))
    })
}

/// Where a pulled session lands: the folder of its project as mapped here.
/// A subagent transcript has no place of its own (its `cwd`s may name
/// another folder than its session's): it goes beside its session's file
/// (`source::apply`).
pub fn target(root: &Path, stream: &StreamName, lines: &[&[u8]], map: &PathMap) -> Option<PathBuf> {
    if stream.sub.is_some() {
        return None;
    }
    let project = map.local(&cwd(lines.iter().copied())?);
    let folder = root.join("projects").join(project_folder(&project));
    Some(folder.join(format!("{}.jsonl", stream.session)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::cwd::map_cwd;

    #[test]
    fn folder_and_ids() {
        assert_eq!(project_folder("/home/a/my_proj.x"), "-home-a-my-proj-x");
        let ids = uuid_ids(br#"{"parentUuid":null,"uuid":"u1","type":"user"}"#).unwrap();
        assert_eq!((ids.id.as_deref(), ids.parent), (Some("u1"), Some(None)));
        let ids = uuid_ids(br#"{"parentUuid":"u1","uuid":"u2"}"#).unwrap();
        assert_eq!(ids.parent, Some(Some("u1".into())));
        assert!(uuid_ids(br#"{"type":"summary","leafUuid":"u2"}"#).is_none());
    }

    #[test]
    fn cwd_rewrite_goes_both_ways() {
        let mut m = std::collections::BTreeMap::new();
        m.insert("/home/a/proj".to_owned(), "/srv/b/proj".to_owned());
        let map = PathMap::new(&m);
        let line = br#"{"cwd":"/home/a/proj/x","message":{"content":"say \"cwd\":\"/home/a/proj\""},"n":{"cwd":"/other"}}"#;
        let here = map_cwd(line, |p| map.local(p));
        assert_eq!(
            std::str::from_utf8(&here).unwrap(),
            r#"{"cwd":"/srv/b/proj/x","message":{"content":"say \"cwd\":\"/home/a/proj\""},"n":{"cwd":"/other"}}"#
        );
        assert_eq!(&map_cwd(&here, |p| map.original(p))[..], &line[..]);
        assert!(matches!(
            map_cwd(line, |p| p.to_owned()),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
