//! Writing pulled entries into the transcripts, as `DESIGN.md` ("Pull never
//! rewrites a file") says.
//!
//! # Promises
//!
//! - Only appends, each entry to the file of its own day (or, when that file
//!   ends in a partial line abandoned by eVi for 24 hours, to the next day's
//!   file, with ids).
//! - **Verbatim** (byte for byte, so its derived id comes out the same here)
//!   only when its parent is the local implicit tip (for a session with no
//!   implicit line here: it is a first entry), its day is neither before the
//!   tip's day nor after this device's local date today, and no file of the
//!   session at or before that day ends in a partial line. Every other entry
//!   gets `id` and `parentId` at the front of its object (or is wrapped as
//!   `{"id":…,"parentId":…,"eviRawLine":"<base64>"}`), which never moves the
//!   implicit chain.
//! - **Never into a line being written**: right before each append, every
//!   file of the session must still be as this appender last saw it (size and
//!   inode, a newline at the end; files it did not know must still be
//!   absent). If eVi wrote meanwhile, the session is read again and the
//!   entries are decided again. An entry whose day file ends in a partial
//!   line is not written at all: [`Batch::waiting`] hands it back.
//! - After each append the file is `fstat`ed: [`Appended::after`] is the exact
//!   state of a file that holds what it held plus pull's bytes, and `None`
//!   when anything else grew it meanwhile, so push never takes a line that
//!   eVi wrote during a pull as pushed.
//!
//! - **Only into a quiet file**: the last check is made on the very handle
//!   the append writes through (opened `O_APPEND`), right before the one
//!   `write`: same inode and size as decided on, a newline as its last
//!   byte, and no write to it for [`QUIET`] (its mtime). A file eVi keeps
//!   writing is never quiet: its entries go on waiting in `sync/pending/`
//!   and are applied by a later sync once it is.
//!
//! - **A line a killed pull cut short is finished**, by the entry it was:
//!   when [`AppendMarks`] proves a file's partial line is what a killed
//!   sync left of its append, the first entry decided for that file must
//!   begin with exactly those bytes, and only the rest of it is written.
//!   Any other entry for that file waits, as for a line eVi is writing.
//!
//! What it cannot promise, and why what remains loses nothing: eVi does
//! not lock its files, so a write eVi begins in the microseconds between
//! that last check and pull's `write` (after a quiet spell of [`QUIET`])
//! still lands before pull's line. `O_APPEND` makes each of the two writes
//! land whole at the end of the file, never inside the other, so no byte of
//! either is lost or overwritten. The `fstat` after the write notices the
//! extra bytes and whether pull's line starts where it was checked to (right
//! after a newline): if not, the session is re-read, and an entry that does
//! not read back under its id is appended again, with ids, at a clean end;
//! the line eVi was writing keeps all its bytes, in order, around pull's.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io;
use std::io::IoSlice;
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use evi_shared::{Day, SessionId};

use crate::home::EviHome;
use crate::sync::Entry;
use crate::sync::engine::cores::on_all_cores;
use crate::sync::engine::gather::{Gathered, next_part};
use crate::sync::engine::id_set::IdSet;
use crate::sync::engine::pending::WaitReason;
use crate::sync::state::append_marks::{AppendMarks, cut_here_if_asked};
use crate::sync::state::{FileState, Stat, line_hash, rel_name};
use crate::transcript::entry_id::{IdChain, derive_id};
use crate::transcript::line::{explicit_ids, parse_head};
use crate::transcript::lines::walk_file;

/// Rounds of "decide, find the session changed, read it again" before the
/// rest of a batch waits for the next sync.
const ATTEMPTS: usize = 8;

/// How long a file must have gone unwritten before pull appends to it. eVi
/// writes a line in bursts microseconds to milliseconds apart; a file that
/// took no write for this long is between turns, so the chance that eVi
/// begins a line in the few microseconds of pull's check-then-write is
/// that window over eVi's pause, not over its write rate. Short enough that
/// a pull beside an idle session waits at most this once.
pub const QUIET: Duration = Duration::from_millis(50);

/// What one [`SessionAppender::append`] did.
enum Outcome {
    Written(Box<Appended>),
    /// The file is no longer as decided on: decide again.
    Changed,
    /// Written to less than [`QUIET`] ago: try again once it is quiet.
    Busy(Duration),
}

/// One append to one file.
#[derive(Debug)]
pub(crate) struct Appended {
    pub day: Day,
    /// `stat` right before the append (`None`: pull created the file).
    pub before: Option<Stat>,
    /// The file's exact state if it holds its old bytes plus pull's and
    /// nothing else; `None` if something else wrote meanwhile.
    pub after: Option<FileState>,
    pub ids: Vec<String>,
}

