//! What a handoff carries of a checkout that is not in a commit the other
//! device can fetch, as one file, sealed and uploaded like a checkpoint
//! blob.
//!
//! # Format
//!
//! `evi-git-carry v1\n`, then sections, each `<name> <length>\n`, that many
//! bytes, and `\n`:
//!
//! - `staged`: `git diff --cached --binary --full-index HEAD`, the index
//!   against HEAD;
//! - `unstaged`: `git diff --binary --full-index` of the work tree against
//!   the index, with the untracked files git does not ignore added to a
//!   temporary copy of the index as intent-to-add, so they are new files of
//!   the patch (modes, symlinks and binary content as git writes them). The
//!   copy keeps the index's modification time, so git checks the same
//!   "racily clean" entries it checks in the index: a file edited in the
//!   second of the last index write is in the patch as `git diff` shows it;
//! - `objects`: a pack of the blobs the two patches apply to, so the other
//!   side can merge three ways even when it lacks the commit;
//! - `bundle` (with `--bundle`): `git bundle create - HEAD --not --remotes`,
//!   the commits no remote has.
//!
//! Applying `staged` to the index and work tree, then `unstaged` to the
//! work tree alone, gives back what `git status` showed: staged stays
//! staged, unstaged unstaged, untracked untracked, less the files left on
//! the device as secrets (see [`secrets`]: by name, or by what the redaction
//! rules find in them), which neither patch nor the pack holds and the
//! build names. The whole file is at most [`MAX_CARRIED_BYTES`]; past that
//! the handoff stops and says so.

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};
use tempfile::NamedTempFile;

use super::{Git, GitError, Observed};
use crate::sync::engine::redact::Redactor;
use crate::transcript::git_state::LeftOut;

mod secrets;

/// The most a handoff carries: 50 MiB.
pub const MAX_CARRIED_BYTES: u64 = 50 << 20;

const MAGIC: &[u8] = b"evi-git-carry v1\n";

/// Options that keep a user's diff config from changing the patch format.
const DIFF: [&str; 9] = [
    "--binary",
    "--full-index",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "--no-relative",
    "--src-prefix=a/",
    "--dst-prefix=b/",
];

/// The built file, ready to seal.
#[derive(Debug)]
pub struct Built {
    pub file: NamedTempFile,
    pub sha256: String,
    pub size: u64,
    pub bundled: bool,
}

/// What was carried, read back.
#[derive(Debug, Default)]
pub struct Carried {
    pub staged: Vec<u8>,
    pub unstaged: Vec<u8>,
    pub objects: Vec<u8>,
    pub bundle: Vec<u8>,
}

fn io_err(context: &str) -> impl Fn(io::Error) -> GitError + '_ {
    move |source| GitError::Io {
        context: context.to_owned(),
        source,
    }
}

fn args(cmd: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = cmd.iter().map(|s| (*s).to_owned()).collect();
    v.extend(DIFF.iter().map(|s| (*s).to_owned()));
    v
}

/// What a handoff carries: the file, when there is anything to carry, and
/// the changed files it leaves on the device as secrets.
#[derive(Debug)]
pub struct Carry {
    pub built: Option<Built>,
    /// By path.
    pub left_out: Vec<LeftOut>,
}

