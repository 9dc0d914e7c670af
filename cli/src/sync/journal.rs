//! The checkpoint journal as each device's own stream.
//!
//! A device pushes the lines of its `checkpoints/journal.jsonl` and the
//! blobs they name, blobs first, so no device ever pulls a line whose blob is
//! not on the server. The stream is named for the device by
//! [`journal_name`], `<device name>-<short device id>`: names repeat (a
//! reinstall, two machines called `laptop`), the server's device id does
//! not. A line is identified by its journal and its content, never its
//! number: a rewind trims the journal and the lines after it reuse numbers,
//! so a journal that shrank or whose pushed part changed is simply read and
//! pushed again whole, and the server drops the lines it has by id.
//!
//! Other devices keep pulled journals apart, in
//! `checkpoints/devices/<journal name>/journal.jsonl` (format 1 records,
//! pushed before journals were named by device id, land under the bare
//! device name), and their blobs in the shared `checkpoints/blobs/` (named by
//! SHA-256, verified, never rewritten). A pulled line is appended when its
//! content is not in that file yet, so overlapping records (a re-push after a
//! rewind, a retried push) add each line once, and a device never applies its
//! own journal.
//!
//! # Promises
//!
//! - A pulled journal is written only by pull, holding the sync lock, and
//!   only by appending whole lines then fsyncing; the folders it creates are
//!   fsynced into their parents. All of it is durable before the caller saves
//!   the cursor past the records it came from.
//! - So bytes after a pulled journal's last newline can only be a line torn
//!   by a crash mid-append, and the cursor was not saved past its record:
//!   pull will bring that line again. Before appending, pull cuts the file
//!   back to its last newline (truncate, fsync), so a torn line never glues
//!   itself onto the next one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::OpenOptions;
use std::io;
use std::ops::ControlFlow;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use evi_shared::limits::MAX_ENTRY_IDS_PER_SEGMENT;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::sync::context::SyncContext;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::push::{Mark, PushReport, prefix_intact};
use crate::sync::state::{Account, JournalState, Stat, line_hash};
use crate::sync::uploader::Uploader;
use crate::sync::{JournalLine, seal_journal};
use crate::transcript::lines::walk_file;

/// How many characters of the server's device id a journal name keeps.
const SHORT_ID_LEN: usize = 8;
/// The longest journal name (the session id rule, as it names a folder).
const MAX_NAME_LEN: usize = 128;

/// This device's journal name, `<device name>-<short device id>`: the
/// stream it pushes to and the folder its journal lands in elsewhere.
pub fn journal_name(account: &Account) -> String {
    if let Some(kept) = &account.journal {
        return kept.clone();
    }
    let short = short_device_id(&account.device_id);
    let keep = MAX_NAME_LEN - 1 - short.len();
    let device: String = account.device.chars().take(keep).collect();
    format!("{device}-{short}")
}

/// The part of a server device id that tells devices apart in a folder
/// name: the last [`SHORT_ID_LEN`] letters and digits, lowercased. The end,
/// not the start: the server's ids are ULIDs, whose first ten characters are
/// the creation time (the first eight change only once a second, so two
/// devices logged in together would share them) and whose last sixteen are
/// random. An id with no letters or digits at all (never sent by
/// `evi-server`) falls back to the start of its SHA-256.
pub fn short_device_id(device_id: &str) -> String {
    let alnum: Vec<char> = device_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if alnum.is_empty() {
        return hex::encode(Sha256::digest(device_id.as_bytes()))[..SHORT_ID_LEN].to_owned();
    }
    alnum[alnum.len().saturating_sub(SHORT_ID_LEN)..]
        .iter()
        .collect()
}

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