/// What a batch did.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub appended: Vec<Appended>,
    /// Entries that must wait, in their order of arrival.
    pub waiting: Vec<(Entry, WaitReason)>,
    pub verbatim: u64,
    pub branched: u64,
}

/// What this appender knows of one of the session's files.
#[derive(Debug, Clone, Default)]
struct FileInfo {
    /// What is on disk: `None` while the file does not exist.
    disk: Option<Disk>,
    chain_before: Option<String>,
    chain_after: Option<String>,
    /// Whether a line of the file moves the implicit chain.
    has_implicit: bool,
    /// End of the last complete line, counting planned appends.
    offset: u64,
    /// Bytes after `offset` that are not a complete line yet.
    partial: u64,
    /// Those bytes, when they are what a killed sync left of its append
    /// (see [`AppendMarks`]). Once an entry that begins with them is
    /// decided for this file, `partial` is 0 and this says how much of the
    /// planned bytes are on disk already.
    cut: Option<Vec<u8>>,
    last_start: u64,
    last_hash: Option<String>,
    /// The file as this appender's own last write left it, when nothing
    /// else wrote with it: a file still in that state was last written by
    /// pull, not eVi, so it needs no quiet spell (pages of one session
    /// arrive milliseconds apart, and waiting, then reading the session
    /// again, for each would slow a fresh pull of a long session).
    ours: Option<Disk>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Disk {
    size: u64,
    ino: u64,
    mtime: SystemTime,
}

impl Disk {
    fn of(m: &std::fs::Metadata) -> Self {
        Self {
            size: m.len(),
            ino: m.ino(),
            mtime: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        }
    }
}

/// Entries' bytes from which [`LineFacts`] are read on all cores.
pub(crate) const PARALLEL_FACTS_FROM: usize = 1 << 20;

/// What an entry's own bytes say, whatever the session here holds: its
/// explicit ids and whether it reads back under its id (the SHA-256 of a
/// derived id). Read once per entry, not once per attempt to place it.
/// Whether it is a JSON object matters only to an entry written with ids,
/// which is rare: [`with_ids`] parses those alone, not every line of a
/// page (a pass over each was 4% of a fresh pull's CPU).
/// Other agents' entries are read the same way, with their own explicit
/// ids ([`Self::with_ids`]).
pub(crate) struct LineFacts {
    /// A string `id` of its own.
    pub explicit_id: bool,
    /// Its `parentId`, when it has one (`Some(None)`: a root).
    pub explicit_parent: Option<Option<String>>,
    /// Written as it is, it reads back under its id: its own `id`, or the
    /// id derived from its bytes and its parent.
    pub id_reads_back: bool,
}

impl LineFacts {
    fn of(e: &Entry) -> Self {
        Self::with_ids(e, explicit_ids(&e.line))
    }

    /// The facts of `e`, whose line names `ids`.
    pub(crate) fn with_ids(e: &Entry, ids: crate::transcript::entry_id::ExplicitIds) -> Self {
        let id_reads_back = match &ids.id {
            Some(id) => *id == e.id,
            None => derive_id(e.parent.as_deref(), &e.line) == e.id,
        };
        Self {
            explicit_id: ids.id.is_some(),
            explicit_parent: ids.parent,
            id_reads_back,
        }
    }
}

/// How [`SessionAppender::decide`] places an entry.
enum Placed {
    /// The line as it is, and its newline.
    Verbatim,
    /// The line with `id` and `parentId` (or wrapped), its newline included.
    WithIds(Vec<u8>),
}

impl Placed {
    /// Bytes it adds to its file.
    fn len(&self, e: &Entry) -> usize {
        match self {
            Self::Verbatim => e.line.len() + 1,
            Self::WithIds(b) => b.len(),
        }
    }

    /// Whether its bytes begin with `cut` (a partial line: no newline).
    fn finishes(&self, e: &Entry, cut: &[u8]) -> bool {
        match self {
            Self::Verbatim => e.line.starts_with(cut),
            Self::WithIds(b) => b.starts_with(cut),
        }
    }
}

/// Bytes planned for one file.
struct Planned<'a> {
    bytes: Gathered<'a>,
    ids: Vec<String>,
    verbatim: u64,
}

/// One local session, ready to take pulled entries.
pub(crate) struct SessionAppender {
    pub session: SessionId,
    dir: PathBuf,
    marks: Arc<AppendMarks>,
    known: IdSet,
    chain: IdChain,
    tip_day: Option<Day>,
    files: BTreeMap<Day, FileInfo>,
    /// Read again before the next decision: something else wrote.
    stale: bool,
    /// Files appended to since [`Self::sync`], to fsync. Each append opens
    /// its file anew: a handle kept from before a re-read could point at a
    /// file that was since replaced.
    written: Vec<File>,
    /// Day folders in which this appender created a file: fsynced so the
    /// new name survives a crash as surely as the bytes in it.
    new_files_in: BTreeSet<PathBuf>,
    /// Times the session was read from disk: each is a whole session's
    /// bytes, so the tests hold it to what the case needs.
    reads: u32,
}

