//! Writing pulled entries of another agent's session into its folder.
//!
//! # Promises
//!
//! The rules of `DESIGN.md` ("Pull never rewrites a file") for a layout of
//! one file per session:
//!
//! - Only appends, to the session's file where this device has it, else to
//!   the file the source names for it ([`super::Source::target`]: for Claude
//!   Code the folder of its project as mapped here). Nothing is written
//!   outside the agent's folder: every path component below it is a checked
//!   id or a sanitized project folder name.
//! - **Verbatim** when the line reads back here as the same entry: its
//!   parent the one it names (Claude Code's `parentUuid`), else the file's
//!   implicit tip; its id the one it names (`uuid`, or an `id` of its own,
//!   as Claude Code's `api-request` lines have), else derived from that
//!   parent. Every other entry gets `id` and `parentId` in front (or the
//!   `eviRawLine` wrapper), which never moves the implicit chain.
//! - **A subagent transcript goes beside its session**: a Claude Code
//!   stream `claude-code/<session>/<stem>` this device has no file of is
//!   written to `<session>/subagents/<stem>.jsonl` in the folder of the
//!   session's file here, wherever that was placed (its own `cwd`s may name
//!   another folder: the session's directory changed before it ran). Until
//!   the session's file is here, its entries wait.
//! - **Never into a line being written**: the append goes through a handle
//!   opened `O_APPEND` whose size and last byte are checked right before the
//!   one write; a file that ends in a partial line (the agent mid-write)
//!   makes the entries wait. So do entries whose place is not known yet (no
//!   line with a `cwd` has arrived, or a subagent's session is not here). A
//!   session's project entry ([`super::project`]) is kept out of the file;
//!   it may place the session in a checkout here with the same git remote
//!   ([`place_by_remote`]).
//! - **Waiting never blocks others**, as for eVi's sessions (one mechanism,
//!   [`PendingStore`]): what waits is kept, verified, in
//!   `sync/pending-agents/` and every other stream is applied now; the next
//!   pull or push applies it once it can be (each begins with what waits,
//!   [`drain_pending`](crate::sync::engine::incoming::drain_pending)), and
//!   `evi sync status` lists it and why.
//! - **A line the agent abandoned is ended**: a partial line untouched for
//!   [`ABANDONED_AFTER`](crate::sync::engine::pending::ABANDONED_AFTER) is
//!   the agent's dead write, and a single-file session has no next day's
//!   file to go to (eVi's rule): pull appends a newline to it (every byte of
//!   it kept; it reads as a line that is not JSON, which sync carries as
//!   such an entry, see `docs/agents.md` for how the agents read it) and
//!   then the entries that waited.
//! - **A line a killed pull cut short is finished**, not waited on: its mark
//!   in `sync/appending` proves the bytes pull's (see
//!   [`AppendMarks`](crate::sync::state::append_marks::AppendMarks)), and
//!   only when the bytes planned now begin with exactly them is the rest
//!   written.
//! - **What pull wrote is what push skips**: when the push state of the file
//!   matched it before the append, it is moved to cover exactly pull's
//!   bytes; if anything else grew the file meanwhile it is left, and the
//!   next push reads the rest (the server drops what it has, by entry id).
//! - Entries of an agent not turned on here are not written (nor kept): the
//!   user turns the agent on and runs `evi sync pull --all`.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::checkouts::Checkouts;
use super::paths::PathMap;
use super::project::ProjectRecord;
use super::{Agent, StreamName};
use crate::sync::Entry;
use crate::sync::engine::apply::{LineFacts, PARALLEL_FACTS_FROM};
use crate::sync::engine::cores::on_all_cores;
use crate::sync::engine::gather::{Gathered, next_part};
use crate::sync::engine::pending::{PendingStore, WaitReason, Waiting, abandoned};
use crate::sync::error::{IoContext, SyncError};
use crate::sync::state::append_marks::cut_here_if_asked;
use crate::sync::state::context::SyncContext;
use crate::sync::state::{FileState, Stat, line_hash};
use crate::transcript::entry_id::IdChain;
use crate::transcript::lines::walk_file;

/// What the agents' part of a pull did.
#[derive(Debug, Default)]
pub struct AgentApplied {
    pub entries: u64,
    /// The sessions that got entries (a set: a long session's entries come
    /// in many pages and parts).
    pub sessions: std::collections::BTreeSet<StreamName>,
    /// Entries waiting in `sync/pending-agents/` after it.
    pub waiting: u64,
    /// Sessions of agents not turned on here, by agent.
    pub not_enabled: BTreeMap<Agent, u64>,
    /// What people should know (a Codex index left alone, and why).
    pub notes: Vec<String>,
}

