//! `evi-server backup` and `evi-server restore`: an archive of the embedded
//! store (the SQLite file, and the body packs and blob files its rows point
//! at) taken while the server runs and pushes land, and a data folder made
//! from one.
//!
//! # Promises
//!
//! - **Consistent.** The database in an archive is one instant of the
//!   server's (SQLite's online backup API, in one step, so a commit is in
//!   it whole or not at all), and every pack and blob file a row of a live
//!   account names is in it, at least as long as the furthest body a row
//!   points into (a blob exactly its recorded size). Packs and blobs never
//!   change once in place, but a compaction after a forget, a blob
//!   collection or an account purge can delete one the snapshot still
//!   names; then a fresh snapshot is taken and the copy starts over, a
//!   few times at most, before it gives up and says so. (Each of those
//!   commits the rows that stop naming a file before the file goes, so a
//!   file a fresh snapshot still names and that is still gone is missing,
//!   not moving: that is reported at once.) Files of accounts
//!   being purged (retired) are left out: the restored server's first
//!   start finishes their purge, as the live one would.
//! - **Atomic.** The archive is written beside its destination, fsynced,
//!   and renamed into place (0600): a backup that fails or is killed
//!   leaves no file under the name asked for, and the one there before
//!   stays unless `--force` replaces it. A restore unpacks and checks in a
//!   folder beside the data folder and renames it into place once
//!   `PRAGMA integrity_check` passed and every file a row names is there:
//!   a failed restore leaves nothing behind.
//! - **Never in the server's way.** The backup takes no lock on the data
//!   folder and writes nothing in it: it reads the database through a
//!   read-only connection (in WAL mode the server's commits go on while it
//!   copies) and the files by their paths. (On a stopped server, SQLite
//!   makes the empty `-wal` and `-shm` any reader of a WAL database needs;
//!   they are given the database's owner, so a backup run as root leaves
//!   the server able to open them.)
//! - **What it refuses.** A server on Postgres or a bucket (`pg_dump` and
//!   the bucket's own copy are the backup there); a database another
//!   version of the server migrated; a restore into a folder that holds
//!   anything; an archive with an entry outside the data folder's layout
//!   (an absolute path, `..`, a link, a device, a name the server would
//!   never make), twice the same entry, or a database that is damaged or
//!   names a file the archive lacks.
//!
//! The archive is a plain tar of the data folder's own layout
//! (`evi-server.sqlite3`, `bodies/<user>/<pack>`, `blobs/<user>/<name>`,
//! folders 0700, files 0600), so `tar -xpf` alone also gives a folder a
//! server starts on; `restore` adds the checks and the atomic move.

use std::path::PathBuf;

mod create;
mod layout;
mod refs;
mod restore;

pub use create::{BackupOptions, BackupReport, backup};
pub use restore::{RestoreReport, restore};

/// How many snapshots a backup takes before it gives up on a server that
/// keeps deleting files the last one named.
pub const TRIES: u32 = 5;

