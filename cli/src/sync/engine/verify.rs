//! `evi sync verify`: everything the server holds for this account fetched
//! and checked, like a backup tool's read-all check, and held against what
//! this device holds; [`repair`] mends what can be mended.
//!
//! # Promises
//!
//! - [`verify`] only reads. It writes nothing, not even a temp file:
//!   records are opened in memory, blobs are decrypted and hashed as they
//!   stream and then dropped; the sync state (the pull cursor with it) is
//!   left as it was. Nothing a server sends can make it write anywhere.
//! - Every record the server holds, this device's own too, is fetched page
//!   by page and opened as pull opens one (age, the MAC, the ids it is
//!   served under, the formats of what it holds). One that fails is a
//!   [`Problem`]; the check goes on with the others. Under a key that is
//!   not the account's (its key check value), nothing is opened: verify
//!   fails as push does, and a repair reports nothing to the server.
//! - Every blob a verified record names (a checkpoint journal's blob, a
//!   line sent as a blob) is fetched, whole or in parts, and must hash to
//!   its name.
//! - Every entry here (in the transcripts or waiting in `sync/pending/`)
//!   and every line of this device's checkpoint journal must be in a
//!   verified record. Every entry of a verified record this device should
//!   hold (its own, and other devices' up to the pull cursor) must be here,
//!   as must every line of another device's journal up to the cursor and
//!   the blob it names. Title lines (`transcript::title`) are entries like
//!   any other here: pushed, pulled and checked by id.
//! - Other agents' sessions turned on here (`crate::source`) are held
//!   against the server the same way, by the ids push gives their lines
//!   (read through each session's own path map, as push reads them) and
//!   keyed by their stream names; the report counts them per agent. A
//!   session's project entry (`crate::source::project`) is here when
//!   `sync/projects.json` holds it: pull keeps it out of the agent's file.
//!   Records of an agent not turned on here are checked, but their entries
//!   are not expected here (pull passes them over).
//! - What is merely not synced yet is [`Pending`], never a [`Problem`]:
//!   entries and journal lines here past what push has taken (the push
//!   state's offset of their file), and other devices' records after the
//!   cursor. A plain `evi sync push` or `pull` moves them; an entry push
//!   has taken that the server lacks is a problem.
//! - A server out of reach ends the check with an error, never with a
//!   report of what it could not read.
//!
//! [`repair`] sends what the server lacks and applies what this device
//! lacks, by id, through push and pull themselves: push reads the sessions
//! concerned again and sends only the entries the server says it lacks
//! (no entry is stored twice), pull goes through every record again and
//! applies what is not here (`pull --all`: the cursor never moves back).
//! A record the server holds damaged is healed from a device that has its
//! session: [`repair`] tells the server which seqs are damaged (their
//! entries then count as lacking there) and pushes the session again, so
//! its entries go up in a new record; the server drops the damaged row once
//! that record holds all of them, and devices that refused it get the new
//! one with their next pull. A damaged blob, or a damaged record of a
//! session not here, stays a problem.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::ControlFlow;
use std::time::Instant;

use evi_shared::KeyedId;

use crate::source::{Agent, AgentFile, StreamName};
use crate::sync::OpenedSegment;
use crate::sync::engine::blobs::{Verified, checkpoint_blob_path, verify_blobs};
use crate::sync::engine::cores::on_all_cores;
use crate::sync::engine::journal::{journal_lines_missing, journal_name};
use crate::sync::engine::pending::PendingStore;
use crate::sync::engine::pull::{PullOptions, PullReport, fetch_pages, open_record, pull};
use crate::sync::engine::push::{PushOptions, agent_files, push_with};
use crate::sync::engine::push_report::PushReport;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::progress::Progress;
use crate::sync::state::context::SyncContext;
use crate::sync::state::pulled_journals::blob_of;
use crate::sync::state::rel_name;
use crate::transcript::entry_id::IdChain;
use crate::transcript::lines::walk_file;
use crate::transcript::{Catalog, SessionTree};

