//! Bringing the index up to date with the transcripts, reading only what is
//! new.
//!
//! Per session, in reading order (day files, then lines):
//!
//! - nothing changed (every file has the inode and length it had): a stat
//!   per file, nothing read;
//! - only the last files grew, or new files came after every file read:
//!   the new lines are read from the stored offsets, the id chain resumed
//!   at the stored tip, so ids come out as a whole read would give them;
//! - anything else (a file shrank, was replaced, vanished, or grew or
//!   appeared before a file already read, which moves the implicit chain of
//!   every later line): the session is read again whole.
//!
//! Another agent's session is one file, read the same way, its lines placed
//! as [`SessionTree::load_agent`](crate::transcript::SessionTree::load_agent)
//! places them (explicit ids, the `cwd` rewrite undone first) and only
//! those a reader shows as a message indexed ([`agent_message`]).
//!
//! One update is one write transaction: offsets and entries commit
//! together, so a crash loses at most the update, which the next redoes.

use std::collections::HashMap;
use std::fs;
use std::ops::ControlFlow;

use rusqlite::{Transaction, TransactionBehavior, params};

use super::agents::AgentSession;
use super::text::{agent_message, body, message_body, role_name};
use super::{IndexError, SearchIndex, sql_error};
use crate::source::Agent;
use crate::source::paths::PathMap;
use crate::transcript::Catalog;
use crate::transcript::catalog::SessionFile;
use crate::transcript::entry_id::IdChain;
use crate::transcript::line::{Role, parse_head, parse_ts};
use crate::transcript::lines::walk_file;

/// What an update did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Updated {
    pub sessions_read_whole: usize,
    pub files_read: usize,
    pub entries_added: usize,
    pub sessions_removed: usize,
}

/// After adding this many entries, merge the index's segments: fewer
/// segments, smaller file and faster queries, at a cost that only a large
/// update amortises.
const OPTIMIZE_AFTER: usize = 20_000;

#[derive(Debug, Clone)]
struct FileRow {
    id: i64,
    session: i64,
    ino: u64,
    size: u64,
    seen: u64,
    tail: Vec<u8>,
}

