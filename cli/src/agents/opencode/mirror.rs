//! The mirror files: OpenCode's rows as lines sync carries, one file per
//! session, `<data folder>/evi-sync/<session id>.jsonl`, only ever appended
//! to (by [`refresh`] here, and by pull as any agent file).
//!
//! # Promises
//!
//! - [`export`]: every row version the database holds that the mirror does
//!   not is appended, in one write, once the file ends in a whole line (a
//!   pull cut short leaves a partial line for pull to finish).
//! - [`import_file`]: each row's latest version in the mirror (latest by
//!   `time_updated`, then by place in the file) goes into the database only
//!   where the database never had the row, or holds exactly the version evi
//!   itself wrote there. Which rows evi wrote is kept beside the mirror
//!   (`<session id>.rows.json`: each row evi wrote, with the SHA-256 of
//!   what it wrote, and each row OpenCode wrote, as OpenCode's); a row
//!   OpenCode wrote or changed is never written again, and a row that was
//!   here and is gone (deleted in OpenCode) is not brought back.
//! - One evi process at a time does this, under `evi-sync/.lock`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::db;
use super::row::{Line, TABLES};

/// What a failure here is.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("{0}")]
    Db(#[from] rusqlite::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("OpenCode has no database in {0} yet (run opencode once)")]
    NoDatabase(PathBuf),
}

/// Rows of a session and who wrote them here: `Some(hash)` evi (the
/// SHA-256 of the row text it wrote), `None` OpenCode.
type Owners = BTreeMap<String, Option<String>>;

fn owners_path(mirror: &Path) -> PathBuf {
    mirror.with_extension("rows.json")
}

fn load_owners(mirror: &Path) -> Owners {
    std::fs::read(owners_path(mirror))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn save_owners(mirror: &Path, owners: &Owners) -> std::io::Result<()> {
    let path = owners_path(mirror);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(owners).expect("a map"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)
}

fn hash(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn row_key(table: &str, id: &str) -> String {
    format!("{table}/{id}")
}

/// Holds `evi-sync/.lock` while alive.
struct Lock(std::fs::File);

impl Lock {
    fn take(dir: &Path) -> std::io::Result<Self> {
        crate::fsutil::create_dir_all_durable(dir)?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(".lock"))?;
        f.lock()?;
        Ok(Self(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Brings OpenCode's folder `root` level: rows waiting in mirrors go into
/// the database, then the database's new rows into mirrors. Nothing when
/// OpenCode has no database here.
pub fn refresh(root: &Path) -> Result<(), MirrorError> {
    let dbp = super::database(root);
    if !dbp.is_file() {
        return Ok(());
    }
    let dir = super::mirror_dir(root);
    let _lock = Lock::take(&dir)?;
    let Some(mut conn) = db::open(&dbp)? else {
        return Ok(());
    };
    if let Ok(list) = std::fs::read_dir(&dir) {
        let mut files: Vec<PathBuf> = list
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        for f in files {
            import(&mut conn, &f)?;
        }
    }
    for id in db::session_ids(&conn)? {
        if id.parse::<evi_shared::SessionId>().is_err() {
            continue;
        }
        export(&conn, &dir.join(format!("{id}.jsonl")), &id)?;
    }
    Ok(())
}

/// The lines of a mirror file, whole lines only, and whether it ends in one.
fn read_lines(path: &Path) -> std::io::Result<(Vec<Vec<u8>>, bool)> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), true)),
        Err(e) => return Err(e),
    };
    let whole = bytes.is_empty() || bytes.ends_with(b"\n");
    let mut lines: Vec<Vec<u8>> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if !whole {
        lines.pop();
    }
    Ok((lines, whole))
}

/// The line as a row, unwrapping pull's `eviRawLine` form.
fn parse_line(raw: &[u8]) -> Option<Vec<u8>> {
    match crate::transcript::line::original_bytes(raw) {
        Some(inner) => Line::parse(&inner).is_some().then_some(inner),
        None => Line::parse(raw).map(|_| raw.to_vec()),
    }
}

