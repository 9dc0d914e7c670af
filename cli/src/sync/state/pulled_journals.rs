//! Other devices' checkpoint journals as pulled here, in
//! `checkpoints/devices/<journal name>/journal.jsonl`, each read from disk at
//! most once per command ([`PulledJournals`], held in the
//! [`SyncContext`](crate::sync::state::context::SyncContext)). A pulled line
//! is appended when its content is not in that file yet, so overlapping
//! records add each line once; the promises (whole lines, fsynced, a torn
//! last line cut first) are the journal's (see [`crate::sync::engine::journal`]).

use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::sync::JournalLine;
use crate::transcript::lines::walk_file;

/// The one field of a journal line sync needs.
#[derive(Deserialize)]
struct BlobRef {
    #[serde(default)]
    blob: Option<String>,
}

/// The blob a journal line names, if it is a well-formed SHA-256.
pub(crate) fn blob_of(line: &[u8]) -> Option<String> {
    let b = serde_json::from_slice::<BlobRef>(line).ok()?.blob?;
    let ok = b.len() == 64
        && b.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    ok.then_some(b)
}

/// Pulled journals as this command has read them, so a journal arriving in
/// many records (over many pages) is read from disk once per pull, not once
/// per record. It lives in the [`SyncContext`](crate::sync::state::context::SyncContext) (one per command, under the
/// sync lock) behind a mutex, so the pull loop needs no new argument and
/// [`journal_lines_missing`](crate::sync::engine::journal::journal_lines_missing)
/// can look without a mutable borrow.
#[derive(Debug, Default)]
pub struct PulledJournals {
    by_name: Mutex<HashMap<String, Pulled>>,
}

/// What one pulled journal file holds.
#[derive(Debug)]
struct Pulled {
    path: PathBuf,
    /// SHA-256 of every whole line in the file.
    lines: HashSet<[u8; 32]>,
    /// Where the last whole line ends: bytes after it are a torn line.
    whole: u64,
    /// The file's length as read (`None`: no file yet), to notice a change
    /// by other hands before appending.
    len: Option<u64>,
}

impl Pulled {
    fn read(path: PathBuf) -> io::Result<Self> {
        let mut lines = HashSet::new();
        let end = match walk_file(&path, 0, |_, raw| {
            lines.insert(content_hash(raw));
            ControlFlow::Continue(())
        }) {
            Ok(end) => end,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Self {
                    path,
                    lines,
                    whole: 0,
                    len: None,
                });
            }
            Err(e) => return Err(e),
        };
        Ok(Self {
            path,
            lines,
            whole: end.offset,
            len: Some(end.offset + end.pending_bytes),
        })
    }

    /// The lines of `lines` not in the file, each once, in the given order.
    fn missing<'a>(&self, lines: &'a [JournalLine]) -> Vec<&'a JournalLine> {
        let mut seen = HashSet::new();
        lines
            .iter()
            .filter(|l| {
                let h = content_hash(&l.line);
                !self.lines.contains(&h) && seen.insert(h)
            })
            .collect()
    }
}

fn content_hash(line: &[u8]) -> [u8; 32] {
    Sha256::digest(line).into()
}

impl PulledJournals {
    /// Runs `f` on the journal `name` under `checkpoints` as read from disk
    /// (read now if this command has not read it yet).
    fn with<T>(
        &self,
        checkpoints: &Path,
        name: &str,
        f: impl FnOnce(&mut Pulled) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut map = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(name) {
            // `name` passed `check_device` when the segment was opened: it
            // is a single path component that cannot climb out of `devices/`.
            let path = checkpoints.join("devices").join(name).join("journal.jsonl");
            map.insert(name.to_owned(), Pulled::read(path)?);
        }
        f(map.get_mut(name).expect("inserted above"))
    }

    /// Appends the lines of journal `name` that its file under `checkpoints`
    /// does not hold yet (by content, each once, in the given order); returns
    /// the blobs those lines name.
    pub fn apply(
        &self,
        checkpoints: &Path,
        name: &str,
        lines: &[JournalLine],
    ) -> io::Result<(u64, Vec<String>)> {
        self.with(checkpoints, name, |p| {
            // Changed since it was read (never by evi: pull holds the lock):
            // read it again rather than trust what is remembered.
            if current_len(&p.path)? != p.len {
                *p = Pulled::read(p.path.clone())?;
            }
            let new = p.missing(lines);
            if new.is_empty() {
                return Ok((0, Vec::new()));
            }
            let mut buf = Vec::new();
            let mut blobs = Vec::new();
            for l in &new {
                buf.extend_from_slice(&l.line);
                buf.push(b'\n');
                blobs.extend(blob_of(&l.line));
            }
            p.append(&buf)?;
            p.lines.extend(new.iter().map(|l| content_hash(&l.line)));
            Ok((new.len() as u64, blobs))
        })
    }

    /// How many of `lines` (each once) the journal `name` here lacks.
    pub fn count_missing(
        &self,
        checkpoints: &Path,
        name: &str,
        lines: &[JournalLine],
    ) -> io::Result<u64> {
        self.with(checkpoints, name, |p| Ok(p.missing(lines).len() as u64))
    }
}