/// A session file as read before an append.
struct Seen {
    known: HashSet<String>,
    tip: Option<String>,
    size: u64,
    ino: u64,
    partial: bool,
    /// Where the partial line starts (`size` when there is none).
    whole: u64,
    mtime: std::time::SystemTime,
}

/// What pull learned of the agent files it appended to, so that the next
/// page's append to the same file does not read it whole again (a session
/// of many pages cost a read of the whole file per page). An entry holds
/// while the file is exactly as pull left it: the same inode, size and
/// modification time, and no partial line; else the file is read again.
/// Only the files appended to last are kept ([`Self::KEEP`]): a page holds
/// the tail of a long session and the whole of many short ones, and the
/// ids of every file a fresh pull wrote would cost tens of MB.
///
/// It also keeps each agent's sessions as listed at the first page that
/// needed them, with what pull wrote since: listing is a walk of the
/// agent's folder (Gemini CLI reads each file's head, OpenCode exports its
/// database), and a pull applies dozens of pages and parts. Kept for one
/// command only (a pull starts with [`Self::clear`]), as its own writes
/// are all that change which session has which file meanwhile.
#[derive(Default)]
pub struct SeenFiles {
    seen: HashMap<PathBuf, Seen>,
    /// The paths of `seen`, appended to least recently first.
    order: std::collections::VecDeque<PathBuf>,
    listed: HashMap<Agent, HashMap<StreamName, PathBuf>>,
    /// The files this command appended to (with their agent's folder), for
    /// [`after_pull`].
    appended: BTreeMap<StreamName, (PathBuf, PathBuf)>,
}

impl SeenFiles {
    const KEEP: usize = 16;

    /// Forgets what was listed and read: a new pull lists and reads again.
    /// What waits for [`after_pull`] stays.
    pub fn clear(&mut self) {
        let appended = std::mem::take(&mut self.appended);
        *self = Self {
            appended,
            ..Self::default()
        };
    }

    /// Keeps what was learned of `path`, forgetting the file appended to
    /// least recently when more are kept.
    fn keep(&mut self, path: &Path, seen: Seen) {
        self.order.retain(|p| p != path);
        self.order.push_back(path.to_owned());
        self.seen.insert(path.to_owned(), seen);
        while self.order.len() > Self::KEEP {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }

    /// What was learned of `path`, if it is still as pull left it.
    fn take(&mut self, path: &Path) -> Option<Seen> {
        self.order.retain(|p| p != path);
        let seen = self.seen.remove(path)?;
        let meta = std::fs::metadata(path).ok()?;
        let same = meta.ino() == seen.ino
            && meta.len() == seen.size
            && meta.modified().ok() == Some(seen.mtime)
            && !seen.partial;
        same.then_some(seen)
    }
}

/// Appends written and not yet durable, made durable together
/// ([`crate::fsutil::sync_files`]: one `syncfs` for many) before the
/// waiting entries are saved and the caller moves the cursor. One `fsync`
/// per file and folder cost a fresh pull of 2,000 Claude Code sessions 14 s
/// of its 17.
#[derive(Default)]
struct Unsynced {
    files: Vec<std::fs::File>,
    /// Folders that gained a file.
    dirs: std::collections::BTreeSet<PathBuf>,
}

impl Unsynced {
    /// At most this many files are held open before they are made durable.
    const MAX_OPEN: usize = 256;

    fn add(&mut self, f: std::fs::File, new_in: Option<&Path>) -> io::Result<()> {
        self.files.push(f);
        self.dirs.extend(new_in.map(Path::to_owned));
        if self.files.len() >= Self::MAX_OPEN {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut files = std::mem::take(&mut self.files);
        for dir in std::mem::take(&mut self.dirs) {
            files.push(std::fs::File::open(dir)?);
        }
        crate::fsutil::sync_files(files)
    }
}

fn read_file(agent: Agent, map: &PathMap, path: &Path) -> io::Result<Option<Seen>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut chain = IdChain::default();
    let mut known = HashSet::new();
    let end = walk_file(path, 0, |_, raw| {
        let raw = agent.canonical(raw, map);
        known.insert(chain.place(&raw, agent.explicit_ids(&raw)).id);
        ControlFlow::Continue(())
    })?;
    Ok(Some(Seen {
        known,
        tip: chain.implicit_parent().map(str::to_owned),
        size: end.offset + end.pending_bytes,
        ino: meta.ino(),
        partial: end.pending_bytes > 0,
        whole: end.offset,
        mtime: meta.modified()?,
    }))
}

/// What [`plan`] makes of a page's entries for one file.
struct Planned<'a> {
    /// The bytes to append, gathered for one `writev` (a line that goes
    /// as it came is written from its entry, not copied).
    bytes: Gathered<'a>,
    /// The tip after them.
    tip: Option<String>,
    /// The ids they add.
    new: Vec<String>,
}

