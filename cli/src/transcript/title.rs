//! A session's title, kept as an entry of the session itself.
//!
//! `evi sessions title` appends one line to the session:
//!
//! ```text
//! {"id":"<32 hex, random>","parentId":"<active leaf, or null>","role":"system","type":"title","content":"Fix the flaky sync test","ts":"2026-06-08T21:40:11.123Z"}
//! ```
//!
//! Why that shape: it is an entry like any other, so it syncs by id and
//! every device ends up with it; its explicit `id` and `parentId` mean it
//! never moves the implicit chain eVi's next line hangs from, and pull can
//! append it verbatim to any file. It is a system line whose content is the
//! title, hung from the leaf it was given at, so a reader that does not know
//! titles shows a short system message at the end of that branch (as a
//! root it would be a separate, newest conversation). Readers here keep
//! title lines out of the tree (no message, no branch) and show the newest
//! one, by `ts` then id. A new title is another line: nothing is rewritten.
//!
//! # Promises
//!
//! The line goes at the end of the session's last file (a new day file would
//! make the session look active today), in one `write` on a file opened for
//! appending, then fsynced; only when that file ends in a newline, so a line
//! eVi is writing is never cut into. As with pull, a write eVi begins in the
//! microseconds between that check and the append cannot be excluded.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::tree::SessionTree;

/// The `type` of a title line (with `role` `system`).
pub const TITLE_TYPE: &str = "title";

/// The longest title, in characters: a title is a line in a list.
pub const MAX_TITLE_CHARS: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum TitleError {
    #[error("the title is empty")]
    Empty,
    #[error("the title is {0} characters long; at most {MAX_TITLE_CHARS} fit")]
    TooLong(usize),
    #[error("{} ends in a line eVi is still writing", .0.display())]
    Busy(PathBuf),
    #[error("cannot append to {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// A title as it is kept: on one line, white space runs made one space, a
/// pair of quotes around it (models like them) taken off.
pub fn clean(text: &str) -> Result<String, TitleError> {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut t = flat.as_str();
    for (open, close) in [('"', '"'), ('\'', '\''), ('“', '”'), ('`', '`')] {
        if let Some(inner) = t.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
            t = inner.trim();
            break;
        }
    }
    let chars = t.chars().count();
    if chars == 0 {
        return Err(TitleError::Empty);
    }
    if chars > MAX_TITLE_CHARS {
        return Err(TitleError::TooLong(chars));
    }
    Ok(t.to_owned())
}

#[derive(Serialize)]
struct TitleLine<'a> {
    id: &'a str,
    #[serde(rename = "parentId")]
    parent_id: Option<&'a str>,
    role: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    content: &'a str,
    ts: String,
}

/// The line (without its newline) that titles a session `title` as of
/// `parent`, the leaf it is given at.
pub fn title_line(title: &str, parent: Option<&str>) -> io::Result<Vec<u8>> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(io::Error::other)?;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let line = TitleLine {
        id: &hex::encode(id),
        parent_id: parent,
        role: "system",
        kind: TITLE_TYPE,
        content: title,
        ts: now,
    };
    serde_json::to_vec(&line).map_err(io::Error::from)
}

/// The title a title line holds.
pub fn text_of(raw: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Content {
        content: String,
    }
    serde_json::from_slice::<Content>(raw)
        .ok()
        .map(|c| c.content)
}

/// Appends a line titling `tree`'s session `title`, hung from its active
/// leaf, to its last file; returns that file.
pub fn append_title(tree: &SessionTree, title: &str) -> Result<PathBuf, TitleError> {
    append_line(tree, |parent| title_line(title, parent))
}

/// Appends the line `make` builds from the active leaf's id (a line with
/// explicit ids that readers keep out of the tree: a title, a git state),
/// as the promises above say; returns the file.
pub fn append_line(
    tree: &SessionTree,
    make: impl FnOnce(Option<&str>) -> io::Result<Vec<u8>>,
) -> Result<PathBuf, TitleError> {
    let file = tree.files.last().expect("a session has a file");
    let path = file.path.clone();
    let io = |source| TitleError::Io {
        path: path.clone(),
        source,
    };
    let parent = tree.active_leaf().map(|i| tree.entries[i].id.as_str());
    let mut line = make(parent).map_err(io)?;
    line.push(b'\n');
    let mut f = OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.read_exact_at(&mut last, len - 1).map_err(io)?;
        if last[0] != b'\n' {
            return Err(TitleError::Busy(path));
        }
    }
    f.write_all(&line).map_err(io)?;
    f.sync_all().map_err(io)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::line::parse_head;

    #[test]
    fn titles_are_one_clean_line() {
        assert_eq!(
            clean("  \"Fix the\n flaky test\"\n").unwrap(),
            "Fix the flaky test"
        );
        assert_eq!(clean("“Résumé”").unwrap(), "Résumé");
        assert!(matches!(clean(" \n\t"), Err(TitleError::Empty)));
        assert!(matches!(clean("\"\""), Err(TitleError::Empty)));
        assert!(matches!(
            clean(&"é".repeat(201)),
            Err(TitleError::TooLong(201))
        ));
        assert_eq!(clean(&"é".repeat(200)).unwrap().chars().count(), 200);
    }

    #[test]
    fn a_title_line_is_an_entry_with_explicit_ids_that_readers_know() {
        let raw = title_line("Fix \"it\"", Some("abc")).unwrap();
        let head = parse_head(&raw);
        assert!(head.title);
        assert_eq!(head.ids.parent, Some(Some("abc".to_owned())));
        assert_eq!(head.ids.id.as_deref().map(str::len), Some(32));
        assert!(head.ts.is_some());
        assert_eq!(text_of(&raw).as_deref(), Some("Fix \"it\""));
        let root = title_line("t", None).unwrap();
        assert_eq!(parse_head(&root).ids.parent, Some(None));
        // A system message that merely has a `type` is not a title.
        assert!(!parse_head(br#"{"role":"system","type":"note","content":"x"}"#).title);
        assert!(!parse_head(br#"{"role":"user","type":"title","content":"x"}"#).title);
    }
}
