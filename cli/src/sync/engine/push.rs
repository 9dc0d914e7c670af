//! `evi sync push`: find what is new, seal it, upload it.
//!
//! Finding what is new is cheap: a file whose size, mtime and inode match
//! the state is not opened. A changed file is read from where the last push
//! stopped, after checking that the last pushed line is still there byte for
//! byte; a file that shrank or whose pushed prefix changed is read again
//! whole, and the server drops what it already has (merge by entry id).
//!
//! Progress is saved after every acknowledged batch, so a push killed at any
//! point and run again sends only what was not yet acknowledged.

use std::ops::ControlFlow;

use evi_shared::api::ErrorCode;
use evi_shared::limits::MAX_ENTRY_IDS_PER_SEGMENT;
use evi_shared::{Day, SessionId};

use crate::source::Agent;
use crate::source::project::ProjectRecord;
use crate::sync::Entry;
use crate::sync::engine::blobs::{self, BlobsAhead};
use crate::sync::engine::incoming::drain_pending;
use crate::sync::engine::journal;
use crate::sync::engine::line_blobs::line_blob_of;
use crate::sync::engine::push_report::{Mark, PushReport};
use crate::sync::engine::redact::record::{Redaction, RedactionRecord};
use crate::sync::engine::unfinished::{self, Unfinished};
use crate::sync::engine::uploader::Uploader;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::progress::Progress;
use crate::sync::state::context::SyncContext;
use crate::sync::state::{FileState, Stat, line_hash, prefix_intact, rel_name};
use crate::transcript::Catalog;
use crate::transcript::entry_id::IdChain;
use crate::transcript::line::explicit_ids;
use crate::transcript::lines::walk_file;

/// Whether an error concerns one item (a file, a line, a blob) that the rest
/// of a push can go on without, rather than the server or the account.
fn item_error(e: &SyncError) -> bool {
    match e {
        SyncError::Io { .. } | SyncError::TooLarge { .. } | SyncError::Blob { .. } => true,
        SyncError::Client(c) => matches!(c.code(), Some(ErrorCode::PayloadTooLarge)),
        _ => false,
    }
}

/// How to push.
#[derive(Debug, Default, Clone)]
pub struct PushOptions {
    /// Sessions whose files are read again whole, their entries asked about
    /// first and only those the server lacks sent (`evi sync verify
    /// --repair`: the server lost what the push state calls pushed).
    pub recheck_sessions: std::collections::BTreeSet<SessionId>,
    /// The same for other agents' sessions, by stream name
    /// (`claude-code/<id>`).
    pub recheck_streams: std::collections::BTreeSet<String>,
    /// The same for this device's checkpoint journal.
    pub recheck_journal: bool,
}

pub fn push(ctx: &mut SyncContext, progress: &dyn Progress) -> Result<PushReport, SyncError> {
    push_with(ctx, progress, &PushOptions::default())
}

pub fn push_with(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: &PushOptions,
) -> Result<PushReport, SyncError> {
    let mut report = PushReport::default();
    let result = push_forgetting(ctx, progress, opts, &mut report);
    let redacted = std::mem::take(&mut report.redacted);
    let saved = RedactionRecord::add(&ctx.paths.dir, redacted)
        .ctx(|| "cannot save the record of redactions (sync/redactions.json)".into());
    result?;
    saved?;
    Ok(report)
}

/// [`push_into`] between the steps of [`crate::sync::engine::forget`]: old trash out,
/// this device's forgets and undos up first, and after it the tombstones of
/// sessions the server refused as forgotten applied here (then a second
/// round sends the lines they kept as a new session).
fn push_forgetting(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: &PushOptions,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    use crate::sync::engine::forget::apply::{apply_refused, purge_trash};
    use crate::sync::engine::forget::local::send_outbox;
    purge_trash(ctx, &mut report.forget);
    send_outbox(ctx, &mut report.forget)?;
    // Checkpoint forgets (and `keep_days`) in a batch of their own, before
    // the journal goes up again without their lines.
    crate::sync::engine::checkpoint_forget::expire(ctx, &mut report.checkpoint_forget)?;
    crate::sync::engine::checkpoint_forget::send_outbox(ctx, &mut report.checkpoint_forget)?;
    push_into(ctx, progress, opts, report)?;
    if report.forgotten.is_empty() {
        return Ok(());
    }
    let streams = report.forgotten.clone();
    if apply_refused(ctx, &streams, &mut report.forget)? {
        push_into(ctx, progress, opts, report)?;
    }
    Ok(())
}