/// The bytes to append for `entries` after what `r` holds, and the tip after.
fn plan<'a>(agent: Agent, map: &PathMap, r: &Seen, entries: &'a [Entry]) -> Planned<'a> {
    let mut out = Gathered::new();
    let mut tip = r.tip.clone();
    let mut new: HashSet<&str> = HashSet::new();
    let fresh: Vec<&Entry> = (entries.iter())
        .filter(|e| !r.known.contains(&e.id) && new.insert(&e.id))
        .collect();
    // Hashing and parsing each line is most of planning: on all cores when
    // there is enough of it, as for eVi's own sessions.
    let bytes: usize = fresh.iter().map(|e| e.line.len()).sum();
    let of = |e: &&Entry| LineFacts::with_ids(e, agent.explicit_ids(&e.line));
    let facts = if bytes >= PARALLEL_FACTS_FROM {
        on_all_cores(&fresh, of)
    } else {
        fresh.iter().map(of).collect()
    };
    let mut added = Vec::with_capacity(fresh.len());
    for (e, facts) in fresh.into_iter().zip(facts) {
        added.push(e.id.clone());
        // As the line would read back here: its parent the one it names,
        // else the tip; its id the one it names, else derived from that
        // parent (a line naming its id and not its parent, as Claude Code's
        // `api-request` lines do, continues the tip like any other).
        let parent_reads_back = match &facts.explicit_parent {
            Some(parent) => *parent == e.parent,
            None => e.parent == tip,
        };
        let verbatim = parent_reads_back && facts.id_reads_back;
        if verbatim {
            match agent.localize(&e.line, map) {
                Cow::Borrowed(line) => out.push_line(line),
                Cow::Owned(mut line) => {
                    line.push(b'\n');
                    out.push_built(line);
                }
            }
            if facts.explicit_parent.is_none() {
                tip = Some(e.id.clone());
            }
        } else {
            let is_object =
                serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&e.line)
                    .is_ok();
            let line = agent.with_ids(e, facts.explicit_id, is_object);
            out.push_built(agent.localize(&line, map).into_owned());
        }
    }
    Planned {
        bytes: out,
        tip,
        new: added,
    }
}

/// Where other agents' waiting entries are kept.
fn pending_dir(ctx: &SyncContext) -> PathBuf {
    ctx.paths.dir.join("pending-agents")
}

fn load_pending(ctx: &SyncContext) -> Result<PendingStore<StreamName>, SyncError> {
    PendingStore::load(pending_dir(ctx)).ctx(|| "cannot read sync/pending-agents".into())
}

/// Drops what waits for `stream` in `sync/pending-agents/` (it was
/// forgotten: those entries must not bring it back).
pub fn discard_waiting(ctx: &SyncContext, stream: &StreamName) -> Result<(), SyncError> {
    crate::sync::engine::pending::discard(&pending_dir(ctx), stream)
        .ctx(|| format!("cannot drop the entries of {stream} in sync/pending-agents/"))
}

/// What waits in `sync/pending-agents/`, by stream (what `evi sync verify`
/// counts as here, and `evi sync status` lists).
pub fn waiting(ctx: &SyncContext) -> Result<Vec<(StreamName, Vec<Waiting>)>, SyncError> {
    Ok(load_pending(ctx)?
        .sessions()
        .map(|(s, w)| (s.clone(), w.to_vec()))
        .collect())
}

/// The file a subagent transcript of Claude Code goes to: beside its
/// session's file (`session_file`), as Claude Code keeps it.
fn beside_session(session_file: &Path, stream: &StreamName) -> Option<PathBuf> {
    let sub = stream.sub.as_ref()?;
    Some(
        session_file
            .parent()?
            .join(stream.session.as_str())
            .join("subagents")
            .join(format!("{sub}.jsonl")),
    )
}