/// What a check found.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct VerifyReport {
    /// Records fetched, and their ciphertext bytes.
    pub records: u64,
    pub record_bytes: u64,
    /// Blobs fetched and found whole, and their bytes.
    pub blobs: u64,
    pub blob_bytes: u64,
    /// Entries here (transcripts and `sync/pending/`) and lines of this
    /// device's journal, checked against the server.
    pub local_entries: u64,
    pub journal_lines: u64,
    /// Other devices' records after the pull cursor.
    pub not_pulled: u64,
    /// Forgets and undos on the server that verified (see
    /// [`crate::sync::engine::forget`]); one that does not is a problem like any record.
    pub tombstones: u64,
    /// Sessions and entries here of each agent (eVi's first), and the
    /// records the server holds of each.
    pub agents: Vec<AgentCount>,
    /// Entries and journal lines here not pushed yet.
    pub not_pushed: u64,
    /// What is not synced yet, by session: no problem, a push or pull away.
    pub pending: Vec<Pending>,
    pub seconds: f64,
    /// Record and blob bytes checked per second, in MB (10^6 bytes).
    pub mb_per_s: f64,
    pub problems: Vec<Problem>,
}

/// What a check counted of one agent's sessions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentCount {
    pub agent: Agent,
    /// Whether `[agents]` turns it on here (eVi's always is).
    pub enabled: bool,
    /// Sessions here (a Claude Code subagent transcript counts as one).
    pub sessions: u64,
    /// Entries here, waiting ones included.
    pub entries: u64,
    /// Records on the server, and those of them that verified.
    pub records: u64,
    pub verified: u64,
}

/// Something not synced yet, as `evi sync verify` prints it (one line each).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Pending {
    /// Entries here that push has not taken yet.
    NotPushed { session: String, entries: u64 },
    /// Lines of this device's checkpoint journal push has not taken yet.
    JournalNotPushed { lines: u64 },
    /// Records of other devices after the pull cursor.
    NotPulled { records: u64 },
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotPushed { session, entries } => write!(
                f,
                "session {session}: {entries} entries here not pushed yet (`evi sync push` sends them)"
            ),
            Self::JournalNotPushed { lines } => write!(
                f,
                "checkpoint journal: {lines} lines here not pushed yet (`evi sync push` sends them)"
            ),
            Self::NotPulled { records } => write!(
                f,
                "{records} records of other devices not pulled yet (`evi sync pull` applies them)"
            ),
        }
    }
}

/// One thing wrong, as `evi sync verify` prints it (one line each).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// A record that does not open: damaged, forged, swapped or replayed;
    /// `session` when its stream is a session here.
    BadRecord {
        seq: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        error: String,
    },
    /// What the server gives for a blob is not that blob.
    BadBlob { sha256: String, error: String },
    /// A blob a verified record names is not on the server; `here` when
    /// this device has it (`--repair` sends it).
    BlobNotOnServer { sha256: String, here: bool },
    /// Entries here that no verified record holds.
    NotOnServer { session: String, entries: u64 },
    /// Lines of this device's checkpoint journal no verified record holds.
    JournalNotOnServer { lines: u64 },
    /// Entries of verified records this device should hold and does not.
    NotHere { session: String, entries: u64 },
    /// Lines of another device's journal, up to the cursor, not here.
    JournalNotHere { journal: String, lines: u64 },
    /// A blob a journal line here names is not here.
    BlobNotHere { sha256: String },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadRecord {
                seq,
                session: Some(s),
                error,
            } => write!(f, "session {s}: record {seq} does not verify: {error}"),
            Self::BadRecord {
                seq,
                session: None,
                error,
            } => write!(f, "record {seq} does not verify: {error}"),
            Self::BadBlob { sha256, error } => write!(f, "blob {sha256} does not verify: {error}"),
            Self::BlobNotOnServer { sha256, here } => {
                write!(
                    f,
                    "blob {sha256}, named by a journal line, is not on the server"
                )?;
                if *here {
                    f.write_str(" (it is here)")?;
                }
                Ok(())
            }
            Self::NotOnServer { session, entries } => {
                write!(
                    f,
                    "session {session}: {entries} entries here are not on the server"
                )
            }
            Self::JournalNotOnServer { lines } => write!(
                f,
                "checkpoint journal: {lines} lines here are not on the server"
            ),
            Self::NotHere { session, entries } => write!(
                f,
                "session {session}: {entries} entries on the server are not here"
            ),
            Self::JournalNotHere { journal, lines } => write!(
                f,
                "journal {journal}: {lines} lines on the server are not here"
            ),
            Self::BlobNotHere { sha256 } => write!(
                f,
                "blob {sha256}, named by a pulled journal line, is not here"
            ),
        }
    }
}

