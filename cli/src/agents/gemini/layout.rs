//! Where Gemini CLI keeps a project's sessions, as Gemini 0.61 computes it.
//!
//! Chats are under `tmp/<slug>/chats/`; the slug of a project folder is the
//! one `projects.json` (`{"projects": {"<path>": "<slug>"}}`) gives it, else
//! the one whose `.project_root` marker (in `tmp/<slug>/` or
//! `history/<slug>/`) holds the path, else a new one: the folder's base name
//! in lower case, every character outside `[a-z0-9]` a `-`, runs of `-` one,
//! none at either end (`project` when nothing is left), then `-1`, `-2`, …
//! past the slugs `projects.json` names and those whose marker names
//! another folder. A new slug's marker is written here, as Gemini writes it
//! (the path, no newline); Gemini finds it by that marker and records it in
//! its `projects.json` itself (which eVi never writes).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::agents::Agent;
use crate::source::paths::PathMap;
use crate::source::{AgentFile, StreamName};

const MARKER: &str = ".project_root";

/// The session id on the first line of a session file (its metadata).
fn session_of_file(path: &Path) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut head)
        .ok()?;
    let first = head.split(|&b| b == b'\n').next()?;
    Meta::of_line(first).map(|m| m.session_id)
}

/// Every session file under `root/tmp/<slug>/chats/` (subagents' chats,
/// in folders below, are not synced). One file per session: when Gemini
/// resumes a session it first starts a file of the current minute for the
/// same id (its metadata and context, two lines) and then appends to the
/// session's own file, which is the earliest by name; that one is the
/// session's.
pub fn sessions(root: &Path) -> Vec<AgentFile> {
    let mut out: Vec<AgentFile> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let Ok(slugs) = sorted_dir(&root.join("tmp")) else {
        return out;
    };
    for slug in slugs {
        let Ok(files) = sorted_dir(&slug.join("chats")) else {
            continue;
        };
        for path in files {
            let named = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("session-") && n.ends_with(".jsonl"));
            if !named || !path.is_file() {
                continue;
            }
            let session: Option<evi_shared::SessionId> =
                session_of_file(&path).and_then(|s| s.parse().ok());
            let Some(session) = session else {
                continue;
            };
            // Names sort by start time: the first file of an id is its own.
            if seen.insert(session.clone()) {
                out.push(AgentFile {
                    stream: StreamName {
                        agent: Agent::Gemini,
                        session,
                        sub: None,
                    },
                    path,
                });
            }
        }
    }
    out
}

fn sorted_dir(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    v.sort();
    Ok(v)
}

/// What a session's metadata line says.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Meta {
    #[serde(rename = "sessionId")]
    pub session_id: String,
    #[serde(rename = "projectHash")]
    pub project_hash: String,
    #[serde(rename = "startTime", default)]
    pub start_time: Option<String>,
}

impl Meta {
    pub fn of_line(raw: &[u8]) -> Option<Self> {
        serde_json::from_slice(raw).ok()
    }
}

/// The project folder a session file belongs to, as it is here: its slug
/// folder's marker, else the path `projects.json` gives that slug.
pub fn project_of_file(path: &Path) -> Option<String> {
    let slug_dir = path.parent()?.parent()?;
    if let Ok(owner) = std::fs::read_to_string(slug_dir.join(MARKER)) {
        return Some(owner.trim().to_owned()).filter(|p| p.starts_with('/'));
    }
    let slug = slug_dir.file_name()?.to_str()?;
    let root = slug_dir.parent()?.parent()?;
    registry(root)
        .into_iter()
        .find(|(_, s)| s == slug)
        .map(|(p, _)| p)
}

