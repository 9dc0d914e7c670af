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
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::rotation::{Began, Begun, Committed, Rotated};
use super::*;
use crate::bodies::{BodyRef, PackName};

mod admin;
mod blob_refs;
mod forget;
mod pairing;
mod rotation;

/// One step of the schema's history; the database's `user_version` says
/// how many have run.
enum Migration {
    Sql(&'static str),
    /// A step that needs the server's own constants.
    Code(fn(&rusqlite::Transaction<'_>) -> rusqlite::Result<()>),
}

/// The `user_version` of a database this server has migrated: what
/// `evi-server backup` and `restore` expect (see [`crate::backup`]).
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

const MIGRATIONS: &[Migration] = &[
    Migration::Sql(include_str!("../../../migrations/sqlite/0001_init.sql")),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0002_record_device.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0003_record_bodies.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0004_user_name_nocase.sql"
    )),
    Migration::Code(recount_usage),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0005_entry_id_bytes.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0006_records_by_stream.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0007_damaged_records.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0008_pair_slots.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0009_forgotten_streams.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0010_blob_refs.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0011_key_rotation.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0012_blob_parts.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0013_compaction_grace.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0014_rotation_owner.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0015_stream_groups.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0016_entries_by_seq.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0017_pair_minted.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0018_pair_minted_device.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0019_key_proof.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0020_account_disabled.sql"
    )),
    Migration::Sql(include_str!(
        "../../../migrations/sqlite/0021_operator_settings.sql"
    )),
];

/// Sets every account's `bytes_used` to what it stores as [`record_cost`]
/// and [`blob_cost`] count it (before, only ciphertext and blob bytes
/// counted). A record's entry ids are its `entry_ids` text: n ids of 64
/// characters and n - 1 commas.
fn recount_usage(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE users SET bytes_used =
           COALESCE((SELECT SUM(COALESCE(body_len, length(ciphertext)) + ?1
                                + ?2 * ((length(entry_ids) + 1) / 65))
                     FROM records r WHERE r.user_id = users.id), 0)
         + COALESCE((SELECT SUM(size + ?3) FROM blobs b WHERE b.user_id = users.id), 0)",
        params![
            RECORD_ROW_BYTES as i64,
            ENTRY_ID_BYTES as i64,
            BLOB_ROW_BYTES as i64
        ],
    )?;
    Ok(())
}
const READERS: usize = 4;
/// The invite `?1` that a registration at `?2` may use: unused, unexpired.
const USABLE_INVITE: &str =
    "code_hash = ?1 AND used_by IS NULL AND (expires_at IS NULL OR expires_at > ?2)";
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
    /// The file's `user_version` is past [`MIGRATIONS`]: a newer server
    /// migrated it, and this one must not write rows to a schema it does
    /// not know (as Postgres's [`super::postgres::migrate`] refuses).
    #[error(
        "it was migrated by a newer evi-server (schema version {found}; this one knows up to \
         {known}); upgrade this one"
    )]
    NewerSchema { found: usize, known: usize },
}