/// Applies the pulled entries of other agents' sessions (and those that
/// waited, first), each stream in the order its entries came; what cannot
/// be applied now waits (see the module's promises).
pub fn apply(
    ctx: &mut SyncContext,
    batch: Vec<(StreamName, Vec<Entry>)>,
) -> Result<AgentApplied, SyncError> {
    let mut pending = load_pending(ctx)?;
    let mut by_stream: BTreeMap<StreamName, Vec<Entry>> = BTreeMap::new();
    // Entries that waited before, by stream and id: they keep when they
    // first had to wait.
    let mut waited: HashMap<(StreamName, String), Waiting> = HashMap::new();
    let streams: Vec<StreamName> = pending.sessions().map(|(s, _)| s.clone()).collect();
    for s in streams {
        let list = pending.take(&s);
        by_stream
            .entry(s.clone())
            .or_default()
            .extend(list.iter().map(Waiting::entry));
        waited.extend(list.into_iter().map(|w| ((s.clone(), w.id.clone()), w)));
    }
    for (s, mut e) in batch {
        by_stream.entry(s).or_default().append(&mut e);
    }
    let mut done = AgentApplied::default();
    if by_stream.is_empty() {
        return Ok(done);
    }
    // Put back below: listed once per command (see `SeenFiles`).
    let mut local = std::mem::take(&mut ctx.seen_files.listed);
    let mut unsynced = Unsynced::default();
    let mut appended = Vec::new();
    for (stream, fresh) in by_stream {
        let Some(source) = ctx
            .sources
            .iter()
            .find(|s| s.agent == stream.agent)
            .cloned()
        else {
            // What waited goes on waiting (the agent was turned off since);
            // what came now is passed over.
            let mut new = false;
            for e in &fresh {
                match waited.remove(&(stream.clone(), e.id.clone())) {
                    Some(w) => pending.wait(&stream, w),
                    None => new = true,
                }
            }
            if new {
                *done.not_enabled.entry(stream.agent).or_default() += 1;
            }
            continue;
        };
        // A project entry says where the session belongs; it is no line of
        // the agent's file.
        let (records, fresh): (Vec<Entry>, Vec<Entry>) = fresh
            .into_iter()
            .partition(|e| ProjectRecord::of_entry(&stream, e).is_some());
        for e in &records {
            if let Some(r) = ProjectRecord::of_entry(&stream, e) {
                ctx.projects.set_record(&stream, r);
            }
        }
        let mut waits = Vec::new();
        let mut ready = Vec::with_capacity(fresh.len());
        for mut e in fresh {
            if crate::sync::engine::line_blobs::fetch_line(ctx, &mut e)? {
                ready.push(e);
            } else {
                waits.push((e, WaitReason::BlobMissing));
            }
        }
        let files = local.entry(stream.agent).or_insert_with(|| {
            source
                .sessions()
                .into_iter()
                .map(|f| (f.stream, f.path))
                .collect()
        });
        let target = match files.get(&stream) {
            Some(p) => Some(p.clone()),
            // Beside its session's file, once that is here (a session
            // sorts before its subagents: one that came with them is
            // written first).
            None if stream.sub.is_some() => {
                let session = StreamName {
                    sub: None,
                    ..stream.clone()
                };
                (files.get(&session)).and_then(|f| beside_session(f, &stream))
            }
            None => {
                let lines: Vec<&[u8]> = ready.iter().map(|e| &e.line[..]).collect();
                place_by_remote(ctx, &stream, &lines)?;
                let map = ctx.projects.map_for(&ctx.path_map, &stream);
                let record = ctx.projects.get(&stream).and_then(|k| k.record.as_ref());
                let dir = record.and_then(|r| r.dir.as_deref());
                source.target(&stream, &lines, &map, dir)
            }
        };
        let written = match &target {
            Some(path) if !ready.is_empty() => {
                append_parts(ctx, &mut unsynced, &stream, path, &ready)?
            }
            _ => None,
        };
        match (written, target) {
            (Some((n, went)), Some(p)) => {
                // What did not go in waits for the line the file ends in.
                let left = ready.split_off(went);
                waits.extend(left.into_iter().map(|e| (e, WaitReason::PartialLine)));
                if n > 0 {
                    done.entries += n;
                    done.sessions.insert(stream.clone());
                }
                appended.push((stream.clone(), (source.root.clone(), p.clone())));
                files.insert(stream.clone(), p);
            }
            (None, Some(_)) => {
                waits.extend(ready.into_iter().map(|e| (e, WaitReason::PartialLine)))
            }
            (_, None) => waits.extend(ready.into_iter().map(|e| (e, WaitReason::NotPlaced))),
        }
        for (e, reason) in waits {
            let mut w = waited
                .remove(&(stream.clone(), e.id.clone()))
                .unwrap_or_else(|| Waiting::new(&e, reason));
            w.reason = reason;
            pending.wait(&stream, w);
        }
    }
    ctx.seen_files.listed = local;
    (unsynced.flush()).ctx(|| "cannot make the pulled entries of other agents durable".into())?;
    ctx.seen_files.appended.extend(appended);
    done.waiting = pending.count();
    // Durable before the caller moves the cursor.
    (pending.save()).ctx(|| "cannot save the entries that wait in sync/pending-agents".into())?;
    // Each append above is durable: a kill can no longer cut it.
    (ctx.marks.clear()).ctx(|| "cannot clear sync/appending".into())?;
    Ok(done)
}