/// The lookup key of an entry id: 8 bytes of its SHA-256.
fn entry_key(id: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(id.as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// An entry id as stored: a derived id (32 lower-case hex digits) as its
/// 16 bytes, any other id as text.
pub(crate) fn stored_id(id: &str) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    let derived = id.len() == crate::transcript::entry_id::DERIVED_ID_LEN
        && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    match derived.then(|| hex::decode(id).ok()).flatten() {
        Some(bytes) => Value::Blob(bytes),
        None => Value::Text(id.to_owned()),
    }
}

/// An entry id as [`stored_id`] stored it.
pub(crate) fn read_id(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<String> {
    use rusqlite::types::{FromSqlError, ValueRef};
    match v {
        ValueRef::Blob(b) => Ok(hex::encode(b)),
        ValueRef::Text(t) => {
            String::from_utf8(t.to_vec()).map_err(|e| FromSqlError::Other(e.into()))
        }
        _ => Err(FromSqlError::InvalidType),
    }
}

/// Bytes before a file's indexed end that must still be there to read on.
const TAIL: u64 = 32;

/// The last [`TAIL`] bytes before `end`.
fn tail_of(path: &std::path::Path, end: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let start = end.saturating_sub(TAIL);
    let mut f = fs::File::open(path)?;
    f.seek(SeekFrom::Start(start))?;
    let mut out = vec![0; (end - start) as usize];
    f.read_exact(&mut out)?;
    Ok(out)
}

/// How the lines of a session read.
#[derive(Clone, Copy)]
enum Lines<'a> {
    Evi,
    /// Another agent's, through the session's path map.
    Agent(Agent, &'a PathMap),
}

impl Lines<'_> {
    fn agent(self) -> Agent {
        match self {
            Self::Evi => Agent::Evi,
            Self::Agent(a, _) => a,
        }
    }
}

impl SearchIndex {
    /// Indexes whatever `catalog` holds that the index does not; other
    /// agents' sessions are left as they are (after a push or pull, which
    /// has no config to find them by: the next search updates them).
    pub fn update(&mut self, catalog: &Catalog) -> Result<Updated, IndexError> {
        self.update_with(catalog, None)
    }

    /// Indexes `catalog` and `agents`, the sessions of every agent turned
    /// on here: another agent's session not among them (gone, or its agent
    /// turned off) leaves the index.
    pub fn update_all(
        &mut self,
        catalog: &Catalog,
        agents: &[AgentSession],
    ) -> Result<Updated, IndexError> {
        self.update_with(catalog, Some(agents))
    }

    fn update_with(
        &mut self,
        catalog: &Catalog,
        agents: Option<&[AgentSession]>,
    ) -> Result<Updated, IndexError> {
        let path = self.path.clone();
        let sql = |e| sql_error(&path, e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let mut sessions = load_sessions(&tx).map_err(sql)?;
        let files = load_files(&tx).map_err(sql)?;
        let mut per_session: HashMap<i64, usize> = HashMap::new();
        for row in files.values() {
            *per_session.entry(row.session).or_default() += 1;
        }
        let mut up = Updated::default();
        let mut one = |name: &str, lines: Lines<'_>, sfiles: &[SessionFile], rels: Vec<String>| {
            let known = sessions.remove(name).map(|(id, tip, _)| (id, tip));
            let count = known
                .as_ref()
                .map_or(0, |k| per_session.get(&k.0).copied().unwrap_or(0));
            SessionUpdate {
                tx: &tx,
                files: &files,
                up: &mut up,
                path: &path,
                lines,
            }
            .session(name, sfiles, &rels, known, count)
        };
        for (sid, sfiles) in &catalog.sessions {
            one(
                sid.as_str(),
                Lines::Evi,
                sfiles,
                sfiles.iter().map(rel).collect(),
            )?;
        }
        for a in agents.unwrap_or_default() {
            // The index names a file by a text path; one that is not text
            // is not searched (no agent writes such names).
            let Some(abs) = a.file.path.to_str() else {
                continue;
            };
            let Ok(meta) = fs::metadata(&a.file.path) else {
                continue;
            };
            let file = SessionFile {
                day: crate::source::agent_day(),
                path: a.file.path.clone(),
                len: meta.len(),
                mtime: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
            };
            let lines = Lines::Agent(a.file.stream.agent, &a.map);
            one(
                &a.file.stream.to_string(),
                lines,
                &[file],
                vec![abs.to_owned()],
            )?;
        }
        for (id, _, agent) in sessions.into_values() {
            // Without the agents' sessions to compare with, theirs stay.
            if agents.is_none() && agent != Agent::Evi.name() {
                continue;
            }
            delete_session(&tx, id, true).map_err(sql)?;
            up.sessions_removed += 1;
        }
        if up.entries_added >= OPTIMIZE_AFTER {
            tx.execute("INSERT INTO fts(fts) VALUES('optimize')", [])
                .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(up)
    }
}

/// Every session row: name → (id, tip, agent).
type SessionRows = HashMap<String, (i64, Option<String>, String)>;

fn load_sessions(tx: &Transaction<'_>) -> rusqlite::Result<SessionRows> {
    let mut st = tx.prepare("SELECT id, name, tip, agent FROM sessions")?;
    let rows = st.query_map([], |r| {
        Ok((r.get::<_, String>(1)?, (r.get(0)?, r.get(2)?, r.get(3)?)))
    })?;
    rows.collect()
}

fn load_files(tx: &Transaction<'_>) -> rusqlite::Result<HashMap<String, FileRow>> {
    let mut st = tx.prepare("SELECT id, path, session, ino, size, seen, tail FROM files")?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, String>(1)?,
            FileRow {
                id: r.get(0)?,
                session: r.get(2)?,
                ino: r.get::<_, i64>(3)? as u64,
                size: r.get::<_, i64>(4)? as u64,
                seen: r.get::<_, i64>(5)? as u64,
                tail: r.get(6)?,
            },
        ))
    })?;
    rows.collect()
}