/// Applies the steps the database lacks, or refuses a newer schema (read
/// before anything is written).
fn migrate(c: &mut Connection) -> Result<(), OpenError> {
    let version: usize = c.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > MIGRATIONS.len() {
        return Err(OpenError::NewerSchema {
            found: version,
            known: MIGRATIONS.len(),
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        match step {
            Migration::Sql(sql) => tx.execute_batch(sql)?,
            Migration::Code(f) => f(&tx)?,
        }
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    Ok(())
}

/// Deletes the rows marked damaged whose every entry another record holds
/// now (they were sent again), with their blob references (the names go
/// into `released`): their record count and bytes, to take off. Their
/// bodies stay in their packs until the start-up sweep finds the packs
/// unreferenced.
fn drop_superseded(
    tx: &rusqlite::Transaction<'_>,
    user: UserId,
    released: &mut std::collections::BTreeSet<String>,
) -> StoreResult<(i64, i64)> {
    let marked: Vec<(i64, String, Option<Vec<u8>>, i64)> = tx
        .prepare_cached(
            "SELECT r.seq, r.entry_ids, r.entry_id_bytes, COALESCE(r.body_len, length(r.ciphertext))
             FROM damaged_records d JOIN records r ON r.user_id = d.user_id AND r.seq = d.seq
             WHERE d.user_id = ?1",
        )?
        .query_map([user], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    let mut held =
        tx.prepare_cached("SELECT 1 FROM entries WHERE user_id = ?1 AND entry_id = ?2")?;
    let (mut gone, mut freed) = (0i64, 0i64);
    for (seq, text, bytes, len) in marked {
        let ids = split_ids(bytes, &text)?;
        let mut all = true;
        for id in &ids {
            if !held.exists(params![user, entry_key(id)])? {
                all = false;
                break;
            }
        }
        if !all {
            continue;
        }
        blob_refs::release(tx, user, seq, released)?;
        tx.execute(
            "DELETE FROM records WHERE user_id = ?1 AND seq = ?2",
            params![user, seq],
        )?;
        tx.execute(
            "DELETE FROM damaged_records WHERE user_id = ?1 AND seq = ?2",
            params![user, seq],
        )?;
        gone += 1;
        freed += record_cost(len as u64, ids.len()) as i64;
    }
    Ok((gone, freed))
}

fn entry_key(id: &KeyedId) -> Vec<u8> {
    id.to_bytes().to_vec()
}

/// A record's entry ids as stored: their raw MACs, one after another.
fn join_ids(keys: &[Vec<u8>]) -> Vec<u8> {
    keys.concat()
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
        migrate(&mut writer)?;
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

/// Inserts the device under a name no other device of the account has (see
/// [`unique_device_name`]) and returns it. Run inside an immediate
/// transaction on the writer: nothing can add a device between the look and
/// the insert.
pub(super) fn insert_unique_device(
    c: &Connection,
    user: UserId,
    mut d: NewDevice,
) -> StoreResult<String> {
    if let Some(stale) = &d.replaces {
        c.execute(
            "DELETE FROM devices WHERE id = ?1 AND user_id = ?2
               AND key_generation < (SELECT key_generation FROM users WHERE id = ?2)",
            params![stale, user],
        )?;
    }
    let names = {
        let mut st = c.prepare_cached("SELECT name FROM devices WHERE user_id = ?1")?;
        st.query_map([user], |r| {
            r.get::<_, String>(0).map(|n| crate::device_name::shown(&n))
        })?
        .collect::<rusqlite::Result<std::collections::HashSet<_>>>()?
    };
    d.name = unique_device_name(&d.name, |n| names.contains(&crate::device_name::shown(n)));
    c.execute(
        "INSERT INTO devices (id, user_id, name, token_hash, created_at, last_seen_at, key_generation)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, (SELECT key_generation FROM users WHERE id = ?2))",
        params![d.id, user, d.name, &d.token_hash[..], d.now],
    )?;
    Ok(d.name)
}

/// A page from rows of [`SqliteStore::pull`]'s columns: at most `limit`
/// records and `max_bytes` as `cost` counts them (at least one record).
fn read_page(
    mut rows: rusqlite::Rows<'_>,
    limit: u32,
    max_bytes: u64,
    cost: &PageCost,
) -> StoreResult<Page> {
    let mut records = Vec::new();
    let mut bytes = 0u64;
    let mut more = false;
    while let Some(r) = rows.next()? {
        if records.len() as u32 >= limit {
            more = true;
            break;
        }
        let pack: Option<String> = r.get(5)?;
        let body = match pack {
            Some(p) => StoredBody::Stored(BodyRef {
                pack: p
                    .parse()
                    .map_err(|e| StoreError::Backend(format!("corrupt record: {e}")))?,
                offset: r.get::<_, i64>(6)? as u64,
                len: r.get::<_, i64>(7)? as u64,
            }),
            None => StoredBody::Inline(r.get(8)?),
        };
        let seq: i64 = r.get(0)?;
        let rec = StoredRecord {
            seq: seq as u64,
            stream: parse_keyed(r.get(1)?)?,
            kind: r.get(2)?,
            entry_ids: split_ids(r.get(9)?, &r.get::<_, String>(3)?)?,
            body,
            device_id: r.get(4)?,
        };
        let n = cost(&rec);
        if !records.is_empty() && bytes + n > max_bytes {
            more = true;
            break;
        }
        bytes += n;
        records.push(rec);
    }
    Ok(Page { records, more })
}

#[async_trait]
impl Store for SqliteStore {
    async fn pair_open(&self, slot: NewPairSlot) -> StoreResult<u32> {
        pairing::open(self, slot).await
    }
    async fn pair_slot(&self, number: u32, now: i64) -> StoreResult<Option<PairSlot>> {
        pairing::get(self, number, now).await
    }
    async fn pair_step(
        &self,
        number: u32,
        from: evi_shared::api::PairState,
        step: PairStep,
        now: i64,
    ) -> StoreResult<bool> {
        pairing::step(self, number, from, step, now).await
    }
    async fn pair_mint(
        &self,
        number: u32,
        user: UserId,
        device: NewDevice,
        now: i64,
    ) -> StoreResult<Option<String>> {
        pairing::mint(self, number, user, device, now).await
    }
    async fn create_user(
        &self,
        name: &str,
        password_hash: String,
        invite_hash: Option<[u8; 32]>,
        device: NewDevice,
    ) -> StoreResult<UserId> {
        let name = name.to_owned();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // The invite first: without a valid code, nobody learns whether
            // a name is taken.
            if let Some(h) = invite_hash {
                let unused = tx
                    .prepare_cached(&format!("SELECT 1 FROM invites WHERE {USABLE_INVITE}"))?
                    .exists(params![&h[..], device.now])?;
                if !unused {
                    return Err(StoreError::InvalidInvite);
                }
            }
            let exists: Option<i64> = tx
                .query_row(
                    "SELECT id FROM users WHERE name = ?1 COLLATE NOCASE LIMIT 1",
                    [&name],
                    |r| r.get(0),
                )
                .optional()?;
            if exists.is_some() {
                return Err(StoreError::UserExists);
            }
            tx.execute(
                "INSERT INTO users (name, password_hash, created_at) VALUES (?1, ?2, ?3)",
                params![name, password_hash, device.now],
            )?;
            let user = tx.last_insert_rowid();
            if let Some(h) = invite_hash {
                let n = tx.execute(
                    "UPDATE invites SET used_by = ?1 WHERE code_hash = ?2 AND used_by IS NULL",
                    params![user, &h[..]],
                )?;
                if n != 1 {
                    return Err(StoreError::InvalidInvite);
                }
            }
            insert_unique_device(&tx, user, device)?;
            tx.commit()?;
            Ok(user)
        })
        .await
    }

    async fn credentials(&self, name: &str) -> StoreResult<Option<Credentials>> {
        let name = name.to_owned();
        self.read(move |c| {
            // The exact spelling first; two rows and neither exact is a name
            // that two accounts from before the case rule share.
            let mut st = c.prepare_cached(
                "SELECT id, name, password_hash, disabled_at IS NOT NULL
                 FROM users WHERE name = ?1 COLLATE NOCASE
                 ORDER BY name = ?1 DESC, id LIMIT 2",
            )?;
            let rows = st
                .query_map([&name], |r| {
                    Ok(Credentials {
                        user_id: r.get(0)?,
                        name: r.get(1)?,
                        password_hash: r.get(2)?,
                        disabled: r.get(3)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut rows = rows.into_iter();
            Ok(match (rows.next(), rows.next()) {
                (Some(first), _) if first.name == name => Some(first),
                (Some(only), None) => Some(only),
                _ => None,
            })
        })
        .await
    }

    async fn add_device(&self, user: UserId, device: NewDevice) -> StoreResult<String> {
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let name = insert_unique_device(&tx, user, device)?;
            tx.commit()?;
            Ok(name)
        })
        .await
    }

    async fn token_owner(&self, token_hash: [u8; 32]) -> StoreResult<Option<TokenOwner>> {
        self.read(move |c| {
            Ok(c.query_row(
                "SELECT d.user_id, u.name, d.id, d.token_hash, d.last_seen_at,
                        d.key_generation < u.key_generation, u.rotated_at, u.rotated_by,
                        u.disabled_at IS NOT NULL OR o.disabled_at IS NOT NULL,
                        CASE WHEN o.id IS NULL THEN u.quota_bytes ELSE o.quota_bytes END,
                        o.bytes_used
                 FROM devices d JOIN users u ON u.id = d.user_id
                 LEFT JOIN users o ON o.id = u.staging_of
                 WHERE d.token_hash = ?1",
                [&token_hash[..]],
                |r| {
                    let h: Vec<u8> = r.get(3)?;
                    let mut token_hash = [0u8; 32];
                    if h.len() == 32 {
                        token_hash.copy_from_slice(&h);
                    }
                    Ok(TokenOwner {
                        user_id: r.get(0)?,
                        user_name: r.get(1)?,
                        device_id: r.get(2)?,
                        token_hash,
                        last_seen_at: r.get(4)?,
                        rotated: r.get::<_, bool>(5)?.then(|| Rotated {
                            at: r.get::<_, Option<i64>>(6).ok().flatten().unwrap_or(0),
                            by: r
                                .get::<_, Option<String>>(7)
                                .ok()
                                .flatten()
                                .unwrap_or_default(),
                        }),
                        disabled: r.get(8)?,
                        quota_bytes: r.get(9)?,
                        copy_of_bytes: r.get(10)?,
                    })
                },
            )
            .optional()?)
        })
        .await
    }

    async fn touch_device(&self, device_id: &str, now: i64) -> StoreResult<()> {
        let id = device_id.to_owned();
        self.write(move |c| {
            c.execute(
                "UPDATE devices SET last_seen_at = ?1 WHERE id = ?2",
                params![now, id],
            )?;
            Ok(())
        })
        .await
    }

    async fn devices(
        &self,
        user: UserId,
        after: Option<String>,
        limit: u32,
    ) -> StoreResult<Vec<DeviceRow>> {
        self.read(move |c| {
            let mut st = c.prepare_cached(
                "SELECT d.id, d.name, d.created_at, d.last_seen_at, d.key_generation,
                        d.key_generation >= u.key_generation
                 FROM devices d JOIN users u ON u.id = d.user_id
                 WHERE d.user_id = ?1 AND d.id > ?2 ORDER BY d.id LIMIT ?3",
            )?;
            let after = after.unwrap_or_default();
            let rows = st.query_map(params![user, after, limit], |r| {
                Ok(DeviceRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    created_at: r.get(2)?,
                    last_seen_at: r.get(3)?,
                    key_generation: r.get(4)?,
                    current_key: r.get(5)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn revoke_device(&self, user: UserId, device_id: &str) -> StoreResult<bool> {
        let id = device_id.to_owned();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let n = tx.execute(
                "DELETE FROM devices WHERE id = ?1 AND user_id = ?2",
                params![id, user],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound);
            }
            let now = chrono::Utc::now().timestamp();
            let ended = rotation::abandon(&tx, user, Began::By(&id), now)?;
            tx.commit()?;
            Ok(ended)
        })
        .await
    }

    async fn change_password(&self, user: UserId, hash: String, keep: &str) -> StoreResult<u64> {
        let keep = keep.to_owned();
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "UPDATE users SET password_hash = ?1 WHERE id = ?2",
                params![hash, user],
            )?;
            let n = tx.execute(
                "DELETE FROM devices WHERE user_id = ?1 AND id != ?2",
                params![user, keep],
            )?;
            let now = chrono::Utc::now().timestamp();
            rotation::abandon(&tx, user, Began::NotBy(&keep), now)?;
            tx.commit()?;
            Ok(n as u64)
        })
        .await
    }

    async fn key_check(&self, user: UserId) -> StoreResult<Option<Vec<u8>>> {
        self.read(move |c| {
            Ok(
                c.query_row("SELECT key_check FROM users WHERE id = ?1", [user], |r| {
                    r.get(0)
                })?,
            )
        })
        .await
    }

    async fn set_key_check(&self, user: UserId, value: Vec<u8>) -> StoreResult<()> {
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let cur: Option<Vec<u8>> =
                tx.query_row("SELECT key_check FROM users WHERE id = ?1", [user], |r| {
                    r.get(0)
                })?;
            match cur {
                Some(v) if v == value => Ok(()),
                Some(_) => Err(StoreError::KeyCheckMismatch),
                None => {
                    tx.execute(
                        "UPDATE users SET key_check = ?1 WHERE id = ?2",
                        params![value, user],
                    )?;
                    tx.commit()?;
                    Ok(())
                }
            }
        })
        .await
    }

    async fn accounts(&self) -> StoreResult<Vec<super::admin::AccountRow>> {
        admin::accounts(self).await
    }

    async fn set_disabled(&self, user: UserId, at: Option<i64>) -> StoreResult<bool> {
        admin::set_disabled(self, user, at).await
    }

    async fn retire_account(&self, user: UserId, now: i64) -> StoreResult<bool> {
        admin::retire_account(self, user, now).await
    }

    async fn set_quota(&self, user: UserId, quota: Option<i64>) -> StoreResult<bool> {
        admin::set_quota(self, user, quota).await
    }

    async fn invites(&self) -> StoreResult<Vec<super::admin::InviteRow>> {
        admin::invites(self).await
    }

    async fn expire_invite(&self, code_hash: Vec<u8>, at: i64) -> StoreResult<bool> {
        admin::expire_invite(self, code_hash, at).await
    }

    async fn revoke_invite(&self, code_hash: Vec<u8>) -> StoreResult<bool> {
        admin::revoke_invite(self, code_hash).await
    }

    async fn registration(&self) -> StoreResult<Option<evi_shared::api::Registration>> {
        admin::registration(self).await
    }

    async fn set_registration(&self, mode: evi_shared::api::Registration) -> StoreResult<()> {
        admin::set_registration(self, mode).await
    }

    async fn key_proof_hash(&self, user: UserId) -> StoreResult<Option<Vec<u8>>> {
        self.read(move |c| {
            Ok(c.query_row(
                "SELECT key_proof_hash FROM users WHERE id = ?1",
                [user],
                |r| r.get(0),
            )?)
        })
        .await
    }

    async fn set_key_proof_hash(
        &self,
        user: UserId,
        hash: Vec<u8>,
        replace: bool,
    ) -> StoreResult<()> {
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let cur: Option<Vec<u8>> = tx.query_row(
                "SELECT key_proof_hash FROM users WHERE id = ?1",
                [user],
                |r| r.get(0),
            )?;
            match cur {
                Some(v) if v == hash => Ok(()),
                Some(_) if !replace => Err(StoreError::KeyProofMismatch),
                _ => {
                    tx.execute(
                        "UPDATE users SET key_proof_hash = ?1 WHERE id = ?2",
                        params![hash, user],
                    )?;
                    tx.commit()?;
                    Ok(())
                }
            }
        })
        .await
    }

    async fn push(
        &self,
        user: UserId,
        records: Vec<NewRecord>,
        quota: Option<u64>,
        per_item: bool,
    ) -> StoreResult<PushOutcome> {
        self.write(move |c| {
            let now = chrono::Utc::now().timestamp();
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let (mut seq, used): (i64, i64) = tx.query_row(
                "SELECT newest_seq, bytes_used FROM users WHERE id = ?1",
                [user],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let (mut stored, mut dropped, mut new_entries, mut added) = (0u64, 0u64, 0i64, 0i64);
            let mut over_quota = Vec::new();
            let mut forgotten = Vec::new();
            let mut purged = super::forget::Purged::default();
            let mut refused_streams = std::collections::HashSet::new();
            // Streams a segment of which refers to a blob not stored: their
            // later segments wait too (see `blob_refs`).
            let (mut blob_missing, mut blob_refused) =
                (Vec::new(), std::collections::HashSet::new());
            let mut released = std::collections::BTreeSet::new();
            {
                let mut known = tx
                    .prepare_cached("SELECT 1 FROM entries WHERE user_id = ?1 AND entry_id = ?2")?;
                let mut ins_rec = tx.prepare_cached(
                    "INSERT INTO records (user_id, seq, stream, kind, entry_ids, entry_id_bytes,
                     ciphertext, created_at, device_id, body_pack, body_offset, body_len,
                     group_stream)
                     VALUES (?1, ?2, ?3, ?4, '', ?5, x'', ?6, ?7, ?8, ?9, ?10, ?11)",
                )?;
                let mut ins_entry = tx.prepare_cached(
                    "INSERT OR IGNORE INTO entries (user_id, entry_id, seq) VALUES (?1, ?2, ?3)",
                )?;
                for (i, r) in records.iter().enumerate() {
                    if refused_streams.contains(r.stream.as_str()) {
                        over_quota.push(i as u32);
                        continue;
                    }
                    if blob_refused.contains(r.stream.as_str()) {
                        blob_missing.push(i as u32);
                        continue;
                    }
                    let gone = forget::is_forgotten(&tx, user, r.stream.as_str())?
                        || match &r.group {
                            Some(g) => forget::is_forgotten(&tx, user, g.as_str())?,
                            None => false,
                        };
                    if !super::forget::takes(&r.kind, gone) {
                        forgotten.push(i as u32);
                        continue;
                    }
                    let keys: Vec<Vec<u8>> = r.entry_ids.iter().map(entry_key).collect();
                    let mut all_known = true;
                    for k in &keys {
                        if !known.exists(params![user, k])? {
                            all_known = false;
                            break;
                        }
                    }
                    if all_known {
                        dropped += 1;
                        continue;
                    }
                    let Some(refs) = blob_refs::to_record(&tx, user, &r.refs.refs)? else {
                        blob_missing.push(i as u32);
                        blob_refused.insert(r.stream.as_str());
                        continue;
                    };
                    let cost = record_cost(r.body.len, r.entry_ids.len()) as i64;
                    if per_item && quota.is_some_and(|q| (used + added + cost) as u64 > q) {
                        over_quota.push(i as u32);
                        refused_streams.insert(r.stream.as_str());
                        continue;
                    }
                    seq += 1;
                    ins_rec.execute(params![
                        user,
                        seq,
                        r.stream.as_str(),
                        r.kind,
                        join_ids(&keys),
                        now,
                        r.device_id,
                        r.body.pack.as_str(),
                        r.body.offset as i64,
                        r.body.len as i64,
                        r.group.as_ref().map(KeyedId::as_str),
                    ])?;
                    for k in &keys {
                        new_entries += ins_entry.execute(params![user, k, seq])? as i64;
                    }
                    blob_refs::insert(&tx, user, seq, &refs)?;
                    stored += 1;
                    added += cost;
                    match r.kind.as_str() {
                        evi_shared::forget::FORGET_KIND => {
                            let stream = r.stream.as_str();
                            purged += forget::purge(&tx, user, stream, seq, &mut released)?;
                        }
                        evi_shared::blob_refs::FORGET_LINES_KIND => {
                            // Only the blobs it names are collected: the
                            // lines kept from the same records come again.
                            let (stream, forgets) = (r.stream.as_str(), &r.refs.forgets);
                            purged += blob_refs::forget_lines(&tx, user, stream, seq, forgets)?;
                            released.extend(r.refs.forget_blobs.iter().map(|n| n.to_string()));
                        }
                        evi_shared::forget::UNFORGET_KIND => {
                            forget::lift(&tx, user, r.stream.as_str())?;
                        }
                        _ => {}
                    }
                }
            }
            if let Some(q) = quota
                && added > 0
                && (used + added) as u64 > q
            {
                // Dropping the transaction rolls everything back.
                return Err(StoreError::QuotaExceeded);
            }
            let mut collect_blobs = false;
            if stored > 0 {
                let (gone, freed) = drop_superseded(&tx, user, &mut released)?;
                collect_blobs = blob_refs::list_unreferenced(&tx, user, &released)?;
                tx.execute(
                    "UPDATE users SET newest_seq = ?1, record_count = record_count + ?2,
                     entry_count = entry_count + ?3, bytes_used = bytes_used + ?4 WHERE id = ?5",
                    params![
                        seq,
                        stored as i64 - gone - purged.records,
                        new_entries - purged.entries,
                        added - freed - purged.bytes,
                        user
                    ],
                )?;
                tx.commit()?;
            }
            Ok(PushOutcome {
                stored,
                dropped,
                newest_seq: seq as u64,
                over_quota,
                forgotten,
                compact: purged.packs,
                blob_missing,
                collect_blobs,
            })
        })
        .await
    }

    async fn pull(
        &self,
        user: UserId,
        after: u64,
        stream: Option<KeyedId>,
        limit: u32,
        max_bytes: u64,
        cost: PageCost,
    ) -> StoreResult<Page> {
        self.read(move |c| {
            // Inline ciphertext is read only for rows stored before bodies
            // left the database; others cost a few dozen bytes each.
            const COLUMNS: &str =
                "seq, stream, kind, entry_ids, device_id, body_pack, body_offset, body_len,
                 CASE WHEN body_pack IS NULL THEN ciphertext END, entry_id_bytes";
            let take = limit as i64 + 1;
            match stream {
                None => {
                    let mut st = c.prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM records WHERE user_id = ?1 AND seq > ?2
                         ORDER BY seq LIMIT ?3"
                    ))?;
                    read_page(
                        st.query(params![user, after as i64, take])?,
                        limit,
                        max_bytes,
                        &cost,
                    )
                }
                // records_by_stream: the stream's rows only, already in seq order.
                Some(stream) => {
                    let mut st = c.prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM records WHERE user_id = ?1 AND stream = ?2
                         AND seq > ?3 ORDER BY seq LIMIT ?4"
                    ))?;
                    let rows = st.query(params![user, stream.as_str(), after as i64, take])?;
                    read_page(rows, limit, max_bytes, &cost)
                }
            }
        })
        .await
    }

    async fn referenced_packs(&self) -> StoreResult<HashSet<(UserId, PackName)>> {
        self.read(move |c| {
            let mut st = c.prepare_cached(
                "SELECT DISTINCT user_id, body_pack FROM records WHERE body_pack IS NOT NULL
                 UNION SELECT user_id, pack FROM forget_compactions",
            )?;
            let rows =
                st.query_map([], |r| Ok((r.get::<_, UserId>(0)?, r.get::<_, String>(1)?)))?;
            let mut out = HashSet::new();
            for row in rows {
                let (user, pack) = row?;
                let pack = pack
                    .parse()
                    .map_err(|e| StoreError::Backend(format!("corrupt record: {e}")))?;
                out.insert((user, pack));
            }
            Ok(out)
        })
        .await
    }

    async fn pack_referenced(&self, user: UserId, pack: &PackName) -> StoreResult<bool> {
        let pack = pack.clone();
        self.read(move |c| {
            Ok(c.prepare_cached(
                "SELECT 1 FROM records WHERE user_id = ?1 AND body_pack = ?2 LIMIT 1",
            )?
            .exists(params![user, pack.as_str()])?)
        })
        .await
    }

    async fn usage(&self, user: UserId) -> StoreResult<Usage> {
        self.read(move |c| {
            Ok(c.query_row(
                "SELECT newest_seq, record_count, entry_count, blob_count, bytes_used
                 FROM users WHERE id = ?1",
                [user],
                |r| {
                    Ok(Usage {
                        newest_seq: r.get::<_, i64>(0)? as u64,
                        records: r.get::<_, i64>(1)? as u64,
                        entries: r.get::<_, i64>(2)? as u64,
                        blobs: r.get::<_, i64>(3)? as u64,
                        bytes_used: r.get::<_, i64>(4)? as u64,
                    })
                },
            )?)
        })
        .await
    }

    async fn pending_for_device(&self, user: UserId, device: &str, after: u64) -> StoreResult<u64> {
        let device = device.to_owned();
        self.read(move |c| {
            let n: i64 = c.query_row(
                "SELECT COUNT(*) FROM records WHERE user_id = ?1 AND seq > ?2
                 AND (device_id IS NULL OR device_id <> ?3)",
                params![user, after as i64, device],
                |r| r.get(0),
            )?;
            Ok(n as u64)
        })
        .await
    }

    async fn mark_damaged(&self, user: UserId, seqs: Vec<u64>) -> StoreResult<u64> {
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut marked = 0u64;
            let mut unheld = 0i64;
            for seq in seqs {
                let Ok(seq) = i64::try_from(seq) else {
                    continue;
                };
                let exists = tx.query_row(
                    "SELECT 1 FROM records WHERE user_id = ?1 AND seq = ?2",
                    params![user, seq],
                    |_| Ok(()),
                );
                if exists.optional()?.is_none() {
                    continue;
                }
                tx.execute(
                    "INSERT OR IGNORE INTO damaged_records (user_id, seq) VALUES (?1, ?2)",
                    params![user, seq],
                )?;
                unheld += tx.execute(
                    "DELETE FROM entries WHERE user_id = ?1 AND seq = ?2",
                    params![user, seq],
                )? as i64;
                marked += 1;
            }
            tx.execute(
                "UPDATE users SET entry_count = entry_count - ?1 WHERE id = ?2",
                params![unheld, user],
            )?;
            tx.commit()?;
            Ok(marked)
        })
        .await
    }

    async fn known_entries(&self, user: UserId, ids: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>> {
        self.read(move |c| {
            let mut st =
                c.prepare_cached("SELECT 1 FROM entries WHERE user_id = ?1 AND entry_id = ?2")?;
            let mut known = Vec::new();
            for id in ids {
                if st.exists(params![user, entry_key(&id)])? {
                    known.push(id);
                }
            }
            Ok(known)
        })
        .await
    }

    async fn missing_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>> {
        self.read(move |c| {
            let mut st =
                c.prepare_cached("SELECT 1 FROM blobs WHERE user_id = ?1 AND name = ?2")?;
            let mut missing = Vec::new();
            for n in names {
                if !st.exists(params![user, n.as_str()])? {
                    missing.push(n);
                }
            }
            Ok(missing)
        })
        .await
    }

    async fn blob_size(&self, user: UserId, name: &KeyedId) -> StoreResult<Option<u64>> {
        let name = name.clone();
        self.read(move |c| {
            Ok(c.query_row(
                "SELECT size FROM blobs WHERE user_id = ?1 AND name = ?2",
                params![user, name.as_str()],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(|s| s as u64))
        })
        .await
    }

    async fn add_blob(
        &self,
        user: UserId,
        name: &KeyedId,
        size: u64,
        quota: Option<u64>,
        since_ms: i64,
        part_of: Option<&KeyedId>,
    ) -> StoreResult<bool> {
        let name = name.clone();
        let part_of = part_of.map(|p| p.to_string());
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if !blob_refs::upload_allowed(&tx, user, name.as_str(), since_ms)? {
                return Err(super::blob_refs::collecting());
            }
            let exists = tx
                .prepare_cached("SELECT 1 FROM blobs WHERE user_id = ?1 AND name = ?2")?
                .exists(params![user, name.as_str()])?;
            if exists {
                return Ok(false);
            }
            let used: i64 =
                tx.query_row("SELECT bytes_used FROM users WHERE id = ?1", [user], |r| {
                    r.get(0)
                })?;
            let cost = blob_cost(size);
            if quota.is_some_and(|q| used as u64 + cost > q) {
                return Err(StoreError::QuotaExceeded);
            }
            tx.execute(
                "INSERT INTO blobs (user_id, name, size, created_at, part_of)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    user,
                    name.as_str(),
                    size as i64,
                    chrono::Utc::now().timestamp(),
                    part_of
                ],
            )?;
            tx.execute(
                "UPDATE users SET blob_count = blob_count + 1, bytes_used = bytes_used + ?1
                 WHERE id = ?2",
                params![cost as i64, user],
            )?;
            tx.commit()?;
            Ok(true)
        })
        .await
    }

    async fn purge_blobs(&self, user: UserId, names: Vec<KeyedId>) -> StoreResult<Vec<KeyedId>> {
        self.write(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut gone = Vec::new();
            let mut freed = 0i64;
            {
                let mut del = tx.prepare_cached(
                    "DELETE FROM blobs WHERE user_id = ?1 AND name = ?2 RETURNING size",
                )?;
                for n in names {
                    let size: Option<i64> = del
                        .query_row(params![user, n.as_str()], |r| r.get(0))
                        .optional()?;
                    if let Some(s) = size {
                        freed += blob_cost(s as u64) as i64;
                        gone.push(n);
                    }
                }
            }
            if !gone.is_empty() {
                blob_refs::uncount_blobs(&tx, user, gone.len(), freed)?;
                tx.commit()?;
            }
            Ok(gone)
        })
        .await
    }

    async fn create_invite(
        &self,
        code_hash: [u8; 32],
        now: i64,
        expires_at: Option<i64>,
    ) -> StoreResult<()> {
        self.write(move |c| {
            c.execute(
                "INSERT INTO invites (code_hash, created_at, expires_at) VALUES (?1, ?2, ?3)",
                params![&code_hash[..], now, expires_at],
            )?;
            Ok(())
        })
        .await
    }

    async fn invite_usable(&self, code_hash: [u8; 32], now: i64) -> StoreResult<bool> {
        self.read(move |c| {
            Ok(
                c.prepare_cached(&format!("SELECT 1 FROM invites WHERE {USABLE_INVITE}"))?
                    .exists(params![&code_hash[..], now])?,
            )
        })
        .await
    }

    async fn packs_to_compact(&self) -> StoreResult<Vec<ToCompact>> {
        self.read(forget::packs_to_compact).await
    }

    async fn blobs_to_collect(&self) -> StoreResult<Vec<(UserId, KeyedId)>> {
        let now = chrono::Utc::now().timestamp_millis();
        self.write(move |c| blob_refs::to_collect(c, now)).await
    }

    async fn collect_blob_row(
        &self,
        user: UserId,
        name: &KeyedId,
    ) -> StoreResult<Option<Vec<KeyedId>>> {
        let name = name.clone();
        self.write(move |c| blob_refs::take_row(c, user, &name))
            .await
    }

    async fn blob_collected(&self, user: UserId, name: &KeyedId) -> StoreResult<()> {
        let (name, now) = (name.clone(), chrono::Utc::now().timestamp_millis());
        self.write(move |c| blob_refs::mark_done(c, user, &name, now))
            .await
    }

    async fn bodies_in_pack(
        &self,
        user: UserId,
        pack: &PackName,
    ) -> StoreResult<Vec<(u64, BodyRef)>> {
        let pack = pack.clone();
        self.read(move |c| forget::bodies_in_pack(c, user, &pack))
            .await
    }

    async fn repoint_bodies(
        &self,
        user: UserId,
        from: &PackName,
        moved: Vec<(u64, BodyRef)>,
    ) -> StoreResult<()> {
        let from = from.clone();
        self.write(move |c| forget::repoint(c, user, &from, &moved))
            .await
    }

    async fn rotation_begin(
        &self,
        user: UserId,
        device: NewDevice,
        by: &str,
        key: super::rotation::NewKey,
    ) -> StoreResult<Begun> {
        rotation::begin(self, user, device, by.to_owned(), key).await
    }
    async fn rotation_commit(
        &self,
        user: UserId,
        device_id: &str,
        through_seq: u64,
        revoke: Vec<String>,
        now: i64,
    ) -> StoreResult<Committed> {
        rotation::commit(self, user, device_id.to_owned(), through_seq, revoke, now).await
    }
    async fn expire_rotations(&self, begun_before: i64, now: i64) -> StoreResult<usize> {
        rotation::expire(self, begun_before, now).await
    }
    async fn retired_users(&self) -> StoreResult<Vec<UserId>> {
        rotation::retired_users(self).await
    }
    async fn retired_blobs(&self, user: UserId) -> StoreResult<Vec<KeyedId>> {
        rotation::retired_blobs(self, user).await
    }
    async fn drop_retired(&self, user: UserId) -> StoreResult<()> {
        rotation::drop_retired(self, user).await
    }
    async fn compaction_done(&self, user: UserId, pack: &PackName) -> StoreResult<()> {
        let pack = pack.clone();
        self.write(move |c| forget::done(c, user, &pack)).await
    }

    async fn totals(&self) -> StoreResult<super::Totals> {
        self.read(|c| {
            Ok(c.query_row(
                "SELECT (SELECT COUNT(*) FROM users), (SELECT COUNT(*) FROM devices),
                        COALESCE(SUM(record_count), 0), COALESCE(SUM(entry_count), 0),
                        COALESCE(SUM(blob_count), 0)
                 FROM users",
                [],
                |r| {
                    let n = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                    Ok(super::Totals {
                        users: n(0)?,
                        devices: n(1)?,
                        records: n(2)?,
                        entries: n(3)?,
                        blobs: n(4)?,
                    })
                },
            )?)
        })
        .await
    }
}
