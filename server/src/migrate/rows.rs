//! The rows of every table, copied from SQLite to Postgres in batches, each
//! batch one statement of arrays (`UNNEST`) in its own transaction, and
//! every insert `ON CONFLICT DO NOTHING`: a second run adds only what the
//! first did not reach. Tables go in the order their references need
//! (users before what points at them). Failed logins are not copied: they
//! are minutes old at most and count against nothing after a move.

use rusqlite::types::Value;
use tokio_postgres::types::ToSql;

use super::{Ends, MigrateError, Report};

/// Rows per statement: large enough to amortise a round trip, small
/// enough that a batch of records with 4 MB inline bodies stays bounded.
const BATCH: usize = 500;

/// A Postgres column's array type, for the `UNNEST` of a batch.
#[derive(Clone, Copy)]
enum Col {
    Int,
    Text,
    Bytes,
}

impl Col {
    fn array(self) -> &'static str {
        match self {
            Col::Int => "BIGINT[]",
            Col::Text => "TEXT[]",
            Col::Bytes => "BYTEA[]",
        }
    }
}

/// One table to copy: what to read from SQLite (in a stable order, for
/// batches by offset), and the Postgres columns it goes to.
struct Table {
    name: &'static str,
    select: &'static str,
    columns: &'static [(&'static str, Col)],
    /// Between `INSERT INTO t (cols)` and `SELECT`: `OVERRIDING SYSTEM VALUE`
    /// for the users' generated ids, kept as they were.
    overriding: bool,
}

const TABLES: &[Table] = &[
    Table {
        name: "users",
        select: "SELECT id, name, password_hash, key_check, created_at, newest_seq,
                        record_count, entry_count, blob_count, bytes_used,
                        key_generation, rotated_at, rotated_by, staging_of, retired_at,
                        staging_by, key_proof_hash, disabled_at, quota_bytes
                 FROM users ORDER BY id",
        columns: &[
            ("id", Col::Int),
            ("name", Col::Text),
            ("password_hash", Col::Text),
            ("key_check", Col::Bytes),
            ("created_at", Col::Int),
            ("newest_seq", Col::Int),
            ("record_count", Col::Int),
            ("entry_count", Col::Int),
            ("blob_count", Col::Int),
            ("bytes_used", Col::Int),
            // A rotated key's generation, so that devices left on the old
            // key are told so on the new server too (store::rotation).
            ("key_generation", Col::Int),
            ("rotated_at", Col::Int),
            ("rotated_by", Col::Text),
            ("staging_of", Col::Int),
            ("retired_at", Col::Int),
            ("staging_by", Col::Text),
            // Without it the migrated account would take a token's word
            // for a forget again (routes' key proof).
            ("key_proof_hash", Col::Bytes),
            // A disabled account stays so on the new server, and an
            // account keeps the quota the operator gave it.
            ("disabled_at", Col::Int),
            ("quota_bytes", Col::Int),
        ],
        overriding: true,
    },
    Table {
        name: "devices",
        select: "SELECT id, user_id, name, token_hash, created_at, last_seen_at, key_generation
                 FROM devices ORDER BY id",
        columns: &[
            ("id", Col::Text),
            ("user_id", Col::Int),
            ("name", Col::Text),
            ("token_hash", Col::Bytes),
            ("created_at", Col::Int),
            ("last_seen_at", Col::Int),
            ("key_generation", Col::Int),
        ],
        overriding: false,
    },
    Table {
        name: "invites",
        select: "SELECT code_hash, created_at, used_by, expires_at FROM invites ORDER BY code_hash",
        columns: &[
            ("code_hash", Col::Bytes),
            ("created_at", Col::Int),
            ("used_by", Col::Int),
            ("expires_at", Col::Int),
        ],
        overriding: false,
    },
    Table {
        name: "server_settings",
        // The registration mode `invite` and every replica read.
        select: "SELECT name, value FROM server_settings ORDER BY name",
        columns: &[("name", Col::Text), ("value", Col::Text)],
        overriding: false,
    },
    Table {
        name: "records",
        // Entry ids as raw MACs (rows from before they were stored so hold
        // only the text, turned into bytes below); a body inline only where
        // no pack holds it.
        select: "SELECT user_id, seq, stream, kind, entry_id_bytes, entry_ids, device_id,
                        body_pack, body_offset, body_len,
                        CASE WHEN body_pack IS NULL THEN ciphertext END, created_at,
                        group_stream
                 FROM records ORDER BY user_id, seq",
        columns: &[
            ("user_id", Col::Int),
            ("seq", Col::Int),
            ("stream", Col::Text),
            ("kind", Col::Text),
            ("entry_id_bytes", Col::Bytes),
            ("device_id", Col::Text),
            ("body_pack", Col::Text),
            ("body_offset", Col::Int),
            ("body_len", Col::Int),
            ("ciphertext", Col::Bytes),
            ("created_at", Col::Int),
            ("group_stream", Col::Text),
        ],
        overriding: false,
    },
    Table {
        name: "entries",
        select: "SELECT user_id, entry_id, seq FROM entries ORDER BY user_id, entry_id",
        columns: &[
            ("user_id", Col::Int),
            ("entry_id", Col::Bytes),
            ("seq", Col::Int),
        ],
        overriding: false,
    },
    Table {
        name: "damaged_records",
        select: "SELECT user_id, seq FROM damaged_records ORDER BY user_id, seq",
        columns: &[("user_id", Col::Int), ("seq", Col::Int)],
        overriding: false,
    },
    // Forgotten streams keep refusing their old records after a move, and
    // packs still to compact are compacted by the new server.
    Table {
        name: "forgotten_streams",
        select: "SELECT user_id, stream, seq FROM forgotten_streams ORDER BY user_id, stream",
        columns: &[
            ("user_id", Col::Int),
            ("stream", Col::Text),
            ("seq", Col::Int),
        ],
        overriding: false,
    },
    Table {
        name: "forget_compactions",
        select: "SELECT user_id, pack, repointed_at FROM forget_compactions
                 ORDER BY user_id, pack",
        columns: &[
            ("user_id", Col::Int),
            ("pack", Col::Text),
            ("repointed_at", Col::Int),
        ],
        overriding: false,
    },
    Table {
        name: "blobs",
        select: "SELECT user_id, name, size, created_at, part_of FROM blobs
                 ORDER BY user_id, name",
        columns: &[
            ("user_id", Col::Int),
            ("name", Col::Text),
            ("size", Col::Int),
            ("created_at", Col::Int),
            // The whole a part belongs to, so it is still deleted with it.
            ("part_of", Col::Text),
        ],
        overriding: false,
    },
    // Which records refer to which blobs, and blobs being deleted: a
    // blob stays collectable, and one half deleted is finished, after a move.
    Table {
        name: "blob_refs",
        select: "SELECT user_id, seq, name FROM blob_refs ORDER BY user_id, seq, name",
        columns: &[
            ("user_id", Col::Int),
            ("seq", Col::Int),
            ("name", Col::Text),
        ],
        overriding: false,
    },
    Table {
        name: "blob_collections",
        select: "SELECT user_id, name, done_at FROM blob_collections ORDER BY user_id, name",
        columns: &[
            ("user_id", Col::Int),
            ("name", Col::Text),
            ("done_at", Col::Int),
        ],
        overriding: false,
    },
];

