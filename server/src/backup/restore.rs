//! Restoring an archive: unpack beside the data folder, check, rename into
//! place (see the module above for what is refused).

use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::layout::{Place, place};
use super::refs::{Refs, short};
use super::{BackupError, check_schema, io, sql, sync_dir};
use crate::config::DB_FILE;

/// What a restore put in place.
#[derive(Debug, Clone)]
pub struct RestoreReport {
    pub data_dir: PathBuf,
    pub accounts: u64,
    pub records: u64,
    pub packs: u64,
    pub blobs: u64,
    /// The bytes of the files written.
    pub bytes: u64,
}

/// Makes `data_dir` (absent, or an empty folder) from `archive`.
pub fn restore(
    archive: &Path,
    data_dir: &Path,
    progress: &dyn Fn(&str),
) -> Result<RestoreReport, BackupError> {
    check_free(data_dir)?;
    let input = File::open(archive).map_err(io(format!("cannot open {}", archive.display())))?;
    let abs = std::path::absolute(data_dir).map_err(io("cannot resolve --data"))?;
    let parent = abs.parent().unwrap_or(Path::new("/")).to_owned();
    std::fs::create_dir_all(&parent).map_err(io(format!("cannot make {}", parent.display())))?;
    let name = abs
        .file_name()
        .map_or_else(|| "data".into(), |n| n.to_string_lossy().into_owned());
    // Made 0700, and deleted with all it holds unless renamed into place.
    let work = tempfile::Builder::new()
        .prefix(&format!(".{name}.restore-"))
        .tempdir_in(&parent)
        .map_err(io(format!("cannot make a folder in {}", parent.display())))?;
    let bytes = unpack(input, work.path(), progress)?;
    let refs = check(work.path())?;
    crate::private::close_data_folder(work.path())
        .map_err(io("cannot set the restored folder's modes"))?;
    // The destination is looked at again: a server or an operator may
    // have put something there meanwhile.
    check_free(data_dir)?;
    let done = work.keep();
    if let Err(e) = std::fs::rename(&done, &abs) {
        let _ = std::fs::remove_dir_all(&done);
        return Err(io(format!(
            "cannot move the restored folder to {}",
            abs.display()
        ))(e));
    }
    sync_dir(&parent)?;
    Ok(RestoreReport {
        data_dir: abs,
        accounts: refs.accounts,
        records: refs.records,
        packs: refs.packs.len() as u64,
        blobs: refs.blobs.len() as u64,
        bytes,
    })
}

/// Refuses a destination that holds anything: a database most of all.
fn check_free(data_dir: &Path) -> Result<(), BackupError> {
    let meta = match std::fs::symlink_metadata(data_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(format!("cannot read {}", data_dir.display()))(e)),
        Ok(m) => m,
    };
    if data_dir.join(DB_FILE).exists() {
        return Err(BackupError::Occupied(data_dir.to_owned()));
    }
    let empty = meta.is_dir()
        && std::fs::read_dir(data_dir)
            .map_err(io(format!("cannot read {}", data_dir.display())))?
            .next()
            .is_none();
    if !empty {
        return Err(BackupError::NotEmpty(data_dir.to_owned()));
    }
    Ok(())
}

/// Writes every entry of the archive under `root`, each by a name
/// [`place`] accepted; the bytes written.
fn unpack(input: File, root: &Path, progress: &dyn Fn(&str)) -> Result<u64, BackupError> {
    let not_tar =
        |e: std::io::Error| BackupError::NotABackup(format!("not a readable tar archive: {e}"));
    let mut archive = tar::Archive::new(BufReader::with_capacity(1 << 20, input));
    let mut bytes = 0u64;
    let mut files = 0u64;
    let mut told = std::time::Instant::now();
    for entry in archive.entries().map_err(not_tar)? {
        let mut entry = entry.map_err(not_tar)?;
        let name = entry.path().map_err(not_tar)?.into_owned();
        let kind = entry.header().entry_type();
        let is_dir = match kind {
            tar::EntryType::Directory => true,
            tar::EntryType::Regular | tar::EntryType::Continuous => false,
            _ => {
                return Err(BackupError::Refused {
                    entry: name.display().to_string(),
                    why: "not a plain file or folder (a link, a device or the like)",
                });
            }
        };
        match place(&name, is_dir)? {
            Place::Dir(rel) => crate::private::dir(&root.join(rel))
                .map_err(io(format!("cannot make {}", name.display())))?,
            Place::File(rel) => {
                let path = root.join(&rel);
                if let Some(dir) = path.parent() {
                    crate::private::dir(dir)
                        .map_err(io(format!("cannot make the folder of {}", name.display())))?;
                }
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::AlreadyExists => BackupError::Refused {
                            entry: name.display().to_string(),
                            why: "it is in the archive twice",
                        },
                        _ => io(format!("cannot write {}", path.display()))(e),
                    })?;
                bytes += std::io::copy(&mut entry, &mut out).map_err(not_tar)?;
                out.sync_all()
                    .map_err(io(format!("cannot sync {}", path.display())))?;
                files += 1;
            }
        }
        if told.elapsed() >= std::time::Duration::from_secs(2) {
            told = std::time::Instant::now();
            progress(&format!("unpacked {files} files, {bytes} bytes"));
        }
    }
    progress(&format!("unpacked {files} files, {bytes} bytes"));
    Ok(bytes)
}

/// The unpacked folder is a data folder a server can start on: the
/// database is whole and every file a row names is there, long enough.
fn check(root: &Path) -> Result<Refs, BackupError> {
    let db_path = root.join(DB_FILE);
    if !db_path.is_file() {
        return Err(BackupError::NotABackup(format!(
            "the archive holds no {DB_FILE}: not an archive of evi-server backup"
        )));
    }
    let not_db = |e: rusqlite::Error| {
        BackupError::NotABackup(format!(
            "the archive's {DB_FILE} is not a usable database: {e}"
        ))
    };
    let db = Connection::open_with_flags(
        &db_path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql("cannot open the restored database"))?;
    let verdict: Vec<String> = db
        .prepare("PRAGMA integrity_check")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<_, _>>()
        })
        .map_err(not_db)?;
    if verdict != ["ok"] {
        return Err(BackupError::NotABackup(format!(
            "the archive's database fails PRAGMA integrity_check: {}",
            verdict.join("; ")
        )));
    }
    check_schema(&db)?;
    let refs = Refs::list(&db)?;
    db.close()
        .map_err(|(_, e)| sql("cannot close the restored database")(e))?;
    for f in refs.files() {
        let path = root.join(&f.rel);
        let len = match std::fs::metadata(&path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(BackupError::NotABackup(format!(
                    "the archive lacks {}, which its database names",
                    f.rel.display()
                )));
            }
            Err(e) => return Err(io(format!("cannot read {}", path.display()))(e)),
        };
        if let Some(why) = short(f, len) {
            return Err(BackupError::NotABackup(format!(
                "the archive is cut short: {why}"
            )));
        }
    }
    for dir in [root.to_owned(), root.join("bodies"), root.join("blobs")] {
        if dir.is_dir() {
            for sub in std::fs::read_dir(&dir)
                .map_err(io(format!("cannot read {}", dir.display())))?
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            {
                sync_dir(&sub.path())?;
            }
            sync_dir(&dir)?;
        }
    }
    Ok(refs)
}
