//! Applying forgets and undos to this device, and the hooks push and pull
//! call (the rules are in the module above; what this device asks itself
//! is in [`super::local`]).

use std::io::{Read as _, Seek as _, Write as _};
use std::path::Path;

use evi_shared::{Day, SessionId};
use serde::Serialize;

use super::ledger::{Ledger, SessionMark};
use super::tombstone::{Action, Tombstone, TombstoneError};
use super::trash;
use crate::source::{Agent, StreamName};
use crate::sync::OpenedSegment;
use crate::sync::error::{IoContext, SyncError};
use crate::sync::remote::records::PulledRecord;
use crate::sync::state::context::SyncContext;
use crate::transcript::line::parse_head;

/// What forgets and undos did on this device, for the reports.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Applied {
    /// Sessions whose files moved into the trash here.
    pub trashed: Vec<String>,
    /// Sessions brought back from the trash here.
    pub restored: Vec<String>,
    /// Lines kept as a new session (written after the forget, never pushed).
    pub revived: Vec<Revived>,
    /// Tombstones this device sent.
    pub sent: u64,
    /// Trash folders past their 7 days, removed.
    pub purged: u64,
    /// Why a pulled tombstone was not applied (it did not verify), for people.
    pub refused: Vec<String>,
    /// Anything else people should know (lines of a Codex session written
    /// after its forget, kept in the trash).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remarks: Vec<String>,
}

