//! Taking a backup: snapshot, list, copy, and retry when the server
//! deleted a file the snapshot names (see the module above for why that
//! can happen and what the archive promises).

use std::fs::File;
use std::io::{BufWriter, Read};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::refs::{FileRef, Refs, short};
use super::{BackupError, TRIES, check_schema, io, sql, sync_dir};
use crate::config::{Config, DB_FILE};

/// What to back up and where to.
#[derive(Debug, Clone)]
pub struct BackupOptions {
    /// The data folder: holds the database.
    pub data_dir: PathBuf,
    /// Holds `bodies/` and `blobs/`: the data folder, or a `file://` store.
    pub store_dir: PathBuf,
    /// The archive to write.
    pub output: PathBuf,
    /// Replace `output` if it exists.
    pub force: bool,
    /// A test hook (see [`crate::fault`]).
    pub fault: Option<crate::fault::Fault>,
}

impl BackupOptions {
    /// The options for the server `config` describes; refuses one whose
    /// rows or files are not in folders.
    pub fn new(config: &Config, output: PathBuf, force: bool) -> Result<Self, BackupError> {
        if config.database.is_some() {
            return Err(BackupError::NotEmbedded("--database"));
        }
        if let Ok(Some(crate::storage::StoreUrl::S3 { .. })) = config.store_url() {
            return Err(BackupError::NotEmbedded("an s3:// --store"));
        }
        Ok(Self {
            data_dir: config.data_dir.clone(),
            store_dir: config.store_dir(),
            output,
            force,
            fault: config.fault,
        })
    }
}

/// What a backup wrote.
#[derive(Debug, Clone)]
pub struct BackupReport {
    pub output: PathBuf,
    pub accounts: u64,
    pub records: u64,
    pub packs: u64,
    pub blobs: u64,
    /// The archive's size.
    pub bytes: u64,
    /// Snapshots taken (more than one when files went meanwhile).
    pub snapshots: u32,
}

/// How one snapshot's copy ended.
enum Attempt {
    Written(tempfile::NamedTempFile, Refs),
    /// A file the snapshot names was gone when its turn came.
    Moved(PathBuf),
}

/// Writes the archive `opts.output`; `progress` gets a line per step, and
/// one every few seconds while files are copied.
pub fn backup(opts: &BackupOptions, progress: &dyn Fn(&str)) -> Result<BackupReport, BackupError> {
    let live = opts.data_dir.join(DB_FILE);
    if !live.is_file() {
        return Err(BackupError::NoDatabase(
            std::path::absolute(&opts.data_dir).unwrap_or_else(|_| opts.data_dir.clone()),
        ));
    }
    if !opts.force && std::fs::symlink_metadata(&opts.output).is_ok() {
        return Err(BackupError::Exists(opts.output.clone()));
    }
    let parent = match opts.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    // The snapshot and the archive being written live beside the archive:
    // the same disk the operator chose for it, and one rename away.
    let work = tempfile::Builder::new()
        .prefix(".evi-backup-")
        .tempdir_in(&parent)
        .map_err(io(format!(
            "cannot make a work folder in {}",
            parent.display()
        )))?;
    let mut moved = PathBuf::new();
    for n in 1..=TRIES {
        match attempt(opts, &live, work.path(), &parent, n, progress)? {
            Attempt::Written(tmp, refs) => {
                let bytes = tmp
                    .as_file()
                    .metadata()
                    .map_err(io("cannot read the archive's size"))?
                    .len();
                let placed = if opts.force {
                    tmp.persist(&opts.output)
                } else {
                    tmp.persist_noclobber(&opts.output)
                };
                placed.map_err(|e| match e.error.kind() {
                    std::io::ErrorKind::AlreadyExists => BackupError::Exists(opts.output.clone()),
                    _ => BackupError::Io {
                        what: format!("cannot move the archive to {}", opts.output.display()),
                        source: e.error,
                    },
                })?;
                sync_dir(&parent)?;
                return Ok(BackupReport {
                    output: opts.output.clone(),
                    accounts: refs.accounts,
                    records: refs.records,
                    packs: refs.packs.len() as u64,
                    blobs: refs.blobs.len() as u64,
                    bytes,
                    snapshots: n,
                });
            }
            // Every deletion commits the rows that stop naming a file
            // before the file goes: a fresh snapshot that still names the
            // one found missing means it is missing, not moving.
            Attempt::Moved(path) if path == moved => {
                return Err(BackupError::Missing(path));
            }
            Attempt::Moved(path) => {
                progress(&format!(
                    "{} went (a compaction, blob clean-up or account purge) after snapshot \
                     {n} named it: taking a fresh one",
                    path.display()
                ));
                moved = path;
            }
        }
    }
    Err(BackupError::KeptMoving {
        path: moved,
        tries: TRIES,
    })
}