/// Runs each agent's [`AgentKind::after_pull`](crate::agents::AgentKind::after_pull)
/// once for every file the command appended to since the last call, after
/// those appends are durable: what the agent's own index or database needs
/// (OpenCode's rows, Codex's threads) is brought level once per command,
/// not once per page (a session of a few hundred pages cost that many
/// imports of its mirror into OpenCode's database). What a command killed
/// before it is done by the next: OpenCode imports a mirror that grew at
/// every listing, Codex's index takes the session at its next pull.
pub fn after_pull(ctx: &mut SyncContext) -> Vec<String> {
    let appended = std::mem::take(&mut ctx.seen_files.appended);
    let mut by_agent: BTreeMap<(Agent, PathBuf), Vec<(StreamName, PathBuf)>> = BTreeMap::new();
    for (stream, (root, file)) in appended {
        by_agent
            .entry((stream.agent, root))
            .or_default()
            .push((stream, file));
    }
    by_agent
        .into_iter()
        .flat_map(|((agent, root), files)| agent.kind().after_pull(ctx, &root, &files))
        .collect()
}

/// Places a session this device has no file of yet by its project's git
/// remote: when the server holds a project entry for it, `[paths]` does not
/// map the project, and a checkout here has the same origin, the pair
/// (project there, checkout here) is recorded, durably, before the first
/// line is written, and maps every read and write of the session after.
fn place_by_remote(
    ctx: &mut SyncContext,
    stream: &StreamName,
    lines: &[&[u8]],
) -> Result<(), SyncError> {
    let session = StreamName {
        sub: None,
        ..stream.clone()
    };
    let Some(record) = ctx
        .projects
        .get(&session)
        .filter(|k| k.local.is_none())
        .and_then(|k| k.record.clone())
    else {
        return Ok(());
    };
    if ctx.path_map.local(&record.project) != record.project || record.remote.is_empty() {
        return Ok(());
    }
    // The folder the agent ran in: its lines' `cwd`, else (Gemini's lines
    // name none) the one its project entry records.
    let cwd = match &record.dir {
        Some(dir) => Some(dir.clone()),
        None => super::project::cwd_of_lines(stream.agent, lines.iter().copied()),
    };
    let Some(cwd) = cwd else {
        return Ok(());
    };
    let inside = cwd
        .strip_prefix(record.project.as_str())
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if !inside {
        return Ok(());
    }
    if ctx.checkouts.is_none() {
        let own: Vec<String> = ctx
            .sources
            .iter()
            .flat_map(|s| s.sessions())
            .filter_map(|f| super::project::cwd_of_file(&f))
            .collect();
        ctx.checkouts = Some(Checkouts::find_all(own, &ctx.search));
    }
    let found = ctx.checkouts.as_ref().and_then(|c| c.get(&record.remote));
    let Some(top) = found.and_then(|p| p.to_str()).map(str::to_owned) else {
        return Ok(());
    };
    if top != record.project {
        ctx.projects.place(&session, top);
        ctx.projects
            .save(&ctx.paths.dir)
            .ctx(|| "cannot save sync/projects.json".into())?;
    }
    Ok(())
}