impl Problem {
    /// Whether [`repair`] can mend it.
    pub fn repairable(&self) -> bool {
        match self {
            // Sent again from here when its session is here.
            Self::BadRecord { session, .. } => session.is_some(),
            Self::BadBlob { .. } => false,
            Self::BlobNotOnServer { here, .. } => *here,
            _ => true,
        }
    }
}

/// What this device holds, keyed as the server stores it.
struct Local {
    /// Each session's entries (title lines too) in the transcripts, and
    /// other agents' sessions' by stream name, each with whether push has
    /// taken it.
    sessions: Vec<(String, Vec<(KeyedId, bool)>)>,
    /// Sessions and entries here per agent.
    counts: BTreeMap<Agent, (u64, u64)>,
    /// Those and the entries waiting in `sync/pending/`.
    here: HashSet<KeyedId>,
    /// This device's journal lines, each with whether push has taken it.
    journal: Vec<(KeyedId, bool)>,
}

fn local(ctx: &SyncContext) -> Result<Local, SyncError> {
    let catalog =
        Catalog::scan(&ctx.home.transcripts_dir()).ctx(|| "cannot list the transcripts".into())?;
    let mut sessions = Vec::new();
    let mut here = HashSet::new();
    for (session, files) in catalog.sessions {
        let tree = SessionTree::load(session.clone(), files)
            .ctx(|| format!("cannot read session {session}"))?;
        // Push takes a file's lines up to its state's offset (pull's
        // appends included: it records them there).
        let taken = |at: &crate::transcript::lines::LineAt| {
            let day = tree.files[at.file].day;
            ctx.state
                .files
                .get(&rel_name(day, &session))
                .is_some_and(|f| at.offset < f.offset)
        };
        let ids: Vec<(KeyedId, bool)> = tree
            .entries
            .iter()
            .map(|e| (e.id.as_str(), &e.at))
            .chain(tree.titles.iter().map(|t| (t.id.as_str(), &t.at)))
            .map(|(id, at)| (ctx.keys.entry_key(&session, id), taken(at)))
            .collect();
        here.extend(ids.iter().map(|(id, _)| id.clone()));
        sessions.push((session.to_string(), ids));
    }
    let mut counts: BTreeMap<Agent, (u64, u64)> = BTreeMap::new();
    counts.insert(Agent::Evi, (sessions.len() as u64, here.len() as u64));
    let pending = PendingStore::load(ctx.paths.dir.join("pending"))
        .ctx(|| "cannot read sync/pending".into())?;
    for (session, list) in pending.sessions() {
        here.extend(list.iter().map(|w| ctx.keys.entry_key(session, &w.id)));
    }
    for file in agent_files(ctx) {
        let ids = agent_entries(ctx, &file)?;
        let c = counts.entry(file.stream.agent).or_default();
        c.0 += 1;
        c.1 += ids.len() as u64;
        here.extend(ids.iter().map(|(id, _)| id.clone()));
        sessions.push((file.stream.to_string(), ids));
    }
    for (stream, list) in crate::source::apply::waiting(ctx)? {
        let name = stream.to_string();
        here.extend(list.iter().map(|w| ctx.keys.stream_entry_key(&name, &w.id)));
    }
    // A session's project entry is in its stream on the server, and here in
    // `sync/projects.json` (pull keeps it out of the agent's file; push
    // records it there once sent).
    for (stream, record) in ctx.projects.records() {
        here.insert(
            ctx.keys
                .stream_entry_key(&stream.to_string(), &record.id(&stream)),
        );
    }
    let path = ctx.home.checkpoints_dir().join("journal.jsonl");
    let name = journal_name(&ctx.account);
    let mut journal = Vec::new();
    let journal_taken = ctx.state.journal.file.offset;
    match walk_file(&path, 0, |at, raw| {
        journal.push((ctx.keys.journal_line_key(&name, raw), at < journal_taken));
        ControlFlow::Continue(())
    }) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).ctx(|| format!("cannot read {}", path.display())),
    }
    Ok(Local {
        sessions,
        counts,
        here,
        journal,
    })
}