/// The tables compared by [`super::verify`], in copy order.
pub fn table_names() -> impl Iterator<Item = &'static str> {
    TABLES.iter().map(|t| t.name)
}

/// Refuses a target holding accounts this source does not have under the
/// same id and name: a move goes into an empty database, or into one an
/// interrupted move of this folder began.
pub async fn refuse_foreign_accounts(ends: &Ends) -> Result<(), MigrateError> {
    let theirs = ends
        .target
        .query("SELECT id, name FROM users ORDER BY id", &[])
        .await?;
    let mut stmt = ends
        .source
        .prepare("SELECT name FROM users WHERE id = ?1")?;
    for row in theirs {
        let (id, name): (i64, String) = (row.get(0), row.get(1));
        let ours: Option<String> =
            stmt.query_row([id], |r| r.get(0))
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })?;
        if ours.as_deref() != Some(name.as_str()) {
            return Err(MigrateError::Foreign { id, name });
        }
    }
    Ok(())
}

/// One column of a batch, as the array Postgres gets.
enum Array {
    Int(Vec<Option<i64>>),
    Text(Vec<Option<String>>),
    Bytes(Vec<Option<Vec<u8>>>),
}

impl Array {
    fn new(col: Col) -> Self {
        match col {
            Col::Int => Array::Int(Vec::new()),
            Col::Text => Array::Text(Vec::new()),
            Col::Bytes => Array::Bytes(Vec::new()),
        }
    }

