//! The index's tables. A file of another schema version is rebuilt, never
//! migrated: the index is a cache of the transcripts.
//!
//! - `sessions`: a session's name (an eVi session's id, another agent's
//!   stream name: `claude-code/<id>`, `codex/<id>`), its `agent`, and `tip`,
//!   the implicit parent the next line without `parentId` would take (the
//!   chain after the last line read).
//! - `files`: one row per transcript file read, by its path under
//!   `transcripts/` (another agent's file by its absolute path, its `day`
//!   the constant day of those layouts): its inode, `size` (the offset just past the last
//!   complete line read) and `seen` (the file's length then, a pending tail
//!   included), so an unchanged file costs one stat; and `tail`, the last
//!   bytes before `size`, checked before reading on from `size`: a file
//!   replaced by a longer one that got the same inode is read again whole.
//! - `entries`: one row per entry (its rowid is the FTS row), with where its
//!   line is; an id appears once per session, the first line of an id kept,
//!   as the session tree keeps it. To keep the index small (a third of it
//!   was ids), a derived id is stored as its 16 bytes, and duplicates are
//!   found through `key`, 8 bytes of the id's SHA-256, then the id itself.
//! - `fts`: contentless FTS5 over the text of each entry.

use super::{IndexError, SearchIndex, sql_error};

/// Bump when the tables or what is indexed change.
pub const VERSION: i64 = 2;

const CREATE: &str = "
CREATE TABLE sessions(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,
    tip TEXT
);
CREATE TABLE files(
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    session INTEGER NOT NULL,
    day TEXT NOT NULL,
    ino INTEGER NOT NULL,
    size INTEGER NOT NULL,
    seen INTEGER NOT NULL,
    tail BLOB NOT NULL DEFAULT x''
);
CREATE INDEX files_session ON files(session);
CREATE TABLE entries(
    id INTEGER PRIMARY KEY,
    session INTEGER NOT NULL,
    key INTEGER NOT NULL,
    entry ANY NOT NULL,
    role TEXT NOT NULL,
    ts INTEGER,
    file INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    len INTEGER NOT NULL
);
CREATE INDEX entries_key ON entries(session, key);
CREATE VIRTUAL TABLE fts USING fts5(body, content='', contentless_delete=1);
";

/// Sets the connection up and creates the tables of a new file.
pub fn prepare(ix: &mut SearchIndex) -> Result<(), IndexError> {
    let path = ix.path.clone();
    let sql = |e| sql_error(&path, e);
    // WAL with NORMAL: a crash may lose the last update (redone by the next
    // search from the offsets, which commit with it) but never corrupts.
    ix.conn
        .pragma_update(None, "journal_mode", "WAL")
        .map_err(sql)?;
    ix.conn
        .pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql)?;
    let found: i64 = ix
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql)?;
    match found {
        VERSION => Ok(()),
        0 => {
            let tx = ix.conn.transaction().map_err(sql)?;
            tx.execute_batch(CREATE).map_err(sql)?;
            tx.pragma_update(None, "user_version", VERSION)
                .map_err(sql)?;
            tx.commit().map_err(sql)
        }
        found => Err(IndexError::Stale { path, found }),
    }
}