pub(crate) fn push_journal(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    careful: bool,
) -> Result<(), SyncError> {
    let path = ctx.home.checkpoints_dir().join("journal.jsonl");
    let Ok(stat) = Stat::of(&path) else {
        return Ok(());
    };
    let name = journal_name(&ctx.account);
    let prev = ctx.state.journal.clone();
    // A journal pushed under another name (by a version that named journals
    // by device name alone) goes up once more in full under this one, so
    // other devices hold it whole in one folder.
    let same_name = prev.name.as_deref() == Some(name.as_str());
    if same_name && stat.matches(&prev.file) {
        return Ok(());
    }
    let resumable = same_name && stat.size >= prev.file.offset && prefix_intact(&path, &prev.file);
    // Read again whole after a rewind: most of it is on the server.
    let careful = careful || (!resumable && prev.name.is_some());
    let mut js = if resumable {
        prev
    } else {
        JournalState::default()
    };
    js.name = Some(name.clone());
    js.file.size = stat.size;
    js.file.mtime_ns = stat.mtime_ns;
    js.file.ino = stat.ino;
    let budget = up.segment_budget();
    let mut lines: Vec<JournalLine> = Vec::new();
    let mut bytes = 0;
    let mut failure = None;
    let start = js.file.offset;
    let end = walk_file(&path, start, |offset, raw| {
        js.lines += 1;
        js.file.last_start = offset;
        js.file.offset = offset + raw.len() as u64 + 1;
        js.file.last_hash = Some(line_hash(raw));
        bytes += raw.len();
        lines.push(JournalLine {
            seq: js.lines,
            line: raw.to_vec(),
        });
        // One entry id per line at most, and the server takes so many per segment.
        if bytes >= budget || lines.len() >= MAX_ENTRY_IDS_PER_SEGMENT {
            let mid = JournalState {
                file: js.file.mid_file(),
                ..js.clone()
            };
            if let Err(e) = send_lines(ctx, up, report, &name, &mut lines, mid, careful) {
                failure = Some(e);
                return ControlFlow::Break(());
            }
            bytes = 0;
        }
        ControlFlow::Continue(())
    })
    .ctx(|| format!("cannot read {}", path.display()))?;
    if let Some(e) = failure {
        return Err(e);
    }
    js.file.offset = end.offset;
    send_lines(ctx, up, report, &name, &mut lines, js, careful)
}

/// Uploads the blobs `lines` name, then queues the lines as one segment of
/// the journal `name`.
fn send_lines(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    name: &str,
    lines: &mut Vec<JournalLine>,
    mark: JournalState,
    careful: bool,
) -> Result<(), SyncError> {
    if careful {
        crate::sync::unfinished::drop_known_lines(ctx, name, lines)?;
    }
    if lines.is_empty() {
        up.mark("checkpoint journal".into(), vec![Mark::Journal(mark)]);
        return Ok(());
    }
    let shas: BTreeSet<String> = lines.iter().filter_map(|l| blob_of(&l.line)).collect();
    upload_blobs(ctx, report, shas)?;
    let sealed =
        seal_journal(&ctx.keys, &ctx.identity, name, lines).map_err(|e| SyncError::Io {
            context: "cannot seal the checkpoint journal".into(),
            source: std::io::Error::other(e),
        })?;
    // One per distinct line: identical lines are one entry.
    report.journal_lines += sealed.entry_ids.len() as u64;
    lines.clear();
    up.add(ctx, report, sealed, vec![Mark::Journal(mark)])
}

fn upload_blobs(
    ctx: &mut SyncContext,
    report: &mut PushReport,
    shas: BTreeSet<String>,
) -> Result<(), SyncError> {
    // Any size (in parts past the server's limit); one that cannot go up is
    // warned about, counted and remembered, and the lines still go.
    crate::sync::remote::blob_transfer::push_blobs(ctx, report, shas)
}