impl Pulled {
    /// Appends `buf` (whole lines) durably: the folders (`devices/` and
    /// `devices/<name>/`) and the file's name first, a torn last line cut
    /// away, then the bytes.
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let dir = self.path.parent().expect("a journal lives in a folder");
        crate::fsutil::create_dir_all_durable(dir)?;
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)?;
        if self.len.is_none() {
            crate::fsutil::sync_dir(dir)?;
        }
        if self.len.is_some_and(|len| len > self.whole) {
            // A line torn by a crash mid-append: its record comes again (the
            // cursor was not saved past it), so cutting it loses nothing.
            f.set_len(self.whole)?;
            f.sync_all()?;
        }
        crate::fsutil::append_all_or_none(&mut f, self.whole, buf)?;
        f.sync_all()?;
        self.whole += buf.len() as u64;
        self.len = Some(self.whole);
        Ok(())
    }
}

fn current_len(path: &Path) -> io::Result<Option<u64>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m.len())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jl(seq: u64, line: &str) -> JournalLine {
        JournalLine {
            seq,
            line: line.as_bytes().to_vec(),
        }
    }

    fn sha(c: char) -> String {
        c.to_string().repeat(64)
    }

    fn with_blob(seq: u64, path: &str, c: char) -> JournalLine {
        jl(
            seq,
            &format!(r#"{{"seq":{seq},"path":"{path}","blob":"{}"}}"#, sha(c)),
        )
    }

    fn file(cp: &Path, name: &str) -> String {
        String::from_utf8(
            std::fs::read(cp.join("devices").join(name).join("journal.jsonl")).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn overlapping_segments_apply_each_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path();
        let pj = PulledJournals::default();
        let first = [with_blob(1, "/a", 'a'), jl(2, "{\"seq\":2}")];
        assert_eq!(pj.count_missing(cp, "laptop-1", &first).unwrap(), 2);
        assert_eq!(
            pj.apply(cp, "laptop-1", &first).unwrap(),
            (2, vec![sha('a')])
        );
        // A re-push after a rewind: the kept line again, then new lines that
        // reuse the removed numbers; one of them twice.
        let again = [
            with_blob(1, "/a", 'a'),
            with_blob(2, "/b", 'b'),
            jl(3, "{\"seq\":3}"),
            with_blob(2, "/b", 'b'),
        ];
        assert_eq!(pj.count_missing(cp, "laptop-1", &again).unwrap(), 2);
        assert_eq!(
            pj.apply(cp, "laptop-1", &again).unwrap(),
            (2, vec![sha('b')])
        );
        assert_eq!(pj.apply(cp, "laptop-1", &again).unwrap(), (0, vec![]));
        let want = [&first[..], &again[1..3]]
            .concat()
            .iter()
            .map(|l| String::from_utf8(l.line.clone()).unwrap() + "\n")
            .collect::<String>();
        assert_eq!(file(cp, "laptop-1"), want);
        // Another journal with the same lines is another folder.
        pj.apply(cp, "laptop-2", &first).unwrap();
        assert_eq!(file(cp, "laptop-2").lines().count(), 2);
        // A later command reads what is on disk: nothing twice.
        let fresh = PulledJournals::default();
        assert_eq!(fresh.apply(cp, "laptop-1", &again).unwrap(), (0, vec![]));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cp.join("devices/laptop-1/journal.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_torn_last_line_is_cut_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path();
        let path = cp.join("devices/laptop-1/journal.jsonl");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // A crash mid-append left half of line 2.
        std::fs::write(&path, "{\"seq\":1}\n{\"se").unwrap();
        let pj = PulledJournals::default();
        let lines = [jl(1, "{\"seq\":1}"), jl(2, "{\"seq\":2}")];
        pj.apply(cp, "laptop-1", &lines).unwrap();
        assert_eq!(file(cp, "laptop-1"), "{\"seq\":1}\n{\"seq\":2}\n");
        // Nothing to append: a torn tail stays until there is.
        std::fs::write(&path, "{\"seq\":1}\n{\"seq\":2}\n{\"s").unwrap();
        let pj = PulledJournals::default();
        assert_eq!(pj.apply(cp, "laptop-1", &lines).unwrap(), (0, vec![]));
        assert_eq!(file(cp, "laptop-1"), "{\"seq\":1}\n{\"seq\":2}\n{\"s");
    }

    #[test]
    fn a_file_changed_meanwhile_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path();
        let pj = PulledJournals::default();
        pj.apply(cp, "j", &[jl(1, "{\"a\":1}")]).unwrap();
        // Someone appended a line by hand after this pull read the file.
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(cp.join("devices/j/journal.jsonl"))
            .unwrap()
            .write_all(b"{\"b\":2}\n")
            .unwrap();
        pj.apply(cp, "j", &[jl(2, "{\"b\":2}"), jl(3, "{\"c\":3}")])
            .unwrap();
        assert_eq!(file(cp, "j"), "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
    }
}
