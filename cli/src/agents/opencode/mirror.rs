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
//!   cache beside the mirrors (`seen.json`), never ahead of what it
//!   describes.
//! - [`import_files`] (after a pull, once per command): each row's latest
//!   version in the mirror (latest by
//!   `time_updated`, then by place in the file) goes into the database only
//!   where the database never had the row, or holds exactly the version evi
//!   itself wrote there. Which rows evi wrote is kept beside the mirror
//!   ([`owners`], `<session id>.rows.json`: each row evi wrote, with a hash of
//!   what it wrote, and each row OpenCode wrote, as OpenCode's); a row
//!   OpenCode wrote or changed is never written again, and a row that was
//!   here and is gone (deleted in OpenCode) is not brought back.
//! - One evi process at a time does this, under `evi-sync/.lock`.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::db;
use super::owners::{self, Owner, Owners};
use super::row::{self, Line};

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

/// A JSON file kept beside a mirror, or the default when it is absent or
/// does not read (what it held is learned again).
fn load_beside<T: serde::de::DeserializeOwned + Default>(path: &Path) -> T {
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Not made durable of its own: the caller makes it durable with what it
/// describes.
fn save_owners(mirror: &Path, owners: &Owners) -> std::io::Result<()> {
    let path = owners::path(mirror);
    let tmp = path.with_extension("json.tmp");
    drop(owners.write(&tmp)?);
    std::fs::rename(&tmp, &path)
}

/// What imports learned of who wrote which rows, saved after the
/// transactions that wrote them committed, durably and together: each
/// written beside its mirror as soon as its import is done (so that only
/// one session's is in memory at a time), then one barrier for all
/// ([`crate::fsutil::sync_files`]), then each renamed into place. Lost in a
/// crash before, a row evi wrote counts as OpenCode's (never written again
/// by evi): never the other way round, which would keep a pulled row out
/// for good.
#[derive(Default)]
struct StagedOwners {
    written: Vec<(PathBuf, std::fs::File)>,
}

impl StagedOwners {
    fn stage(&mut self, mirror: &Path, owners: &Owners) -> std::io::Result<()> {
        let f = owners.write(&owners::path(mirror).with_extension("json.tmp"))?;
        self.written.push((mirror.to_owned(), f));
        Ok(())
    }

    /// Once what they describe is committed.
    fn save(self) -> std::io::Result<()> {
        let (mirrors, files): (Vec<PathBuf>, Vec<std::fs::File>) = self.written.into_iter().unzip();
        crate::fsutil::sync_files(files)?;
        for mirror in &mirrors {
            let path = owners::path(mirror);
            std::fs::rename(path.with_extension("json.tmp"), &path)?;
        }
        if let Some(dir) = mirrors.first().and_then(|m| m.parent()) {
            crate::fsutil::sync_dir(dir)?;
        }
        Ok(())
    }
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

/// What the last refresh or import saw of a session, so that the next does
/// only what changed since: a cache, never the record of anything. Lost or
/// older than the mirror, it costs a read of what it would have saved (an
/// import of lines already in is a no-op, an export of rows the mirror has
/// appends nothing); it is written only after what it describes is
/// committed and durable, so it is never ahead of it.
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

/// Every session's [`Seen`], by session id, in one file beside the mirrors
/// (`evi-sync/seen.json`): a file per session cost a pull of 2,000
/// sessions 2,000 opens, writes and renames, and every listing 2,000 reads.
type SeenAll = HashMap<String, Seen>;

fn seen_all_path(dir: &Path) -> PathBuf {
    dir.join("seen.json")
}

fn load_seen_all(dir: &Path) -> SeenAll {
    load_beside(&seen_all_path(dir))
}

/// Not made durable of its own: see [`Seen`] (the caller has made what it
/// describes durable first).
fn save_seen_all(dir: &Path, all: &SeenAll) -> std::io::Result<()> {
    let path = seen_all_path(dir);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(all).expect("a map"))?;
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
    let Some(conn) = db::open(&dbp)? else {
        return Ok(());
    };
    let schema = db::Schema::read(&conn)?;
    let was = load_seen_all(&dir);
    let mut seen = SeenAll::new();
    if let Ok(list) = std::fs::read_dir(&dir) {
        let mut files: Vec<PathBuf> = Vec::new();
        for p in list.flatten().map(|e| e.path()) {
            match p.extension().and_then(|x| x.to_str()) {
                Some("jsonl") => files.push(p),
                // Where an earlier evi kept each session's.
                Some("seen") => remove_if_there(&p)?,
                _ => {}
            }
        }
        files.sort();
        let mut grew = Vec::new();
        for f in files {
            let Some(id) = f.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            let s = was.get(&id).cloned().unwrap_or_default();
            let meta = std::fs::metadata(&f)?;
            if let Some(from) = import_from(&s, &meta) {
                grew.push((id.clone(), f, meta, from));
            }
            seen.insert(id, s);
        }
        if !grew.is_empty() {
            let mut batch = db::Batch::begin(&conn)?;
            let mut owners = StagedOwners::default();
            for (id, f, meta, from) in grew {
                match import(&mut batch, &schema, &f, from, &mut owners) {
                    Ok(end) => seen.entry(id).or_default().imported = Some((inode(&meta), end)),
                    // Tried again at the next refresh; the others go in.
                    Err(e) => eprintln!(
                        "warning: OpenCode session {id} not yet in OpenCode's database: {e}"
                    ),
                }
            }
            batch.commit()?;
            owners.save()?;
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
        crate::fsutil::sync_filesystem_of(&dir)?;
    }
    if seen != was {
        save_seen_all(&dir, &seen)?;
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

/// The line as a row, handed to `f` (pull's `eviRawLine` form unwrapped:
/// looked for only where the line names it, a whole parse saved on every
/// other line).
fn with_row<T>(raw: &[u8], f: impl FnOnce(Line<'_>) -> T) -> Option<T> {
    if memchr::memmem::find(raw, b"\"eviRawLine\"").is_some()
        && let Some(inner) = crate::transcript::line::original_bytes(raw)
    {
        return Line::parse(&inner).map(f);
    }
    Line::parse(raw).map(f)
}

/// `f` of the line's bytes, pull's `eviRawLine` form unwrapped.
fn with_raw<T>(raw: &[u8], f: impl FnOnce(&[u8]) -> Option<T>) -> Option<T> {
    if memchr::memmem::find(raw, b"\"eviRawLine\"").is_some()
        && let Some(inner) = crate::transcript::line::original_bytes(raw)
    {
        return f(&inner);
    }
    f(raw)
}

/// The line as a row's line (pull's `eviRawLine` form unwrapped).
fn row_bytes(raw: &[u8]) -> Option<Vec<u8>> {
    if memchr::memmem::find(raw, b"\"eviRawLine\"").is_some()
        && let Some(inner) = crate::transcript::line::original_bytes(raw)
    {
        return Line::parse(&inner).is_some().then_some(inner);
    }
    Line::parse(raw).map(|_| raw.to_vec())
}

/// What identifies a row version ([`Line::key`]), or a row (its table and
/// id), in 16 bytes: a mirror's set of them is a fraction of the mirror.
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
            if let Some(k) = with_row(l, |p| key_hash(&p.table, p.row_text)) {
                known.insert(k);
            }
            Ok(())
        })?;
        if end != len_before {
            return Ok(None);
        }
    }
    let mut owners = Owners::load(mirror);
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
            crate::fsutil::create_private(&tmp)?,
        )),
        Some(_) => None,
    };
    let mut out = Vec::new();
    let mut wrote = false;
    db::session_lines(conn, schema, id, false, |r| -> Result<(), MirrorError> {
        let line = &r.line;
        owners.know(r.table, &r.id);
        // Each row once from the database: a new mirror needs no record of
        // what it holds.
        if before.is_none() || known.insert(key_hash(r.table, r.row_text())) {
            match &mut fresh {
                Some(w) => {
                    w.write_all(line)?;
                    w.write_all(b"\n")?;
                }
                None => {
                    out.extend_from_slice(line);
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
        save_owners(mirror, &owners)?;
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

/// [`import`] of the mirror files pull appended to, after pull, under one
/// lock and in one run of transactions ([`db::Batch`]): what each gained
/// since the last import ([`Seen`]). A session the database held nothing
/// of, or just what the last refresh exported, holds after it only what its
/// mirror has (the rows that went in came from it), so the next refresh
/// need not read it.
/// Each mirror that could not be imported, with why, is passed over (its
/// rows go in at the next import) and named in what it returns; the
/// others' go in all the same.
pub fn import_files<'m>(
    root: &Path,
    mirrors: &[&'m Path],
) -> Result<Vec<(&'m Path, MirrorError)>, MirrorError> {
    let dbp = super::database(root);
    let Some(conn) = db::open(&dbp)? else {
        return Err(MirrorError::NoDatabase(root.to_owned()));
    };
    let _lock = Lock::take(&super::mirror_dir(root))?;
    let schema = db::Schema::read(&conn)?;
    let fingerprint = |conn: &rusqlite::Connection, id: &str| {
        db::fingerprints(conn, &schema, Some(id))
            .ok()
            .and_then(|mut m| m.remove(id))
    };
    let mut batch = db::Batch::begin(&conn)?;
    let mut owners = StagedOwners::default();
    let dir = super::mirror_dir(root);
    let was = load_seen_all(&dir);
    let mut all = was.clone();
    let mut failed = Vec::new();
    for &mirror in mirrors {
        let id = mirror
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let seen = all.entry(id.to_owned()).or_default();
        let meta = std::fs::metadata(mirror)?;
        let Some(from) = import_from(seen, &meta) else {
            continue;
        };
        let before = fingerprint(&batch, id);
        let level = before.is_none() || (seen.exported.is_some() && before == seen.exported);
        let end = match import(&mut batch, &schema, mirror, from, &mut owners) {
            Ok(end) => end,
            Err(e) => {
                failed.push((mirror, e));
                continue;
            }
        };
        seen.imported = Some((inode(&meta), end));
        if level {
            seen.exported = fingerprint(&batch, id);
        }
    }
    batch.commit()?;
    owners.save()?;
    if all != was {
        save_seen_all(&dir, &all)?;
    }
    Ok(failed)
}

/// Writes each row's latest version in `mirror`'s lines from byte `from`
/// into the database where that is evi's to do (see the module's
/// promises); where the whole lines it read end. A version older (by
/// `time_updated`) than the one evi wrote before is not written over it:
/// read from the middle, the latest of the lines read may be older than
/// one read before. The lines are read in order, a line at a time: first
/// only each row's table, id and time ([`row::Head`]) to find each row's
/// latest, then once per table for those lines whole. Who wrote which row,
/// when that changed, is staged in `owners_out` (saved once `batch`
/// committed), also when a row fails: the rows before it stay in.
fn import(
    batch: &mut db::Batch<'_>,
    schema: &db::Schema,
    mirror: &Path,
    from: u64,
    owners_out: &mut StagedOwners,
) -> Result<u64, MirrorError> {
    // The latest version of each row (by a hash of its table and id: a
    // fraction of the ids, for a session of 100,000 rows): its table, time
    // and place.
    let mut latest: HashMap<[u8; 16], (&'static str, i64, u64)> = HashMap::new();
    let end = each_line(mirror, from, |at, raw| {
        let Some(head) = with_raw(raw, row::Head::parse) else {
            return Ok(());
        };
        let e = latest.entry(key_hash(head.table, &head.id)).or_insert((
            head.table,
            head.time_updated,
            at,
        ));
        if head.time_updated >= e.1 {
            *e = (head.table, head.time_updated, at);
        }
        Ok(())
    })?;
    if latest.is_empty() {
        return Ok(end);
    }
    // By place: which table, and the time.
    let wanted: HashMap<u64, (&'static str, i64)> = latest
        .into_values()
        .map(|(table, t, at)| (at, (table, t)))
        .collect();
    let mut owners = Owners::load(mirror);
    let mut changed = false;
    // A table at a time, each row after those it refers to (OpenCode's
    // database checks its foreign keys), a read of the lines each.
    let mut wrote = || -> Result<(), MirrorError> {
        for table in row::TABLES {
            each_line(mirror, from, |at, raw| {
                match wanted.get(&at) {
                    Some((t, time)) if *t == table => {
                        changed |= import_row(batch, schema, &mut owners, raw, *time)?;
                    }
                    _ => {}
                }
                Ok(())
            })?;
        }
        Ok(())
    };
    let result = wrote();
    // What went in before an error is recorded as evi's all the same.
    if changed {
        owners_out.stage(mirror, &owners)?;
    }
    result.map(|()| end)
}

/// Writes one row's latest version `raw` (of time `t`) where that is evi's
/// to do ([`import`]); whether what evi knows of who wrote it changed. A
/// row evi knows nothing of is inserted unless the database has one of its
/// id (then it is OpenCode's), in one statement: most rows of a pull are
/// new, and a look first cost a query each.
fn import_row(
    batch: &mut db::Batch<'_>,
    schema: &db::Schema,
    owners: &mut Owners,
    raw: &[u8],
    t: i64,
) -> Result<bool, MirrorError> {
    let unwrapped;
    let row: &[u8] = if memchr::memmem::find(raw, b"\"eviRawLine\"").is_some()
        && let Some(inner) = crate::transcript::line::original_bytes(raw)
    {
        unwrapped = inner;
        &unwrapped
    } else {
        raw
    };
    let Some((line, id)) = Line::parse(row).and_then(|l| l.id().map(|id| (l, id))) else {
        return Ok(false);
    };
    let id = id.as_str();
    batch.breathe()?;
    let tx: &rusqlite::Connection = batch;
    let table = line.table.as_str();
    match owners.get(table, id) {
        Owner::Unknown => {
            if table == "session" {
                db::ensure_project(tx, schema, &line)?;
            }
            if db::insert_new(tx, schema, &line)? {
                owners.evis(table, id, line.row_text);
            } else {
                owners.opencodes(table, id);
            }
            Ok(true)
        }
        // OpenCode's own: left as it is.
        Owner::OpenCode => Ok(false),
        Owner::Evi(mine) => match db::current(tx, schema, table, id)? {
            Some(now) => {
                let Some(now) = Line::parse(&now) else {
                    return Ok(false);
                };
                if !Owners::wrote_this(&mine, now.row_text) {
                    owners.opencodes(table, id);
                    return Ok(true);
                }
                if now.row_text != line.row_text && t >= now.int("time_updated").unwrap_or(0) {
                    db::update(tx, schema, &line)?;
                    owners.evis(table, id, line.row_text);
                    return Ok(true);
                }
                Ok(false)
            }
            // Gone from the database (deleted in OpenCode): left gone.
            None => Ok(false),
        },
    }
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
        remove_if_there(&owners::path(&mirror))?;
        forget_seen(&dir, id)?;
        return Ok(0);
    };
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let (have, whole) = read_lines(trashed)?;
    let mut known: HashSet<(String, String)> = have
        .iter()
        .filter_map(|l| with_row(l, |p| p.key()))
        .collect();
    let schema = db::Schema::read(&tx)?;
    let mut rows = Vec::new();
    db::session_lines(&tx, &schema, id, true, |r| {
        rows.push(r.line);
        Ok::<_, MirrorError>(())
    })?;
    let again = mirror.is_file();
    if again {
        rows.extend(read_lines(&mirror)?.0.iter().filter_map(|l| row_bytes(l)));
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
    remove_if_there(&owners::path(&mirror))?;
    forget_seen(&dir, id)?;
    Ok(n)
}

fn forget_seen(dir: &Path, id: &str) -> std::io::Result<()> {
    let mut all = load_seen_all(dir);
    if all.remove(id).is_some() {
        save_seen_all(dir, &all)?;
    }
    Ok(())
}

/// Puts session `id`'s rows back into OpenCode's database from its mirror,
/// which an undo brought back from evi's trash: each row the database
/// lacks goes in, in its latest version.
pub fn restore(root: &Path, id: &str) -> Result<(), MirrorError> {
    let mirror = super::mirror_dir(root).join(format!("{id}.jsonl"));
    if !mirror.is_file() {
        return Ok(());
    }
    match import_files(root, &[&mirror])?.pop() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "ses_db11e77f7ffeBZB1cFrSN20WW2";
    const S2: &str = "ses_db131773fffe3b27T7SPN8guk1";

    /// An OpenCode data folder with an empty database of OpenCode's schema.
    fn opencode_folder() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let conn = rusqlite::Connection::open(super::super::database(root.path())).unwrap();
        conn.execute_batch(include_str!("testdata/schema.sql"))
            .unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        std::fs::create_dir_all(super::super::mirror_dir(root.path())).unwrap();
        root
    }

    fn session(id: &str, t: i64) -> String {
        format!(
            r#"{{"table":"session","row":{{"id":"{id}","project_id":"p1","slug":"s","directory":"/work/app","title":"t","version":"1.18.33","time_created":1,"time_updated":{t}}}}}"#
        )
    }

    fn message(id: &str, session: &str, t: i64, v: &str) -> String {
        format!(
            r#"{{"table":"message","row":{{"id":"{id}","session_id":"{session}","time_created":1,"time_updated":{t},"data":{{"role":"user","v":"{v}"}}}}}}"#
        )
    }

    fn part(id: &str, message: &str, session: &str, t: i64) -> String {
        format!(
            r#"{{"table":"part","role":"user","row":{{"id":"{id}","message_id":"{message}","session_id":"{session}","time_created":1,"time_updated":{t},"data":{{"type":"text","text":"hi"}}}}}}"#
        )
    }

    fn append(mirror: &Path, lines: &[String]) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(mirror)
            .unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }

    fn query(root: &Path, sql: &str) -> Vec<String> {
        let conn = rusqlite::Connection::open(super::super::database(root)).unwrap();
        let mut st = conn.prepare(sql).unwrap();
        st.query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Pull's appends go in a table at a time (a message's latest version
    /// may come after its parts: OpenCode's database checks foreign keys),
    /// from where the last import stopped; a refresh after finds the
    /// session level and appends nothing; a row OpenCode changed is
    /// exported once, and never written over by a later pulled version.
    #[test]
    fn pulled_rows_go_in_each_after_what_it_refers_to_and_opencodes_own_stay() {
        let root = opencode_folder();
        let root = root.path();
        let mirror = super::super::mirror_dir(root).join(format!("{S1}.jsonl"));
        append(
            &mirror,
            &[
                session(S1, 1),
                message("msg_1", S1, 1, "one"),
                part("prt_1", "msg_1", S1, 1),
                message("msg_1", S1, 2, "two"),
            ],
        );
        assert!(import_files(root, &[&mirror]).unwrap().is_empty());
        assert_eq!(query(root, "SELECT id FROM session"), [S1]);
        assert_eq!(
            query(root, "SELECT data FROM message"),
            [r#"{"role":"user","v":"two"}"#]
        );
        assert_eq!(query(root, "SELECT id FROM part"), ["prt_1"]);
        assert_eq!(query(root, "SELECT worktree FROM project"), ["/work/app"]);

        // Level: a refresh reads nothing of it and appends nothing.
        let pulled = std::fs::read(&mirror).unwrap();
        refresh(root).unwrap();
        assert_eq!(std::fs::read(&mirror).unwrap(), pulled);

        // OpenCode changes the message: the next refresh appends that
        // version once, the one after nothing.
        let conn = rusqlite::Connection::open(super::super::database(root)).unwrap();
        conn.execute(
            r#"UPDATE message SET data = '{"role":"user","v":"mine"}', time_updated = 3"#,
            [],
        )
        .unwrap();
        drop(conn);
        refresh(root).unwrap();
        let exported = std::fs::read_to_string(&mirror).unwrap();
        assert_eq!(exported.matches(r#""v":"mine""#).count(), 1, "{exported}");
        refresh(root).unwrap();
        assert_eq!(std::fs::read_to_string(&mirror).unwrap(), exported);

        // A later version pulled from elsewhere does not overwrite what
        // OpenCode wrote; a new row beside it goes in.
        append(
            &mirror,
            &[
                message("msg_1", S1, 4, "other"),
                part("prt_2", "msg_1", S1, 4),
            ],
        );
        assert!(import_files(root, &[&mirror]).unwrap().is_empty());
        assert_eq!(
            query(root, "SELECT data FROM message"),
            [r#"{"role":"user","v":"mine"}"#]
        );
        assert_eq!(
            query(root, "SELECT id FROM part ORDER BY id"),
            ["prt_1", "prt_2"]
        );
    }

    /// A pulled row the database holds already, though evi never wrote it
    /// (OpenCode made it, or a record of evi's was lost), stays as it is,
    /// and counts as OpenCode's from then on: a later version pulled is not
    /// written over it either. The rows beside it go in.
    #[test]
    fn a_row_the_database_has_that_evi_never_wrote_is_left_to_opencode() {
        let root = opencode_folder();
        let root = root.path();
        let mirror = super::super::mirror_dir(root).join(format!("{S1}.jsonl"));
        append(&mirror, &[session(S1, 1), message("msg_1", S1, 1, "one")]);
        assert!(import_files(root, &[&mirror]).unwrap().is_empty());
        // What evi wrote is forgotten, and OpenCode writes the message.
        std::fs::remove_file(owners::path(&mirror)).unwrap();
        let conn = rusqlite::Connection::open(super::super::database(root)).unwrap();
        conn.execute(
            r#"UPDATE message SET data = '{"role":"user","v":"mine"}', time_updated = 3"#,
            [],
        )
        .unwrap();
        drop(conn);
        append(
            &mirror,
            &[
                message("msg_1", S1, 4, "theirs"),
                part("prt_1", "msg_1", S1, 4),
            ],
        );
        assert!(import_files(root, &[&mirror]).unwrap().is_empty());
        append(&mirror, &[message("msg_1", S1, 5, "later")]);
        assert!(import_files(root, &[&mirror]).unwrap().is_empty());
        assert_eq!(
            query(root, "SELECT data FROM message"),
            [r#"{"role":"user","v":"mine"}"#]
        );
        assert_eq!(query(root, "SELECT id FROM part"), ["prt_1"]);
    }

    /// A session whose rows cannot go in (a part of a message the database
    /// lacks) is named, and the others' rows go in all the same.
    #[test]
    fn a_session_that_cannot_go_in_keeps_no_other_out() {
        let root = opencode_folder();
        let root = root.path();
        let dir = super::super::mirror_dir(root);
        let (good, bad) = (
            dir.join(format!("{S1}.jsonl")),
            dir.join(format!("{S2}.jsonl")),
        );
        append(&good, &[session(S1, 1), message("msg_1", S1, 1, "one")]);
        append(&bad, &[session(S2, 1), part("prt_9", "msg_gone", S2, 1)]);
        let failed = import_files(root, &[&bad, &good]).unwrap();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].0, bad.as_path());
        assert_eq!(query(root, "SELECT id FROM message"), ["msg_1"]);
        assert!(query(root, "SELECT id FROM part").is_empty());
    }
}
