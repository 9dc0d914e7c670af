//! Which transcript files exist: `transcripts/<YYYY-MM-DD>/<session_id>.jsonl`.
//!
//! Scanning only lists folders, it opens no file, so finding the sessions of a
//! large home is cheap. Anything that does not fit the layout (a folder that is
//! not a day, a file whose name is not a session id) is skipped with one
//! warning and never touched.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use evi_shared::{Day, SessionId};

/// One day's file of a session.
#[derive(Debug, Clone)]
pub struct SessionFile {
    pub day: Day,
    pub path: PathBuf,
    pub len: u64,
    pub mtime: SystemTime,
}

/// Every session of a home, each with its files in day order.
#[derive(Debug, Default)]
pub struct Catalog {
    pub sessions: BTreeMap<SessionId, Vec<SessionFile>>,
    /// One line per skipped path, for the command to print on stderr.
    pub warnings: Vec<String>,
}

impl Catalog {
    /// Lists `dir` (the `transcripts` folder). A missing folder is an empty
    /// catalog; the caller decides how to explain that.
    pub fn scan(dir: &Path) -> io::Result<Self> {
        let mut catalog = Catalog::default();
        let read = match fs::read_dir(dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(catalog),
            Err(e) => return Err(e),
        };
        let mut days = Vec::new();
        for ent in read {
            let ent = ent?;
            let name = ent.file_name();
            let day = name.to_str().and_then(|n| n.parse::<Day>().ok());
            match (day, ent.file_type()?.is_dir()) {
                (Some(day), true) => days.push((day, ent.path())),
                _ => catalog.warnings.push(format!(
                    "skipping {}: not a day folder (YYYY-MM-DD)",
                    ent.path().display()
                )),
            }
        }
        days.sort();
        for (day, path) in days {
            catalog.scan_day(day, &path)?;
        }
        Ok(catalog)
    }

    fn scan_day(&mut self, day: Day, dir: &Path) -> io::Result<()> {
        for ent in fs::read_dir(dir)? {
            let ent = ent?;
            let name = ent.file_name();
            let id = name
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .and_then(|n| n.parse::<SessionId>().ok());
            let meta = ent.metadata()?;
            match id {
                Some(id) if meta.is_file() => {
                    self.sessions.entry(id).or_default().push(SessionFile {
                        day,
                        path: ent.path(),
                        len: meta.len(),
                        mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    });
                }
                _ => self.warnings.push(format!(
                    "skipping {}: not a session file (<session id>.jsonl)",
                    ent.path().display()
                )),
            }
        }
        Ok(())
    }

    /// Session ids starting with `prefix`, ignoring ASCII case (ULIDs are
    /// written in upper case, typed in lower): the exact id alone if it
    /// exists.
    pub fn matching(&self, prefix: &str) -> Vec<&SessionId> {
        if let Some(id) = self.sessions.keys().find(|id| id.as_str() == prefix) {
            return vec![id];
        }
        self.sessions
            .keys()
            .filter(|id| starts_with_ignore_case(id.as_str(), prefix))
            .collect()
    }

    /// Sessions ordered by last activity, newest first: last day, then the
    /// mtime of that day's file, then id.
    pub fn by_recency(&self) -> Vec<(&SessionId, &[SessionFile])> {
        let mut v: Vec<_> = self
            .sessions
            .iter()
            .map(|(id, files)| (id, files.as_slice()))
            .collect();
        v.sort_by(|a, b| {
            let key = |f: &[SessionFile]| f.last().map(|f| (f.day, f.mtime));
            key(b.1).cmp(&key(a.1)).then_with(|| b.0.cmp(a.0))
        });
        v
    }
}

impl Catalog {
    /// The shortest prefix of `id` (at least 8 characters) no other session
    /// shares. Ids are sorted, so only the two neighbours can share the
    /// longest prefix with it.
    pub fn short_id(&self, id: &SessionId) -> String {
        use std::ops::Bound::{Excluded, Unbounded};
        let s = id.as_str();
        let common = |other: Option<(&SessionId, _)>| {
            other.map_or(0, |(o, _)| {
                s.bytes()
                    .zip(o.as_str().bytes())
                    .take_while(|(a, b)| a == b)
                    .count()
            })
        };
        let before = common(self.sessions.range(..id).next_back());
        let after = common(self.sessions.range((Excluded(id), Unbounded)).next());
        let n = (before.max(after) + 1).max(8).min(s.len());
        s[..n].to_owned()
    }
}

/// Whether `s` starts with `prefix`, ASCII letters compared without case.
pub fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}
