//! The embedded default: one SQLite file in WAL mode with `synchronous=FULL`,
//! so a commit is on disk before a push is answered.
//!
//! One writer connection behind a mutex (SQLite has a single writer anyway,
//! which is what makes commit order equal seq order) and a few reader
//! connections; every call runs on the blocking pool.
//!
//! The schema moves on by the steps of `MIGRATIONS` at open (the file's
//! `user_version` counts those run); a file a newer server migrated further
//! is refused at open, untouched, as a Postgres database is.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use evi_shared::KeyedId;
use rusqlite::Connection;

use super::*;
use crate::bodies::{BodyRef, PackName};

mod accounts;
mod admin;
mod blob_refs;
mod blobs;
mod forget;
mod migrate;
mod pairing;
mod records;
mod rotation;
mod store_impl;

pub use migrate::SCHEMA_VERSION;

const READERS: usize = 4;
/// Bytes of write-ahead log kept after a checkpoint.
const WAL_SIZE_LIMIT: i64 = 4 << 20;
/// Page cache of the writing connection, in KiB (SQLite's default is 2 MiB,
/// and grows only as pages are used). A push inserts its entries' keyed
/// ids, which are random, into the `entries` index: in 2 MiB a first push
/// of 270,000 entries (an index of 12 MB) spilled dirty pages to the log
/// mid-transaction and read them back, again and again: 280,000 `pwrite`
/// and 240,000 `pread` calls, a third of the server's CPU time.
const WRITER_CACHE_KIB: i64 = 64 << 10;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        // SQLITE_FULL: the write did not happen (SQLite rolls the
        // statement or transaction back).
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            return StoreError::Full;
        }
        StoreError::Backend(e.to_string())
    }
}

struct Inner {
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
}

#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

fn open_conn(path: &Path) -> rusqlite::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(10))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    // A checkpointed write-ahead log is cut back to this size; otherwise it
    // keeps the size of the biggest burst of pushes since the start (13 MiB
    // after a first push of a 400 MB home) on disk for good.
    c.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
    c.pragma_update(None, "foreign_keys", "ON")?;
    // What a forget deletes is overwritten with zeros, not left in free
    // pages for anyone with the file to read (see `store::forget`).
    c.pragma_update(None, "secure_delete", "ON")?;
    Ok(c)
}

/// Why the embedded database was not opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file's `user_version` is past the steps this server knows: a newer server
    /// migrated it, and this one must not write rows to a schema it does
    /// not know (as Postgres's [`super::postgres::migrate`] refuses).
    #[error(
        "it was migrated by a newer evi-server (schema version {found}; this one knows up to \
         {known}); upgrade this one"
    )]
    NewerSchema { found: usize, known: usize },
}

fn entry_key(id: &KeyedId) -> Vec<u8> {
    id.to_bytes().to_vec()
}

/// A record's entry ids from either form a row may hold: raw bytes (rows
/// since migration 5) or comma-separated hex (rows from before).
pub(super) fn split_ids(bytes: Option<Vec<u8>>, text: &str) -> StoreResult<Vec<KeyedId>> {
    let corrupt = |e: String| StoreError::Backend(format!("corrupt entry ids: {e}"));
    match bytes {
        Some(b) => {
            let chunks = b.chunks_exact(32);
            if !chunks.remainder().is_empty() {
                return Err(corrupt(format!("{} bytes", b.len())));
            }
            Ok(chunks
                .map(|c| KeyedId::from_bytes(c.try_into().expect("32-byte chunk")))
                .collect())
        }
        None => text
            .split(',')
            .map(|p| {
                p.parse()
                    .map_err(|e: evi_shared::IdError| corrupt(e.to_string()))
            })
            .collect(),
    }
}

fn parse_keyed(s: String) -> StoreResult<KeyedId> {
    s.parse()
        .map_err(|e| StoreError::Backend(format!("corrupt id: {e}")))
}

impl SqliteStore {
    /// Opens (creating if needed) the database and applies migrations; a
    /// database a newer server migrated is refused, untouched.
    pub fn open(path: &Path) -> Result<Self, OpenError> {
        let mut writer = open_conn(path)?;
        writer.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        migrate::migrate(&mut writer)?;
        let readers = (0..READERS)
            .map(|_| open_conn(path).map(Mutex::new))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(Self {
            inner: Arc::new(Inner {
                writer: Mutex::new(writer),
                readers,
                next_reader: AtomicUsize::new(0),
            }),
        })
    }

    pub(super) async fn write<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = inner.writer.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut c)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("blocking task failed: {e}")))?
    }

    pub(super) async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let start = inner.next_reader.fetch_add(1, Ordering::Relaxed);
            // Take the first idle reader, else wait on the round-robin one.
            for i in 0..READERS {
                if let Ok(c) = inner.readers[(start + i) % READERS].try_lock() {
                    return f(&c);
                }
            }
            let c = inner.readers[start % READERS]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            f(&c)
        })
        .await
        .map_err(|e| StoreError::Backend(format!("blocking task failed: {e}")))?
    }
}
