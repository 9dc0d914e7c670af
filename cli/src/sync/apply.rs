//! Writing pulled entries into the transcripts, as `DESIGN.md` ("Pull never
//! rewrites a file") says: only appends, each entry to the file of its day.
//!
//! An entry that continues the local tip (its parent is the implicit parent
//! the next local line would take, and its day is not before the tip's) is
//! appended verbatim, so its derived id comes out the same here. Any other
//! entry is appended with `id` and `parentId` added at the front of the
//! object, so the file stays a faithful tree and the local implicit chain is
//! not disturbed; a line that is not a JSON object is wrapped as
//! `{"id":…,"parentId":…,"eviRawLine":"<base64>"}`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;

use base64::Engine as _;
use evi_shared::{Day, SessionId};

use super::Entry;
use super::state::{FileState, Stat, line_hash};
use crate::home::EviHome;
use crate::transcript::entry_id::{IdChain, derive_id};
use crate::transcript::line::parse_head;
use crate::transcript::lines::walk_file;

/// A transcript file pull appended to.
#[derive(Debug)]
pub(super) struct Touched {
    /// `stat` before the first append (`None`: pull created the file).
    pub before: Option<Stat>,
    pub ids: Vec<String>,
}

/// The file of a day is being written by eVi (it ends in a partial line):
/// appending now would corrupt that line.
#[derive(Debug, thiserror::Error)]
#[error("{0} is being written (its last line is not complete yet)")]
pub struct Busy(pub PathBuf);

/// Where a file's chain and end stand, as push records them.
#[derive(Debug, Clone, Default)]
struct FileInfo {
    chain_before: Option<String>,
    chain_after: Option<String>,
    /// Whether a line of the file moves the implicit chain.
    has_implicit: bool,
    offset: u64,
    last_start: u64,
    last_hash: Option<String>,
}

/// One local session, ready to take pulled entries.
pub(super) struct SessionAppender {
    pub session: SessionId,
    dir: PathBuf,
    known: HashSet<String>,
    chain: IdChain,
    tip_day: Option<Day>,
    /// Days whose file ends in a partial line.
    busy: HashSet<Day>,
    /// Buffered: a page appends thousands of lines; [`Self::sync`] flushes.
    open: HashMap<Day, BufWriter<File>>,
    /// What the session's files hold, kept up to date as pull appends.
    files: BTreeMap<Day, FileInfo>,
    /// Files appended to since [`Self::take_touched`] was last called.
    pub touched: BTreeMap<Day, Touched>,
    pub verbatim: u64,
    pub branched: u64,
}

impl SessionAppender {
    /// Reads the session's current tree (ids and tip only).
    pub fn load(home: &EviHome, session: &SessionId) -> io::Result<Self> {
        let dir = home.transcripts_dir();
        let mut me = Self {
            session: session.clone(),
            dir,
            known: HashSet::new(),
            chain: IdChain::default(),
            tip_day: None,
            busy: HashSet::new(),
            open: HashMap::new(),
            files: BTreeMap::new(),
            touched: BTreeMap::new(),
            verbatim: 0,
            branched: 0,
        };
        for (day, path) in me.list_files()? {
            let mut info = FileInfo {
                chain_before: me.chain.implicit_parent().map(str::to_owned),
                ..FileInfo::default()
            };
            let end = walk_file(&path, 0, |offset, raw| {
                let head = parse_head(raw);
                let moves = head.ids.parent.is_none();
                let placed = me.chain.place(raw, head.ids);
                if moves {
                    me.tip_day = Some(day);
                    info.has_implicit = true;
                }
                info.last_start = offset;
                info.last_hash = Some(line_hash(raw));
                me.known.insert(placed.id);
                ControlFlow::Continue(())
            })?;
            if end.pending_bytes > 0 {
                me.busy.insert(day);
            }
            info.offset = end.offset;
            info.chain_after = me.chain.implicit_parent().map(str::to_owned);
            me.files.insert(day, info);
        }
        Ok(me)
    }

