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

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use evi_shared::limits::MAX_ENTRY_IDS_PER_SEGMENT;
use sha2::{Digest, Sha256};

use crate::sync::engine::blobs::{BlobsAhead, push_blobs};
use crate::sync::engine::push_report::{Mark, PushReport};
use crate::sync::engine::uploader::Uploader;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::progress::Progress;
use crate::sync::state::context::SyncContext;
use crate::sync::state::pulled_journals::blob_of;
use crate::sync::state::{Account, JournalState, Stat, line_hash, prefix_intact};
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

/// What of the journal a push reads: where it is, its stat, the state to
/// go on from, and whether the server may hold some of it already.
struct JournalTail {
    path: std::path::PathBuf,
    stat: Stat,
    name: String,
    from: JournalState,
    careful: bool,
}

/// The part of the journal a push sends, or `None` when it is as the last
/// push left it (or there is none).
fn journal_tail(ctx: &SyncContext, careful: bool) -> Option<JournalTail> {
    let path = ctx.home.checkpoints_dir().join("journal.jsonl");
    let stat = Stat::of(&path).ok()?;
    let name = journal_name(&ctx.account);
    let prev = ctx.state.journal.clone();
    // A journal pushed under another name (by a version that named journals
    // by device name alone) goes up once more in full under this one, so
    // other devices hold it whole in one folder.
    let same_name = prev.name.as_deref() == Some(name.as_str());
    if same_name && stat.matches(&prev.file) {
        return None;
    }
    let resumable = same_name && stat.size >= prev.file.offset && prefix_intact(&path, &prev.file);
    // Read again whole after a rewind: most of it is on the server.
    let careful = careful || (!resumable && prev.name.is_some());
    let from = if resumable {
        prev
    } else {
        JournalState::default()
    };
    Some(JournalTail {
        path,
        stat,
        name,
        from,
        careful,
    })
}

/// The blobs named by the journal lines the next [`push_journal`] sends,
/// for uploading ahead (see [`BlobsAhead`]); none when the server may hold
/// some of those lines already (their blobs are asked about then).
pub(crate) fn blobs_ahead(ctx: &SyncContext, careful: bool) -> BTreeSet<String> {
    let mut shas = BTreeSet::new();
    let Some(tail) = journal_tail(ctx, careful).filter(|t| !t.careful) else {
        return shas;
    };
    // A journal that cannot be read now fails where it is pushed.
    let _ = walk_file(&tail.path, tail.from.file.offset, |_, raw| {
        shas.extend(blob_of(raw));
        ControlFlow::Continue(())
    });
    shas
}

pub(crate) fn push_journal(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    careful: bool,
    progress: &dyn Progress,
    ahead: &mut BlobsAhead,
) -> Result<(), SyncError> {
    let Some(JournalTail {
        path,
        stat,
        name,
        from: mut js,
        careful,
    }) = journal_tail(ctx, careful)
    else {
        return Ok(());
    };
    js.name = Some(name.clone());
    js.file.size = stat.size;
    js.file.mtime_ns = stat.mtime_ns;
    js.file.ino = stat.ino;
    let mut how = Sending {
        name: &name,
        careful,
        progress,
        ahead,
    };
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
            if let Err(e) = send_lines(ctx, up, report, &mut how, &mut lines, mid) {
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
    send_lines(ctx, up, report, &mut how, &mut lines, js)
}

/// What stays the same for every segment of one journal push.
struct Sending<'a> {
    /// The journal's name ([`journal_name`]).
    name: &'a str,
    /// Ask the server which lines it has before sending them.
    careful: bool,
    /// Where a blob that could not go up is told of.
    progress: &'a dyn Progress,
    /// Blob uploads started ahead of the lines.
    ahead: &'a mut BlobsAhead,
}

/// Uploads the blobs `lines` name, then queues the lines as one segment of
/// the journal `how.name`.
fn send_lines(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    how: &mut Sending<'_>,
    lines: &mut Vec<JournalLine>,
    mark: JournalState,
) -> Result<(), SyncError> {
    let (name, careful, progress) = (how.name, how.careful, how.progress);
    if careful {
        crate::sync::engine::unfinished::drop_known_lines(ctx, name, lines)?;
    }
    if lines.is_empty() {
        up.mark("checkpoint journal".into(), vec![Mark::Journal(mark)]);
        return Ok(());
    }
    let shas: BTreeSet<String> = lines.iter().filter_map(|l| blob_of(&l.line)).collect();
    // Any size (in parts past the server's limit); one that cannot go up is
    // warned about, counted and remembered, and the lines still go.
    push_blobs(ctx, report, shas.clone(), progress, how.ahead)?;
    let mut sealed =
        seal_journal(&ctx.keys, &ctx.identity, name, lines).map_err(|e| SyncError::Io {
            context: "cannot seal the checkpoint journal".into(),
            source: std::io::Error::other(e),
        })?;
    // A blob that could not go up is not declared: the server would refuse
    // the lines for it, and they go without it (see `blobs`).
    let absent: BTreeSet<_> = (shas.iter())
        .filter(|s| ctx.state.missing_blobs.contains(*s))
        .map(|s| ctx.keys.blob_key(s))
        .collect();
    sealed.refs.retain(|r| !absent.contains(r));
    // One per distinct line: identical lines are one entry.
    report.journal_lines += sealed.entry_ids.len() as u64;
    lines.clear();
    up.add(ctx, report, sealed, vec![Mark::Journal(mark)])
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
/// yet (see [`PulledJournals::apply`](crate::sync::state::pulled_journals::PulledJournals::apply)); returns how many it appended and
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::seal::segment::check_device;

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
}
