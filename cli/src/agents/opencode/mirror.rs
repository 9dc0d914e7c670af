//! The mirror files: OpenCode's rows as lines sync carries, one file per
//! session, `<data folder>/evi-sync/<session id>.jsonl`, only ever appended
//! to (by [`refresh`] here, and by pull as any agent file).
//!
//! # Promises
//!
//! - [`export`]: every row version the database holds that the mirror does
//!   not is appended, in one write, once the file ends in a whole line (a
//!   pull cut short leaves a partial line for pull to finish); a new mirror
//!   appears whole (written under another name, then renamed).
//! - [`refresh`] reads only what changed since the last: a mirror that grew
//!   from where the last import stopped, a session whose rows' fingerprint
//!   in the database moved ([`db::fingerprints`]); what it last saw is a
//!   cache beside the mirror (`<session id>.seen`), never ahead of what it
//!   describes.
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

/// A JSON file kept beside a mirror, or the default when it is absent or
/// does not read (what it held is learned again).
fn load_beside<T: serde::de::DeserializeOwned + Default>(path: &Path) -> T {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn load_owners(mirror: &Path) -> Owners {
    load_beside(&owners_path(mirror))
}

/// With `durable`, synced before it replaces the last; else the caller
/// makes it durable with what it describes.
fn save_owners(mirror: &Path, owners: &Owners, durable: bool) -> std::io::Result<()> {
    let path = owners_path(mirror);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(owners).expect("a map"))?;
    if durable {
        std::fs::File::open(&tmp)?.sync_all()?;
    }
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

/// What the last refresh or import saw of a session, beside its mirror
/// (`<session id>.seen`), so that the next does only what changed since: a
/// cache, never the record of anything. Lost or older than the mirror, it
/// costs a read of what it would have saved (an import of lines already in
/// is a no-op, an export of rows the mirror has appends nothing); it is
/// written only after what it describes is committed and durable, so it is
/// never ahead of it.
#[derive(Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Seen {
    /// The fingerprint of the session's rows in the database when every
    /// finished row of them was in the mirror ([`db::fingerprints`]).
    #[serde(default)]
    exported: Option<String>,
    /// The mirror file (its inode) and the end of the last whole line
    /// whose row went into the database.
    #[serde(default)]
    imported: Option<(u64, u64)>,
}

fn seen_path(mirror: &Path) -> PathBuf {
    mirror.with_extension("seen")
}

fn load_seen(mirror: &Path) -> Seen {
    load_beside(&seen_path(mirror))
}

/// Not made durable of its own: see [`Seen`] (the caller has made what it
/// describes durable first).
fn save_seen(mirror: &Path, seen: &Seen) -> std::io::Result<()> {
    let path = seen_path(mirror);
    let tmp = path.with_extension("seen.tmp");
    std::fs::write(&tmp, serde_json::to_vec(seen).expect("a struct"))?;
    std::fs::rename(&tmp, &path)
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
}

/// Where an import of `mirror` starts: after what the last import read,
/// when the file is the same one and grew since; `None` when it is just as
/// the last import left it.
fn import_from(seen: &Seen, meta: &std::fs::Metadata) -> Option<u64> {
    match seen.imported {
        Some((ino, end)) if ino == inode(meta) && end == meta.len() => None,
        Some((ino, end)) if ino == inode(meta) && end < meta.len() => Some(end),
        _ => Some(0),
    }
}

/// Brings OpenCode's folder `root` level: rows waiting in mirrors go into
/// the database, then the database's new rows into mirrors. Only what
/// changed since the last refresh is read ([`Seen`]): mirrors that grew,
/// from where the last import stopped; sessions whose rows' fingerprint
/// moved. What it wrote is made durable once, at the end. Nothing when
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
    let schema = db::Schema::read(&conn)?;
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut was: HashMap<String, Seen> = HashMap::new();
    if let Ok(list) = std::fs::read_dir(&dir) {
        let mut files: Vec<PathBuf> = list
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        for f in files {
            let Some(id) = f.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            let mut s = load_seen(&f);
            was.insert(id.clone(), s.clone());
            let meta = std::fs::metadata(&f)?;
            if let Some(from) = import_from(&s, &meta) {
                let end = import(&mut conn, &schema, &f, from)?;
                s.imported = Some((inode(&meta), end));
            }
            seen.insert(id, s);
        }
    }
    // Without a fingerprint (a schema evi does not know), every session is
    // read, as before there were any.
    let fps = db::fingerprints(&conn, &schema, None).unwrap_or_default();
    let mut wrote = false;
    for id in db::session_ids(&conn)? {
        if id.parse::<evi_shared::SessionId>().is_err() {
            continue;
        }
        let mirror = dir.join(format!("{id}.jsonl"));
        let s = seen.entry(id.clone()).or_default();
        let fp = fps.get(&id);
        if fp.is_some() && s.exported.as_ref() == fp && mirror.is_file() {
            continue;
        }
        let Some(out) = export(&conn, &schema, &mirror, &id)? else {
            continue;
        };
        wrote |= out.wrote;
        // What export appended came from the database: no import needed.
        let level = match s.imported {
            Some((ino, end)) => ino == out.inode && end == out.len_before,
            None => out.len_before == 0,
        };
        if level {
            s.imported = Some((out.inode, out.len_after));
        }
        s.exported = fp.cloned();
    }
    if wrote {
        // One barrier for every mirror and record written above.
        crate::fsutil::sync_files(vec![std::fs::File::open(&dir)?])?;
    }
    for (id, s) in &seen {
        if was.get(id) != Some(s) {
            save_seen(&dir.join(format!("{id}.jsonl")), s)?;
        }
    }
    Ok(())
}

