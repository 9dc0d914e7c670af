//! This device's git checkouts, by the repository their `origin` names:
//! where a pulled session whose project is a clone of the same repository
//! goes (see [`super::project`]).
//!
//! Looked for, in this order, the first found winning: the projects of this
//! device's own agent sessions (their `cwd`s, sorted), then each folder of
//! `[paths] search` in the order given, walked in name order at most
//! [`MAX_DEPTH`] levels down, never into a checkout, a hidden folder or a
//! build or dependency tree, and never past [`MAX_DIRS`] folders in all.
//! The answer is built once per command, on the first question.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

use crate::git::remote::origin;

/// How deep below a search folder a checkout may be (`~/code/org/app` is 2).
pub const MAX_DEPTH: usize = 4;
/// How many folders a search looks at, in all.
pub const MAX_DIRS: usize = 20_000;

/// Folders never searched: what build tools and package managers fill.
const SKIP: &[&str] = &[
    "node_modules",
    "target",
    "vendor",
    "build",
    "dist",
    "__pycache__",
    "venv",
];

/// The checkouts found, by normalized remote.
#[derive(Debug, Default)]
pub struct Checkouts {
    by_remote: BTreeMap<String, PathBuf>,
}

impl Checkouts {
    /// Looks through `own` (project directories of this device's sessions)
    /// and the `search` folders.
    pub fn find_all(own: impl IntoIterator<Item = String>, search: &[PathBuf]) -> Self {
        let mut c = Self::default();
        let own: BTreeSet<String> = own.into_iter().collect();
        let mut tops = BTreeSet::new();
        for dir in own {
            if let Some(o) = origin(Path::new(&dir))
                && tops.insert(o.top.clone())
            {
                c.by_remote.entry(o.remote).or_insert(o.top);
            }
        }
        let mut budget = MAX_DIRS;
        for root in search {
            let mut walk = WalkDir::new(root)
                .max_depth(MAX_DEPTH)
                .sort_by_file_name()
                .into_iter();
            while let Some(next) = walk.next() {
                let Ok(e) = next else { continue };
                if !e.file_type().is_dir() {
                    continue;
                }
                if budget == 0 {
                    return c;
                }
                budget -= 1;
                let name = e.file_name().to_string_lossy();
                if e.depth() > 0 && (name.starts_with('.') || SKIP.contains(&name.as_ref())) {
                    walk.skip_current_dir();
                    continue;
                }
                if e.path().join(".git").exists() {
                    walk.skip_current_dir();
                    if tops.contains(e.path()) {
                        continue;
                    }
                    if let Some(o) = origin(e.path())
                        && o.top == e.path()
                        && tops.insert(o.top.clone())
                    {
                        c.by_remote.entry(o.remote).or_insert(o.top);
                    }
                }
            }
        }
        c
    }

    /// The checkout here whose origin is `remote`.
    pub fn get(&self, remote: &str) -> Option<&Path> {
        self.by_remote.get(remote).map(PathBuf::as_path)
    }
}