impl Applied {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl Applied {
    /// One line each for people, of what happened here (what `sync push`
    /// and `sync pull` print on stderr).
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.trashed.is_empty() {
            out.push(format!(
                "forgotten, moved to sync/trash/ for 7 days: {}",
                self.trashed.join(", ")
            ));
        }
        for r in &self.revived {
            out.push(format!(
                "{} lines of {} were written after it was forgotten: kept as session {}",
                r.lines, r.from, r.to
            ));
        }
        if !self.restored.is_empty() {
            out.push(format!(
                "forget undone, brought back from sync/trash/: {}",
                self.restored.join(", ")
            ));
        }
        for r in &self.refused {
            out.push(format!("a forget from the server was not applied: {r}"));
        }
        out.extend(self.remarks.iter().cloned());
        out
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Revived {
    pub from: String,
    pub to: String,
    pub lines: u64,
}

/// A run of a pull page: records to apply as usual, then the forget or
/// undo that came right after them (if any).
pub struct Run {
    pub records: Vec<PulledRecord>,
    pub then: Option<PulledRecord>,
}

/// Splits a page at its forgets and undos, keeping seq order: each applies
/// after the records before it and before those after it.
pub fn runs(records: Vec<PulledRecord>) -> Vec<Run> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for r in records {
        let kind = &r.head.kind;
        if evi_shared::forget::is_forget_kind(kind)
            || kind == evi_shared::blob_refs::FORGET_LINES_KIND
        {
            out.push(Run {
                records: std::mem::take(&mut cur),
                then: Some(r),
            });
        } else {
            cur.push(r);
        }
    }
    out.push(Run {
        records: cur,
        then: None,
    });
    out
}

pub(super) fn ledger(ctx: &SyncContext) -> Result<Ledger, SyncError> {
    Ledger::load(&ctx.paths.dir).ctx(|| "cannot read sync/forget.json".into())
}

pub(super) fn save(ctx: &SyncContext, l: &Ledger) -> Result<(), SyncError> {
    l.save(&ctx.paths.dir)
        .ctx(|| "cannot save sync/forget.json".into())
}

/// Passes over pulled entries of sessions forgotten here (what another
/// device pushed before it learned of the forget).
pub fn drop_forgotten(ctx: &SyncContext, opened: Vec<OpenedSegment>) -> Vec<OpenedSegment> {
    let Ok(l) = ledger(ctx) else {
        return opened;
    };
    if l.sessions.is_empty() {
        return opened;
    }
    opened
        .into_iter()
        .filter(|s| match s {
            OpenedSegment::Entries { session, .. } => !l.is_forgotten(session.as_str()),
            OpenedSegment::AgentEntries { stream, .. } => !l.is_forgotten(&stream.to_string()),
            _ => true,
        })
        .collect()
}

/// A pulled forget or undo opened and checked against the ids it came under.
fn open_pulled(ctx: &SyncContext, r: &PulledRecord) -> Result<Tombstone, TombstoneError> {
    Tombstone::open(
        &ctx.keys,
        &ctx.identity,
        &r.head.stream,
        &r.head.kind,
        &r.head.entry_ids,
        &r.ciphertext,
    )
}

/// Whether a pulled forget or undo verifies (for `evi sync verify`), and
/// why not.
pub fn check(ctx: &SyncContext, r: &PulledRecord) -> Result<(), String> {
    open_pulled(ctx, r).map(drop).map_err(|e| e.to_string())
}

/// Applies a pulled forget or undo (once: one applied before is passed
/// over). Returns the stream name of a forget applied now, so the caller
/// drops what it holds of it in memory.
pub fn apply_pulled(
    ctx: &mut SyncContext,
    r: &PulledRecord,
    applied: &mut Applied,
) -> Result<Option<String>, SyncError> {
    let mut l = ledger(ctx)?;
    let Some(id) = r.head.entry_ids.first() else {
        return Ok(None);
    };
    if l.applied.contains(id.as_str()) {
        return Ok(None);
    }
    let t = match open_pulled(ctx, r) {
        Ok(t) => t,
        Err(e) => {
            applied.refused.push(format!("record {}: {e}", r.head.seq));
            return Ok(None);
        }
    };
    // Applied here before under other ids (a key rotation sealed it
    // again): what came after it here stands, an undo above all.
    if l.knows(&t) {
        l.applied.insert(id.to_string());
        save(ctx, &l)?;
        return Ok(None);
    }
    apply(ctx, &mut l, &t, id.as_str(), applied)?;
    l.applied.insert(id.to_string());
    save(ctx, &l)?;
    ctx.save_state()?;
    Ok((t.action == Action::Forget).then_some(t.stream))
}

/// What a verified tombstone does here: an eVi session's files, or
/// another agent's in its folder here (see [`super::agent`]), to the trash
/// or back. A stream name that is neither is only noted.
fn apply(
    ctx: &mut SyncContext,
    l: &mut Ledger,
    t: &Tombstone,
    id: &str,
    applied: &mut Applied,
) -> Result<(), SyncError> {
    let Some(stream) = StreamName::parse(&t.stream) else {
        return Ok(());
    };
    ctx.state.high_water.forgot();
    match t.action {
        Action::Forget => trash_stream(ctx, l, &stream, t.at_ms, true, applied)?,
        Action::Undo => {
            restore_stream(ctx, &stream, applied)?;
        }
    }
    l.sessions.insert(
        stream.to_string(),
        SessionMark {
            action: t.action,
            at_ms: t.at_ms,
            device: t.device.clone(),
            tombstone: id.to_owned(),
            unsent: false,
        },
    );
    l.remember(t);
    Ok(())
}

/// Applies the newest tombstone of each stream a push was refused for,
/// and of its session (a subagent transcript's is refused when its session
/// is forgotten): the server says it is forgotten (another device forgot
/// it, or this one did and eVi wrote to it again). Returns whether lines
/// were kept as a new session (the caller pushes again to send them).
pub fn apply_refused(
    ctx: &mut SyncContext,
    streams: &[String],
    applied: &mut Applied,
) -> Result<bool, SyncError> {
    let before = applied.revived.len();
    let framed = ctx.client.capabilities()?.frames;
    let mut asked = std::collections::BTreeSet::new();
    for name in streams {
        asked.insert(name.clone());
        if let Some(s) = StreamName::parse(name).filter(|s| s.sub.is_some()) {
            asked.insert(s.session_stream().to_string());
        }
    }
    for stream in &asked {
        let key = ctx.keys.stream_key(stream);
        let mut after = 0;
        let mut newest: Option<(Tombstone, String)> = None;
        loop {
            let page = ctx.client.pull_stream(&key, after, framed)?;
            for r in &page.records {
                if !evi_shared::forget::is_forget_kind(&r.head.kind) || r.head.stream != key {
                    continue;
                }
                match open_pulled(ctx, r) {
                    Ok(t) => newest = Some((t, r.head.entry_ids[0].to_string())),
                    Err(e) => applied.refused.push(format!("record {}: {e}", r.head.seq)),
                }
            }
            if page.records.is_empty() || !page.more {
                break;
            }
            after = page.next_after;
        }
        let Some((t, id)) = newest else { continue };
        if t.action != Action::Forget {
            continue;
        }
        let mut l = ledger(ctx)?;
        apply(ctx, &mut l, &t, &id, applied)?;
        l.applied.insert(id);
        save(ctx, &l)?;
    }
    ctx.save_state()?;
    Ok(applied.revived.len() > before)
}

/// Removes trash folders past their 7 days (best effort: a folder that
/// cannot be removed is tried again by the next sync).
pub fn purge_trash(ctx: &SyncContext, applied: &mut Applied) {
    if let Ok(n) = trash::purge(&ctx.home, trash::now_ms()) {
        applied.purged += n;
    }
}

/// Moves the files of `stream` here into the trash (eVi's day files, or
/// another agent's file): see [`trash_session`] and [`super::agent`].
pub(super) fn trash_stream(
    ctx: &mut SyncContext,
    l: &Ledger,
    stream: &StreamName,
    at_ms: i64,
    revive: bool,
    applied: &mut Applied,
) -> Result<(), SyncError> {
    match stream.agent {
        Agent::Evi => trash_session(ctx, l, &stream.session, at_ms, revive, applied),
        _ => super::agent::trash_agent_stream(ctx, stream, at_ms, revive, applied),
    }
}

/// Moves the files of `session` here into the trash and forgets their push
/// state and the entries that wait for them in `sync/pending/`; with
/// `revive`, first keeps as a new session the lines written after `at_ms`
/// that were never pushed from here.
fn trash_session(
    ctx: &mut SyncContext,
    l: &Ledger,
    session: &SessionId,
    at_ms: i64,
    revive: bool,
    applied: &mut Applied,
) -> Result<(), SyncError> {
    crate::sync::engine::pending::discard(&ctx.paths.dir.join("pending"), session)
        .ctx(|| format!("cannot drop the entries of session {session} in sync/pending/"))?;
    let files = trash::session_files(&ctx.home, session)
        .ctx(|| format!("cannot list the files of session {session}"))?;
    if files.is_empty() {
        return Ok(());
    }
    let mut kept: Vec<(Day, Vec<Vec<u8>>)> = Vec::new();
    if revive {
        for (day, path) in &files {
            let rel = crate::sync::state::rel_name(*day, session);
            let pushed = ctx.state.files.get(&rel).map_or(0, |f| f.offset);
            let lines = lines_after_forget(path, pushed, at_ms, |l| parse_head(l).ts)
                .ctx(|| format!("cannot read {}", path.display()))?;
            if !lines.is_empty() {
                kept.push((*day, lines));
            }
        }
    }
    trash::move_in(&ctx.home, session, &files, at_ms)
        .ctx(|| format!("cannot move session {session} into sync/trash/"))?;
    for (day, _) in &files {
        ctx.state
            .files
            .remove(&crate::sync::state::rel_name(*day, session));
    }
    ctx.state.skip.remove(session.as_str());
    ctx.state.session_cursors.remove(session.as_str());
    applied.trashed.push(session.to_string());
    if !kept.is_empty() {
        let to = revive_id(session, l);
        let mut lines = 0;
        for (day, day_lines) in kept {
            lines += day_lines.len() as u64;
            let dir = ctx.home.transcripts_dir().join(day.as_str());
            append_lines(&dir.join(format!("{to}.jsonl")), &day_lines)
                .ctx(|| format!("cannot write session {to}"))?;
        }
        applied.revived.push(Revived {
            from: session.to_string(),
            to: to.to_string(),
            lines,
        });
    }
    Ok(())
}

/// Brings back the trash folders of `stream` (to the day folders, or to
/// where another agent's files were: a session's with its subagents'),
/// newest first (a file whose place is taken again stays in the trash);
/// its files are read again whole by the next push. `false` when there is
/// none.
pub(super) fn restore_stream(
    ctx: &mut SyncContext,
    stream: &StreamName,
    applied: &mut Applied,
) -> Result<bool, SyncError> {
    let name = stream.to_string();
    let folders =
        trash::all(&ctx.home, &name).ctx(|| format!("cannot read the trash of session {name}"))?;
    if folders.is_empty() {
        return Ok(false);
    }
    for (dir, meta) in folders {
        trash::restore(&ctx.home, &dir, &meta)
            .ctx(|| format!("cannot bring session {name} back from sync/trash/"))?;
        for rel in &meta.files {
            ctx.state.files.remove(rel);
        }
        if !meta.agent_files.is_empty() {
            // The session's own file, and its subagents'.
            ctx.state.files.retain(|key, _| {
                !(key.strip_suffix(".jsonl"))
                    .and_then(StreamName::parse)
                    .is_some_and(|s| stream.agent != Agent::Evi && stream.covers(&s))
            });
        }
    }
    if let Some(source) = ctx.sources.iter().find(|s| s.agent == stream.agent) {
        let note = (stream.agent.kind()).after_restore(&source.root, stream);
        applied.remarks.extend(note);
    }
    applied.restored.push(name);
    Ok(true)
}

/// The whole lines of `path` past byte `pushed` whose time (`ts` reads it)
/// is later than `at_ms` (a line being written, with no newline yet, is
/// not one).
pub(super) fn lines_after_forget(
    path: &Path,
    pushed: u64,
    at_ms: i64,
    ts: impl Fn(&[u8]) -> Option<i64>,
) -> std::io::Result<Vec<Vec<u8>>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if pushed >= len {
        return Ok(Vec::new());
    }
    f.seek(std::io::SeekFrom::Start(pushed))?;
    let mut rest = Vec::new();
    f.read_to_end(&mut rest)?;
    let whole = match rest.iter().rposition(|&b| b == b'\n') {
        Some(end) => &rest[..end],
        None => return Ok(Vec::new()),
    };
    Ok(whole
        .split(|&b| b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .filter(|line| ts(line).is_some_and(|t| t > at_ms))
        .map(<[u8]>::to_vec)
        .collect())
}

/// `<id>-after-forget` (the id cut to fit), or with `-2`, `-3`… when that
/// one was forgotten too.
fn revive_id(session: &SessionId, l: &Ledger) -> SessionId {
    const TAIL: &str = "-after-forget";
    let base: String = session
        .as_str()
        .chars()
        .take(128 - TAIL.len() - 4)
        .collect();
    (1..)
        .map(|n| match n {
            1 => format!("{base}{TAIL}"),
            n => format!("{base}{TAIL}-{n}"),
        })
        .filter_map(|s| s.parse::<SessionId>().ok())
        .find(|s| !l.is_forgotten(s.as_str()))
        .expect("a free name exists")
}

pub(super) fn append_lines(path: &Path, lines: &[Vec<u8>]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::fsutil::create_dir_all_durable(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    f.write_all(&out)?;
    f.sync_all()?;
    if let Some(dir) = path.parent() {
        crate::fsutil::sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_unpushed_lines_after_the_forget_start_a_new_life() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("s.jsonl");
        let pushed = "{\"role\":\"user\",\"ts\":\"2026-01-01T00:00:05Z\",\"content\":\"pushed\"}\n";
        let body = format!(
            "{pushed}{}\n{}\n{}\n{}",
            r#"{"role":"user","ts":"2026-01-01T00:00:01Z","content":"before, unpushed"}"#,
            r#"{"role":"user","ts":"2026-01-01T00:00:20Z","content":"after"}"#,
            r#"{"role":"user","content":"no ts"}"#,
            r#"{"role":"user","ts":"2026-01-01T00:00:30Z","content":"being writ"#,
        );
        std::fs::write(&p, body).unwrap();
        let at = crate::transcript::line::parse_ts("2026-01-01T00:00:10Z").unwrap();
        let ts = |l: &[u8]| parse_head(l).ts;
        let got = lines_after_forget(&p, pushed.len() as u64, at, ts).unwrap();
        assert_eq!(got.len(), 1);
        assert!(String::from_utf8_lossy(&got[0]).contains("\"after\""));
        // Pushed already (another device has it): never kept.
        assert!(lines_after_forget(&p, 10_000, at, ts).unwrap().is_empty());
    }

    #[test]
    fn the_new_life_gets_a_name_not_forgotten_yet() {
        let s: SessionId = "abc".parse().unwrap();
        let mut l = Ledger::default();
        assert_eq!(revive_id(&s, &l).as_str(), "abc-after-forget");
        l.sessions.insert(
            "abc-after-forget".into(),
            SessionMark {
                action: Action::Forget,
                at_ms: 0,
                device: String::new(),
                tombstone: String::new(),
                unsent: false,
            },
        );
        assert_eq!(revive_id(&s, &l).as_str(), "abc-after-forget-2");
        let long: SessionId = "x".repeat(128).parse().unwrap();
        assert!(revive_id(&long, &Ledger::default()).as_str().len() <= 128);
    }
}
