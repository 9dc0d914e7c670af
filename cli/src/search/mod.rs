//! The local full-text index behind `evi sessions search`.
//!
//! Promises:
//!
//! - **A cache, never a source.** `sync/search.db` (SQLite FTS5, mode 0600:
//!   it holds what the transcripts hold) can always be deleted; a missing,
//!   corrupt or older-schema file is rebuilt from the transcripts by the next
//!   search, and a failure marks it for rebuild (`sync/search.rebuild`)
//!   rather than failing anything else. No transcript is ever written.
//! - **Incremental.** Transcripts are append-only, so the index keeps, per
//!   file, its inode and how far it has read, and per session the implicit
//!   parent after the last line read (see [`update`]): a search with nothing
//!   new costs a stat per file.
//! - **The same ids as every reader.** Entries are placed with the one
//!   [`IdChain`](crate::transcript::entry_id::IdChain) the tree and sync use,
//!   duplicates of an id dropped (the first kept), titles skipped, so a hit's
//!   entry opens with `evi sessions show ID --through ENTRY`.
//! - **Every agent's sessions.** Claude Code's and Codex's sessions, where
//!   `[agents]` turns them on, are indexed beside eVi's ([`agents`]), as
//!   `show` reads them: the text people read, never encrypted reasoning.
//! - **Contentless.** The index holds only the inverted lists and where each
//!   line is; snippets are cut from the transcript line (see [`snippet`]).

pub mod agents;
pub mod find;
pub mod query;
pub mod schema;
pub mod snippet;
pub mod text;
pub mod update;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode};

use crate::home::EviHome;

/// What went wrong with the index. Every variant is fixed by a rebuild
/// except `Io` on the transcripts, which the caller reports.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index {path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "search index {path} has schema version {found}, this evi writes {}",
        schema::VERSION
    )]
    Stale { path: PathBuf, found: i64 },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("the search index is being updated by another evi; try again")]
    Busy,
}

impl IndexError {
    /// The file itself is damaged or from another version: rebuilding is
    /// the fix.
    pub fn wants_rebuild(&self) -> bool {
        match self {
            Self::Stale { .. } => true,
            Self::Sqlite { source, .. } => matches!(
                source.sqlite_error_code(),
                Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
            ),
            _ => false,
        }
    }
}

/// An open index.
pub struct SearchIndex {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
    /// The transcripts folder the stored paths are relative to.
    pub(crate) transcripts: PathBuf,
}

/// Where the index of `home` lives.
pub fn index_path(home: &EviHome) -> PathBuf {
    home.sync_dir().join("search.db")
}

fn rebuild_marker(home: &EviHome) -> PathBuf {
    home.sync_dir().join("search.rebuild")
}

impl SearchIndex {
    /// Opens (creating if needed) the index of `home`, waiting up to `wait`
    /// for another writer. A damaged file, or one marked for rebuild, is
    /// removed and made anew.
    pub fn open(home: &EviHome, wait: Duration) -> Result<Self, IndexError> {
        let path = index_path(home);
        let marker = rebuild_marker(home);
        if marker.exists() {
            remove_files(&path)?;
            let _ = fs::remove_file(&marker);
        }
        match Self::open_at(&path, home, wait) {
            Err(e) if e.wants_rebuild() => {
                remove_files(&path)?;
                Self::open_at(&path, home, wait)
            }
            other => other,
        }
    }

    /// Opens the index only if it exists and is sound (after a push or
    /// pull: building it from scratch is for a search to do, so a damaged
    /// file is an error here, not a rebuild).
    pub fn open_existing(home: &EviHome, wait: Duration) -> Result<Option<Self>, IndexError> {
        let path = index_path(home);
        if !path.exists() || rebuild_marker(home).exists() {
            return Ok(None);
        }
        Self::open_at(&path, home, wait).map(Some)
    }

    fn open_at(path: &Path, home: &EviHome, wait: Duration) -> Result<Self, IndexError> {
        create_private(path)?;
        let sql = |source| sql_error(path, source);
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(wait).map_err(sql)?;
        let mut ix = Self {
            conn,
            path: path.to_owned(),
            transcripts: home.transcripts_dir(),
        };
        schema::prepare(&mut ix)?;
        Ok(ix)
    }

    pub(crate) fn sql(&self, source: rusqlite::Error) -> IndexError {
        sql_error(&self.path, source)
    }
}

/// An SQLite error on the index at `path`.
pub(crate) fn sql_error(path: &Path, source: rusqlite::Error) -> IndexError {
    if source.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) {
        return IndexError::Busy;
    }
    IndexError::Sqlite {
        path: path.to_owned(),
        source,
    }
}

/// Runs `f` on the open index of `home`; if the file turns out damaged
/// midway, rebuilds it once and runs `f` again.
pub fn with_index<T>(
    home: &EviHome,
    wait: Duration,
    mut f: impl FnMut(&mut SearchIndex) -> Result<T, IndexError>,
) -> Result<T, IndexError> {
    let mut ix = SearchIndex::open(home, wait)?;
    match f(&mut ix) {
        Err(e) if e.wants_rebuild() => {
            let path = ix.path.clone();
            drop(ix);
            remove_files(&path)?;
            f(&mut SearchIndex::open(home, wait)?)
        }
        other => other,
    }
}

/// Brings an existing index up to date after a push or pull, never failing
/// it: if another evi is indexing this is skipped (the next search catches
/// up), and any other failure is a warning and a mark for rebuild.
pub fn refresh_after_sync(home: &EviHome, catalog: &crate::transcript::Catalog) -> Option<String> {
    let run = || -> Result<(), IndexError> {
        if let Some(mut ix) = SearchIndex::open_existing(home, Duration::ZERO)? {
            ix.update(catalog)?;
        }
        Ok(())
    };
    match run() {
        Ok(()) | Err(IndexError::Busy) => None,
        Err(e) => {
            let _ = fs::write(rebuild_marker(home), b"");
            Some(format!(
                "{e}; the search index will be rebuilt by the next `evi sessions search`"
            ))
        }
    }
}

/// Makes the index file (and its folder) readable by its owner alone
/// before SQLite opens it: SQLite gives its WAL and shared-memory files the
/// database file's mode.
fn create_private(path: &Path) -> Result<(), IndexError> {
    let io = |what, p: &Path| {
        let p = p.to_owned();
        move |source| IndexError::Io {
            what,
            path: p,
            source,
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(io("cannot create", dir))?;
    let mut opts = fs::OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let file = opts.open(path).map_err(io("cannot create", path))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = file
            .metadata()
            .map_err(io("cannot read", path))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            file.set_permissions(fs::Permissions::from_mode(0o600))
                .map_err(io("cannot restrict", path))?;
        }
    }
    Ok(())
}

/// Removes the index and SQLite's files beside it.
fn remove_files(path: &Path) -> Result<(), IndexError> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        match fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(IndexError::Io {
                    what: "cannot remove",
                    path: p,
                    source,
                });
            }
        }
    }
    Ok(())
}