fn attempt(
    opts: &BackupOptions,
    live: &Path,
    work: &Path,
    parent: &Path,
    n: u32,
    progress: &dyn Fn(&str),
) -> Result<Attempt, BackupError> {
    let snap = work.join(DB_FILE);
    for f in [snap.clone(), work.join(format!("{DB_FILE}-journal"))] {
        match std::fs::remove_file(&f) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io(format!("cannot remove {}", f.display()))(e));
            }
            _ => {}
        }
    }
    let started = Instant::now();
    let refs = snapshot(live, &snap)?;
    if n == 1 && crate::fault::is(opts.fault, crate::fault::Fault::HoldBackupAfterSnapshot) {
        progress("fault hold-backup-after-snapshot: held until a line on stdin");
        let _ = std::io::stdin().read_line(&mut String::new());
    }
    let snap_len = std::fs::metadata(&snap)
        .map_err(io("cannot read the snapshot's size"))?
        .len();
    // Every file checked before any is copied: one gone costs a stat
    // each, not a copy of everything before it.
    let mut total = snap_len;
    for f in refs.files() {
        let path = opts.store_dir.join(&f.rel);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Attempt::Moved(path)),
            Err(e) => return Err(io(format!("cannot read {}", path.display()))(e)),
            Ok(m) => {
                if let Some(why) = short(f, m.len()) {
                    return Err(BackupError::Damaged(why));
                }
                total += m.len();
            }
        }
    }
    progress(&format!(
        "snapshot of the database ({snap_len} bytes) in {:.1} s: {} accounts, {} records, \
         {} packs, {} blobs, {total} bytes to copy",
        started.elapsed().as_secs_f64(),
        refs.accounts,
        refs.records,
        refs.packs.len(),
        refs.blobs.len(),
    ));
    let tmp = tempfile::Builder::new()
        .prefix(".evi-backup-")
        .suffix(".tar")
        .tempfile_in(parent)
        .map_err(io(format!("cannot make a file in {}", parent.display())))?;
    let owner = std::fs::metadata(live).map_err(io(format!("cannot read {}", live.display())))?;
    let mut out = Writer {
        tar: tar::Builder::new(BufWriter::with_capacity(
            1 << 20,
            tmp.reopen()
                .map_err(io("cannot open the archive being written"))?,
        )),
        owner: (owner.uid(), owner.gid()),
        copied: 0,
        total,
        told: Instant::now(),
        progress,
    };
    let db = File::open(&snap).map_err(io("cannot open the snapshot"))?;
    out.file(Path::new(DB_FILE), db, snap_len, None)?;
    let mut dir_done = PathBuf::new();
    for top in ["bodies", "blobs"] {
        out.dir(Path::new(top))?;
        let list = if top == "bodies" {
            &refs.packs
        } else {
            &refs.blobs
        };
        for f in list {
            let dir = f.rel.parent().expect("bodies/USER/FILE");
            if dir != dir_done {
                out.dir(dir)?;
                dir_done = dir.to_owned();
            }
            if let Some(gone) = out.copy(&opts.store_dir, f)? {
                return Ok(Attempt::Moved(gone));
            }
        }
    }
    let buf = out
        .tar
        .into_inner()
        .map_err(io("cannot finish the archive"))?;
    let file = buf
        .into_inner()
        .map_err(|e| io("cannot write the archive")(e.into_error()))?;
    file.sync_all().map_err(io("cannot sync the archive"))?;
    Ok(Attempt::Written(tmp, refs))
}

