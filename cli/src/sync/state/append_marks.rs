//! `sync/appending`: the appends to transcripts that a sync command has
//! begun and not yet made durable, so that the next command can tell a line
//! a killed sync cut short from a line eVi is writing.
//!
//! # Why
//!
//! A kill (SIGKILL, an unhandled Ctrl-C, a shutdown) that lands inside
//! pull's `writev` stops the kernel's copy at a page boundary of the file:
//! the line being written is cut short, and the cursor has not moved past
//! its record. eVi writes those files too, so a file that ends mid-line is,
//! on its own, a line eVi is writing, which pull must leave alone (its
//! entries wait, `DESIGN.md`). Nor do the cut bytes prove themselves pull's
//! by starting like a pulled entry: lines of one role share their first
//! bytes. A mark does: pull was writing at that very offset of that very
//! file (its inode), and had bytes left to write when it stopped.
//!
//! # Promises
//!
//! - A mark is on disk before each append it covers starts, and is dropped
//!   ([`AppendMarks::clear`]) only once that append is durable. An append
//!   inside one page gets none: the kernel copies a page at a time and
//!   checks for a kill between pages, so such a write lands whole.
//! - [`AppendMarks::cut_by_kill`] names a partial line pull's own only when a
//!   mark an earlier command left covers it: the same file and inode, the
//!   line starting at or after where that append began, the file ending
//!   before where it would have ended, on a page boundary. The appender
//!   finishes such a line only when what it now plans for the file starts
//!   with exactly its bytes (see `sync::engine::apply`), so the finished line
//!   is the entry the killed pull was writing.
//! - Marks an earlier command left stay until the line they cover is
//!   finished or the file changed (each clear checks them against the file
//!   again): a push between the killed pull and the next passes the cut line
//!   by, and the next pull still finds it proven.
//!
//! Durability of the marks themselves: they are not fsynced (that would cost
//! a flush per append). A kill leaves them in the page cache, which is what
//! they are for. After a power cut a mark may be lost where the cut bytes
//! are not; then the line waits, as it did before marks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};

/// The page size a kill cuts a write at: the smallest of the systems eVi
/// runs on (larger pages and folios are multiples of it).
pub const PAGE: u64 = 4096;

/// Far more than one run's marks (one per append that spans a page, for a
/// page of records): a file longer than this is not all marks, and the rest
/// of it is not read.
const MAX_READ: u64 = 16 << 20;

/// One append begun: `len` bytes at `at` of `file` whose inode is `ino`.
/// `file` is a transcript's name under `transcripts/` (as
/// [`crate::sync::state::rel_name`] gives it), or another agent's session
/// file by its absolute path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Mark {
    file: String,
    ino: u64,
    at: u64,
    len: u64,
}

pub struct AppendMarks {
    file: File,
    transcripts: PathBuf,
    /// Marks of earlier commands still covering a cut line when opened.
    earlier: Vec<Mark>,
    /// Whether a mark was written since the last clear.
    recorded: AtomicBool,
}

