//! What a handoff leaves on the device: every changed or untracked file
//! that is a secret by its name ([`secret_by_name`]: a `.env`, a `*.pem`,
//! an `id_rsa`), or whose new content (the staged blob, the file in the
//! work tree) holds a secret one of the redaction rules turned on finds.
//! Such a file is left out whole, never patched: a redacted line in a
//! patch would no longer apply, or would apply as something nobody wrote.
//!
//! It is taken out of the index copy the patches are made from: a tracked
//! file is reset there to HEAD and marked skip-worktree, so neither patch
//! names it (nor the pack its blobs); an untracked one is not added as
//! intent-to-add. A deletion carries nothing new and stays. The user's own
//! index and files are never touched.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::io::Read as _;
use std::os::unix::ffi::OsStrExt;

use super::{Git, GitError, MAX_CARRIED_BYTES, Observed};
use crate::sync::engine::redact::Redactor;
use crate::sync::engine::redact::names::secret_by_name;
use crate::transcript::git_state::LeftOut;

/// One path of `git diff --raw -z --no-renames`: the new side.
struct Change {
    mode: Vec<u8>,
    sha: String,
    path: Vec<u8>,
}

impl Change {
    /// A regular file (not a deletion, a symlink or a submodule).
    fn regular(&self) -> bool {
        self.mode == b"100644" || self.mode == b"100755"
    }

    fn deleted(&self) -> bool {
        self.mode.iter().all(|&b| b == b'0')
    }
}

fn changes(raw: &[u8]) -> Vec<Change> {
    let mut out = Vec::new();
    let mut fields = raw.split(|&b| b == 0);
    while let Some(field) = fields.next() {
        let Some(meta) = field.strip_prefix(b":") else {
            continue;
        };
        let Some(path) = fields.next() else {
            break;
        };
        let words: Vec<&[u8]> = meta.split(|&b| b == b' ').collect();
        if words.len() < 5 {
            continue;
        }
        out.push(Change {
            mode: words[1].to_vec(),
            sha: String::from_utf8_lossy(words[3]).into_owned(),
            path: path.to_vec(),
        });
    }
    out
}

/// Finds the files to leave out and takes the tracked ones out of the index
/// copy `gi` reads (before any untracked file is added to it); by path.
pub(super) fn leave_out(
    gi: &Git,
    obs: &Observed,
    rules: &Redactor,
) -> Result<Vec<LeftOut>, GitError> {
    let raw = |args: &[&str]| -> Result<Vec<Change>, GitError> {
        let mut a = vec!["diff", "--raw", "-z", "--no-abbrev", "--no-renames"];
        a.extend_from_slice(args);
        Ok(changes(&gi.run(&a)?))
    };
    let staged = raw(&["--cached", "HEAD"])?;
    let unstaged = raw(&[])?;
    let name = |p: &[u8]| secret_by_name(&String::from_utf8_lossy(p));
    let mut found: BTreeMap<Vec<u8>, String> = BTreeMap::new();
    let mut blobs: Vec<&Change> = Vec::new();
    let mut files: Vec<&[u8]> = Vec::new();
    for (c, staged) in (staged.iter().map(|c| (c, true))).chain(unstaged.iter().map(|c| (c, false)))
    {
        if c.deleted() {
            continue;
        }
        if name(&c.path) {
            found.insert(c.path.clone(), "name".into());
        } else if c.regular() && staged {
            blobs.push(c);
        } else if c.regular() {
            files.push(&c.path);
        }
    }
    for p in &obs.untracked {
        if name(p.as_bytes()) {
            found.insert(p.as_bytes().to_vec(), "name".into());
        } else {
            files.push(p.as_bytes());
        }
    }
    for (path, bytes) in read_blobs(gi, &blobs)? {
        if !found.contains_key(path)
            && let Some(rule) = rules.secrets_in(&bytes).into_iter().next()
        {
            found.insert(path.to_vec(), rule);
        }
    }
    for path in files {
        if found.contains_key(path) {
            continue;
        }
        if let Some(bytes) = read_file(gi, path)
            && let Some(rule) = rules.secrets_in(&bytes).into_iter().next()
        {
            found.insert(path.to_vec(), rule);
        }
    }
    let tracked: Vec<&[u8]> = (found.keys())
        .filter(|p| staged.iter().chain(&unstaged).any(|c| &c.path == *p))
        .map(Vec::as_slice)
        .collect();
    take_out(gi, &tracked)?;
    Ok(found
        .into_iter()
        .map(|(path, secret)| LeftOut {
            path: String::from_utf8_lossy(&path).into_owned(),
            secret,
        })
        .collect())
}