/// Builds the file for `obs` in `tmp` (the sync folder: private to the
/// user); `built` is `None` when there is nothing to carry. `bundle`: carry
/// the commits no remote has (only when HEAD is on none). `secrets`: the
/// redaction rules turned on (`None`: `[sync] redact = false`); with them,
/// a changed or untracked file that is a secret by its name, or whose new
/// content holds a secret a rule finds, is left out of both patches (see
/// [`secrets`]).
pub fn build(
    obs: &Observed,
    bundle: bool,
    tmp: &Path,
    secrets: Option<&Redactor>,
) -> Result<Carry, GitError> {
    let g = Git::new(&obs.top);
    let work = tempfile::tempdir_in(tmp).map_err(io_err("cannot make a temp folder"))?;
    let index = work.path().join("index");
    let real = g.text(&["rev-parse", "--path-format=absolute", "--git-path", "index"])?;
    if Path::new(&real).is_file() {
        copy_index(Path::new(&real), &index)?;
    } else {
        g.with_index(&index).run(&["read-tree", "HEAD"])?;
    }
    // Everything below reads the copy: what is left out is taken out of it.
    let gi = g.with_index(&index);
    let left_out = match secrets {
        Some(r) => secrets::leave_out(&gi, obs, r)?,
        None => Vec::new(),
    };
    let mut budget = MAX_CARRIED_BYTES;
    let mut part = |what: &str, f: &mut dyn FnMut(&mut File, u64) -> Result<u64, GitError>| {
        let path = work.path().join(what);
        let mut file = File::create(&path).map_err(io_err("cannot write a temp file"))?;
        let n = f(&mut file, budget)?;
        budget = budget.saturating_sub(n);
        Ok::<_, GitError>((what.to_owned(), path, n))
    };
    let mut parts = Vec::new();
    parts.push(part("staged", &mut |f, b| {
        let mut a = args(&["diff", "--cached"]);
        a.push("HEAD".into());
        gi.run_into(&a, f, b, "staged changes")
    })?);
    // Before the untracked files are in the copy as intent-to-add.
    let mut shas = preimages(
        &gi.run(&[
            "diff",
            "--cached",
            "--raw",
            "-z",
            "--no-abbrev",
            "--no-renames",
            "HEAD",
        ])?,
        true,
    );
    let untracked: Vec<&String> = (obs.untracked.iter())
        .filter(|p| !left_out.iter().any(|l| &l.path == *p))
        .collect();
    if !untracked.is_empty() {
        let list: Vec<u8> = untracked
            .iter()
            .flat_map(|p| p.bytes().chain([0]))
            .collect();
        gi.run_with(
            &[
                "add",
                "--intent-to-add",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
            ],
            &list,
        )?;
    }
    parts.push(part("unstaged", &mut |f, b| {
        gi.run_into(
            &args(&["diff"]),
            f,
            b,
            "unstaged changes and untracked files",
        )
    })?);
    shas.extend(preimages(
        &gi.run(&["diff", "--raw", "-z", "--no-abbrev", "--no-renames"])?,
        false,
    ));
    shas.sort();
    shas.dedup();
    let present = present_blobs(&g, &shas)?;
    if !present.is_empty() {
        parts.push(part("objects", &mut |f, b| {
            let pack = g.run_with(
                &["pack-objects", "--stdout", "-q"],
                present.join("\n").as_bytes(),
            )?;
            if pack.len() as u64 > b {
                return Err(GitError::TooLarge {
                    what: "changed files".into(),
                });
            }
            f.write_all(&pack)
                .map_err(io_err("cannot write a temp file"))?;
            Ok(pack.len() as u64)
        })?);
    }
    let bundled = bundle && !obs.pushed;
    if bundled {
        // git writes the bundle over the part's file, under the same name.
        let path = work.path().join("bundle");
        parts.push(part("bundle", &mut |_, b| {
            g.run(&[
                "bundle",
                "create",
                "-q",
                &path.to_string_lossy(),
                "HEAD",
                "--not",
                "--remotes",
            ])?;
            let n = std::fs::metadata(&path)
                .map_err(io_err("cannot read the bundle"))?
                .len();
            if n > b {
                return Err(GitError::TooLarge {
                    what: "commits to bundle".into(),
                });
            }
            Ok(n)
        })?);
    }
    let carries_something = parts.iter().any(|(name, _, n)| *n > 0 && name != "objects");
    if !carries_something {
        return Ok(Carry {
            built: None,
            left_out,
        });
    }
    let mut out = NamedTempFile::new_in(tmp).map_err(io_err("cannot make a temp file"))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    let mut put = |bytes: &[u8], out: &mut NamedTempFile| -> Result<(), GitError> {
        hasher.update(bytes);
        size += bytes.len() as u64;
        out.write_all(bytes)
            .map_err(io_err("cannot write a temp file"))
    };
    put(MAGIC, &mut out)?;
    for (name, path, n) in &parts {
        put(format!("{name} {n}\n").as_bytes(), &mut out)?;
        let mut r = BufReader::new(File::open(path).map_err(io_err("cannot read a temp file"))?);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let k = r
                .read(&mut buf)
                .map_err(io_err("cannot read a temp file"))?;
            if k == 0 {
                break;
            }
            put(&buf[..k], &mut out)?;
        }
        put(b"\n", &mut out)?;
    }
    if size > MAX_CARRIED_BYTES {
        return Err(GitError::TooLarge {
            what: "changes".into(),
        });
    }
    out.as_file()
        .sync_all()
        .map_err(io_err("cannot write a temp file"))?;
    Ok(Carry {
        built: Some(Built {
            file: out,
            sha256: hex::encode(hasher.finalize()),
            size,
            bundled,
        }),
        left_out,
    })
}