/// The keyed ids of another agent's session file, as push gives them (the
/// form every device agrees on, a repeated id once), each with whether push
/// has taken it.
fn agent_entries(ctx: &SyncContext, file: &AgentFile) -> Result<Vec<(KeyedId, bool)>, SyncError> {
    let agent = file.stream.agent;
    let stream = file.stream.to_string();
    // The session's own map, as push reads it (`[paths]`, and the pair of
    // a session a pull placed by its git remote).
    let map = ctx.projects.map_for(&ctx.path_map, &file.stream);
    let taken = ctx
        .state
        .files
        .get(&file.stream.state_key())
        .map_or(0, |f| f.offset);
    let mut chain = IdChain::default();
    let mut seen = HashSet::new();
    let mut ids = Vec::new();
    walk_file(&file.path, 0, |at, raw| {
        let canon = agent.canonical(raw, &map);
        let placed = chain.place(&canon, agent.explicit_ids(&canon));
        if seen.insert(placed.id.clone()) {
            ids.push((ctx.keys.stream_entry_key(&stream, &placed.id), at < taken));
        }
        ControlFlow::Continue(())
    })
    .ctx(|| format!("cannot read {}", file.path.display()))?;
    Ok(ids)
}

/// Checks everything the server holds for this account against itself and
/// against this device (see the module's promises).
pub fn verify(ctx: &SyncContext, progress: &dyn Progress) -> Result<VerifyReport, SyncError> {
    let started = Instant::now();
    let mut report = VerifyReport::default();
    // Under another key nothing opens: that is the key, not damage (and a
    // repair would report every record damaged to the server).
    ctx.check_key()?;
    let status = ctx.client.status()?;
    let framed = ctx.client.capabilities()?.frames;
    let local = local(ctx)?;
    report.local_entries = local.here.len() as u64;
    report.journal_lines = local.journal.len() as u64;
    let own_journal = journal_name(&ctx.account);
    let cursor = ctx.state.cursor;
    // Streams of the sessions here, to name a record that does not open.
    let streams: HashMap<KeyedId, &str> = (local.sessions.iter())
        .map(|(s, _)| (ctx.keys.stream_key(s), s.as_str()))
        .collect();
    let enabled: HashSet<Agent> = ctx.sources.iter().map(|s| s.agent).collect();
    // Records of each agent: (all, verified); a record that does not open
    // counts under the agent of its stream when that is a session here.
    let mut records: BTreeMap<Agent, (u64, u64)> = BTreeMap::new();
    let agent_of = |name: &str| StreamName::parse(name).map(|s| s.agent);
    let mut on_server: HashSet<KeyedId> = HashSet::new();
    // Ids of records that do not verify: those records are the problem
    // named, not their entries once more.
    let mut claimed: HashSet<KeyedId> = HashSet::new();
    let mut not_here: BTreeMap<String, u64> = BTreeMap::new();
    let mut journal_not_here: BTreeMap<String, u64> = BTreeMap::new();
    // Blobs verified records name, and those of them a journal line here
    // names (which must be here too).
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut wanted_here: BTreeSet<String> = BTreeSet::new();
    progress.start("verifying", status.newest_seq);
    std::thread::scope(|scope| -> Result<(), SyncError> {
        let (tx, pages) = std::sync::mpsc::sync_channel(0);
        let client = ctx.client.clone();
        scope.spawn(move || fetch_pages(&client, None, 0, framed, tx));
        for page in pages {
            let page = page?;
            let opened = on_all_cores(&page.records, |r| open_record(ctx, r));
            for (r, seg) in page.records.iter().zip(opened) {
                report.records += 1;
                report.record_bytes += r.ciphertext.len() as u64;
                if evi_shared::forget::is_forget_kind(&r.head.kind)
                    || r.head.kind == evi_shared::blob_refs::FORGET_LINES_KIND
                {
                    let checked = if r.head.kind == evi_shared::blob_refs::FORGET_LINES_KIND {
                        crate::sync::engine::checkpoint_forget::check(ctx, r)
                    } else {
                        crate::sync::engine::forget::apply::check(ctx, r)
                    };
                    match checked {
                        Ok(()) => report.tombstones += 1,
                        Err(error) => report.problems.push(Problem::BadRecord {
                            seq: r.head.seq,
                            session: streams.get(&r.head.stream).map(|s| s.to_string()),
                            error,
                        }),
                    }
                    continue;
                }
                let seg = match seg {
                    Ok(seg) => seg,
                    Err(e) => {
                        if let Some(a) = streams.get(&r.head.stream).and_then(|s| agent_of(s)) {
                            records.entry(a).or_default().0 += 1;
                        }
                        claimed.extend(r.head.entry_ids.iter().cloned());
                        let error = match e {
                            SyncError::Segment { source, .. } => source.to_string(),
                            e => e.to_string(),
                        };
                        report.problems.push(Problem::BadRecord {
                            seq: r.head.seq,
                            session: streams.get(&r.head.stream).map(|s| s.to_string()),
                            error,
                        });
                        continue;
                    }
                };
                on_server.extend(r.head.entry_ids.iter().cloned());
                let own = r
                    .head
                    .device
                    .as_deref()
                    .is_some_and(|d| ctx.account.is_own_device(d));
                let should_hold = own || r.head.seq <= cursor;
                if !should_hold {
                    report.not_pulled += 1;
                }
                let counted = match &seg {
                    OpenedSegment::Entries { .. } => Some(Agent::Evi),
                    OpenedSegment::AgentEntries { stream, .. } => Some(stream.agent),
                    OpenedSegment::Journal { .. } => None,
                };
                if let Some(a) = counted {
                    let c = records.entry(a).or_default();
                    c.0 += 1;
                    c.1 += 1;
                }
                let (name, agent, entries) = match seg {
                    OpenedSegment::Entries { session, entries } => {
                        (session.to_string(), Agent::Evi, entries)
                    }
                    OpenedSegment::AgentEntries { stream, entries } => {
                        (stream.to_string(), stream.agent, entries)
                    }
                    OpenedSegment::Journal { device, lines } => {
                        let shas = lines.iter().filter_map(|l| blob_of(&l.line));
                        // Another device's journal, pulled up to the cursor.
                        if !own && should_hold && device != own_journal {
                            wanted_here.extend(shas.clone());
                            let missing = journal_lines_missing(ctx, &device, &lines)?;
                            if missing > 0 {
                                *journal_not_here.entry(device).or_default() += missing;
                            }
                        }
                        named.extend(shas);
                        continue;
                    }
                };
                named.extend(
                    entries
                        .iter()
                        .filter_map(|e| e.line_blob.as_ref())
                        .map(|b| b.sha256_hex.clone()),
                );
                // Another agent's entries are expected here only when that
                // agent is turned on here.
                let expected = agent == Agent::Evi || enabled.contains(&agent);
                let missing = r
                    .head
                    .entry_ids
                    .iter()
                    .filter(|id| !local.here.contains(*id))
                    .count() as u64;
                if should_hold && expected && missing > 0 {
                    *not_here.entry(name).or_default() += missing;
                }
            }
            progress.inc(page.records.len() as u64);
            if page.records.is_empty() || !page.more {
                break;
            }
        }
        Ok(())
    })?;
    progress.finish();

    let named: Vec<String> = named.into_iter().collect();
    progress.start("verifying blobs", named.len() as u64);
    let checked = verify_blobs(ctx, &named)?;
    progress.finish();
    for (sha, v) in named.iter().zip(checked) {
        match v {
            Verified::Good(n) => {
                report.blobs += 1;
                report.blob_bytes += n;
            }
            Verified::Missing => report.problems.push(Problem::BlobNotOnServer {
                sha256: sha.clone(),
                here: checkpoint_blob_path(ctx, sha).is_file(),
            }),
            Verified::Bad(error) => report.problems.push(Problem::BadBlob {
                sha256: sha.clone(),
                error,
            }),
        }
    }
    for sha in wanted_here {
        if !checkpoint_blob_path(ctx, &sha).is_file() {
            report.problems.push(Problem::BlobNotHere { sha256: sha });
        }
    }
    let lacks = |id: &KeyedId| !on_server.contains(id) && !claimed.contains(id);
    // (lacked and taken by push, lacked and not taken yet)
    let count = |ids: &mut dyn Iterator<Item = &(KeyedId, bool)>| {
        ids.filter(|(id, _)| lacks(id))
            .fold((0u64, 0u64), |(lost, new), (_, taken)| {
                if *taken {
                    (lost + 1, new)
                } else {
                    (lost, new + 1)
                }
            })
    };
    for (session, ids) in &local.sessions {
        let (lost, new) = count(&mut ids.iter());
        if lost > 0 {
            report.problems.push(Problem::NotOnServer {
                session: session.clone(),
                entries: lost,
            });
        }
        if new > 0 {
            report.not_pushed += new;
            report.pending.push(Pending::NotPushed {
                session: session.clone(),
                entries: new,
            });
        }
    }
    let mut seen = HashSet::new();
    let (lost, new) = count(
        &mut local
            .journal
            .iter()
            .filter(|(id, _)| seen.insert(id.clone())),
    );
    if lost > 0 {
        report
            .problems
            .push(Problem::JournalNotOnServer { lines: lost });
    }
    if new > 0 {
        report.not_pushed += new;
        report
            .pending
            .push(Pending::JournalNotPushed { lines: new });
    }
    if report.not_pulled > 0 {
        report.pending.push(Pending::NotPulled {
            records: report.not_pulled,
        });
    }
    report.problems.extend(
        not_here
            .into_iter()
            .map(|(session, entries)| Problem::NotHere { session, entries }),
    );
    report.problems.extend(
        journal_not_here
            .into_iter()
            .map(|(journal, lines)| Problem::JournalNotHere { journal, lines }),
    );
    report.agents = Agent::ALL
        .iter()
        .copied()
        .filter(|a| *a == Agent::Evi || enabled.contains(a) || records.contains_key(a))
        .map(|agent| {
            let (sessions, entries) = local.counts.get(&agent).copied().unwrap_or_default();
            let (records, verified) = records.get(&agent).copied().unwrap_or_default();
            AgentCount {
                agent,
                enabled: agent == Agent::Evi || enabled.contains(&agent),
                sessions,
                entries,
                records,
                verified,
            }
        })
        .collect();
    report.seconds = started.elapsed().as_secs_f64();
    let bytes = (report.record_bytes + report.blob_bytes) as f64;
    report.mb_per_s = bytes / 1e6 / report.seconds.max(1e-9);
    Ok(report)
}