/// Resets `paths` to HEAD in the index copy and marks those HEAD has
/// skip-worktree, so that neither patch names them.
fn take_out(gi: &Git, paths: &[&[u8]]) -> Result<(), GitError> {
    if paths.is_empty() {
        return Ok(());
    }
    let list = |ps: &[&[u8]]| -> Vec<u8> {
        ps.iter()
            .flat_map(|p| p.iter().copied().chain([0]))
            .collect()
    };
    gi.run_with(
        &[
            "reset",
            "-q",
            "HEAD",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ],
        &list(paths),
    )?;
    let listed = gi.run(&["ls-files", "-z"])?;
    let in_index: HashSet<&[u8]> = listed.split(|&b| b == 0).collect();
    let kept: Vec<&[u8]> = (paths.iter().copied())
        .filter(|p| in_index.contains(p))
        .collect();
    if !kept.is_empty() {
        gi.run_with(
            &["update-index", "--skip-worktree", "-z", "--stdin"],
            &list(&kept),
        )?;
    }
    Ok(())
}

/// A path and the bytes found there.
type Read<'a> = (&'a [u8], Vec<u8>);

/// The staged blobs of `changes`, those at most [`MAX_CARRIED_BYTES`] (a
/// larger one stops the handoff anyway), with their paths.
fn read_blobs<'a>(gi: &Git, changes: &[&'a Change]) -> Result<Vec<Read<'a>>, GitError> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let input = |cs: &[&Change]| -> Vec<u8> {
        cs.iter()
            .flat_map(|c| c.sha.bytes().chain([b'\n']))
            .collect()
    };
    let sizes = gi.run_with(&["cat-file", "--batch-check"], &input(changes))?;
    let small: Vec<&Change> = (changes.iter().copied())
        .zip(String::from_utf8_lossy(&sizes).lines())
        .filter(|(_, l)| {
            l.rsplit(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n <= MAX_CARRIED_BYTES)
        })
        .map(|(c, _)| c)
        .collect();
    if small.is_empty() {
        return Ok(Vec::new());
    }
    let out = gi.run_with(&["cat-file", "--batch"], &input(&small))?;
    let mut rest = out.as_slice();
    let mut read = Vec::new();
    for c in small {
        // `<sha> <type> <size>\n<content>\n`
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        let size = header
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<usize>().ok());
        let Some(body) = size.and_then(|n| rest.get(nl + 1..nl + 1 + n)) else {
            return Err(GitError::Failed {
                command: "git cat-file --batch".into(),
                stderr: format!("unexpected answer {header:?}"),
                stdout: String::new(),
            });
        };
        read.push((c.path.as_slice(), body.to_vec()));
        rest = &rest[(nl + 2 + body.len()).min(rest.len())..];
    }
    Ok(read)
}

/// The work tree's file at `path`, when it is a regular file of at most
/// [`MAX_CARRIED_BYTES`] that can be read (one that cannot is no secret
/// this can see, and the patch reads it as git does).
fn read_file(gi: &Git, path: &[u8]) -> Option<Vec<u8>> {
    let full = gi.dir.join(OsStr::from_bytes(path));
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if !meta.is_file() || meta.len() > MAX_CARRIED_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&full)
        .ok()?
        .take(MAX_CARRIED_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::changes;

    #[test]
    fn raw_changes_name_the_new_side_and_its_path() {
        let a = "a".repeat(40);
        let z = "0".repeat(40);
        let raw = format!(
            ":100644 100644 {a} {z} M\0dir/f g\0:100644 000000 {a} {z} D\0gone\0:000000 120000 {z} {a} A\0link\0"
        );
        let c = changes(raw.as_bytes());
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].path, b"dir/f g");
        assert!(c[0].regular() && !c[0].deleted());
        assert!(c[1].deleted() && !c[1].regular());
        assert_eq!(c[2].sha, a);
        assert!(!c[2].regular() && !c[2].deleted());
    }
}
