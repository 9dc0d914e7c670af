//! A checkpoint journal as readers see it: eVi's `checkpoints/journal.jsonl`
//! (one `{seq, ts, path, op, blob?, size?}` line per file it wrote), or
//! another device's copy under `checkpoints/devices/<device>/`.
//!
//! Reading never fails on a line: one that is not a checkpoint (not JSON, no
//! `seq` or `path`) is kept aside as [`Unreadable`] with its line number, and
//! an unknown `op` is kept as [`Op::Other`], so a newer eVi's journal still
//! lists. A tail without a newline is a line eVi is still writing: not a
//! checkpoint yet, only counted.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What eVi did to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Overwrote it; its earlier contents are the blob.
    Modify,
    /// Created it: there were no earlier contents.
    Create,
    /// Overwrote it without keeping the earlier contents (over 5 MiB).
    Skip,
    /// An op this version does not know.
    Other(String),
}

impl Op {
    fn parse(s: &str) -> Self {
        match s {
            "modify" => Self::Modify,
            "create" => Self::Create,
            "skip" => Self::Skip,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Modify => "modify",
            Self::Create => "create",
            Self::Skip => "skip",
            Self::Other(s) => s,
        }
    }
}

/// One line of a journal.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub seq: u64,
    /// As written (RFC 3339 text, or a number of epoch seconds or
    /// milliseconds), for JSON output.
    pub ts: Option<serde_json::Value>,
    /// Epoch milliseconds, when `ts` reads as a time.
    pub ts_ms: Option<i64>,
    /// The path on the device that wrote the journal.
    pub path: String,
    pub op: Op,
    /// SHA-256 (lowercase hex) of the earlier contents, when well formed.
    pub blob: Option<String>,
    pub size: Option<u64>,
    /// 1-based line number in the file.
    pub line: usize,
    /// The line's bytes in the file, its newline included.
    pub span: Range<u64>,
}

impl Checkpoint {
    /// Why it cannot be undone or copied here, if it cannot (`blob_here`:
    /// its blob is in this device's `blobs/`).
    pub fn not_restorable(&self, blob_here: bool) -> Option<&'static str> {
        match self.op {
            Op::Skip => Some("not snapshotted"),
            Op::Other(_) => Some("unknown op"),
            Op::Modify if self.blob.is_none() => Some("no blob recorded"),
            Op::Modify if !blob_here => Some("blob not on this device"),
            Op::Modify | Op::Create => None,
        }
    }
}

/// A line that is not a checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    pub line: usize,
    pub why: String,
}

/// What identifies the file a journal was read from, to notice a change
/// by other hands (eVi appending) before rewriting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    pub ino: u64,
    pub len: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// A journal file, read.
#[derive(Debug, Clone)]
pub struct Journal {
    pub path: PathBuf,
    /// In file order (oldest first).
    pub checkpoints: Vec<Checkpoint>,
    pub unreadable: Vec<Unreadable>,
    /// Bytes after the last newline: a line being written.
    pub pending_bytes: u64,
    /// `None`: there is no journal file.
    pub file: Option<FileId>,
}