/// Copies the live database into `snap` in one step of the backup API:
/// one read transaction, so one instant of it, while the server's writes
/// go on in its WAL. (Step by step, every commit of the server would
/// start the copy over.) Returns what the copy names.
fn snapshot(live: &Path, snap: &Path) -> Result<Refs, BackupError> {
    let what = format!("cannot read the database {}", live.display());
    // On a stopped server SQLite makes the -wal and -shm a WAL database is
    // read with; left owned by whoever ran the backup (root, say), they
    // would keep the server from opening its own database.
    let sidecars: Vec<PathBuf> = ["-wal", "-shm"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", live.display())))
        .filter(|p| !p.exists())
        .collect();
    let src = Connection::open_with_flags(
        live,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql(&what))?;
    src.busy_timeout(Duration::from_secs(10))
        .map_err(sql(&what))?;
    let mut dst = Connection::open(snap).map_err(sql("cannot make the snapshot"))?;
    {
        let copy = Backup::new(&src, &mut dst).map_err(sql("cannot start the snapshot"))?;
        let mut waits = 0;
        loop {
            match copy.step(-1).map_err(sql(&what))? {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked if waits < 200 => {
                    waits += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    return Err(BackupError::Sqlite {
                        what,
                        source: rusqlite::Error::SqliteFailure(
                            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                            Some("the database stayed locked for 10 s".into()),
                        ),
                    });
                }
            }
        }
    }
    drop(src);
    if let Ok(owner) = std::fs::metadata(live) {
        for made in sidecars.iter().filter(|p| p.exists()) {
            let _ = std::os::unix::fs::chown(made, Some(owner.uid()), Some(owner.gid()));
        }
    }
    check_schema(&dst)?;
    // The copied header says WAL, as the server's file does; the archive
    // holds one self-contained file (the server sets WAL again at start).
    dst.pragma_update(None, "journal_mode", "DELETE")
        .map_err(sql("cannot finish the snapshot"))?;
    let refs = Refs::list(&dst)?;
    dst.close()
        .map_err(|(_, e)| sql("cannot close the snapshot")(e))?;
    Ok(refs)
}

/// The archive being written, and the progress lines about it.
struct Writer<'a> {
    tar: tar::Builder<BufWriter<File>>,
    /// The server's user and group (the database's owner): what `tar -xpf`
    /// run as root gives the files back.
    owner: (u32, u32),
    copied: u64,
    total: u64,
    told: Instant,
    progress: &'a dyn Fn(&str),
}

impl Writer<'_> {
    fn header(
        &self,
        kind: tar::EntryType,
        mode: u32,
        size: u64,
        mtime: Option<u64>,
    ) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_uid(self.owner.0.into());
        h.set_gid(self.owner.1.into());
        h.set_mtime(mtime.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        }));
        h
    }

    fn dir(&mut self, rel: &Path) -> Result<(), BackupError> {
        let mut h = self.header(tar::EntryType::Directory, 0o700, 0, None);
        self.tar
            .append_data(&mut h, rel, std::io::empty())
            .map_err(io("cannot write the archive"))
    }

    fn file(
        &mut self,
        rel: &Path,
        from: File,
        len: u64,
        mtime: Option<u64>,
    ) -> Result<(), BackupError> {
        let mut h = self.header(tar::EntryType::Regular, 0o600, len, mtime);
        let exact = Exactly {
            inner: from.take(len),
            left: len,
        };
        self.tar
            .append_data(&mut h, rel, exact)
            .map_err(io(format!(
                "cannot copy {} into the archive",
                rel.display()
            )))?;
        self.copied += len;
        if self.told.elapsed() >= Duration::from_secs(2) {
            self.told = Instant::now();
            (self.progress)(&format!(
                "copied {} of {} bytes ({}%)",
                self.copied,
                self.total,
                self.copied * 100 / self.total.max(1)
            ));
        }
        Ok(())
    }

    /// Copies one pack or blob; the path when it is gone.
    fn copy(&mut self, root: &Path, f: &FileRef) -> Result<Option<PathBuf>, BackupError> {
        let path = root.join(&f.rel);
        let file = match File::open(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(path)),
            Err(e) => return Err(io(format!("cannot open {}", path.display()))(e)),
            Ok(file) => file,
        };
        // Open, it stays readable whatever deletes its name now; and it
        // never changes once in place, so its length now is its length.
        let meta = file
            .metadata()
            .map_err(io(format!("cannot read {}", path.display())))?;
        if let Some(why) = short(f, meta.len()) {
            return Err(BackupError::Damaged(why));
        }
        let mtime = u64::try_from(meta.mtime()).ok();
        self.file(&f.rel, file, meta.len(), mtime)?;
        Ok(None)
    }
}

/// A reader of exactly `left` bytes: one that ends early is an error, not
/// an entry shorter than its header says (which would misalign the rest).
struct Exactly<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exactly<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file ended {} bytes early", self.left),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_ends_early_is_an_error() {
        let mut r = Exactly {
            inner: &b"abc"[..],
            left: 5,
        };
        let mut out = Vec::new();
        assert!(std::io::copy(&mut r, &mut out).is_err());
    }
}