/// `projects.json`'s pairs (path, slug); none when it cannot be read.
fn registry(root: &Path) -> Vec<(String, String)> {
    #[derive(serde::Deserialize)]
    struct Registry {
        projects: std::collections::BTreeMap<String, String>,
    }
    std::fs::read(root.join("projects.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Registry>(&b).ok())
        .map(|r| r.projects.into_iter().collect())
        .unwrap_or_default()
}

/// Gemini's slug of a folder's base name.
pub fn slugify(name: &str) -> String {
    let mut out = String::new();
    for c in name.to_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    let t = out.trim_matches('-');
    if t.is_empty() {
        "project".to_owned()
    } else {
        t.to_owned()
    }
}

fn valid_slug(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Who owns `slug` by its markers: `Ok(None)` when no marker is there.
fn owner(root: &Path, slug: &str) -> Result<Option<String>, ()> {
    let mut found = None;
    for base in ["tmp", "history"] {
        match std::fs::read_to_string(root.join(base).join(slug).join(MARKER)) {
            Ok(o) => match &found {
                Some(f) if *f != o.trim() => return Err(()),
                _ => found = Some(o.trim().to_owned()),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => return Err(()),
        }
    }
    Ok(found)
}

/// The slug Gemini uses for the project folder `project` under `root`, as
/// its start-up finds or makes it (see the module's doc); a new slug's
/// marker is written. `None` when it cannot be.
pub fn slug_for(root: &Path, project: &str) -> Option<String> {
    let registry = registry(root);
    if let Some((_, s)) = registry.iter().find(|(p, _)| p == project)
        && valid_slug(s)
        && owner(root, s).is_ok_and(|o| o.is_none_or(|o| o == project))
    {
        return Some(s.clone());
    }
    for base in ["tmp", "history"] {
        for dir in sorted_dir(&root.join(base)).unwrap_or_default() {
            let slug = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if valid_slug(slug)
                && std::fs::read_to_string(dir.join(MARKER)).is_ok_and(|o| o.trim() == project)
            {
                return Some(slug.to_owned());
            }
        }
    }
    let base = slugify(Path::new(project).file_name()?.to_str()?);
    for n in 0..10_000 {
        let slug = if n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        if registry.iter().any(|(_, s)| *s == slug) {
            continue;
        }
        match owner(root, &slug) {
            Ok(Some(o)) if o == project => return Some(slug),
            Ok(None) => {}
            _ => continue,
        }
        match claim(root, &slug, project) {
            Ok(true) => return Some(slug),
            Ok(false) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Writes `tmp/<slug>/.project_root` naming `project`, unless a marker is
/// there already (then: whether it names `project`).
fn claim(root: &Path, slug: &str, project: &str) -> io::Result<bool> {
    let dir = root.join("tmp").join(slug);
    crate::fsutil::create_dir_all_durable(&dir)?;
    let marker = dir.join(MARKER);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
    {
        Ok(mut f) => {
            f.write_all(project.as_bytes())?;
            f.sync_all()?;
            crate::fsutil::sync_dir(&dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(&marker)?.trim() == project)
        }
        Err(e) => Err(e),
    }
}

/// The file name Gemini gives a session it starts: the start time in UTC to
/// the minute and the id's first 8 characters.
pub fn file_name(meta: &Meta) -> Option<String> {
    let t = meta.start_time.as_deref()?.get(..16)?;
    let ok = t.bytes().enumerate().all(|(i, b)| {
        b.is_ascii_digit() || matches!((i, b), (4 | 7, b'-') | (10, b'T') | (13, b':'))
    });
    let short = meta.session_id.get(..8)?;
    (ok && short
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    .then(|| format!("session-{}-{short}.jsonl", t.replace(':', "-")))
}

/// Where a pulled session goes: `tmp/<slug>/chats/<name>` for its project
/// folder `dir` (from its project entry) as mapped here, the name from its
/// metadata line. `None` (the entries wait) until both are known.
pub fn target(
    root: &Path,
    stream: &StreamName,
    lines: &[&[u8]],
    map: &PathMap,
    dir: Option<&str>,
) -> Option<PathBuf> {
    let project = map.local(dir?);
    if !project.starts_with('/') {
        return None;
    }
    let meta = lines
        .iter()
        .find_map(|l| Meta::of_line(l))
        .filter(|m| m.session_id == stream.session.as_str())?;
    let name = file_name(&meta)?;
    let slug = slug_for(root, &project)?;
    Some(root.join("tmp").join(slug).join("chats").join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_as_gemini_makes_them() {
        assert_eq!(slugify("proj"), "proj");
        assert_eq!(slugify("My App_2.x"), "my-app-2-x");
        assert_eq!(slugify("--a--b--"), "a-b");
        assert_eq!(slugify("日本"), "project");
    }

    #[test]
    fn a_slug_is_found_or_claimed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::write(
            root.join("projects.json"),
            r#"{"projects":{"/a/proj":"proj","/x/other":"app"}}"#,
        )
        .unwrap();
        assert_eq!(slug_for(root, "/a/proj").unwrap(), "proj");
        // `app` is named in projects.json: the next one.
        assert_eq!(slug_for(root, "/b/app").unwrap(), "app-1");
        assert_eq!(
            std::fs::read_to_string(root.join("tmp/app-1/.project_root")).unwrap(),
            "/b/app"
        );
        assert_eq!(slug_for(root, "/b/app").unwrap(), "app-1", "by its marker");
        // A marker of another folder is skipped.
        std::fs::create_dir_all(root.join("history/web")).unwrap();
        std::fs::write(root.join("history/web/.project_root"), "/z/web").unwrap();
        assert_eq!(slug_for(root, "/c/web").unwrap(), "web-1");
    }

    #[test]
    fn names_as_gemini_names_them() {
        let m = Meta::of_line(br#"{"sessionId":"f6ba12cb-3ae0-4220-b208-3036bf9a1ff0","projectHash":"d","startTime":"2026-12-06T23:36:22.085Z","kind":"main"}"#).unwrap();
        assert_eq!(
            file_name(&m).unwrap(),
            "session-2026-12-06T23-36-f6ba12cb.jsonl"
        );
        let bad = Meta::of_line(
            br#"{"sessionId":"f6ba12cb","projectHash":"d","startTime":"../../../../x/y/z"}"#,
        )
        .unwrap();
        assert!(file_name(&bad).is_none());
    }
}