    /// The session's files in day order.
    fn list_files(&self) -> io::Result<Vec<(Day, PathBuf)>> {
        let mut out = Vec::new();
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for ent in rd {
            let ent = ent?;
            let Some(day) = ent.file_name().to_str().and_then(|n| n.parse::<Day>().ok()) else {
                continue;
            };
            let path = ent.path().join(format!("{}.jsonl", self.session));
            if path.is_file() {
                out.push((day, path));
            }
        }
        out.sort();
        Ok(out)
    }

    fn path(&self, day: Day) -> PathBuf {
        // Both parts were parsed through their strict types: no separator,
        // no leading dot, so the path stays inside `transcripts/`.
        self.dir
            .join(day.as_str())
            .join(format!("{}.jsonl", self.session))
    }

    /// Whether the entry is already here.
    pub fn has(&self, id: &str) -> bool {
        self.known.contains(id)
    }

    /// Appends one entry (no-op if its id is here).
    pub fn apply(&mut self, e: &Entry) -> Result<(), ApplyError> {
        if self.known.contains(&e.id) {
            return Ok(());
        }
        if self.busy.contains(&e.day) {
            return Err(ApplyError::Busy(Busy(self.path(e.day))));
        }
        let head = parse_head(&e.line);
        let explicit_parent = head.ids.parent.is_some();
        let id_here = match &head.ids.id {
            Some(id) => id.clone(),
            None => derive_id(e.parent.as_deref(), &e.line),
        };
        let extends_tip = e.parent.as_deref() == self.chain.implicit_parent()
            && self.tip_day.is_none_or(|t| e.day >= t);
        let verbatim = id_here == e.id && (explicit_parent || extends_tip);
        let bytes = if verbatim {
            self.verbatim += 1;
            let mut b = e.line.clone();
            b.push(b'\n');
            b
        } else {
            self.branched += 1;
            with_ids(e, head.ids.id.is_some(), head.fault.is_none())
        };
        let path = self.path(e.day);
        self.touched.entry(e.day).or_insert_with(|| Touched {
            before: Stat::of(&path).ok(),
            ids: Vec::new(),
        });
        let f = match self.open.entry(e.day) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                std::fs::create_dir_all(path.parent().expect("day folder"))?;
                let mut opts = OpenOptions::new();
                opts.create(true).append(true);
                std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
                v.insert(BufWriter::with_capacity(64 * 1024, opts.open(&path)?))
            }
        };
        f.write_all(&bytes)?;
        let moves = verbatim && !explicit_parent;
        if moves {
            self.chain = IdChain::starting_at(Some(e.id.clone()));
            self.tip_day = Some(e.day);
        }
        let info = self.files.entry(e.day).or_default();
        info.last_start = info.offset;
        info.offset += bytes.len() as u64;
        info.last_hash = Some(line_hash(&bytes[..bytes.len() - 1]));
        info.has_implicit |= moves;
        self.rechain();
        self.known.insert(e.id.clone());
        if let Some(t) = self.touched.get_mut(&e.day) {
            t.ids.push(e.id.clone());
        }
        Ok(())
    }

    /// Recomputes each file's chain ends from its predecessor. Only the last
    /// file with implicit lines can move the chain, so a file without any
    /// passes it through.
    fn rechain(&mut self) {
        let tip = self.chain.implicit_parent().map(str::to_owned);
        let last_implicit = self
            .files
            .iter()
            .rev()
            .find(|(_, i)| i.has_implicit)
            .map(|(d, _)| *d);
        let mut prev = None;
        for (day, info) in self.files.iter_mut() {
            info.chain_before = prev;
            if Some(*day) == last_implicit {
                info.chain_after = tip.clone();
            } else if !info.has_implicit {
                info.chain_after = info.chain_before.clone();
            }
            prev = info.chain_after.clone();
        }
    }

    /// The state push should record for the file of `day`, as it is now.
    pub fn file_state(&self, day: Day) -> io::Result<Option<FileState>> {
        let Some(info) = self.files.get(&day) else {
            return Ok(None);
        };
        let st = Stat::of(&self.path(day))?;
        Ok(Some(FileState {
            size: st.size,
            mtime_ns: st.mtime_ns,
            ino: st.ino,
            offset: info.offset,
            last_start: info.last_start,
            last_hash: info.last_hash.clone(),
            chain_before: info.chain_before.clone(),
            chain_after: info.chain_after.clone(),
        }))
    }

    /// The files appended to since the last call.
    pub fn take_touched(&mut self) -> BTreeMap<Day, Touched> {
        std::mem::take(&mut self.touched)
    }

    /// Makes every append durable.
    pub fn sync(&mut self) -> io::Result<()> {
        for (_, f) in self.open.drain() {
            let f = f.into_inner().map_err(io::IntoInnerError::into_error)?;
            f.sync_all()?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Busy(#[from] Busy),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The line with `id` and `parentId` put in front (or wrapped, when it is
/// not a JSON object or would not read back with them), ending in `\n`.
fn with_ids(e: &Entry, has_id: bool, is_object: bool) -> Vec<u8> {
    let parent = serde_json::to_string(&e.parent).expect("string or null");
    let id = serde_json::to_string(&e.id).expect("string");
    if is_object {
        let out = fields_in_front(e, &id, &parent, has_id);
        // An object with an `id` that is not a string (`"id":null`) would
        // now hold `id` twice, which readers refuse as not JSON: then the
        // entry would read back under another id, and move the local chain.
        let back = parse_head(&out[..out.len() - 1]);
        if back.fault.is_none()
            && back.ids.id.as_deref() == Some(e.id.as_str())
            && back.ids.parent.as_ref() == Some(&e.parent)
        {
            return out;
        }
    }
    let raw = base64::engine::general_purpose::STANDARD.encode(&e.line);
    format!("{{\"id\":{id},\"parentId\":{parent},\"eviRawLine\":\"{raw}\"}}\n").into_bytes()
}

fn fields_in_front(e: &Entry, id: &str, parent: &str, has_id: bool) -> Vec<u8> {
    let brace = e
        .line
        .iter()
        .position(|&b| b == b'{')
        .expect("a JSON object");
    let rest = &e.line[brace + 1..];
    let empty = rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    let mut out = e.line[..=brace].to_vec();
    if !has_id {
        out.extend_from_slice(format!("\"id\":{id},").as_bytes());
    }
    out.extend_from_slice(format!("\"parentId\":{parent}").as_bytes());
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &[u8]) -> Entry {
        Entry {
            id: "abc".into(),
            parent: Some("p".into()),
            day: "2026-06-08".parse().unwrap(),
            line: line.to_vec(),
            line_blob: None,
        }
    }

    #[test]
    fn ids_go_in_front_and_read_back() {
        let out = with_ids(&entry(br#"{"role":"user","content":"x"}"#), false, true);
        assert_eq!(
            out,
            b"{\"id\":\"abc\",\"parentId\":\"p\",\"role\":\"user\",\"content\":\"x\"}\n"
        );
        let head = parse_head(&out[..out.len() - 1]);
        assert_eq!(head.ids.id.as_deref(), Some("abc"));
        assert_eq!(head.ids.parent, Some(Some("p".into())));
        assert_eq!(
            with_ids(&entry(b"{ }"), false, true),
            b"{\"id\":\"abc\",\"parentId\":\"p\" }\n"
        );
        assert_eq!(
            with_ids(&entry(br#"{"id":"abc","x":1}"#), true, true),
            b"{\"parentId\":\"p\",\"id\":\"abc\",\"x\":1}\n"
        );
    }

    #[test]
    fn objects_that_would_not_read_back_are_wrapped() {
        for line in [&br#"{"id":null,"x":1}"#[..], br#"{"id":7}"#] {
            let out = with_ids(&entry(line), false, true);
            let raw = &out[..out.len() - 1];
            assert!(parse_head(raw).wrapped, "{}", String::from_utf8_lossy(raw));
            assert_eq!(crate::transcript::line::original_bytes(raw).unwrap(), line);
        }
    }

    #[test]
    fn non_objects_are_wrapped() {
        let out = with_ids(&entry(b"not json"), false, false);
        assert_eq!(
            out,
            b"{\"id\":\"abc\",\"parentId\":\"p\",\"eviRawLine\":\"bm90IGpzb24=\"}\n"
        );
        let raw = &out[..out.len() - 1];
        assert!(parse_head(raw).wrapped);
        assert_eq!(
            crate::transcript::line::original_bytes(raw).unwrap(),
            b"not json"
        );
    }
}