impl AppendMarks {
    /// Opens `sync/appending` in `sync_dir` (under the sync lock: no other
    /// command writes it), keeping what earlier commands left that still
    /// covers a cut line of a file in `transcripts`.
    pub fn open(sync_dir: &Path, transcripts: &Path) -> io::Result<Self> {
        let path = sync_dir.join("appending");
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)?;
        let mut text = Vec::new();
        (&file).take(MAX_READ).read_to_end(&mut text)?;
        // A line that does not parse was cut by the kill itself, before its
        // append began: there is nothing of it to finish.
        let left = text
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice::<Mark>(line).ok());
        let mut me = Self {
            file,
            transcripts: transcripts.to_owned(),
            earlier: Vec::new(),
            recorded: AtomicBool::new(!text.is_empty()),
        };
        me.earlier = left.filter(|m| me.still_cut(m)).collect();
        me.clear()?;
        Ok(me)
    }

    /// Notes that `len` bytes are about to be appended at `at` to `file`
    /// (inode `ino`).
    pub fn record(&self, file: &str, ino: u64, at: u64, len: u64) -> io::Result<()> {
        if !crosses_page(at, len) {
            return Ok(());
        }
        let mark = Mark {
            file: file.to_owned(),
            ino,
            at,
            len,
        };
        let mut line = serde_json::to_vec(&mark).map_err(io::Error::other)?;
        line.push(b'\n');
        self.recorded.store(true, Ordering::Relaxed);
        // One small write with O_APPEND: marks written at once by the
        // threads that apply sessions land whole, one after another.
        (&self.file).write_all(&line)
    }

    /// Whether the partial line from `line_start` to the end of `file`
    /// (inode `ino`, `size` bytes) is what a killed sync left of an append
    /// (see the module's promises).
    fn cut_by_kill(&self, file: &str, ino: u64, size: u64, line_start: u64) -> bool {
        self.earlier
            .iter()
            .any(|m| m.file == file && m.ino == ino && covers(m, size, line_start))
    }

    /// The partial line from `line_start` to the end of `file` (inode `ino`,
    /// `size` bytes), when [`Self::cut_by_kill`] proves it a killed sync's.
    pub fn cut_line(
        &self,
        file: &str,
        ino: u64,
        size: u64,
        line_start: u64,
    ) -> io::Result<Option<Vec<u8>>> {
        if !self.cut_by_kill(file, ino, size, line_start) {
            return Ok(None);
        }
        let mut cut = vec![0; (size - line_start) as usize];
        match File::open(self.transcripts.join(file))?.read_exact_at(&mut cut, line_start) {
            Ok(()) => Ok(Some(cut)),
            // Shorter now: someone else changed it; the next check sees it.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Drops the marks of appends made durable since the last clear, and of
    /// cut lines since finished. Call only while no append is under way.
    pub fn clear(&self) -> io::Result<()> {
        if !self.recorded.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        self.file.set_len(0)?;
        let mut text = Vec::new();
        for m in self.earlier.iter().filter(|m| self.still_cut(m)) {
            text.extend(serde_json::to_vec(m).map_err(io::Error::other)?);
            text.push(b'\n');
        }
        if !text.is_empty() {
            self.recorded.store(true, Ordering::Relaxed);
            (&self.file).write_all(&text)?;
        }
        Ok(())
    }

    /// Whether the file `m` names still ends in a line its append left cut.
    fn still_cut(&self, m: &Mark) -> bool {
        let Ok(f) = File::open(self.transcripts.join(&m.file)) else {
            return false;
        };
        let Ok(meta) = f.metadata() else {
            return false;
        };
        let size = meta.len();
        let mut last = [0u8; 1];
        meta.ino() == m.ino
            && covers(m, size, m.at)
            && f.read_exact_at(&mut last, size - 1).is_ok()
            && last[0] != b'\n'
    }
}

/// Whether `len` bytes written at `at` cross a page boundary, so that a
/// kill can cut them.
fn crosses_page(at: u64, len: u64) -> bool {
    len > 0 && at / PAGE != (at + len - 1) / PAGE
}

/// The `EVI_PULL_CUT_AT` hook (see [`crate::test_hooks`]): ends the process
/// inside the n-th append that crosses a page boundary, once its bytes up to
/// the first boundary are written, as a kill inside the kernel's copy leaves
/// it. Called right before the append of `slices` at `at` to `f`; without
/// the `test-hooks` feature it does nothing.
pub fn cut_here_if_asked(f: &mut File, at: u64, slices: &[io::IoSlice<'_>]) {
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(nth) = crate::test_hooks::pull_cut_at() else {
        return;
    };
    let len: usize = slices.iter().map(|s| s.len()).sum();
    if !crosses_page(at, len as u64) {
        return;
    }
    if SEEN.fetch_add(1, Ordering::SeqCst) + 1 == nth {
        let bytes: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
        let upto = (PAGE - at % PAGE) as usize;
        let _ = f.write_all(&bytes[..upto]);
        std::process::abort();
    }
}

/// Whether an append `m` cut at `size` can have left the partial line that
/// starts at `line_start`.
fn covers(m: &Mark, size: u64, line_start: u64) -> bool {
    m.at <= line_start && m.at < size && size < m.at + m.len && size.is_multiple_of(PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "2026-06-08/s.jsonl";

    /// A home whose transcript `FILE` holds `bytes`; its inode.
    fn home(bytes: &[u8]) -> (tempfile::TempDir, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transcripts").join(FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::create_dir_all(dir.path().join("sync")).unwrap();
        std::fs::write(&path, bytes).unwrap();
        let ino = std::fs::metadata(&path).unwrap().ino();
        (dir, ino)
    }

    fn open(dir: &Path) -> AppendMarks {
        AppendMarks::open(&dir.join("sync"), &dir.join("transcripts")).unwrap()
    }

    /// 100 bytes of whole lines, then an append of 10,000 bytes cut at the
    /// first page boundary, mid-line.
    fn cut_home() -> (tempfile::TempDir, u64) {
        let mut bytes = vec![b'a'; 99];
        bytes.push(b'\n');
        bytes.resize(PAGE as usize, b'b');
        home(&bytes)
    }

    #[test]
    fn a_mark_left_by_an_earlier_command_proves_the_cut_line() {
        let (dir, ino) = cut_home();
        open(dir.path()).record(FILE, ino, 100, 10_000).unwrap();
        // The command is killed here; the next one opens the marks.
        let marks = open(dir.path());
        assert!(marks.cut_by_kill(FILE, ino, PAGE, 100));
        assert!(
            !marks.cut_by_kill(FILE, ino + 1, PAGE, 100),
            "another inode"
        );
        assert!(
            !marks.cut_by_kill(FILE, ino, PAGE, 50),
            "a line begun before"
        );
        assert!(!marks.cut_by_kill("2026-06-09/s.jsonl", ino, PAGE, 100));
        // Still proven by the command after, until the line is finished.
        marks.record(FILE, ino, 9000, 20_000).unwrap();
        marks.clear().unwrap();
        assert!(open(dir.path()).cut_by_kill(FILE, ino, PAGE, 100));
        let path = dir.path().join("transcripts").join(FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"b\n").unwrap();
        let marks = open(dir.path());
        assert!(!marks.cut_by_kill(FILE, ino, PAGE, 100));
        assert_eq!(
            std::fs::read(dir.path().join("sync/appending")).unwrap(),
            b""
        );
    }

    #[test]
    fn marks_of_this_command_and_of_whole_appends_prove_nothing() {
        let (dir, ino) = cut_home();
        let marks = open(dir.path());
        marks.record(FILE, ino, 100, 10_000).unwrap();
        assert!(
            !marks.cut_by_kill(FILE, ino, PAGE, 100),
            "this command's own"
        );
        marks.clear().unwrap();
        assert!(
            !open(dir.path()).cut_by_kill(FILE, ino, PAGE, 100),
            "cleared"
        );
        // An append that ended where the file ends was not cut.
        let mut bytes = vec![b'a'; 99];
        bytes.push(b'\n');
        bytes.resize(2 * PAGE as usize, b'b');
        let (dir, ino) = home(&bytes);
        open(dir.path())
            .record(FILE, ino, 100, 2 * PAGE - 100)
            .unwrap();
        assert!(
            !std::fs::read(dir.path().join("sync/appending"))
                .unwrap()
                .is_empty()
        );
        assert!(!open(dir.path()).cut_by_kill(FILE, ino, 2 * PAGE, 100));
    }

    #[test]
    fn an_end_off_a_page_boundary_or_a_whole_last_line_is_not_a_cut() {
        let (dir, ino) = home(&[b'x'; 5000]);
        open(dir.path()).record(FILE, ino, 0, 10_000).unwrap();
        assert!(!open(dir.path()).cut_by_kill(FILE, ino, 5000, 0));
        let mut bytes = vec![b'x'; PAGE as usize - 1];
        bytes.push(b'\n');
        let (dir, ino) = home(&bytes);
        open(dir.path()).record(FILE, ino, 0, 10_000).unwrap();
        assert!(!open(dir.path()).cut_by_kill(FILE, ino, PAGE, PAGE));
    }

    #[test]
    fn an_append_inside_one_page_leaves_no_mark() {
        let (dir, ino) = home(b"");
        let marks = open(dir.path());
        marks.record(FILE, ino, 10, 4000).unwrap();
        marks.record(FILE, ino, 0, PAGE).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("sync/appending")).unwrap(),
            b""
        );
        marks.record(FILE, ino, 10, PAGE).unwrap();
        assert!(
            !std::fs::read(dir.path().join("sync/appending"))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_marks_file_past_any_run_is_read_only_so_far() {
        let (dir, ino) = cut_home();
        open(dir.path()).record(FILE, ino, 100, 10_000).unwrap();
        let path = dir.path().join("sync/appending");
        let mut text = vec![b'x'; MAX_READ as usize];
        text.push(b'\n');
        text.extend(std::fs::read(&path).unwrap());
        std::fs::write(&path, text).unwrap();
        assert!(!open(dir.path()).cut_by_kill(FILE, ino, PAGE, 100));
        assert_eq!(std::fs::read(&path).unwrap(), b"", "and it is cleared");
    }

    #[test]
    fn a_damaged_marks_file_is_read_past() {
        let (dir, ino) = cut_home();
        open(dir.path()).record(FILE, ino, 100, 10_000).unwrap();
        let path = dir.path().join("sync/appending");
        let mut text = b"{\"file\":\"x\",\"in\n\0\0garbage\n".to_vec();
        text.extend(std::fs::read(&path).unwrap());
        text.extend(b"{\"file\":");
        std::fs::write(&path, text).unwrap();
        assert!(open(dir.path()).cut_by_kill(FILE, ino, PAGE, 100));
    }
}