/// Why a backup or a restore did not complete; nothing was written under
/// the name asked for.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The server keeps its rows in Postgres or its files in a bucket.
    #[error("{0}: evi-server backup copies the embedded store (a --data folder) only")]
    NotEmbedded(&'static str),
    #[error("no evi-server database in {} (no {} there)", .0.display(), crate::config::DB_FILE)]
    NoDatabase(PathBuf),
    #[error("{} exists already", .0.display())]
    Exists(PathBuf),
    /// The database is not at the schema this binary knows.
    #[error("the database is at schema version {found}, and this evi-server knows version {known}")]
    Schema { found: usize, known: usize },
    /// Files kept disappearing between a snapshot and the copy of what it
    /// names (a retry is worth it later).
    #[error(
        "{} was deleted by the server before it could be copied, after {tries} snapshots",
        .path.display()
    )]
    KeptMoving { path: PathBuf, tries: u32 },
    /// A file the database names is not there, snapshot after snapshot.
    #[error("the database names {}, which is not there", .0.display())]
    Missing(PathBuf),
    /// What the database names is not on disk as it says: the data folder
    /// is damaged (or, for a restore, the archive is incomplete).
    #[error("{0}")]
    Damaged(String),
    /// The restore's destination holds a server's data already.
    #[error("{} holds a database already", .0.display())]
    Occupied(PathBuf),
    #[error("{} is not an empty folder", .0.display())]
    NotEmpty(PathBuf),
    /// An archive entry a data folder never holds: a hostile or foreign
    /// archive.
    #[error("the archive entry {entry:?} is refused: {why}")]
    Refused { entry: String, why: &'static str },
    /// The archive is not one `evi-server backup` wrote, or is cut short.
    #[error("{0}")]
    NotABackup(String),
    #[error("{what}: {source}")]
    Sqlite {
        what: String,
        source: rusqlite::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl BackupError {
    /// What the operator can do about it (the `hint:` line).
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            Self::NotEmbedded(_) => {
                "back up the database with pg_dump and the bucket with its own \
                 tools (deploy/README.md, \"Backups of a scaled-out server\")"
                    .into()
            }
            Self::NoDatabase(_) => "pass the folder the server runs on (--data DIR or \
                 EVI_SERVER_DATA)"
                .into(),
            Self::Exists(_) => "choose another file name, or pass --force to replace it".into(),
            Self::Schema { found, known } if found > known => {
                "run the evi-server that migrated it (a newer one)".into()
            }
            Self::Schema { .. } => "start this evi-server on the folder once (it migrates the \
                 database), or back it up with the version that runs on it"
                .into(),
            Self::KeptMoving { .. } => {
                "forgets, blob clean-ups or account deletions were deleting \
                 files meanwhile: run the backup again later, or stop the server and copy the \
                 folder (deploy/README.md, section 5)"
                    .into()
            }
            Self::Missing(_) => "if the server runs with --store file:///PATH, pass the same \
                 --store to the backup; otherwise the data folder is damaged: stop the server \
                 and copy the whole folder as it is (deploy/README.md, section 5)"
                .into(),
            Self::Damaged(_) => "the data folder is damaged: stop the server and copy the whole \
                 folder as it is (deploy/README.md, section 5), then look into it"
                .into(),
            Self::Occupied(p) => format!(
                "move it aside first (mv {0} {0}.old), or restore into another folder",
                p.display()
            ),
            Self::NotEmpty(_) => {
                "restore into a folder that does not exist yet, or an empty one".into()
            }
            Self::Refused { .. } | Self::NotABackup(_) => {
                "restore only archives `evi-server backup` wrote".into()
            }
            Self::Sqlite { .. } | Self::Io { .. } => return None,
        })
    }
}

/// `map_err` helpers: the path or step the error is about, in the message.
fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> BackupError {
    move |source| BackupError::Io {
        what: what.to_string(),
        source,
    }
}

fn sql(what: impl std::fmt::Display) -> impl FnOnce(rusqlite::Error) -> BackupError {
    move |source| BackupError::Sqlite {
        what: what.to_string(),
        source,
    }
}

/// Refuses a database at another schema than this binary's: the queries
/// of [`refs`] name its columns, and a restored server must be able to
/// start on it.
fn check_schema(db: &rusqlite::Connection) -> Result<(), BackupError> {
    let found: usize = db
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql("cannot read the database's schema version"))?;
    let known = crate::store::sqlite::SCHEMA_VERSION;
    if found != known {
        return Err(BackupError::Schema { found, known });
    }
    Ok(())
}

/// [`crate::private::sync_dir`], its failure said as a backup's.
fn sync_dir(dir: &std::path::Path) -> Result<(), BackupError> {
    crate::private::sync_dir(dir).map_err(io(format!("cannot sync {}", dir.display())))
}