/// What [`repair`] did: the push and the pull it ran, if it needed them.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Repaired {
    pub pushed: Option<PushReport>,
    pub pulled: Option<PullReport>,
}

/// Sends what `found` says the server lacks and applies what this device
/// lacks (see the module's promises); problems it cannot mend are left.
pub fn repair(
    ctx: &mut SyncContext,
    found: &VerifyReport,
    progress: &dyn Progress,
) -> Result<Repaired, SyncError> {
    let mut opts = PushOptions::default();
    let (mut send, mut fetch) = (false, false);
    let mut damaged = Vec::new();
    for p in &found.problems {
        match p {
            Problem::BadRecord {
                seq,
                session: Some(session),
                ..
            } => {
                damaged.push(*seq);
                if session.contains('/') {
                    opts.recheck_streams.insert(session.clone());
                } else {
                    opts.recheck_sessions.extend(session.parse().ok());
                }
            }
            Problem::NotOnServer { session, .. } if session.contains('/') => {
                opts.recheck_streams.insert(session.clone());
            }
            Problem::NotOnServer { session, .. } => {
                opts.recheck_sessions.extend(session.parse().ok());
            }
            Problem::JournalNotOnServer { .. } => opts.recheck_journal = true,
            // Remembered as missing, a blob goes up with the next push and
            // comes down with the next pull (see `blob_transfer`).
            Problem::BlobNotOnServer { sha256, here: true } => {
                ctx.state.missing_blobs.insert(sha256.clone());
                send = true;
            }
            Problem::BlobNotHere { sha256 } => {
                ctx.state.missing_blobs.insert(sha256.clone());
                fetch = true;
            }
            Problem::NotHere { .. } | Problem::JournalNotHere { .. } => fetch = true,
            Problem::BadRecord { session: None, .. }
            | Problem::BadBlob { .. }
            | Problem::BlobNotOnServer { .. } => {}
        }
    }
    // Not a problem, but what the repair's check after would show again.
    send |= found
        .pending
        .iter()
        .any(|p| !matches!(p, Pending::NotPulled { .. }));
    if !damaged.is_empty() {
        if !ctx.client.capabilities()?.damage_reports {
            return Err(SyncError::Io {
                context: "cannot send damaged records again".into(),
                source: std::io::Error::other(
                    "this server cannot take reports of damaged records (upgrade evi-server)",
                ),
            });
        }
        ctx.client.mark_damaged(&damaged)?;
    }
    let mut done = Repaired::default();
    if send
        || !opts.recheck_sessions.is_empty()
        || !opts.recheck_streams.is_empty()
        || opts.recheck_journal
    {
        done.pushed = Some(push_with(ctx, progress, &opts)?);
    }
    if fetch {
        done.pulled = Some(pull(ctx, progress, PullOptions { all: true })?);
    }
    Ok(done)
}