fn push_into(
    ctx: &mut SyncContext,
    progress: &dyn Progress,
    opts: &PushOptions,
    report: &mut PushReport,
) -> Result<(), SyncError> {
    let caps = ctx.client.capabilities()?;
    let rechecks = !opts.recheck_sessions.is_empty()
        || !opts.recheck_streams.is_empty()
        || opts.recheck_journal;
    if rechecks && !caps.known_entries {
        return Err(SyncError::Io {
            context: "cannot send only what the server lacks".into(),
            source: std::io::Error::other(
                "this server cannot say which entries it holds (upgrade evi-server)",
            ),
        });
    }
    // Nothing goes up under a key the account was not set up with.
    ctx.check_key()?;
    // Entries that waited for eVi (or another agent) to finish a line go
    // in first, so what is read below is the home as pull would leave it.
    drain_pending(ctx)?;
    report
        .agent_notes
        .extend(crate::source::apply::after_pull(ctx));
    let unfinished = Unfinished::begin(&ctx.paths, caps.known_entries)?;
    // The journal's blobs go up while the transcripts are read and sealed.
    let journal_careful = unfinished.careful || opts.recheck_journal;
    let mut shas = journal::blobs_ahead(ctx, journal_careful);
    shas.extend(blobs::owed_blobs(ctx));
    let mut ahead = BlobsAhead::start(ctx, shas);
    let catalog =
        Catalog::scan(&ctx.home.transcripts_dir()).ctx(|| "cannot list the transcripts".into())?;
    let mut up = Uploader::new(ctx, caps.max_batch_bytes, caps.frames);
    progress.start("pushing", catalog.sessions.len() as u64);
    for (session, files) in &catalog.sessions {
        let recheck = opts.recheck_sessions.contains(session);
        if recheck {
            for f in files {
                ctx.state.files.remove(&rel_name(f.day, session));
            }
        }
        let files = files
            .iter()
            .map(|f| PushFile {
                rel: rel_name(f.day, session),
                path: f.path.clone(),
                day: f.day,
            })
            .collect();
        // Entries and sessions are counted as their segments join a batch.
        match push_session(
            ctx,
            &mut up,
            report,
            session.as_str(),
            files,
            How {
                careful: unfinished.careful || recheck,
                agent: Agent::Evi,
                project: None,
            },
        ) {
            Ok(()) => {}
            Err(e) if item_error(&e) => report.failed.push(format!("session {session}: {e}")),
            Err(e) => return Err(e),
        }
        progress.inc(1);
    }
    // Other agents' sessions: one file each, its own stream.
    let mut origins = std::collections::HashMap::new();
    for file in agent_files(ctx) {
        let stream = file.stream.to_string();
        let recheck = opts.recheck_streams.contains(&stream);
        if recheck {
            ctx.state.files.remove(&file.stream.state_key());
        }
        let project = project_record(ctx, &file, &mut origins);
        let files = vec![PushFile {
            rel: file.stream.state_key(),
            path: file.path,
            day: crate::source::agent_day(),
        }];
        match push_session(
            ctx,
            &mut up,
            report,
            &stream,
            files,
            How {
                careful: unfinished.careful || recheck,
                agent: file.stream.agent,
                project,
            },
        ) {
            Ok(()) => {}
            Err(e) if item_error(&e) => report.failed.push(format!("session {stream}: {e}")),
            Err(e) => return Err(e),
        }
    }
    up.flush(ctx, report)?;
    progress.finish();
    // Blobs an earlier push could not send go now, journal changed or not.
    blobs::push_missing_blobs(ctx, report, progress, &mut ahead)?;
    if opts.recheck_journal {
        ctx.state.journal = crate::sync::state::JournalState::default();
    }
    match journal::push_journal(ctx, &mut up, report, journal_careful, progress, &mut ahead) {
        Ok(()) => {}
        Err(e) if item_error(&e) => report.failed.push(format!("checkpoint journal: {e}")),
        Err(e) => return Err(e),
    }
    up.flush(ctx, report)?;
    ctx.state.last_push = Some(chrono::Utc::now().to_rfc3339());
    ctx.save_state()?;
    crate::sync::engine::rotate::local::drop_old_identity(&ctx.paths);
    unfinished.finish()?;
    report.retries = ctx.client.retries();
    Ok(())
}