/// Appends what `entries` add to `path`: `Some(count)` once written (its
/// file in `unsynced`, durable before [`apply`] returns), `None` when the
/// file ends in a line being written (the entries wait).
fn append(
    ctx: &mut SyncContext,
    unsynced: &mut Unsynced,
    stream: &StreamName,
    path: &Path,
    entries: &[Entry],
) -> Result<Option<u64>, SyncError> {
    let what = || format!("cannot append to {}", path.display());
    for _ in 0..3 {
        let map = ctx.projects.map_for(&ctx.path_map, stream).into_owned();
        let before = match ctx.seen_files.take(path) {
            Some(seen) => Some(seen),
            None => read_file(stream.agent, &map, path).ctx(what)?,
        };
        let empty = Seen {
            known: HashSet::new(),
            tip: None,
            size: 0,
            ino: 0,
            partial: false,
            whole: 0,
            mtime: std::time::SystemTime::UNIX_EPOCH,
        };
        let r = before.as_ref().unwrap_or(&empty);
        // The start of a line a killed pull cut short, which the bytes
        // planned now must begin with; any other partial line is the
        // agent's, and the entries wait, unless the agent left it a day ago.
        let cut = match r.partial {
            true => {
                let cut = match path.to_str() {
                    Some(name) => (ctx.marks.cut_line(name, r.ino, r.size, r.whole)).ctx(what)?,
                    None => None,
                };
                match cut {
                    Some(cut) => cut,
                    None if abandoned(r.mtime) => {
                        end_dead_line(path, r).ctx(what)?;
                        continue;
                    }
                    None => return Ok(None),
                }
            }
            false => Vec::new(),
        };
        let Planned { bytes, tip, new } = plan(stream.agent, &map, r, entries);
        let n = new.len() as u64;
        if bytes.len() == 0 {
            if let Some(seen) = before {
                ctx.seen_files.keep(path, seen);
            }
            return Ok(Some(0));
        }
        if !bytes.starts_with(&cut) {
            return Ok(None);
        }
        let key = stream.state_key();
        let prev_matched = match &before {
            None => true,
            Some(_) => ctx
                .state
                .files
                .get(&key)
                .is_some_and(|fs| Stat::of(path).is_ok_and(|s| s.matches(fs))),
        };
        if before.is_none()
            && let Some(dir) = path.parent()
        {
            crate::fsutil::create_dir_all_durable(dir)
                .ctx(|| format!("cannot create {}", dir.display()))?;
        }
        // A new file is the user's alone, as eVi's transcripts are (an
        // agent's file already here keeps the mode the agent gave it).
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .open(path)
            .ctx(what)?;
        if let Some(name) = path.to_str() {
            // Before the last check, not between it and the write; from
            // where the planned bytes start, so that a kill inside the write
            // that finishes a cut line is proven the same way.
            let (ino, at) = (f.metadata().ctx(what)?.ino(), r.size - cut.len() as u64);
            (ctx.marks.record(name, ino, at, bytes.len() as u64)).ctx(what)?;
        }
        // The last check, on the handle the write goes through.
        let m = f.metadata().ctx(what)?;
        let same = m.len() == r.size && (before.is_none() || m.ino() == r.ino);
        if !same
            || (cut.is_empty() && m.len() > 0 && !ends_in_newline(&mut f, m.len()).ctx(what)?)
        {
            continue;
        }
        let rest_len = (bytes.len() - cut.len()) as u64;
        let mut slices = bytes.slices();
        let mut rest = &mut slices[..];
        io::IoSlice::advance_slices(&mut rest, cut.len());
        cut_here_if_asked(&mut f, r.size, rest);
        crate::fsutil::append_slices_all_or_none(&mut f, r.size, rest).ctx(what)?;
        crate::fsutil::start_writeback(&f, r.size, rest_len);
        let after = Stat::of(path).ctx(what)?;
        let new_in = before.is_none().then(|| path.parent()).flatten();
        unsynced.add(f, new_in).ctx(what)?;
        if prev_matched && after.size == r.size + rest_len {
            let last = bytes.last_line();
            // Where the planned bytes start: the cut line's start.
            let base = r.size - cut.len() as u64;
            ctx.state.files.insert(
                key,
                FileState {
                    size: after.size,
                    mtime_ns: after.mtime_ns,
                    ino: after.ino,
                    offset: after.size,
                    last_start: base + (bytes.len() - last.len() - 1) as u64,
                    last_hash: Some(line_hash(last)),
                    chain_before: None,
                    chain_after: tip.clone(),
                },
            );
        }
        let mut known = before.map(|b| b.known).unwrap_or_default();
        known.extend(new);
        if let Ok(m) = std::fs::metadata(path) {
            let seen = Seen {
                known,
                tip,
                size: m.len(),
                ino: m.ino(),
                partial: false,
                whole: m.len(),
                mtime: m.modified().ctx(what)?,
            };
            ctx.seen_files.keep(path, seen);
        }
        return Ok(Some(n));
    }
    Ok(None)
}