#[derive(Deserialize)]
struct RawLine {
    seq: Option<u64>,
    #[serde(default)]
    ts: Option<serde_json::Value>,
    path: Option<String>,
    op: Option<String>,
    #[serde(default)]
    blob: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

/// Whether `s` is a SHA-256 as blobs are named: 64 lowercase hex digits.
pub fn is_blob_name(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// A journal `ts` as epoch milliseconds: RFC 3339 text, or a number (of
/// seconds below 10^11, which is the year 5138, else of milliseconds).
fn ts_millis(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::String(s) => crate::transcript::line::parse_ts(s),
        serde_json::Value::Number(n) => {
            let n = n.as_f64()?;
            let ms = if n.abs() < 1e11 { n * 1000.0 } else { n };
            Some(ms as i64)
        }
        _ => None,
    }
}

fn parse_line(raw: &[u8], line: usize, span: Range<u64>) -> Result<Checkpoint, String> {
    let r: RawLine = serde_json::from_slice(raw).map_err(|e| format!("not a JSON object: {e}"))?;
    let seq = r.seq.ok_or("no `seq` number")?;
    let path = r.path.filter(|p| !p.is_empty()).ok_or("no `path`")?;
    let op = Op::parse(r.op.as_deref().ok_or("no `op`")?);
    let ts_ms = r.ts.as_ref().and_then(ts_millis);
    Ok(Checkpoint {
        seq,
        ts: r.ts,
        ts_ms,
        path,
        op,
        blob: r.blob.filter(|b| is_blob_name(b)),
        size: r.size,
        line,
        span,
    })
}

impl Journal {
    /// Reads the journal at `path`; a missing file is an empty journal.
    pub fn read(path: &Path) -> io::Result<Self> {
        let mut journal = Self {
            path: path.to_owned(),
            checkpoints: Vec::new(),
            unreadable: Vec::new(),
            pending_bytes: 0,
            file: None,
        };
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(journal),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let mut r = BufReader::with_capacity(256 * 1024, file);
        let mut buf = Vec::new();
        let (mut line, mut offset) = (0, 0u64);
        loop {
            buf.clear();
            let n = r.read_until(b'\n', &mut buf)? as u64;
            if n == 0 {
                break;
            }
            if buf.last() != Some(&b'\n') {
                journal.pending_bytes = n;
                break;
            }
            line += 1;
            let span = offset..offset + n;
            offset += n;
            let raw = &buf[..buf.len() - 1];
            if crate::transcript::line::is_blank(raw) {
                continue;
            }
            match parse_line(raw, line, span) {
                Ok(c) => journal.checkpoints.push(c),
                Err(why) => journal.unreadable.push(Unreadable { line, why }),
            }
        }
        // What was read, not what the stat saw: eVi may have appended since.
        journal.file = Some(FileId {
            ino: meta.ino(),
            len: offset + journal.pending_bytes,
            mode: meta.mode() & 0o7777,
            uid: meta.uid(),
            gid: meta.gid(),
        });
        Ok(journal)
    }

    /// The newest checkpoint (the last in the file).
    pub fn latest(&self) -> Option<&Checkpoint> {
        self.checkpoints.last()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_checkpoints_and_sets_aside_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let blob = "a".repeat(64);
        let text = format!(
            "{{\"seq\":1,\"ts\":\"2026-06-08T10:00:01Z\",\"path\":\"/p/a\",\"op\":\"modify\",\"blob\":\"{blob}\",\"size\":3}}\n\
             not json\n\
             \n\
             {{\"seq\":2,\"ts\":1780000000,\"path\":\"/p/b\",\"op\":\"create\"}}\n\
             {{\"seq\":3,\"path\":\"/p/c\",\"op\":\"rename\",\"blob\":\"../x\"}}\n\
             {{\"seq\":4,\"path\":\"/p/d\"}}\n\
             {{\"seq\":5,\"pa"
        );
        std::fs::write(&path, &text).unwrap();
        let j = Journal::read(&path).unwrap();
        let seqs: Vec<u64> = j.checkpoints.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(j.checkpoints[0].op, Op::Modify);
        assert_eq!(j.checkpoints[0].blob.as_deref(), Some(blob.as_str()));
        assert_eq!(
            j.checkpoints[0].ts_ms,
            crate::transcript::line::parse_ts("2026-06-08T10:00:01Z")
        );
        assert_eq!(j.checkpoints[1].ts_ms, Some(1_780_000_000_000));
        assert_eq!(j.checkpoints[1].line, 4);
        assert_eq!(j.checkpoints[2].op, Op::Other("rename".into()));
        assert_eq!(j.checkpoints[2].blob, None, "a blob name that is a path");
        let bad: Vec<usize> = j.unreadable.iter().map(|u| u.line).collect();
        assert_eq!(bad, [2, 6]);
        assert_eq!(j.pending_bytes, 12);
        let span = &j.checkpoints[1].span;
        assert_eq!(
            &text.as_bytes()[span.start as usize..span.end as usize],
            b"{\"seq\":2,\"ts\":1780000000,\"path\":\"/p/b\",\"op\":\"create\"}\n"
        );
    }

    #[test]
    fn a_missing_journal_is_empty() {
        let j = Journal::read(Path::new("/nonexistent/journal.jsonl")).unwrap();
        assert!(j.checkpoints.is_empty() && j.file.is_none());
    }
}