/// The project entry to send with `file`, when the server has none for it
/// yet and its project is a checkout with an origin remote. Looked for once
/// per session, and again only when a session without one grows; `origins`
/// keeps what git said per directory for this push.
fn project_record(
    ctx: &mut SyncContext,
    file: &crate::source::AgentFile,
    origins: &mut std::collections::HashMap<String, Option<crate::git::remote::Origin>>,
) -> Option<ProjectRecord> {
    if file.stream.sub.is_some() {
        return None;
    }
    let size = std::fs::metadata(&file.path).ok()?.len();
    let known = ctx.projects.get(&file.stream);
    if known.is_some_and(|k| k.record.is_some() || k.none_at == Some(size)) {
        return None;
    }
    let cwd = crate::source::project::cwd_of_file(file);
    let found = cwd.clone().and_then(|cwd| {
        origins
            .entry(cwd.clone())
            .or_insert_with(|| crate::git::remote::origin(std::path::Path::new(&cwd)))
            .clone()
    });
    // An agent whose lines name no folder (Gemini) always sends its own,
    // with the checkout's remote when there is one.
    let dir = file.stream.agent.project_of_file(&file.path);
    let found = found.and_then(|o| Some((o.top.to_str()?.to_owned(), o.remote)));
    let Some((top, remote)) = found.or_else(|| Some((dir.clone()?, String::new()))) else {
        ctx.projects.set_none(&file.stream, size);
        return None;
    };
    let map = ctx.projects.map_for(&ctx.path_map, &file.stream);
    Some(ProjectRecord {
        project: map.original(&top),
        remote,
        dir: dir.map(|d| map.original(&d)),
    })
}

/// The session files of the other agents turned on.
pub fn agent_files(ctx: &SyncContext) -> Vec<crate::source::AgentFile> {
    ctx.sources.iter().flat_map(|s| s.sessions()).collect()
}

/// One file of a session to push: its key in the push state, where it is,
/// the day its entries carry.
struct PushFile {
    rel: String,
    path: std::path::PathBuf,
    day: Day,
}

/// One session being gathered into segments.
struct Gather<'a> {
    /// The stream name (an eVi session's bare id).
    session: &'a str,
    /// Whose session it is: how its lines name their ids.
    agent: Agent,
    entries: Vec<Entry>,
    bytes: usize,
    /// Marks of files finished since the last seal.
    pending: Vec<Mark>,
    /// Whether the server may hold some of `entries` already (see
    /// [`unfinished`]): they are asked about before sealing.
    careful: bool,
}

impl Gather<'_> {
    fn seal_into(
        &mut self,
        ctx: &mut SyncContext,
        up: &mut Uploader,
        report: &mut PushReport,
        current: Option<Mark>,
    ) -> Result<(), SyncError> {
        let mut marks = std::mem::take(&mut self.pending);
        marks.extend(current);
        if self.entries.is_empty() {
            up.mark(format!("session {}", self.session), marks);
            return Ok(());
        }
        self.bytes = 0;
        let mut entries = std::mem::take(&mut self.entries);
        if self.careful {
            unfinished::drop_known_entries(ctx, self.session, &mut entries)?;
            if entries.is_empty() {
                up.mark(format!("session {}", self.session), marks);
                return Ok(());
            }
        }
        up.seal_and_add(ctx, report, self.session, entries, marks)
    }
}

/// How one session is pushed.
struct How {
    /// Whether the server may hold some of its entries already.
    careful: bool,
    /// Whose session it is.
    agent: Agent,
    /// The project entry to send first, if one is due.
    project: Option<ProjectRecord>,
}