/// [`append`] of `entries` a part at a time ([`next_part`]): how many
/// entries were written, and how many of `entries` went in (those after
/// wait: the agent began a line meanwhile); `None` when none went in.
fn append_parts(
    ctx: &mut SyncContext,
    unsynced: &mut Unsynced,
    stream: &StreamName,
    path: &Path,
    entries: &[Entry],
) -> Result<Option<(u64, usize)>, SyncError> {
    let (mut written, mut went) = (0, 0);
    let mut rest = entries;
    while !rest.is_empty() {
        let (part, after) = next_part(rest);
        match append(ctx, unsynced, stream, path, part)? {
            Some(n) => written += n,
            None if went == 0 => return Ok(None),
            None => break,
        }
        went += part.len();
        rest = after;
    }
    Ok(Some((written, went)))
}

/// Ends the line an agent abandoned (see the module's promises) with a
/// newline, if the file is still as read and still untouched (checked on
/// the handle the newline goes through); the caller reads it again either
/// way.
fn end_dead_line(path: &Path, r: &Seen) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .read(true)
        .open(path)?;
    let m = f.metadata()?;
    if m.len() != r.size || m.ino() != r.ino || !m.modified().is_ok_and(abandoned) {
        return Ok(());
    }
    crate::fsutil::append_all_or_none(&mut f, r.size, b"\n")?;
    f.sync_all()
}

fn ends_in_newline(f: &mut std::fs::File, size: u64) -> io::Result<bool> {
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(size - 1))?;
    f.read_exact(&mut b)?;
    Ok(b[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::entry_id::derive_id;

    fn entry(id: &str, parent: Option<&str>, line: &str) -> Entry {
        Entry {
            id: id.to_owned(),
            parent: parent.map(str::to_owned),
            day: super::super::agent_day(),
            line: line.as_bytes().to_vec(),
            line_blob: None,
        }
    }

    fn seen(tip: Option<&str>) -> Seen {
        Seen {
            known: HashSet::new(),
            tip: tip.map(str::to_owned),
            size: 0,
            ino: 0,
            partial: false,
            whole: 0,
            mtime: std::time::SystemTime::UNIX_EPOCH,
        }
    }

    /// Each line goes as the agent wrote it when it reads back here with the
    /// same id and parent, whichever of them it names itself.
    #[test]
    fn lines_that_read_back_go_verbatim_and_move_the_tip_as_they_would() {
        let map = PathMap::default();
        let derived = r#"{"type":"last-prompt"}"#;
        let d = derive_id(Some("t0"), derived.as_bytes());
        let own_id = r#"{"type":"api-request","id":"req-1"}"#;
        let both = r#"{"uuid":"u1","parentUuid":"req-1","type":"user"}"#;
        let entries = [
            entry(&d, Some("t0"), derived),
            entry("req-1", Some(&d), own_id),
            entry("u1", Some("req-1"), both),
        ];
        let Planned {
            bytes: out,
            tip,
            new,
        } = plan(Agent::ClaudeCode, &map, &seen(Some("t0")), &entries);
        assert_eq!(new.len(), 3);
        assert_eq!(
            String::from_utf8(out.to_vec()).unwrap(),
            format!("{derived}\n{own_id}\n{both}\n")
        );
        assert_eq!(
            tip.as_deref(),
            Some("req-1"),
            "a line naming its id only moves it"
        );

        // Not the tip's child: its parent is added.
        let Planned {
            bytes: out, tip, ..
        } = plan(
            Agent::ClaudeCode,
            &map,
            &seen(Some("other")),
            &entries[1..2],
        );
        assert_eq!(
            String::from_utf8(out.to_vec()).unwrap(),
            format!("{{\"parentId\":\"{d}\",\"type\":\"api-request\",\"id\":\"req-1\"}}\n")
        );
        assert_eq!(tip.as_deref(), Some("other"));
    }
}