/// Reads the lines of `path` from byte `from`, whole lines only, handing
/// each to `f` with its offset; where the whole lines end.
fn each_line(
    path: &Path,
    from: u64,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), MirrorError>,
) -> Result<u64, MirrorError> {
    use std::io::{BufRead, Seek};
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut r = std::io::BufReader::with_capacity(256 * 1024, file);
    r.seek(std::io::SeekFrom::Start(from))?;
    let mut at = from;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = r.read_until(b'\n', &mut buf)?;
        if n == 0 || buf.last() != Some(&b'\n') {
            return Ok(at);
        }
        let line = &buf[..n - 1];
        if !line.is_empty() {
            f(at, line)?;
        }
        at += n as u64;
    }
}

/// The line of `path` at `at`, `len` bytes.
fn line_at(file: &mut std::fs::File, at: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    file.seek(std::io::SeekFrom::Start(at))?;
    let mut buf = vec![0; len];
    file.read_exact(&mut buf)?;
    Ok(buf)
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

/// What identifies a row version ([`Line::key`]) in 16 bytes: a mirror's
/// set of them is a fraction of the mirror.
fn key_hash(table: &str, row_text: &str) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(table.as_bytes());
    h.update(b"\n");
    h.update(row_text.as_bytes());
    h.finalize()[..16].try_into().expect("16 bytes")
}

/// What an [`export`] did to the mirror.
pub struct Exported {
    inode: u64,
    len_before: u64,
    len_after: u64,
    /// Whether it wrote anything (left to the caller to make durable).
    wrote: bool,
}

/// Appends session `id`'s row versions the mirror lacks; `None` when the
/// mirror ends in a partial line (a pull cut short: pull finishes it). The
/// mirror is read a line at a time (what it has kept as hashes) and the
/// rows one at a time; a new mirror is written whole under another name
/// and renamed into place, so that it appears whole.
pub fn export(
    conn: &rusqlite::Connection,
    schema: &db::Schema,
    mirror: &Path,
    id: &str,
) -> Result<Option<Exported>, MirrorError> {
    let before = match std::fs::metadata(mirror) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let len_before = before.as_ref().map_or(0, std::fs::Metadata::len);
    let mut known: HashSet<[u8; 16]> = HashSet::new();
    if before.is_some() {
        let end = each_line(mirror, 0, |_, l| {
            if let Some(row) = parse_line(l)
                && let Some(p) = Line::parse(&row)
            {
                known.insert(key_hash(&p.table, p.row_text));
            }
            Ok(())
        })?;
        if end != len_before {
            return Ok(None);
        }
    }
    let mut owners = load_owners(mirror);
    let owned_before = owners.len();
    if let Some(dir) = mirror.parent() {
        crate::fsutil::create_dir_all_durable(dir)?;
    }
    let tmp = mirror.with_extension("jsonl.tmp");
    // A new mirror goes to a file of its own, a line at a time; new rows of
    // a mirror there are appended in one write.
    let mut fresh = match before {
        None => Some(std::io::BufWriter::with_capacity(
            256 * 1024,
            std::fs::File::create(&tmp)?,
        )),
        Some(_) => None,
    };
    let mut out = Vec::new();
    let mut wrote = false;
    db::session_lines(conn, schema, id, false, |line| -> Result<(), MirrorError> {
        let Some(row) = Line::parse(&line) else {
            return Ok(());
        };
        if let Some(rid) = row.id() {
            owners.entry(row_key(&row.table, &rid)).or_insert(None);
        }
        if known.insert(key_hash(&row.table, row.row_text)) {
            match &mut fresh {
                Some(w) => {
                    w.write_all(&line)?;
                    w.write_all(b"\n")?;
                }
                None => {
                    out.extend_from_slice(&line);
                    out.push(b'\n');
                }
            }
            wrote = true;
        }
        Ok(())
    })?;
    if let Some(w) = fresh {
        let f = w.into_inner().map_err(|e| e.into_error())?;
        drop(f);
        if wrote {
            std::fs::rename(&tmp, mirror)?;
        } else {
            remove_if_there(&tmp)?;
        }
    } else if !out.is_empty() {
        let mut f = std::fs::OpenOptions::new().append(true).open(mirror)?;
        f.write_all(&out)?;
    }
    if owners.len() != owned_before {
        save_owners(mirror, &owners, false)?;
        wrote = true;
    }
    let after = match std::fs::metadata(mirror) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    Ok(Some(Exported {
        inode: after.as_ref().map_or(0, inode),
        len_before,
        len_after: after.as_ref().map_or(0, std::fs::Metadata::len),
        wrote,
    }))
}