fn push_session(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    session: &str,
    files: Vec<PushFile>,
    how: How,
) -> Result<(), SyncError> {
    let How {
        careful,
        agent,
        project,
    } = how;
    let budget = up.segment_budget();
    let mut g = Gather {
        session,
        entries: Vec::new(),
        bytes: 0,
        pending: Vec::new(),
        careful,
        agent,
    };
    // The project entry goes first: a pull places the session by it before
    // it writes the session's first line.
    if let Some((record, stream)) = project.zip(crate::source::StreamName::parse(session)) {
        let e = record.entry(&stream);
        g.bytes += e.line.len() + e.id.len() + 32;
        g.entries.push(e);
        g.pending.push(Mark::Project(stream, record));
    }
    let mut skip = ctx.state.skip.remove(session).unwrap_or_default();
    let result = push_files(ctx, up, report, &mut g, &mut skip, budget, &files);
    if !skip.is_empty() {
        ctx.state.skip.insert(session.to_string(), skip);
    }
    result
}

/// The body of [`push_session`]; on an error, what was gathered before the
/// failing line is still sealed, so only that line and what follows wait.
fn push_files(
    ctx: &mut SyncContext,
    up: &mut Uploader,
    report: &mut PushReport,
    g: &mut Gather<'_>,
    skip: &mut std::collections::BTreeSet<String>,
    budget: usize,
    files: &[PushFile],
) -> Result<(), SyncError> {
    let agent = g.agent;
    // The session's own map: `[paths]`, and where a pull placed it by its
    // git remote.
    let map = match crate::source::StreamName::parse(g.session) {
        Some(stream) if agent != Agent::Evi => {
            ctx.projects.map_for(&ctx.path_map, &stream).into_owned()
        }
        _ => ctx.path_map.clone(),
    };
    let redactor = ctx.redactor.clone();
    let mut chain = IdChain::default();
    // Another agent may write one id twice in a file (eVi never does): the
    // first is the entry, a repeat is passed over. Only a line with an id
    // or parent of its own can repeat one: an id derived from the chain
    // follows from every line before it, so they are not kept (a copy of
    // each of Codex's ids was a tenth of its push's main thread).
    let mut seen = std::collections::HashSet::new();
    for file in files {
        let rel = file.rel.clone();
        let stat = Stat::of(&file.path).ctx(|| format!("cannot stat {}", file.path.display()))?;
        let chain_before = chain.implicit_parent().map(str::to_owned);
        let prev = ctx.state.files.get(&rel).cloned();
        if let Some(p) = &prev
            && stat.matches(p)
            && p.chain_before == chain_before
        {
            chain = IdChain::starting_at(p.chain_after.clone());
            continue;
        }
        report.files_read += 1;
        let had_state = prev.is_some();
        let resume = prev.filter(|p| {
            p.chain_before == chain_before && stat.size >= p.offset && prefix_intact(&file.path, p)
        });
        // Read again whole: what was pushed of it may be on the server.
        g.careful |= had_state && resume.is_none();
        let mut fs = FileState {
            size: stat.size,
            mtime_ns: stat.mtime_ns,
            ino: stat.ino,
            chain_before: chain_before.clone(),
            ..resume.clone().unwrap_or_default()
        };
        if let Some(r) = &resume {
            chain = IdChain::starting_at(r.chain_after.clone());
        }
        let start = fs.offset;
        let mut failure = None;
        // The last line read, hashed only where a state is recorded: a hash
        // per line would be one more SHA-256 pass over every byte pushed.
        let mut last_line: Option<Vec<u8>> = None;
        let settled = |fs: &FileState, last: &Option<Vec<u8>>| {
            let mut fs = fs.clone();
            if let Some(l) = last {
                fs.last_hash = Some(line_hash(l));
            }
            fs
        };
        let end = walk_file(&file.path, start, |offset, raw| {
            // Ids and content from the form every device agrees on (another
            // agent's lines may have paths rewritten for this device); the
            // offsets and hashes of the state stay those of the file.
            let canon = agent.canonical(raw, &map);
            let ids = match agent {
                Agent::Evi => explicit_ids(raw),
                a => a.explicit_ids(&canon),
            };
            let own = ids.id.is_some() || ids.parent.is_some();
            let placed = chain.place(&canon, ids);
            let repeat = agent != Agent::Evi && own && !seen.insert(placed.id.clone());
            let skipped = skip.remove(&placed.id) || repeat;
            // Secrets out before sealing; the line keeps the ids of its
            // original bytes (derived above), so it travels with them.
            let redacted = match &redactor {
                Some(r) if !skipped => r.redact_line(&canon),
                _ => None,
            };
            let redacted = redacted.map(|r| {
                for (rule, n) in &r.hits {
                    *report.redactions.entry(rule.clone()).or_default() += n;
                }
                report.redacted_lines += 1;
                report.redacted.push((
                    g.session.to_owned(),
                    Redaction {
                        entry: placed.id.clone(),
                        file: rel.clone(),
                        offset,
                        rules: r.hits,
                    },
                ));
                crate::sync::engine::redact::carry(
                    agent,
                    r.line,
                    &placed.id,
                    placed.parent.as_deref(),
                )
            });
            let sealed: &[u8] = redacted.as_deref().unwrap_or(&canon);
            // A line too large for a segment goes up as a blob, sent by the
            // thread that seals its segment just before it does; the
            // segment carries its hash. It is the only entry of its segment,
            // so no more than one such line is held per segment.
            let big = !skipped && sealed.len() > budget;
            let size = if big { budget } else { sealed.len() };
            // The server takes at most so many entry ids per segment.
            let full = g.bytes + size > budget || g.entries.len() >= MAX_ENTRY_IDS_PER_SEGMENT;
            if !skipped && !g.entries.is_empty() && full {
                // Seal what came before this line.
                let mid = Mark::File(rel.clone(), settled(&fs, &last_line).mid_file());
                if let Err(e) = g.seal_into(ctx, up, report, Some(mid)) {
                    failure = Some(e);
                    return ControlFlow::Break(());
                }
            }
            let line_blob = big.then(|| line_blob_of(sealed));
            fs.last_start = offset;
            fs.offset = offset + raw.len() as u64 + 1;
            let last = last_line.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(raw);
            fs.chain_after = chain.implicit_parent().map(str::to_owned);
            if !skipped {
                g.bytes += size + placed.id.len() + 32;
                g.entries.push(Entry {
                    id: placed.id,
                    parent: placed.parent,
                    day: file.day,
                    line: sealed.to_vec(),
                    line_blob,
                });
            }
            ControlFlow::Continue(())
        })
        .ctx(|| format!("cannot read {}", file.path.display()))?;
        if let Some(e) = failure {
            return Err(e);
        }
        let mut fs = settled(&fs, &last_line);
        fs.offset = end.offset;
        fs.chain_after = chain.implicit_parent().map(str::to_owned);
        g.pending.push(Mark::File(rel, fs));
    }
    g.seal_into(ctx, up, report, None)
}

