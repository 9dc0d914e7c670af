//! Taking lines out of this device's journal once they were rewound.
//!
//! # Promises
//!
//! - The journal is replaced whole or not at all: the kept bytes (every
//!   line not taken out, byte for byte, in order) go to a temp file in
//!   `checkpoints/`, are fsynced, and the temp file is renamed over the
//!   journal, then the folder is fsynced. A process killed at any point
//!   leaves the old journal or the new one, never a mix; a temp file it
//!   leaves behind is swept by the next rewind (see [`super::lock`]).
//! - Lines eVi appended while the rewind ran are kept: right before the
//!   rename the journal is looked at again, and whole lines past what was
//!   read are copied too. A journal that was replaced, shrank, or ends in a
//!   line still being written is left as it is ([`TrimError::Changed`]).
//! - A concurrent `evi sync push` reads either file, both of which hold
//!   only real lines; it sees a journal that shrank or changed and reads it
//!   again whole, sending only the lines the server lacks.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;

use super::journal::Journal;
use crate::fsutil::{persist_replace, set_mode_and_owner, temp_beside};

/// Rounds of "eVi appended meanwhile, copy that too" before giving up.
const ROUNDS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum TrimError {
    #[error("{0} changed while the rewind ran (eVi is writing to it?): it was left as it was")]
    Changed(String),
    #[error("cannot rewrite {path}: {source}")]
    Io { path: String, source: io::Error },
}

/// Rewrites `journal`'s file without the lines at `remove` (spans from
/// [`Journal::read`], newline included).
pub fn trim(journal: &Journal, remove: &[Range<u64>]) -> Result<(), TrimError> {
    let path = &journal.path;
    let shown = path.display().to_string();
    let io = |source| TrimError::Io {
        path: shown.clone(),
        source,
    };
    let changed = || TrimError::Changed(shown.clone());
    let Some(id) = journal.file else {
        return Err(changed());
    };
    let mut src = File::open(path).map_err(io)?;
    let meta = src.metadata().map_err(io)?;
    if meta.ino() != id.ino || meta.len() < id.len {
        return Err(changed());
    }
    let mut tmp = temp_beside(path).map_err(io)?;
    set_mode_and_owner(tmp.as_file(), id.mode, Some((id.uid, id.gid))).map_err(io)?;
    let mut spans: Vec<&Range<u64>> = remove.iter().collect();
    spans.sort_by_key(|r| r.start);
    {
        let mut out = io::BufWriter::with_capacity(256 * 1024, tmp.as_file_mut());
        let mut at = 0;
        for span in spans {
            copy_range(&mut src, at..span.start, &mut out).map_err(io)?;
            at = at.max(span.end);
        }
        copy_range(&mut src, at..id.len, &mut out).map_err(io)?;
        // Whole lines eVi appended since the journal was read.
        let mut copied = id.len;
        for round in 0.. {
            let now = std::fs::metadata(path).map_err(io)?;
            if now.ino() != id.ino || now.len() < copied {
                return Err(changed());
            }
            if now.len() == copied {
                break;
            }
            if round == ROUNDS || !ends_in_newline(&mut src, now.len()).map_err(io)? {
                return Err(changed());
            }
            copy_range(&mut src, copied..now.len(), &mut out).map_err(io)?;
            copied = now.len();
        }
        out.flush().map_err(io)?;
    }
    persist_replace(tmp, path).map_err(io)
}

fn copy_range(src: &mut File, r: Range<u64>, out: &mut impl Write) -> io::Result<()> {
    if r.end <= r.start {
        return Ok(());
    }
    src.seek(SeekFrom::Start(r.start))?;
    let n = io::copy(&mut src.take(r.end - r.start), out)?;
    if n != r.end - r.start {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the journal is shorter than when it was read",
        ));
    }
    Ok(())
}

fn ends_in_newline(src: &mut File, len: u64) -> io::Result<bool> {
    let mut b = [0u8; 1];
    src.seek(SeekFrom::Start(len - 1))?;
    src.read_exact(&mut b)?;
    Ok(b[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt;

    fn journal(dir: &std::path::Path, text: &str) -> Journal {
        let path = dir.join("journal.jsonl");
        std::fs::write(&path, text).unwrap();
        Journal::read(&path).unwrap()
    }

    fn line(seq: u64) -> String {
        format!("{{\"seq\":{seq},\"path\":\"/p/{seq}\",\"op\":\"create\"}}\n")
    }

    #[test]
    fn keeps_every_other_line_byte_for_byte_and_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!("{}junk\n\n{}{}", line(1), line(2), line(3));
        let j = journal(dir.path(), &text);
        std::fs::set_permissions(&j.path, Permissions::from_mode(0o640)).unwrap();
        let j = Journal::read(&j.path).unwrap();
        let remove: Vec<_> = j.checkpoints[1..].iter().map(|c| c.span.clone()).collect();
        trim(&j, &remove).unwrap();
        assert_eq!(
            std::fs::read_to_string(&j.path).unwrap(),
            format!("{}junk\n\n", line(1))
        );
        let mode = std::fs::metadata(&j.path).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn lines_appended_meanwhile_are_kept_and_a_replaced_journal_is_not_touched() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal(dir.path(), &(line(1) + &line(2)));
        let remove = [j.checkpoints[1].span.clone()];
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&j.path)
            .unwrap();
        f.write_all(line(3).as_bytes()).unwrap();
        trim(&j, &remove).unwrap();
        assert_eq!(
            std::fs::read_to_string(&j.path).unwrap(),
            line(1) + &line(3)
        );

        let j = journal(dir.path(), &(line(1) + &line(2)));
        // Appended, but mid-line: eVi is still writing.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&j.path)
            .unwrap()
            .write_all(b"{\"seq\":3")
            .unwrap();
        let err = trim(&j, &[j.checkpoints[1].span.clone()]).unwrap_err();
        assert!(matches!(err, TrimError::Changed(_)), "{err}");
        // Replaced by another file.
        let j = journal(dir.path(), &(line(1) + &line(2)));
        let other = dir.path().join("other");
        std::fs::write(&other, line(1) + &line(2)).unwrap();
        std::fs::rename(&other, &j.path).unwrap();
        let err = trim(&j, &[j.checkpoints[1].span.clone()]).unwrap_err();
        assert!(matches!(err, TrimError::Changed(_)), "{err}");
        assert_eq!(
            std::fs::read_to_string(&j.path).unwrap(),
            line(1) + &line(2)
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