    fn push(&mut self, v: Value) -> Result<(), MigrateError> {
        let bad = |what: &str| MigrateError::Mismatch(format!("a source value is not {what}"));
        match (self, v) {
            (Array::Int(a), Value::Null) => a.push(None),
            (Array::Int(a), Value::Integer(i)) => a.push(Some(i)),
            (Array::Text(a), Value::Null) => a.push(None),
            (Array::Text(a), Value::Text(s)) => a.push(Some(s)),
            (Array::Bytes(a), Value::Null) => a.push(None),
            (Array::Bytes(a), Value::Blob(b)) => a.push(Some(b)),
            (Array::Int(_), _) => return Err(bad("a whole number")),
            (Array::Text(_), _) => return Err(bad("text")),
            (Array::Bytes(_), _) => return Err(bad("bytes")),
        }
        Ok(())
    }

    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Array::Int(a) => a,
            Array::Text(a) => a,
            Array::Bytes(a) => a,
        }
    }
}

/// A record row from SQLite in the shape Postgres keeps: the entry ids as
/// bytes, from the text where an old row has no bytes.
fn record_values(mut row: Vec<Value>) -> Result<Vec<Value>, MigrateError> {
    let text = row.remove(5);
    if matches!(row[4], Value::Null) {
        let Value::Text(text) = text else {
            return Err(MigrateError::Mismatch("a record has no entry ids".into()));
        };
        let mut bytes = Vec::with_capacity(text.len() / 2);
        for id in text.split(',').filter(|s| !s.is_empty()) {
            let raw = hex::decode(id).map_err(|_| {
                MigrateError::Mismatch(format!("a record's entry id {id:?} is not hex"))
            })?;
            bytes.extend_from_slice(&raw);
        }
        row[4] = Value::Blob(bytes);
    }
    Ok(row)
}

fn insert_sql(t: &Table) -> String {
    let cols: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
    let params: Vec<String> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| format!("${}::{}", i + 1, ty.array()))
        .collect();
    format!(
        "INSERT INTO {} ({}) {} SELECT * FROM UNNEST({}) ON CONFLICT DO NOTHING",
        t.name,
        cols.join(", "),
        if t.overriding {
            "OVERRIDING SYSTEM VALUE"
        } else {
            ""
        },
        params.join(", ")
    )
}

async fn insert(ends: &Ends, t: &Table, rows: &[Vec<Value>]) -> Result<u64, MigrateError> {
    let mut arrays: Vec<Array> = t.columns.iter().map(|(_, c)| Array::new(*c)).collect();
    for row in rows {
        for (a, v) in arrays.iter_mut().zip(row.iter().cloned()) {
            a.push(v)?;
        }
    }
    let params: Vec<&(dyn ToSql + Sync)> = arrays.iter().map(Array::as_sql).collect();
    Ok(ends.target.execute(&insert_sql(t), &params).await?)
}

/// Copies every table; what each added goes into `report.rows`.
pub async fn copy_all(
    ends: &Ends,
    report: &mut Report,
    say: &dyn Fn(&str),
    fault: Option<crate::fault::Fault>,
) -> Result<(), MigrateError> {
    for t in TABLES {
        crate::fault::crash_if(
            t.name == "records" && crate::fault::is(fault, crate::fault::Fault::CrashMidMigrate),
            "crash-mid-migrate: aborting between the devices and the records tables",
        );
        let mut stmt = ends.source.prepare(t.select)?;
        let n = stmt.column_count();
        let mut rows = stmt.query([])?;
        let mut batch = Vec::with_capacity(BATCH);
        let (mut seen, mut added) = (0u64, 0u64);
        loop {
            let done = match rows.next()? {
                Some(r) => {
                    let mut values = (0..n)
                        .map(|i| r.get::<_, Value>(i))
                        .collect::<Result<Vec<_>, _>>()?;
                    if t.name == "records" {
                        values = record_values(values)?;
                    }
                    batch.push(values);
                    seen += 1;
                    false
                }
                None => true,
            };
            if batch.len() == BATCH || (done && !batch.is_empty()) {
                added += insert(ends, t, &batch).await?;
                batch.clear();
            }
            if done {
                break;
            }
        }
        say(&format!(
            "{}: {seen} rows, {added} new in the target",
            t.name
        ));
        report.rows.insert(t.name, added);
    }
    // New accounts made on the target go on after the copied ids.
    ends.target
        .execute(
            "SELECT setval(pg_get_serial_sequence('users', 'id'),
                           GREATEST((SELECT max(id) FROM users), 1))",
            &[],
        )
        .await?;
    Ok(())
}