/// Files whose size, mtime or inode changed since the last push: what
/// `evi sync status` reports as pending, at the cost of a `stat` each.
/// Whether a transcript file is as the last push saw it.
fn file_pushed(
    ctx: &SyncContext,
    session: &SessionId,
    f: &crate::transcript::SessionFile,
) -> Result<bool, SyncError> {
    let stat = Stat::of(&f.path).ctx(|| format!("cannot stat {}", f.path.display()))?;
    let known = ctx.state.files.get(&rel_name(f.day, session));
    Ok(known.is_some_and(|k| stat.matches(k)))
}

/// Whether every file of `session` is as the last push saw it (its tip is
/// on the server: a partial last line is not an entry yet).
pub fn session_pushed(
    ctx: &SyncContext,
    session: &SessionId,
    files: &[crate::transcript::SessionFile],
) -> Result<bool, SyncError> {
    for f in files {
        if !file_pushed(ctx, session, f)? {
            return Ok(false);
        }
    }
    Ok(true)
}

pub fn changed_files(ctx: &SyncContext) -> Result<u64, SyncError> {
    let catalog =
        Catalog::scan(&ctx.home.transcripts_dir()).ctx(|| "cannot list the transcripts".into())?;
    let mut n = 0;
    for (session, files) in &catalog.sessions {
        for f in files {
            if !file_pushed(ctx, session, f)? {
                n += 1;
            }
        }
    }
    for f in agent_files(ctx) {
        let known = ctx.state.files.get(&f.stream.state_key());
        if !Stat::of(&f.path).is_ok_and(|st| known.is_some_and(|k| st.matches(k))) {
            n += 1;
        }
    }
    Ok(n)
}