/// Pulled journals as this command has read them, so a journal arriving in
/// many records (over many pages) is read from disk once per pull, not once
/// per record. It lives in the [`SyncContext`] (one per command, under the
/// sync lock) behind a mutex, so the pull loop needs no new argument and
/// [`journal_blobs`] can look without a mutable borrow.
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

    /// The blobs named by the lines [`Self::apply`] would append.
    pub fn blobs(
        &self,
        checkpoints: &Path,
        name: &str,
        lines: &[JournalLine],
    ) -> io::Result<Vec<String>> {
        self.with(checkpoints, name, |p| {
            Ok(p.missing(lines)
                .into_iter()
                .filter_map(|l| blob_of(&l.line))
                .collect())
        })
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

/// Whether `name` is this device's own journal, which it never applies.
fn is_own(ctx: &SyncContext, name: &str) -> bool {
    name == journal_name(&ctx.account)
}

fn pulled_error(ctx: &SyncContext, name: &str) -> impl FnOnce() -> String {
    let dir = ctx.home.checkpoints_dir().join("devices").join(name);
    move || format!("cannot update the pulled journal in {}", dir.display())
}

/// Appends the lines of another device's journal `name` that are not here
/// yet (see [`PulledJournals::apply`]); returns how many it appended and
/// the blobs they name.
pub(crate) fn apply_journal(
    ctx: &mut SyncContext,
    name: &str,
    lines: Vec<JournalLine>,
) -> Result<(u64, Vec<String>), SyncError> {
    if is_own(ctx, name) {
        return Ok((0, Vec::new()));
    }
    ctx.journals
        .apply(&ctx.home.checkpoints_dir(), name, &lines)
        .ctx(pulled_error(ctx, name))
}

/// The blobs named by those of journal `name`'s lines that [`apply_journal`]
/// would append.
pub(crate) fn journal_blobs(
    ctx: &SyncContext,
    name: &str,
    lines: &[JournalLine],
) -> Result<Vec<String>, SyncError> {
    if is_own(ctx, name) {
        return Ok(Vec::new());
    }
    ctx.journals
        .blobs(&ctx.home.checkpoints_dir(), name, lines)
        .ctx(pulled_error(ctx, name))
}

/// How many of journal `name`'s lines are not here (none of this device's
/// own journal, which is never pulled).
pub(crate) fn journal_lines_missing(
    ctx: &SyncContext,
    name: &str,
    lines: &[JournalLine],
) -> Result<u64, SyncError> {
    if is_own(ctx, name) {
        return Ok(0);
    }
    ctx.journals
        .count_missing(&ctx.home.checkpoints_dir(), name, lines)
        .ctx(pulled_error(ctx, name))
}

/// Downloads, verifies and stores blobs that are not here yet (whole or in
/// parts); one the server lacks is warned about and remembered in the state,
/// and asked for again at every pull.
pub(crate) fn fetch_blobs(ctx: &mut SyncContext, shas: &[String]) -> Result<u64, SyncError> {
    crate::sync::remote::blob_transfer::pull_blobs(ctx, shas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::seal::segment::check_device;

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
    fn names_keep_the_random_end_of_the_device_id() {
        let acct = |device: &str, id: &str| Account {
            server: "s".into(),
            user: "u".into(),
            device: device.into(),
            device_id: id.into(),
            ..Account::default()
        };
        // Two ULIDs made in the same second share their first 8 characters.
        let a = journal_name(&acct("laptop", "01jxk3m9q4r8v2w6y05zb7x0qa"));
        let b = journal_name(&acct("laptop", "01jxk3m9q5aaaaaaaaaaaaaaaa"));
        assert_eq!(a, "laptop-5zb7x0qa");
        assert_ne!(a, b);
        assert_eq!(short_device_id("01JXK3M9Q4R8V2W6Y05ZB7X0QA"), "5zb7x0qa");
        assert_eq!(short_device_id("ab-c"), "abc");
        assert_eq!(short_device_id("--").len(), SHORT_ID_LEN);
        let long = journal_name(&acct(&"d".repeat(128), "01jxk3m9q4r8v2w6y05zb7x0qa"));
        assert_eq!(long.len(), MAX_NAME_LEN);
        assert!(long.ends_with("-5zb7x0qa"));
        for n in [a, b, long] {
            check_device(&n).unwrap();
        }
    }

    #[test]
    fn overlapping_segments_apply_each_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let cp = dir.path();
        let pj = PulledJournals::default();
        let first = [with_blob(1, "/a", 'a'), jl(2, "{\"seq\":2}")];
        assert_eq!(pj.blobs(cp, "laptop-1", &first).unwrap(), vec![sha('a')]);
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
        assert_eq!(pj.blobs(cp, "laptop-1", &again).unwrap(), vec![sha('b')]);
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