impl SessionAppender {
    /// Reads the session's current tree (ids, tip, file ends); `marks` are
    /// the appends under way and those a killed sync left cut.
    pub fn load(home: &EviHome, marks: Arc<AppendMarks>, session: &SessionId) -> io::Result<Self> {
        let mut me = Self {
            session: session.clone(),
            dir: home.transcripts_dir(),
            marks,
            known: IdSet::default(),
            chain: IdChain::default(),
            tip_day: None,
            files: BTreeMap::new(),
            stale: false,
            written: Vec::new(),
            new_files_in: BTreeSet::new(),
            reads: 0,
        };
        me.read()?;
        Ok(me)
    }

    fn read(&mut self) -> io::Result<()> {
        self.reads += 1;
        self.known.clear();
        self.chain = IdChain::default();
        self.tip_day = None;
        self.files.clear();
        for (day, path) in self.list_files()? {
            let Some(disk) = stat(&path)? else { continue };
            let mut info = FileInfo {
                disk: Some(disk),
                chain_before: self.chain.implicit_parent().map(str::to_owned),
                ..FileInfo::default()
            };
            let (chain, known, tip_day) = (&mut self.chain, &mut self.known, &mut self.tip_day);
            let mut last_len = None;
            let end = walk_file(&path, 0, |offset, raw| {
                let head = parse_head(raw);
                let moves = head.ids.parent.is_none();
                let placed = chain.place(raw, head.ids);
                if moves {
                    *tip_day = Some(day);
                    info.has_implicit = true;
                }
                info.last_start = offset;
                last_len = Some(raw.len());
                known.insert(&placed.id);
                ControlFlow::Continue(())
            })?;
            // Only the last line's hash is kept: read back once rather than
            // hashing every line of a session of hundreds of MB.
            if let Some(len) = last_len {
                info.last_hash = Some(hash_line_at(&path, info.last_start, len)?);
            }
            info.offset = end.offset;
            info.partial = end.pending_bytes;
            if info.partial > 0 && disk.size == end.offset + end.pending_bytes {
                let rel = rel_name(day, &self.session);
                info.cut = (self.marks).cut_line(&rel, disk.ino, disk.size, end.offset)?;
            }
            // The walk read further than the stat saw: the file grew while
            // being read. Take what was read; the next check notices.
            info.chain_after = self.chain.implicit_parent().map(str::to_owned);
            self.files.insert(day, info);
        }
        self.stale = false;
        Ok(())
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

    /// Whether every file is still as last seen, and each day in `absent`
    /// (days this appender has no file for) still has none.
    fn unchanged(&self, absent: impl IntoIterator<Item = Day>) -> io::Result<bool> {
        for (day, info) in &self.files {
            let Some(disk) = info.disk else { continue };
            let path = self.path(*day);
            let Some(now) = stat(&path)? else {
                return Ok(false);
            };
            if now.size != disk.size || now.ino != disk.ino {
                return Ok(false);
            }
            let whole = info.partial == 0 && info.cut.is_none();
            if whole && disk.size > 0 && !ends_in_newline(&path, disk.size)? {
                return Ok(false);
            }
        }
        for day in absent {
            if self.files.get(&day).is_none_or(|i| i.disk.is_none()) && self.path(day).exists() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Appends what can be appended of `entries` (in order), re-deciding
    /// whenever the files changed under it; hands back what must wait.
    ///
    /// In parts of about [`WRITE_BYTES`](super::gather::WRITE_BYTES) ([`next_part`]): each part's bytes go to each file
    /// in one `writev` (so no line of eVi's lands between two of pull's),
    /// long lines from the entries themselves and short ones copied (see
    /// [`Gathered`]), and the copies of a page of one long session are
    /// held a part at a time, not for the whole page. Each part is decided and
    /// checked against the files as a whole batch is; a part that must
    /// wait is followed by parts that wait too (the files say so).
    pub fn apply(&mut self, entries: &[Entry], today: Day) -> io::Result<Batch> {
        let mut batch = Batch::default();
        let mut rest = entries;
        while !rest.is_empty() {
            let (part, after) = next_part(rest);
            let (b, gave_up) = self.apply_part(part, today)?;
            batch.appended.extend(b.appended);
            batch.waiting.extend(b.waiting);
            batch.verbatim += b.verbatim;
            batch.branched += b.branched;
            rest = after;
            if gave_up {
                // eVi keeps writing: the rest waits with the part, rather
                // than each part trying as long again.
                let left = rest.iter().filter(|e| !self.known.contains(&e.id));
                (batch.waiting).extend(left.map(|e| (e.clone(), WaitReason::PartialLine)));
                break;
            }
        }
        Ok(batch)
    }

    /// [`Self::apply`] of one part; `true` when the files kept changing
    /// and what is left of the part waits.
    fn apply_part(&mut self, entries: &[Entry], today: Day) -> io::Result<(Batch, bool)> {
        let mut batch = Batch::default();
        // What each entry's bytes say, read once for all attempts; on all
        // cores when there is enough of it (one long session fills whole
        // pages, and this is most of deciding).
        let bytes: usize = entries.iter().map(|e| e.line.len()).sum();
        let facts = if bytes >= PARALLEL_FACTS_FROM {
            on_all_cores(entries, LineFacts::of)
        } else {
            entries.iter().map(LineFacts::of).collect()
        };
        for _ in 0..ATTEMPTS {
            if self.stale || !self.unchanged([today])? {
                self.read()?;
            }
            let mut plan: BTreeMap<Day, Planned> = BTreeMap::new();
            batch.waiting.clear();
            for (e, facts) in entries.iter().zip(&facts) {
                if self.known.contains(&e.id) {
                    continue;
                }
                debug_assert!(
                    e.line_blob.is_none(),
                    "a line blob is fetched before it is applied"
                );
                match self.decide(e, facts, today) {
                    Err(reason) => batch.waiting.push((e.clone(), reason)),
                    Ok((day, placed)) => {
                        let p = plan.entry(day).or_insert_with(|| Planned {
                            bytes: Gathered::new(),
                            ids: Vec::new(),
                            verbatim: 0,
                        });
                        match placed {
                            // Written from the entry itself when long.
                            Placed::Verbatim => {
                                p.bytes.push_line(&e.line);
                                p.verbatim += 1;
                            }
                            Placed::WithIds(bytes) => p.bytes.push_built(bytes),
                        }
                        p.ids.push(e.id.clone());
                    }
                }
            }
            let mut clean = true;
            // In day order, so a file's recorded chain start is on disk.
            for (day, p) in plan {
                if !self.unchanged([day, today])? {
                    clean = false;
                    break;
                }
                let (verbatim, branched) = (p.verbatim, p.ids.len() as u64 - p.verbatim);
                match self.append(day, p)? {
                    Outcome::Written(a) => batch.appended.push(*a),
                    Outcome::Changed => {
                        clean = false;
                        break;
                    }
                    Outcome::Busy(wait) => {
                        std::thread::sleep(wait);
                        clean = false;
                        break;
                    }
                }
                batch.verbatim += verbatim;
                batch.branched += branched;
                if self.stale {
                    clean = false;
                    break;
                }
            }
            if clean {
                return Ok((batch, false));
            }
            // Read again and decide again: what was written reads back as
            // known.
            self.stale = true;
        }
        // eVi keeps writing: what is left waits for the next sync.
        self.read()?;
        batch.waiting = entries
            .iter()
            .filter(|e| !self.known.contains(&e.id))
            .map(|e| (e.clone(), WaitReason::PartialLine))
            .collect();
        Ok((batch, true))
    }

    /// Where and how one entry goes, updating the tip and file ends as if it
    /// were written; `Err` when it must wait.
    fn decide(
        &mut self,
        e: &Entry,
        facts: &LineFacts,
        today: Day,
    ) -> Result<(Day, Placed), WaitReason> {
        let mut day = e.day;
        let mut forced = false;
        // A line a killed pull cut short in the entry's own file: decided as
        // if the file were whole, and kept so only if this entry finishes it.
        let cut = (self.files.get_mut(&day))
            .filter(|i| i.partial > 0 && i.cut.is_some())
            .map(|i| std::mem::replace(&mut i.partial, 0));
        while let Some(info) = self.files.get(&day).filter(|i| i.partial > 0) {
            if !abandoned(info) {
                return Err(WaitReason::PartialLine);
            }
            // eVi died mid-line: that file can never take a line again.
            day = next_day(day);
            forced = true;
        }
        let explicit_parent = facts.explicit_parent.is_some();
        let partial_before = self.files.range(..=day).any(|(_, i)| i.partial > 0);
        let reads_back = if explicit_parent {
            facts.explicit_parent.as_ref() == Some(&e.parent)
        } else {
            e.parent.as_deref() == self.chain.implicit_parent()
                && self.tip_day.is_none_or(|t| day >= t)
                && day <= today
                && !partial_before
        };
        let verbatim = !forced && facts.id_reads_back && reads_back;
        let placed = if verbatim {
            Placed::Verbatim
        } else {
            let is_object = parse_head(&e.line).fault.is_none();
            Placed::WithIds(with_ids(e, facts.explicit_id, is_object))
        };
        if let Some(partial) = cut {
            let info = self.files.get_mut(&day).expect("the cut file");
            if !placed.finishes(e, info.cut.as_deref().expect("cut bytes")) {
                info.partial = partial;
                return Err(WaitReason::PartialLine);
            }
        }
        let moves = verbatim && !explicit_parent;
        if moves {
            self.chain = IdChain::starting_at(Some(e.id.clone()));
            self.tip_day = Some(day);
        }
        let info = self.files.entry(day).or_default();
        info.last_start = info.offset;
        info.offset += placed.len(e) as u64;
        // Hashed once per file, from the planned bytes, by `append`.
        info.last_hash = None;
        info.has_implicit |= moves;
        self.rechain();
        self.known.insert(&e.id);
        Ok((day, placed))
    }

    /// Writes one file's planned bytes in one `writev`, if the file is still
    /// as decided on and quiet (checked on the handle written through), then
    /// checks that the file grew by exactly those bytes.
    fn append(&mut self, day: Day, p: Planned<'_>) -> io::Result<Outcome> {
        let path = self.path(day);
        let dir = path.parent().expect("day folder").to_owned();
        let info = self.files.get(&day).cloned().unwrap_or_default();
        let before_disk = info.disk;
        if before_disk.is_none() {
            crate::fsutil::create_dir_all_durable(&dir)?;
            self.new_files_in.insert(dir);
        }
        // Readable too: the last checks and the one after read through it.
        let mut f = OpenOptions::new()
            .read(true)
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        let before = match before_disk {
            Some(_) => Some(Stat::of(&path)?),
            None => None,
        };
        let old = before_disk.map_or(0, |d| d.size);
        // Planned bytes on disk already: the start of a line a killed pull
        // cut short, which the first entry planned here finishes.
        let done = info
            .cut
            .as_ref()
            .filter(|_| info.partial == 0)
            .map_or(0, Vec::len);
        let len = (p.bytes.len() - done) as u64;
        let mut slices = p.bytes.slices();
        let mut rest = &mut slices[..];
        IoSlice::advance_slices(&mut rest, done);
        // The mark goes first, from where the planned bytes start (so that a
        // kill inside the write that finishes a cut line is proven the same
        // way): written between the last look and the write, it widened the
        // window in which eVi's next line could land first. A mark of an
        // append that does not happen proves nothing (see AppendMarks).
        let rel = rel_name(day, &self.session);
        let ino = f.metadata()?.ino();
        (self.marks).record(&rel, ino, old - done as u64, p.bytes.len() as u64)?;
        // The last look before the write, through the handle itself: a
        // rename or replace of the path since cannot fool it.
        let now = f.metadata()?;
        let as_decided = now.len() == old && before_disk.is_none_or(|d| now.ino() == d.ino);
        if !as_decided || (old > 0 && done == 0 && !last_byte_is_newline(&f, old)?) {
            self.stale = true;
            return Ok(Outcome::Changed);
        }
        // Quiet unless the file is exactly as pull's own last write left it
        // (a recent mtime there is pull's, and eVi's next write would have
        // changed size and mtime).
        if old > 0 && info.ours != Some(Disk::of(&now)) {
            let age = now
                .modified()
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or_default();
            if age < QUIET {
                return Ok(Outcome::Busy(QUIET - age));
            }
        }
        cut_here_if_asked(&mut f, old, rest);
        let written = crate::fsutil::append_slices_all_or_none(&mut f, old, rest);
        if let Err(e) = written {
            // A file this append made and then took back leaves no trace.
            if before_disk.is_none() && f.metadata().is_ok_and(|m| m.len() == 0) {
                let _ = std::fs::remove_file(&path);
            }
            return Err(e);
        }
        let m = f.metadata()?;
        let exact = m.len() == old + len;
        // Not exact: eVi wrote too. Harmless when pull's line begins where
        // it was checked (at `old`, right after a newline) and eVi's bytes
        // came after it; if eVi's came first, pull's line is glued to them.
        // Either way the session is read again below (`stale`), and an
        // entry that does not read back under its id is written again.
        let glued = !exact && !landed_at(&f, old - done as u64, &p.bytes)?;
        crate::fsutil::start_writeback(&f, old, len);
        self.written.push(f);
        let info = self.files.get_mut(&day).expect("planned file");
        info.cut = None;
        info.disk = Some(Disk::of(&m));
        info.ours = exact.then(|| Disk::of(&m));
        info.last_hash = Some(line_hash(p.bytes.last_line()));
        let after = exact.then(|| FileState {
            size: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ino: m.ino(),
            offset: info.offset,
            last_start: info.last_start,
            last_hash: info.last_hash.clone(),
            chain_before: info.chain_before.clone(),
            chain_after: info.chain_after.clone(),
        });
        if !exact || glued {
            // Someone else wrote too: what the file holds now is unknown.
            self.stale = true;
        }
        Ok(Outcome::Written(Box::new(Appended {
            day,
            before,
            after,
            ids: p.ids,
        })))
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

    /// Hands over what the caller must make durable, which syncs many
    /// sessions' writes together: the files written since (returned), and
    /// the day folders that got new files (added to `dirs`, once each however
    /// many sessions created a file there; new day folders themselves were
    /// made durable when created).
    pub fn take_unsynced(&mut self, dirs: &mut BTreeSet<PathBuf>) -> Vec<File> {
        dirs.append(&mut self.new_files_in);
        std::mem::take(&mut self.written)
    }
}

/// The hash of the line of `len` bytes at `start` (its newline not
/// counted), as [`line_hash`] gives it.
fn hash_line_at(path: &std::path::Path, start: u64, len: usize) -> io::Result<String> {
    let mut raw = vec![0; len];
    File::open(path)?.read_exact_at(&mut raw, start)?;
    Ok(line_hash(&raw))
}

fn stat(path: &std::path::Path) -> io::Result<Option<Disk>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Disk::of(&m))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the byte of `f` at `size - 1` is a newline (`size` > 0).
fn last_byte_is_newline(f: &File, size: u64) -> io::Result<bool> {
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, size - 1)?;
    Ok(b[0] == b'\n')
}

/// Whether `bytes` are in `f` at `at`.
fn landed_at(f: &File, at: u64, bytes: &Gathered<'_>) -> io::Result<bool> {
    let mut got = vec![0u8; bytes.len()];
    match f.read_exact_at(&mut got, at) {
        Ok(()) => Ok(bytes.equals(&got)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether the file's byte at `size - 1` is a newline (`size` > 0).
pub fn ends_in_newline(path: &std::path::Path, size: u64) -> io::Result<bool> {
    let mut b = [0u8; 1];
    File::open(path)?.read_exact_at(&mut b, size - 1)?;
    Ok(b[0] == b'\n')
}

/// A partial line whose file was not touched for
/// [`ABANDONED_AFTER`](crate::sync::engine::pending::ABANDONED_AFTER).
fn abandoned(info: &FileInfo) -> bool {
    info.disk
        .is_some_and(|d| crate::sync::engine::pending::abandoned(d.mtime))
}

/// The day after `day`.
pub fn next_day(day: Day) -> Day {
    let (y, m, d) = day.ymd();
    chrono::NaiveDate::from_ymd_opt(y as i32, m, d)
        .and_then(|date| date.succ_opt())
        .map(|date| {
            date.format("%Y-%m-%d")
                .to_string()
                .parse()
                .expect("a formatted date is a day")
        })
        .unwrap_or(day)
}

/// This device's local date, where eVi writes its next lines.
pub fn local_today() -> Day {
    chrono::Local::now()
        .format("%Y-%m-%d")
        .to_string()
        .parse()
        .expect("a formatted date is a day")
}

/// The line with `id` and `parentId` put in front (or wrapped, when it is
/// not a JSON object or would not read back with them), ending in `\n`.
pub(crate) fn with_ids(e: &Entry, has_id: bool, is_object: bool) -> Vec<u8> {
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
    let mut out = Vec::with_capacity(e.line.len() + id.len() + parent.len() + 24);
    out.extend_from_slice(&e.line[..=brace]);
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
    use std::io::Write;

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

    fn day(s: &str) -> Day {
        s.parse().unwrap()
    }

    /// An appender of session `s` in `home`, with the marks a killed sync
    /// left there.
    fn load(home: &EviHome) -> SessionAppender {
        let sync = home.root().join("sync");
        std::fs::create_dir_all(&sync).unwrap();
        let marks = AppendMarks::open(&sync, &home.transcripts_dir()).unwrap();
        SessionAppender::load(home, Arc::new(marks), &"s".parse().unwrap()).unwrap()
    }

    /// A home with `files` (day, bytes) of session `s`, and an appender.
    fn home(files: &[(&str, &[u8])]) -> (tempfile::TempDir, EviHome, SessionAppender) {
        let dir = tempfile::tempdir().unwrap();
        let home = EviHome::new(dir.path());
        for (d, bytes) in files {
            let p = home.transcripts_dir().join(d).join("s.jsonl");
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        let a = load(&home);
        (dir, home, a)
    }

    fn next(parent: Option<&str>, d: &str, line: &[u8]) -> Entry {
        Entry {
            id: derive_id(parent, line),
            parent: parent.map(str::to_owned),
            day: day(d),
            line: line.to_vec(),
            line_blob: None,
        }
    }

    fn read(home: &EviHome, d: &str) -> Vec<u8> {
        std::fs::read(home.transcripts_dir().join(d).join("s.jsonl")).unwrap_or_default()
    }

    const L1: &[u8] = br#"{"role":"user","content":"one"}"#;
    const L2: &[u8] = br#"{"role":"user","content":"two"}"#;

    #[test]
    fn continuing_the_tip_is_verbatim_and_a_later_day_than_today_is_not() {
        let first = [L1, b"\n"].concat();
        let (_d, home, mut a) = home(&[("2026-06-08", &first)]);
        let tip = derive_id(None, L1);
        let e = next(Some(&tip), "2026-06-09", L2);
        // This device is still on the 8th: the 9th is its future.
        let b = a
            .apply(std::slice::from_ref(&e), day("2026-06-08"))
            .unwrap();
        assert_eq!((b.verbatim, b.branched), (0, 1));
        assert!(read(&home, "2026-06-09").starts_with(b"{\"id\":"));
        let (_d, home, mut a) = self::home(&[("2026-06-08", &first)]);
        let b = a
            .apply(std::slice::from_ref(&e), day("2026-06-09"))
            .unwrap();
        assert_eq!((b.verbatim, b.branched), (1, 0));
        assert_eq!(read(&home, "2026-06-09"), [L2, b"\n"].concat());
        let st = b.appended[0].after.as_ref().expect("exact state");
        assert_eq!(st.offset, L2.len() as u64 + 1);
        assert_eq!(st.chain_before.as_deref(), Some(tip.as_str()));
        assert_eq!(st.chain_after.as_deref(), Some(e.id.as_str()));
    }

    #[test]
    fn a_partial_line_makes_its_day_wait_and_later_days_take_ids() {
        let (_d, home, mut a) = home(&[("2026-06-08", b"{\"role\":\"user\",\"con")]);
        let e8 = next(None, "2026-06-08", L1);
        let e9 = next(Some(&e8.id), "2026-06-09", L2);
        let b = a
            .apply(&[e8.clone(), e9.clone()], day("2026-06-09"))
            .unwrap();
        assert_eq!(b.waiting.len(), 1);
        assert_eq!(b.waiting[0].0, e8);
        assert_eq!(b.branched, 1, "the 9th reads after a line not finished yet");
        assert_eq!(read(&home, "2026-06-08"), b"{\"role\":\"user\",\"con");
        assert!(read(&home, "2026-06-09").starts_with(b"{\"id\":"));
    }

    #[test]
    fn a_line_written_after_loading_is_noticed_before_appending() {
        let first = [L1, b"\n"].concat();
        let (_d, home, mut a) = home(&[("2026-06-08", &first)]);
        let tip = derive_id(None, L1);
        let path = home.transcripts_dir().join("2026-06-08/s.jsonl");
        // eVi starts a line after pull read the session.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"role\":")
            .unwrap();
        let e = next(Some(&tip), "2026-06-08", L2);
        let b = a
            .apply(std::slice::from_ref(&e), day("2026-06-08"))
            .unwrap();
        assert_eq!(b.waiting.len(), 1);
        assert_eq!(
            read(&home, "2026-06-08"),
            [&first[..], b"{\"role\":"].concat()
        );
        // eVi finishes it: the pulled entry no longer continues the tip.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"\"x\"}\n")
            .unwrap();
        let b = a
            .apply(std::slice::from_ref(&e), day("2026-06-08"))
            .unwrap();
        assert_eq!((b.verbatim, b.branched, b.waiting.len()), (0, 1, 0));
        let again = load(&home);
        assert!(again.has(&e.id), "the entry reads back under its own id");
    }

    /// Pages of one session come milliseconds apart: a file pull itself
    /// just wrote is not eVi's busy file, so the next page goes straight
    /// in, without a quiet spell or a second read of the session (a fresh
    /// pull of 60 one-record pages took 2.9 s that way, 0.4 s now).
    #[test]
    fn a_file_pull_just_wrote_takes_the_next_page_at_once() {
        let first = [L1, b"\n"].concat();
        let (_d, home, mut a) = home(&[("2026-06-08", &first)]);
        let path = home.transcripts_dir().join("2026-06-08/s.jsonl");
        let quiet = SystemTime::now() - QUIET * 4;
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(quiet)
            .unwrap();
        let e2 = next(Some(&derive_id(None, L1)), "2026-06-08", L2);
        let l3 = br#"{"role":"user","content":"three"}"#;
        let e3 = next(Some(&e2.id), "2026-06-08", l3);
        for e in [&e2, &e3] {
            let b = a.apply(std::slice::from_ref(e), day("2026-06-08")).unwrap();
            assert_eq!((b.verbatim, b.waiting.len()), (1, 0));
        }
        assert_eq!(a.reads, 1, "the session was read once, at load");
        assert_eq!(
            read(&home, "2026-06-08"),
            [&first[..], L2, b"\n", l3, b"\n"].concat()
        );
    }

    #[test]
    fn an_abandoned_partial_line_sends_entries_to_the_next_day_with_ids() {
        let (_d, home, _) = home(&[("2026-06-08", b"{\"cut")]);
        let path = home.transcripts_dir().join("2026-06-08/s.jsonl");
        let old = SystemTime::now()
            - crate::sync::engine::pending::ABANDONED_AFTER
            - Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let mut a = load(&home);
        let e = next(None, "2026-06-08", L1);
        let b = a
            .apply(std::slice::from_ref(&e), day("2026-06-10"))
            .unwrap();
        assert_eq!((b.waiting.len(), b.branched), (0, 1));
        assert_eq!(read(&home, "2026-06-08"), b"{\"cut");
        assert!(read(&home, "2026-06-09").starts_with(b"{\"id\":"));
    }

    /// A home where a killed pull left `long` cut at the first page
    /// boundary after `first` (and its mark, unless `marked` is false).
    fn cut_home(first: &[u8], long: &[u8], marked: bool) -> (tempfile::TempDir, EviHome) {
        let (dir, home, _) = home(&[("2026-06-08", first)]);
        let path = home.transcripts_dir().join("2026-06-08/s.jsonl");
        let ino = std::fs::metadata(&path).unwrap().ino();
        if marked {
            let sync = home.root().join("sync");
            std::fs::create_dir_all(&sync).unwrap();
            let marks = AppendMarks::open(&sync, &home.transcripts_dir()).unwrap();
            let at = first.len() as u64;
            marks
                .record("2026-06-08/s.jsonl", ino, at, long.len() as u64 + 1)
                .unwrap();
        }
        let upto = crate::sync::state::append_marks::PAGE as usize - first.len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&long[..upto]).unwrap();
        (dir, home)
    }

    fn long_line(role: &str) -> Vec<u8> {
        format!(r#"{{"role":"{role}","content":"{}"}}"#, "x".repeat(10_000)).into_bytes()
    }

    #[test]
    fn a_line_a_killed_pull_cut_is_finished_by_the_entry_it_was() {
        let first = [L1, b"\n"].concat();
        let long = long_line("assistant");
        let (_d, home) = cut_home(&first, &long, true);
        let mut a = load(&home);
        let e = next(Some(&derive_id(None, L1)), "2026-06-08", &long);
        let b = a
            .apply(std::slice::from_ref(&e), day("2026-06-08"))
            .unwrap();
        assert_eq!((b.verbatim, b.branched, b.waiting.len()), (1, 0, 0));
        let whole = [&first[..], &long, b"\n"].concat();
        assert_eq!(read(&home, "2026-06-08"), whole);
        let st = b.appended[0].after.as_ref().expect("exact state");
        assert_eq!(
            (st.size, st.offset),
            (whole.len() as u64, whole.len() as u64)
        );
        assert_eq!(st.last_start, first.len() as u64);
        assert!(load(&home).has(&e.id), "it reads back under its own id");
    }

    #[test]
    fn a_cut_line_waits_unless_marked_and_finished_by_the_entry() {
        let first = [L1, b"\n"].concat();
        let long = long_line("assistant");
        let tip = derive_id(None, L1);
        // Proven cut, but this entry's bytes do not begin with it; nor do
        // they when it goes with ids (a branch from the root).
        let other = next(Some(&tip), "2026-06-08", &long_line("user"));
        let branch = next(None, "2026-06-08", &long);
        let (_d, home) = cut_home(&first, &long, true);
        let before = read(&home, "2026-06-08");
        for e in [&other, &branch] {
            let b = load(&home)
                .apply(std::slice::from_ref(e), day("2026-06-08"))
                .unwrap();
            assert_eq!(b.waiting.len(), 1);
            assert_eq!(read(&home, "2026-06-08"), before);
        }
        // The entry it was, but no mark: eVi's line, for all pull knows.
        let (_d, home) = cut_home(&first, &long, false);
        let e = next(Some(&tip), "2026-06-08", &long);
        let b = load(&home)
            .apply(std::slice::from_ref(&e), day("2026-06-08"))
            .unwrap();
        assert_eq!(b.waiting.len(), 1);
        assert_eq!(read(&home, "2026-06-08"), before);
    }

    #[test]
    fn next_day_rolls_over_months_and_years() {
        assert_eq!(next_day(day("2026-12-31")), day("2027-01-01"));
        assert_eq!(next_day(day("2028-02-28")), day("2028-02-29"));
    }
}