/// Appends session `id`'s row versions the mirror lacks.
pub fn export(conn: &rusqlite::Connection, mirror: &Path, id: &str) -> Result<(), MirrorError> {
    let (lines, whole) = read_lines(mirror)?;
    if !whole {
        return Ok(());
    }
    let known: HashSet<(String, String)> = lines
        .iter()
        .filter_map(|l| parse_line(l))
        .filter_map(|l| Line::parse(&l).map(|p| p.key()))
        .collect();
    let mut owners = load_owners(mirror);
    let before = owners.len();
    let mut out = Vec::new();
    for line in db::session_lines(conn, id, false)? {
        let Some(row) = Line::parse(&line) else {
            continue;
        };
        if let Some(rid) = row.id() {
            owners.entry(row_key(&row.table, &rid)).or_insert(None);
        }
        if !known.contains(&row.key()) {
            out.extend_from_slice(&line);
            out.push(b'\n');
        }
    }
    if !out.is_empty() {
        if let Some(dir) = mirror.parent() {
            crate::fsutil::create_dir_all_durable(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(mirror)?;
        f.write_all(&out)?;
        f.sync_all()?;
    }
    if owners.len() != before {
        save_owners(mirror, &owners)?;
    }
    Ok(())
}

/// [`import`] of one mirror file, the database opened for it.
pub fn import_file(root: &Path, mirror: &Path) -> Result<(), MirrorError> {
    let dbp = super::database(root);
    let Some(mut conn) = db::open(&dbp)? else {
        return Err(MirrorError::NoDatabase(root.to_owned()));
    };
    let _lock = Lock::take(&super::mirror_dir(root))?;
    import(&mut conn, mirror)
}

/// Writes each row's latest version in `mirror` into the database where
/// that is evi's to do (see the module's promises).
pub fn import(conn: &mut rusqlite::Connection, mirror: &Path) -> Result<(), MirrorError> {
    let (lines, _) = read_lines(mirror)?;
    let rows: Vec<Vec<u8>> = lines.iter().filter_map(|l| parse_line(l)).collect();
    // The latest version of each row, by table.
    let mut latest: HashMap<(String, String), (i64, usize)> = HashMap::new();
    let parsed: Vec<Line<'_>> = rows.iter().filter_map(|r| Line::parse(r)).collect();
    for (i, l) in parsed.iter().enumerate() {
        let Some(id) = l.id() else { continue };
        let t = l.int("time_updated").unwrap_or(0);
        let e = latest.entry((l.table.clone(), id)).or_insert((t, i));
        if t >= e.0 {
            *e = (t, i);
        }
    }
    let mut owners = load_owners(mirror);
    let mut changed = false;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for table in TABLES {
        let mut these: Vec<(usize, String)> = latest
            .iter()
            .filter(|((t, _), _)| t == table)
            .map(|((_, id), (_, i))| (*i, id.clone()))
            .collect();
        these.sort();
        for (i, id) in these {
            let line = &parsed[i];
            let key = row_key(table, &id);
            let now = db::current(&tx, table, &id)?;
            match (owners.get(&key).cloned(), now) {
                (None, None) => {
                    if table == "session" {
                        db::ensure_project(&tx, line)?;
                    }
                    db::write(&tx, line, false)?;
                    owners.insert(key, Some(hash(line.row_text)));
                    changed = true;
                }
                (None, Some(_)) => {
                    owners.insert(key, None);
                    changed = true;
                }
                (Some(Some(mine)), Some(now)) if hash(&now) == mine => {
                    if now != line.row_text {
                        db::write(&tx, line, true)?;
                        owners.insert(key, Some(hash(line.row_text)));
                        changed = true;
                    }
                }
                (Some(Some(_)), Some(_)) => {
                    owners.insert(key, None);
                    changed = true;
                }
                // Gone from the database (deleted in OpenCode), or
                // OpenCode's own: left as it is.
                (Some(_), None) | (Some(None), Some(_)) => {}
            }
        }
    }
    tx.commit()?;
    if changed {
        save_owners(mirror, &owners)?;
    }
    Ok(())
}

/// Takes session `id` out of OpenCode's database once a forget moved its
/// mirror into evi's trash, at `trashed`: in one `IMMEDIATE` transaction,
/// every row version the mirror lacks (a turn in flight, a change made
/// since the mirror was last brought level, what a refresh of another evi
/// process exported meanwhile) is appended to it first, durably, and then
/// the session's part, message and session rows are deleted. The record of
/// who wrote which row goes too: an undo ([`restore`]) puts every row back
/// as evi's. How many rows went.
pub fn remove(root: &Path, id: &str, trashed: &Path) -> Result<usize, MirrorError> {
    let dir = super::mirror_dir(root);
    let _lock = Lock::take(&dir)?;
    let mirror = dir.join(format!("{id}.jsonl"));
    let Some(mut conn) = db::open(&super::database(root))? else {
        remove_if_there(&owners_path(&mirror))?;
        return Ok(0);
    };
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let (have, whole) = read_lines(trashed)?;
    let mut known: HashSet<(String, String)> = have
        .iter()
        .filter_map(|l| parse_line(l))
        .filter_map(|l| Line::parse(&l).map(|p| p.key()))
        .collect();
    let mut rows = db::session_lines(&tx, id, true)?;
    let again = mirror.is_file();
    if again {
        rows.extend(read_lines(&mirror)?.0.iter().filter_map(|l| parse_line(l)));
    }
    let mut out = Vec::new();
    for line in rows {
        if Line::parse(&line).is_some_and(|p| known.insert(p.key())) {
            out.extend_from_slice(&line);
            out.push(b'\n');
        }
    }
    if !out.is_empty() {
        let mut f = std::fs::OpenOptions::new().append(true).open(trashed)?;
        if !whole {
            // A line a pull left cut short stays a line of its own.
            f.write_all(b"\n")?;
        }
        f.write_all(&out)?;
        f.sync_all()?;
    }
    let n = db::delete_session(&tx, id)?;
    tx.commit()?;
    if again {
        remove_if_there(&mirror)?;
    }
    remove_if_there(&owners_path(&mirror))?;
    Ok(n)
}

/// Puts session `id`'s rows back into OpenCode's database from its mirror,
/// which an undo brought back from evi's trash: each row the database
/// lacks goes in, in its latest version.
pub fn restore(root: &Path, id: &str) -> Result<(), MirrorError> {
    let mirror = super::mirror_dir(root).join(format!("{id}.jsonl"));
    if !mirror.is_file() {
        return Ok(());
    }
    import_file(root, &mirror)
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