fn delete_session(tx: &Transaction<'_>, id: i64, and_row: bool) -> rusqlite::Result<()> {
    tx.execute(
        "DELETE FROM fts WHERE rowid IN (SELECT id FROM entries WHERE session = ?1)",
        [id],
    )?;
    tx.execute("DELETE FROM entries WHERE session = ?1", [id])?;
    tx.execute("DELETE FROM files WHERE session = ?1", [id])?;
    if and_row {
        tx.execute("DELETE FROM sessions WHERE id = ?1", [id])?;
    }
    Ok(())
}

/// The path of a file as the index names it: `<day>/<session>.jsonl`.
fn rel(f: &SessionFile) -> String {
    let name = f.path.file_name().unwrap_or_default().to_string_lossy();
    format!("{}/{name}", f.day)
}

#[cfg(unix)]
fn inode(m: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(m)
}

#[cfg(not(unix))]
fn inode(_: &fs::Metadata) -> u64 {
    0
}

struct SessionUpdate<'a, 't> {
    tx: &'a Transaction<'t>,
    files: &'a HashMap<String, FileRow>,
    up: &'a mut Updated,
    path: &'a std::path::Path,
    lines: Lines<'a>,
}

impl SessionUpdate<'_, '_> {
    fn sql(&self, e: rusqlite::Error) -> IndexError {
        sql_error(self.path, e)
    }

    /// `known`: the session's row (id, tip), `indexed`: how many of its
    /// files the index has read.
    fn session(
        &mut self,
        name: &str,
        sfiles: &[SessionFile],
        rels: &[String],
        known: Option<(i64, Option<String>)>,
        indexed: usize,
    ) -> Result<(), IndexError> {
        let mut stats = Vec::with_capacity(sfiles.len());
        for f in sfiles {
            match fs::metadata(&f.path) {
                Ok(m) => stats.push((inode(&m), m.len())),
                // Gone since the scan: the next update sees the session as
                // it is then.
                Err(_) => return Ok(()),
            }
        }
        let rows: Vec<Option<&FileRow>> = rels.iter().map(|r| self.files.get(r)).collect();
        let Some(first) = (0..sfiles.len())
            .find(|&j| rows[j].is_none_or(|r| r.seen != stats[j].1 || r.ino != stats[j].0))
        else {
            if rows.iter().flatten().count() == indexed {
                return Ok(());
            }
            return self.read(name, sfiles, rels, &stats, known, None);
        };
        let whole = rows.iter().flatten().count() != indexed
            || rows
                .iter()
                .zip(&stats)
                .any(|(r, &(ino, len))| r.is_some_and(|r| r.ino != ino || len < r.size))
            || rows[first + 1..].iter().any(Option::is_some)
            || rows[first].is_some_and(|r| {
                tail_of(&sfiles[first].path, r.size).ok().as_ref() != Some(&r.tail)
            });
        let from = (!whole && known.is_some()).then_some(first);
        self.read(name, sfiles, rels, &stats, known, from)
    }