/// [`import`] of one mirror file, the database opened for it: what pull
/// appended to it (from where the last import stopped, [`Seen`]). When the
/// database held nothing of the session's the mirror lacked before, it
/// still holds nothing after (the rows that went in came from the mirror),
/// and the next refresh need not read the session.
pub fn import_file(root: &Path, mirror: &Path) -> Result<(), MirrorError> {
    let dbp = super::database(root);
    let Some(mut conn) = db::open(&dbp)? else {
        return Err(MirrorError::NoDatabase(root.to_owned()));
    };
    let _lock = Lock::take(&super::mirror_dir(root))?;
    let schema = db::Schema::read(&conn)?;
    let mut seen = load_seen(mirror);
    let was = seen.clone();
    let meta = std::fs::metadata(mirror)?;
    let Some(from) = import_from(&seen, &meta) else {
        return Ok(());
    };
    let id = mirror
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    let fp = |conn: &rusqlite::Connection| {
        db::fingerprints(conn, &schema, Some(&id))
            .ok()
            .and_then(|mut m| m.remove(&id))
    };
    let level = seen.exported.is_some() && fp(&conn) == seen.exported;
    let end = import(&mut conn, &schema, mirror, from)?;
    seen.imported = Some((inode(&meta), end));
    if level {
        seen.exported = fp(&conn);
    }
    if seen != was {
        save_seen(mirror, &seen)?;
    }
    Ok(())
}

/// Writes each row's latest version in `mirror`'s lines from byte `from`
/// into the database where that is evi's to do (see the module's
/// promises); where the whole lines it read end. A version older (by
/// `time_updated`) than the one evi wrote before is not written over it:
/// read from the middle, the latest of the lines read may be older than
/// one read before. The lines are read twice, a line at a time: first to
/// find each row's latest (its place kept), then those.
pub fn import(
    conn: &mut rusqlite::Connection,
    schema: &db::Schema,
    mirror: &Path,
    from: u64,
) -> Result<u64, MirrorError> {
    // The latest version of each row: its time, place and length.
    let mut latest: HashMap<(String, String), (i64, u64, usize)> = HashMap::new();
    let end = each_line(mirror, from, |at, raw| {
        let Some(row) = parse_line(raw) else {
            return Ok(());
        };
        let Some(l) = Line::parse(&row) else {
            return Ok(());
        };
        let Some(id) = l.id() else { return Ok(()) };
        let t = l.int("time_updated").unwrap_or(0);
        let e = latest
            .entry((l.table.clone(), id))
            .or_insert((t, at, raw.len()));
        if t >= e.0 {
            *e = (t, at, raw.len());
        }
        Ok(())
    })?;
    if latest.is_empty() {
        return Ok(end);
    }
    let mut file = std::fs::File::open(mirror)?;
    let mut owners = load_owners(mirror);
    let mut changed = false;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    for table in TABLES {
        let mut these: Vec<(u64, usize, i64, String)> = latest
            .iter()
            .filter(|((t, _), _)| t == table)
            .map(|((_, id), (t, at, len))| (*at, *len, *t, id.clone()))
            .collect();
        these.sort();
        for (at, len, t, id) in these {
            let raw = line_at(&mut file, at, len)?;
            let Some(row) = parse_line(&raw) else {
                continue;
            };
            let Some(line) = Line::parse(&row) else {
                continue;
            };
            let key = row_key(table, &id);
            let now = db::current(&tx, schema, table, &id)?;
            let now = now.as_deref().and_then(Line::parse);
            match (owners.get(&key).cloned(), now) {
                (None, None) => {
                    if table == "session" {
                        db::ensure_project(&tx, schema, &line)?;
                    }
                    db::write(&tx, schema, &line, false)?;
                    owners.insert(key, Some(hash(line.row_text)));
                    changed = true;
                }
                (None, Some(_)) => {
                    owners.insert(key, None);
                    changed = true;
                }
                (Some(Some(mine)), Some(now)) if hash(now.row_text) == mine => {
                    if now.row_text != line.row_text && t >= now.int("time_updated").unwrap_or(0) {
                        db::write(&tx, schema, &line, true)?;
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
        save_owners(mirror, &owners, true)?;
    }
    Ok(end)
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
        remove_if_there(&seen_path(&mirror))?;
        return Ok(0);
    };
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let (have, whole) = read_lines(trashed)?;
    let mut known: HashSet<(String, String)> = have
        .iter()
        .filter_map(|l| parse_line(l))
        .filter_map(|l| Line::parse(&l).map(|p| p.key()))
        .collect();
    let schema = db::Schema::read(&tx)?;
    let mut rows = Vec::new();
    db::session_lines(&tx, &schema, id, true, |l| {
        rows.push(l);
        Ok::<_, MirrorError>(())
    })?;
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
    remove_if_there(&seen_path(&mirror))?;
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