/// Copies the index at `real` to `to` with its modification time: git
/// takes an entry whose file has the index's second (or a later one) for
/// "racily clean" and compares its content, since a same-size edit in that
/// second leaves the stat data as recorded. A copy with a newer time would
/// pass such an edit over as clean, and the patch would lack what `git
/// status` and `git diff` show; with the time kept, git reads the copy as
/// it reads the index (and smudges such entries when it writes the copy).
fn copy_index(real: &Path, to: &Path) -> Result<(), GitError> {
    let err = io_err("cannot copy the git index");
    // One open file: the time is that of the bytes copied, even if git
    // replaces the index meanwhile.
    let mut from = File::open(real).map_err(&err)?;
    let mtime = from.metadata().and_then(|m| m.modified()).map_err(&err)?;
    let mut copy = File::create(to).map_err(&err)?;
    io::copy(&mut from, &mut copy).map_err(&err)?;
    copy.set_modified(mtime).map_err(&err)
}

/// The blob ids `git diff --raw -z --no-abbrev` names as preimages (and,
/// with `both`, as postimages: the staged blobs the unstaged patch applies to).
fn preimages(raw: &[u8], both: bool) -> Vec<String> {
    let mut out = Vec::new();
    for field in raw.split(|&b| b == 0) {
        let Some(meta) = field.strip_prefix(b":") else {
            continue;
        };
        let words: Vec<&[u8]> = meta.split(|&b| b == b' ').collect();
        if words.len() < 4 {
            continue;
        }
        let ids = if both { &words[2..4] } else { &words[2..3] };
        for id in ids {
            if !id.is_empty() && id.iter().any(|&b| b != b'0') {
                out.push(String::from_utf8_lossy(id).into_owned());
            }
        }
    }
    out
}

/// Those of `shas` that are blobs in the repository.
fn present_blobs(g: &Git, shas: &[String]) -> Result<Vec<String>, GitError> {
    if shas.is_empty() {
        return Ok(Vec::new());
    }
    let out = g.run_with(
        &["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        (shas.join("\n") + "\n").as_bytes(),
    )?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.strip_suffix(" blob"))
        .map(str::to_owned)
        .collect())
}

impl Carried {
    /// Reads a carried file (as fetched and verified against its hash).
    pub fn read(path: &Path) -> Result<Self, GitError> {
        let mut bytes = Vec::new();
        File::open(path)
            .map_err(io_err("cannot read the carried working tree"))?
            .take(MAX_CARRIED_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io_err("cannot read the carried working tree"))?;
        Self::parse(&bytes)
    }

    fn parse(bytes: &[u8]) -> Result<Self, GitError> {
        let bad = |why: &str| GitError::BadCarry(why.to_owned());
        let mut rest = bytes.strip_prefix(MAGIC).ok_or_else(|| {
            bad("it does not begin as this version of evi writes it (a newer evi may read it)")
        })?;
        let mut c = Self::default();
        while !rest.is_empty() {
            let nl = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or_else(|| bad("a section has no header"))?;
            let header =
                std::str::from_utf8(&rest[..nl]).map_err(|_| bad("a header is not text"))?;
            let (name, len) = header
                .split_once(' ')
                .ok_or_else(|| bad("a header has no length"))?;
            let len: usize = len.parse().map_err(|_| bad("a length is not a number"))?;
            let body = rest
                .get(nl + 1..nl + 1 + len)
                .ok_or_else(|| bad("a section is cut short"))?;
            if rest.get(nl + 1 + len) != Some(&b'\n') {
                return Err(bad("a section does not end where its header says"));
            }
            rest = &rest[nl + 2 + len..];
            let slot = match name {
                "staged" => &mut c.staged,
                "unstaged" => &mut c.unstaged,
                "objects" => &mut c.objects,
                "bundle" => &mut c.bundle,
                // A later evi may carry more; what this one knows still applies.
                _ => continue,
            };
            *slot = body.to_vec();
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_read_back_and_damage_is_named() {
        let mut f = MAGIC.to_vec();
        f.extend(b"staged 3\nabc\nfuture 1\nx\nunstaged 0\n\n");
        let c = Carried::parse(&f).unwrap();
        assert_eq!(c.staged, b"abc");
        assert!(c.unstaged.is_empty() && c.bundle.is_empty());
        let mut cut = MAGIC.to_vec();
        cut.extend(b"staged 9\nabc\n");
        assert!(matches!(Carried::parse(&cut), Err(GitError::BadCarry(_))));
        assert!(matches!(
            Carried::parse(b"PK\x03\x04"),
            Err(GitError::BadCarry(_))
        ));
    }

    #[test]
    fn preimages_are_the_old_ids_and_for_the_index_the_new_ones_too() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let z = "0".repeat(40);
        let raw = format!(":100644 100644 {a} {b} M\0f\0:000000 100644 {z} {b} A\0g\0");
        assert_eq!(preimages(raw.as_bytes(), false), vec![a.clone()]);
        assert_eq!(preimages(raw.as_bytes(), true), [a, b.clone(), b]);
    }
}