    /// Reads the session's files from file `from` on (its stored offset,
    /// the chain at the stored tip), or whole when `from` is `None`.
    fn read(
        &mut self,
        name: &str,
        sfiles: &[SessionFile],
        rels: &[String],
        stats: &[(u64, u64)],
        known: Option<(i64, Option<String>)>,
        from: Option<usize>,
    ) -> Result<(), IndexError> {
        let tx = self.tx;
        let (sid, tip) = match known {
            Some((id, tip)) => (id, tip),
            None => {
                tx.execute(
                    "INSERT INTO sessions(name, agent) VALUES (?1, ?2)",
                    [name, self.lines.agent().name()],
                )
                .map_err(|e| self.sql(e))?;
                (tx.last_insert_rowid(), None)
            }
        };
        let mut chain = match from {
            Some(_) => IdChain::starting_at(tip),
            None => {
                delete_session(tx, sid, false).map_err(|e| self.sql(e))?;
                self.up.sessions_read_whole += 1;
                IdChain::default()
            }
        };
        for j in from.unwrap_or(0)..sfiles.len() {
            let row = from.and_then(|_| self.files.get(&rels[j]));
            let file_id = match row {
                Some(r) => r.id,
                None => {
                    tx.execute(
                        "INSERT INTO files(path, session, day, ino, size, seen) VALUES (?1, ?2, ?3, ?4, 0, 0)",
                        params![rels[j], sid, sfiles[j].day.as_str(), stats[j].0 as i64],
                    )
                    .map_err(|e| self.sql(e))?;
                    tx.last_insert_rowid()
                }
            };
            let start = row.map_or(0, |r| r.size);
            let end = self.read_file(&sfiles[j], start, sid, file_id, &mut chain)?;
            let tail = tail_of(&sfiles[j].path, end).map_err(|source| IndexError::Io {
                what: "cannot read",
                path: sfiles[j].path.clone(),
                source,
            })?;
            tx.execute(
                "UPDATE files SET ino = ?2, size = ?3, seen = ?4, tail = ?5 WHERE id = ?1",
                params![
                    file_id,
                    stats[j].0 as i64,
                    end as i64,
                    stats[j].1 as i64,
                    tail
                ],
            )
            .map_err(|e| self.sql(e))?;
            self.up.files_read += 1;
        }
        tx.execute(
            "UPDATE sessions SET tip = ?2 WHERE id = ?1",
            params![sid, chain.implicit_parent()],
        )
        .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Indexes the complete lines of one file from `start`; the offset just
    /// past the last one.
    fn read_file(
        &mut self,
        f: &SessionFile,
        start: u64,
        sid: i64,
        file_id: i64,
        chain: &mut IdChain,
    ) -> Result<u64, IndexError> {
        let tx = self.tx;
        let mut seen = tx
            .prepare_cached("SELECT 1 FROM entries WHERE session = ?1 AND key = ?2 AND entry = ?3")
            .map_err(|e| self.sql(e))?;
        let mut entry = tx
            .prepare_cached(
                "INSERT INTO entries(session, key, entry, role, ts, file, offset, len)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .map_err(|e| self.sql(e))?;
        let mut fts = tx
            .prepare_cached("INSERT INTO fts(rowid, body) VALUES (?1, ?2)")
            .map_err(|e| self.sql(e))?;
        let mut failed = None;
        let mut added = 0;
        let lines = self.lines;
        let end = walk_file(&f.path, start, |offset, raw| {
            // Placed as every reader places the line; a line no reader
            // shows as a message (a title, an agent's bookkeeping) is not
            // indexed.
            let (placed, role, ts, msg) = match lines {
                Lines::Evi => {
                    let head = parse_head(raw);
                    let placed = chain.place(raw, head.ids);
                    if head.title {
                        return ControlFlow::Continue(());
                    }
                    (placed, head.role, head.ts, None)
                }
                Lines::Agent(agent, map) => {
                    let canon = agent.canonical(raw, map);
                    let placed = chain.place(&canon, agent.explicit_ids(&canon));
                    let Some(m) = agent_message(agent, raw) else {
                        return ControlFlow::Continue(());
                    };
                    let ts = m.ts.as_deref().and_then(parse_ts);
                    (placed, Role::of(&m.role), ts, Some(m))
                }
            };
            let (key, stored) = (entry_key(&placed.id), stored_id(&placed.id));
            let row = params![
                sid,
                key,
                stored,
                role_name(role),
                ts,
                file_id,
                offset as i64,
                raw.len() as i64
            ];
            let done = seen.exists(params![sid, key, stored]).and_then(|dup| {
                if !dup {
                    entry.execute(row)?;
                    added += 1;
                    let text = msg.map_or_else(|| body(raw), message_body);
                    fts.execute(params![tx.last_insert_rowid(), text])?;
                }
                Ok(())
            });
            match done {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            }
        })
        .map_err(|source| IndexError::Io {
            what: "cannot read",
            path: f.path.clone(),
            source,
        })?;
        if let Some(e) = failed {
            return Err(self.sql(e));
        }
        self.up.entries_added += added;
        Ok(end.offset)
    }
}
