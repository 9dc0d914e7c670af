//! The state of a session's git checkout at a handoff, kept as an entry of
//! the session itself.
//!
//! `evi sessions handoff` appends one line to the session:
//!
//! ```text
//! {"id":"<32 hex, random>","parentId":"<active leaf, or null>","role":"system","type":"git_state","content":"branch fix-auth at 3f2a9c1, pushed; 3 files changed, 1 untracked","ts":"…","git":{…}}
//! ```
//!
//! It is shaped like a title line (see [`super::title`]) for the same
//! reasons: an entry like any other, so it syncs by id, merges and reaches
//! every device; explicit ids, so it never moves the implicit chain; a
//! system line whose content says in words what was carried, so a reader
//! that does not know the type shows a short note. Readers here keep it out
//! of the tree and show the newest one (by `ts`, then id). `git` is a
//! [`GitState`]: what the checkout was, and the sealed blob (a
//! [`crate::git::carry`] container) holding its uncommitted changes and any
//! bundled commits, named by its SHA-256 like a checkpoint blob. The line
//! travels inside the session's encrypted segments and the blob as its own
//! age file, so the server learns neither a path nor a branch name.

use serde::{Deserialize, Serialize};

/// The `type` of a git state line (with `role` `system`).
pub const GIT_STATE_TYPE: &str = "git_state";

/// A remote of the checkout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remote {
    pub name: String,
    pub url: String,
}

/// The blob that carries what is not in a commit on a remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedBlob {
    pub sha256: String,
    pub size: u64,
}

/// A changed or untracked file a handoff left on its device as a secret
/// (see [`crate::git::carry`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    pub path: String,
    /// `name`: a secret by its name (a `.env`, a `*.pem`); else the
    /// redaction rule that found a secret in it.
    pub secret: String,
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.secret.as_str() {
            "name" => write!(f, "{} (a secret by its name)", self.path),
            rule => write!(f, "{} (holds a secret: {rule})", self.path),
        }
    }
}

/// `a (why), b (why)`.
pub fn left_out_list(left: &[LeftOut]) -> String {
    left.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a handoff recorded of the checkout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitState {
    pub remotes: Vec<Remote>,
    /// `None`: a detached HEAD.
    pub branch: Option<String>,
    /// The HEAD commit, in full.
    pub head: String,
    /// HEAD is on a remote-tracking branch (the other device can fetch it).
    pub pushed: bool,
    /// Paths with staged or unstaged changes.
    pub files_changed: usize,
    /// Untracked files git does not ignore.
    pub untracked: usize,
    /// The commits not on a remote travel in the blob as a `git bundle`.
    #[serde(default)]
    pub bundled: bool,
    /// `None` when there is nothing to carry (a clean tree, pushed).
    #[serde(default)]
    pub blob: Option<CarriedBlob>,
    /// Files left on the handing-off device as secrets, by path; not
    /// counted in `files_changed` and `untracked`, which count what was
    /// carried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
}

/// The newest git state of a session as readers show it (`sessions list
/// --json`, the web viewer's session heading).
#[derive(Debug, Clone, Serialize)]
pub struct RecordedTree {
    /// When the handoff recorded it (RFC 3339).
    pub ts: Option<String>,
    /// In words, as the handoff printed it.
    pub summary: String,
    #[serde(flatten)]
    pub state: GitState,
}

/// The short form of a commit id people read.
pub fn short(commit: &str) -> &str {
    &commit[..commit.len().min(7)]
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl GitState {
    /// `branch fix-auth at 3f2a9c1, pushed; 3 files changed, 1 untracked`.
    pub fn summary(&self) -> String {
        let at = match &self.branch {
            Some(b) => format!("branch {b} at {}", short(&self.head)),
            None => format!("detached HEAD at {}", short(&self.head)),
        };
        let pushed = if self.pushed {
            "pushed"
        } else if self.bundled {
            "not on a remote, carried as a bundle"
        } else {
            "NOT on any remote"
        };
        let left = match self.left_out.len() {
            0 => String::new(),
            1 => "; 1 secret file left out".into(),
            n => format!("; {n} secret files left out"),
        };
        format!(
            "{at}, {pushed}; {}{left}",
            changes(self.files_changed, self.untracked)
        )
    }
}

/// `3 files changed, 1 untracked`, or `clean`.
pub fn changes(files_changed: usize, untracked: usize) -> String {
    match (files_changed, untracked) {
        (0, 0) => "clean".into(),
        (c, 0) => plural(c, "file changed", "files changed"),
        (0, u) => format!("{u} untracked"),
        (c, u) => format!(
            "{}, {u} untracked",
            plural(c, "file changed", "files changed")
        ),
    }
}

#[derive(Serialize)]
struct Line<'a> {
    id: &'a str,
    #[serde(rename = "parentId")]
    parent_id: Option<&'a str>,
    role: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    content: &'a str,
    ts: String,
    git: &'a GitState,
}

/// The line (without its newline) recording `state`, hung from `parent`.
pub fn git_state_line(state: &GitState, parent: Option<&str>) -> std::io::Result<Vec<u8>> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(std::io::Error::other)?;
    let line = Line {
        id: &hex::encode(id),
        parent_id: parent,
        role: "system",
        kind: GIT_STATE_TYPE,
        content: &state.summary(),
        ts: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        git: state,
    };
    serde_json::to_vec(&line).map_err(std::io::Error::from)
}

/// The state a git state line holds (`None` for a line that is not one a
/// reader here understands).
pub fn state_of(raw: &[u8]) -> Option<GitState> {
    #[derive(Deserialize)]
    struct Holder {
        git: GitState,
    }
    serde_json::from_slice::<Holder>(raw).ok().map(|h| h.git)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::line::parse_head;

    fn state() -> GitState {
        GitState {
            remotes: vec![Remote {
                name: "origin".into(),
                url: "git@example.com:me/app.git".into(),
            }],
            branch: Some("fix-auth".into()),
            head: "3f2a9c1d".repeat(5),
            pushed: true,
            files_changed: 3,
            untracked: 1,
            bundled: false,
            blob: None,
            left_out: Vec::new(),
        }
    }

    #[test]
    fn the_summary_says_what_was_carried() {
        let mut s = state();
        assert_eq!(
            s.summary(),
            "branch fix-auth at 3f2a9c1, pushed; 3 files changed, 1 untracked"
        );
        s.branch = None;
        s.pushed = false;
        s.bundled = true;
        s.files_changed = 1;
        s.untracked = 0;
        assert_eq!(
            s.summary(),
            "detached HEAD at 3f2a9c1, not on a remote, carried as a bundle; 1 file changed"
        );
        assert_eq!(changes(0, 0), "clean");
        s.left_out = vec![LeftOut {
            path: ".env".into(),
            secret: "name".into(),
        }];
        assert!(
            s.summary()
                .ends_with("; 1 file changed; 1 secret file left out")
        );
    }

    #[test]
    fn a_git_state_line_is_an_entry_with_explicit_ids_that_readers_know() {
        let raw = git_state_line(&state(), Some("abc")).unwrap();
        let head = parse_head(&raw);
        assert!(head.git_state);
        assert!(!head.title);
        assert_eq!(head.ids.parent, Some(Some("abc".to_owned())));
        assert_eq!(head.ids.id.as_deref().map(str::len), Some(32));
        assert_eq!(state_of(&raw), Some(state()));
        assert!(!parse_head(br#"{"role":"user","type":"git_state","content":"x"}"#).git_state);
    }
}
